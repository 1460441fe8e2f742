// A run of adjacent cold misses is one read request (neuron-cache.ts queueBundleRead): the
// requests and bytes a load issues, counted by hand from the pack's layout, and the bytes that
// land in each slot against the pack file read with node:fs — with gate rows pinned (up+down
// blocks, the gate blocks between them read along unused) and without (gate blocks). The same
// for reads ahead (readAhead): up+down blocks with pinned gate rows, whole bundles without.
import { describe, expect, it } from "vitest";
import { loadSparseModel } from "../../src/api/model.js";
import { native } from "../../src/native.js";
import { budgetForFfnFraction, planOptions } from "../../src/sparse/memory-plan.js";
import { openPack } from "../../src/sparse/pack/open.js";
import { scratchDefaultPack } from "../helpers/default-pack.js";
import { fileBytes } from "../helpers/file-bytes.js";

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
      const { bundleBytes: B, gateBlock, upDownBlock, gateBytes, upBytes, downBytes } = pack;
      cache.resetStats();
      cache.beginLease();
      let within: number;
      let len: number;
      if (pinGates) {
        cache.loadUpDown(layer, positions, 4, slots);
        [within, len] = [gateBlock, upBytes + downBytes];
        // p..p+2: one request from p's up+down block to p+2's (two bundles and a block); p+10: its block
        expect(cache.stats[layer]!.bytesRead).toBe(2 * B + upDownBlock + upDownBlock);
      } else {
        expect(cache.loadGates(layer, positions, 0, 4, slots)).toBe(4);
        [within, len] = [0, gateBytes];
        expect(cache.stats[layer]!.bytesRead).toBe(2 * B + gateBlock + gateBlock);
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
      const { bundleBytes: B, gateBlock, upDownBlock, gateBytes, upBytes, downBytes } = pack;
      cache.resetStats();
      expect(cache.readAhead(layer, positions, 3, 1)).toBe(3);
      cache.settle();
      const st = cache.stats[layer]!;
      expect(st.aheadReads).toBe(2);
      // pinned: p's up+down block, a bundle more for p+1; p+5 its block. Else whole bundles.
      expect(st.aheadBytes).toBe(pinGates ? B + upDownBlock + upDownBlock : 2 * B + B);
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
