// A run of adjacent cold misses is one read request (neuron-cache.ts queueBundleRead): the
// requests and bytes a load issues, counted by hand from the pack's layout, and the bytes that
// land in each slot against the pack file read with node:fs — with gate rows pinned (up+down
// blocks, the gate blocks between them read along unused) and without (gate blocks). The same
// for reads ahead (readAhead): up+down blocks with pinned gate rows, whole bundles without. A
// request reads its last bundle's rows rounded up to the loader's alignment, not the block's
// padding (512-byte sectors: the default model's 8 KiB bundle is read as 6 KiB).
import { describe, expect, it } from "vitest";
import { loadSparseModel } from "../../src/api/model.js";
import { native } from "../../src/native.js";
import { budgetForFfnFraction, planOptions } from "../../src/sparse/memory-plan.js";
import { openPack } from "../../src/sparse/pack/open.js";
import { scratchDefaultPack } from "../helpers/default-pack.js";
import { fileBytes } from "../helpers/file-bytes.js";
import type { Pack } from "../../src/sparse/pack/format.js";

/** What a request starting with a gate block, an up+down block or a bundle reads, by hand: the rows up to the next multiple of the alignment (at least 512), never past the block. */
function readLengths(pack: Pack, align: number) {
  const a = Math.max(512, align);
  const up = (x: number) => Math.ceil(x / a) * a;
  const upDown = Math.min(pack.upDownBlock, up(pack.upBytes + pack.downBytes));
  return { gate: Math.min(pack.gateBlock, up(pack.gateBytes)), upDown, bundle: pack.gateBlock + upDown };
}

const { packPath } = scratchDefaultPack("np-merged-reads-");
const ctx = 64;

describe.each([true, false])("gate rows pinned: %s", (pinGates) => {
  it("adjacent misses share a request; every slot holds its neuron's bytes from the file", async () => {
    const pack = openPack(packPath);
    const memory = budgetForFfnFraction(pack, 0.45, planOptions(pack.config, { contextSize: ctx, predictor: true }));
    const m = await loadSparseModel(packPath, { memory, predictor: "oracle", decoder: "inline", contextSize: ctx, pinGates, readAhead: 0 });
    try {
      const cache = m.sparse!.cache;
      expect(cache.pinned).toBe(pinGates);
      const layer = 1;
      const base = layer * pack.config.nFF;
      const cold = (p: number) => p >= cache.hotLimit[layer]! && p < pack.config.nFF && cache.slotOfNeuron(base + p) < 0;
      // three adjacent missing positions, and one more apart
      let p = cache.hotLimit[layer]!;
      while (!(cold(p) && cold(p + 1) && cold(p + 2) && cold(p + 10))) p++;
      const positions = Int32Array.from([p, p + 1, p + 2, p + 10]);
      const slots = new Int32Array(4);
      const { bundleBytes: B, gateBlock, gateBytes, upBytes, downBytes } = pack;
      const align = native().loaderInfo(cache.loader.id).align;
      const read = readLengths(pack, align);
      expect([cache.gateRead, cache.upDownRead, cache.bundleRead]).toEqual([read.gate, read.upDown, read.bundle]);
      if (align === 512) expect(read).toEqual({ gate: 1024, upDown: 2048, bundle: 6144 }); // F32 rows of 256: 1 KiB each
      cache.resetStats();
      cache.beginLease();
      let within: number;
      let len: number;
      if (pinGates) {
        cache.loadUpDown(layer, positions, 4, slots);
        [within, len] = [gateBlock, upBytes + downBytes];
        // p..p+2: one request from p's up+down block to p+2's rows (two bundles more); p+10: its rows
        expect(cache.stats[layer]!.bytesRead).toBe(2 * B + read.upDown + read.upDown);
      } else {
        expect(cache.loadGates(layer, positions, 0, 4, slots)).toBe(4);
        [within, len] = [0, gateBytes];
        expect(cache.stats[layer]!.bytesRead).toBe(2 * B + read.gate + read.gate);
      }
      expect(cache.stats[layer]!.reads).toBe(2);
      const n = native();
      positions.forEach((q, k) => {
        const s = pinGates ? slots[k]! : cache.slotOfNeuron(base + q);
        const at = s * cache.slotBytes + (pinGates ? cache.upOffset : 0);
        const want = fileBytes(packPath, pack.layers[layer]!.bundlesOffset + q * B + within, len);
        expect(Buffer.from(n.viewU8(cache.arena, at, len)).equals(want), `position ${q}`).toBe(true);
      });
    } finally {
      await m[Symbol.asyncDispose]();
    }
  });
});

describe.each([true, false])("reads ahead, gate rows pinned: %s", (pinGates) => {
  it("a run of adjacent positions is one request; every neuron read ahead holds its bytes from the file", async () => {
    const pack = openPack(packPath);
    const memory = budgetForFfnFraction(pack, 0.45, planOptions(pack.config, { contextSize: ctx, predictor: true }));
    const m = await loadSparseModel(packPath, { memory, predictor: "oracle", decoder: "inline", contextSize: ctx, pinGates, readAhead: 64 });
    try {
      const cache = m.sparse!.cache;
      expect(cache.pinned).toBe(pinGates);
      expect(cache.aheadStaging).toBeGreaterThanOrEqual(0);
      const layer = 2;
      const base = layer * pack.config.nFF;
      const cold = (p: number) => p >= cache.hotLimit[layer]! && p < pack.config.nFF && cache.slotOfNeuron(base + p) < 0;
      let p = cache.hotLimit[layer]!;
      while (!(cold(p) && cold(p + 1) && cold(p + 5))) p++;
      const positions = Int32Array.from([p, p + 1, p + 5]);
      const { bundleBytes: B, gateBlock, gateBytes, upBytes, downBytes } = pack;
      const read = readLengths(pack, native().loaderInfo(cache.loader.id).align);
      cache.resetStats();
      expect(cache.readAhead(layer, positions, 3, 1)).toBe(3);
      cache.settle();
      const st = cache.stats[layer]!;
      expect(st.aheadReads).toBe(2);
      // pinned: p's up+down rows, a bundle more for p+1; p+5 its rows. Else bundles.
      expect(st.aheadBytes).toBe(pinGates ? B + read.upDown + read.upDown : B + read.bundle + read.bundle);
      const n = native();
      for (const q of positions) {
        const s = cache.slotOfNeuron(base + q);
        expect(cache.holdsWhole(base + q), `position ${q}`).toBe(true);
        const at = pack.layers[layer]!.bundlesOffset + q * B;
        const ud = upBytes + downBytes;
        expect(Buffer.from(n.viewU8(cache.arena, s * cache.slotBytes + cache.upOffset, ud)).equals(fileBytes(packPath, at + gateBlock, ud)), `up+down of ${q}`).toBe(true);
        if (!pinGates) expect(Buffer.from(n.viewU8(cache.arena, s * cache.slotBytes, gateBytes)).equals(fileBytes(packPath, at, gateBytes)), `gate of ${q}`).toBe(true);
      }
    } finally {
      await m[Symbol.asyncDispose]();
    }
  });
});
