// Kept cold neurons (PlanOptions.coldKeep): the cold region keeps the most-used cold neurons of
// the profile for good (most fired; with a trained predictor and whole bundles, most flagged) and
// runs its LRU over the other slots. Checked against the pack's own
// counts read independently (which neurons are kept), against the pack file (their bytes), after
// a decode that churns the LRU (they are still there), and against the dense engine (the tokens).
import { describe, expect, it } from "vitest";
import { loadModel, loadSparseModel } from "../../src/api/model.js";
import { native } from "../../src/native.js";
import { budgetForFfnFraction, planMemory, planOptions } from "../../src/sparse/memory-plan.js";
import { openPack } from "../../src/sparse/pack/open.js";
import { defaultModel, scratchDefaultPack } from "../helpers/default-pack.js";
import { fileBytes } from "../helpers/file-bytes.js";

const { packPath } = scratchDefaultPack("np-cold-keep-");
const ctx = 128;

async function tokens(path: string, o: Parameters<typeof loadModel>[1], n: number): Promise<number[]> {
  const m = await loadModel(path, o);
  try {
    const s = m.createSession({ contextSize: ctx });
    const ids: number[] = [];
    for await (const p of s.generate("The whale", { maxTokens: n, temperature: 0 })) if (p.token >= 0) ids.push(p.token);
    s.dispose();
    return ids;
  } finally {
    m.dispose();
  }
}

describe("kept cold neurons", () => {
  it("the plan keeps a share of the cold region, leaving the LRU room for a staging batch and the reads ahead", () => {
    const pack = openPack(packPath);
    const opts = (coldKeep: number, readAheadNeurons = 0) => planOptions(pack.config, { contextSize: ctx, predictor: true, pinGates: false, coldKeep, readAheadNeurons, readAheadBundles: readAheadNeurons > 0, readAheadMaxShare: 1 });
    const memory = budgetForFfnFraction(pack, 0.5, opts(0));
    expect(planMemory(pack, memory, opts(0)).coldKept).toBe(0);
    const p = planMemory(pack, memory, opts(0.5));
    expect(p.coldKept).toBe(Math.floor(p.coldSlots * 0.5));
    const all = planMemory(pack, memory, opts(0.999, 64));
    expect(all.readAheadBytes).toBeGreaterThan(0);
    expect(all.coldSlots - all.coldKept).toBe(all.options.stagingNeurons + 2 * 64);
  });

  it("a bad coldKeep is refused by name; the blocking decoder has no cold region to keep", async () => {
    const pack = openPack(packPath);
    const memory = budgetForFfnFraction(pack, 0.5, planOptions(pack.config, { contextSize: ctx, predictor: true }));
    for (const coldKeep of [1, -0.1, Number.NaN]) {
      await expect(loadSparseModel(packPath, { memory, contextSize: ctx, coldKeep })).rejects.toThrow(`coldKeep must be a share of the cold region in [0, 1), got ${coldKeep}`);
    }
    await expect(loadSparseModel(packPath, { memory, contextSize: ctx, decoder: "blocking", coldKeep: 0.5 })).rejects.toThrow("coldKeep: the blocking decoder (LLMFlash) has a window cache, no cold region to keep");
    await expect(loadModel(defaultModel, { coldKeep: 0.5 })).rejects.toThrow(`coldKeep needs a neuron pack, and ${defaultModel} is a plain model`);
  });

  it("with a trained predictor and whole bundles, the cold region keeps the neurons flagged most (fired or flagged silent), by the profile's counts and the predictor's false-flag rates", async () => {
    const pack = openPack(packPath);
    const { nLayer, nFF } = pack.config;
    const T = pack.profileTokens;
    const memory = budgetForFfnFraction(pack, 0.5, planOptions(pack.config, { contextSize: ctx, predictor: true }));
    const m = await loadSparseModel(packPath, { memory, predictor: "trained", decoder: "inline", contextSize: ctx, pinGates: false, readAhead: 0, coldKeep: 0.9 });
    try {
      const { cache, plan } = m.sparse!;
      expect(cache.pinned).toBe(false);
      // a flag of an absent neuron reads its bundle: p + (1 − p)·f per token, p = count ÷ tokens
      // (single precision), f the predictor's false-flag rate; ties by layer, then position
      const byUse: { g: number; u: number }[] = [];
      const byFiring: { g: number; c: number }[] = [];
      for (let l = 0; l < nLayer; l++) {
        const counts = pack.layers[l]!.counts;
        const f = pack.predictor![l]!.falseFlags!;
        for (let p = cache.hotLimit[l]!; p < nFF; p++) {
          const x = Math.fround(counts[p]! / T);
          const u = x + (1 - x) * f[p]!;
          if (u > 0) byUse.push({ g: l * nFF + p, u });
          if (counts[p]! > 0) byFiring.push({ g: l * nFF + p, c: counts[p]! });
        }
      }
      byUse.sort((a, b) => b.u - a.u || a.g - b.g);
      byFiring.sort((a, b) => b.c - a.c || a.g - b.g);
      const loaded = byUse.slice(0, plan.coldSlots).map((x) => x.g);
      const firedMost = new Set(byFiring.slice(0, plan.coldSlots).map((x) => x.g));
      // the two measures choose differently here: the difference is what this checks
      const onlyByUse = loaded.filter((g) => !firedMost.has(g));
      expect(onlyByUse.length).toBeGreaterThan(plan.coldSlots / 50);
      for (const g of loaded) expect(cache.holdsWhole(g), `neuron ${g}`).toBe(true);
      // and after a decode that churns the LRU, the kept ones are still there
      const session = m.createSession({ contextSize: ctx });
      for await (const t of session.generate("The whale", { maxTokens: 16, temperature: 0 })) void t;
      session.dispose();
      for (const g of loaded.slice(0, plan.coldKept)) expect(cache.holdsWhole(g), `kept neuron ${g}`).toBe(true);
    } finally {
      await m[Symbol.asyncDispose]();
    }
  }, 120_000);

  for (const pinGates of [false, true]) {
    it(`gate rows pinned: ${pinGates}: the kept neurons are the most-fired cold ones by the pack's counts, hold their bytes, and stay through a decode; the tokens are the dense engine's`, async () => {
      const pack = openPack(packPath);
      const { nLayer, nFF } = pack.config;
      // pinned gate rows take a third of the FFN's bytes: a budget above them
      const memory = budgetForFfnFraction(pack, 0.55, planOptions(pack.config, { contextSize: ctx, predictor: false }));
      const o = { memory, predictor: "oracle", decoder: "inline", contextSize: ctx, pinGates, readAhead: 0, coldKeep: 0.9 } as const;
      const m = await loadSparseModel(packPath, o);
      try {
        const { cache, plan } = m.sparse!;
        expect(cache.pinned).toBe(pinGates);
        expect(plan.coldKept).toBeGreaterThan(0);
        // the expected set: positions past each layer's hot limit with a firing count, most fired
        // first (ties: layer, then position), the first coldKept of them
        const cand: { g: number; c: number }[] = [];
        for (let l = 0; l < nLayer; l++) {
          const counts = pack.layers[l]!.counts;
          for (let p = cache.hotLimit[l]!; p < nFF; p++) if (counts[p]! > 0) cand.push({ g: l * nFF + p, c: counts[p]! });
        }
        cand.sort((a, b) => b.c - a.c || a.g - b.g);
        const kept = cand.slice(0, plan.coldKept).map((x) => x.g);
        expect(kept.length).toBe(plan.coldKept);
        // the others the load put in the cold region (the next most fired): the LRU's to evict
        const others = cand.slice(plan.coldKept, plan.coldSlots).map((x) => x.g);
        expect(others.every((g) => cache.holdsWhole(g))).toBe(true);
        const session = m.createSession({ contextSize: ctx });
        const ids: number[] = [];
        for await (const t of session.generate("The whale", { maxTokens: 24, temperature: 0 })) if (t.token >= 0) ids.push(t.token);
        session.dispose();
        // the LRU went round: it read more neurons than it has slots
        const reads = cache.stats.reduce((a, s) => a + s.upDownAccesses - s.upDownHits + s.gateAccesses - s.gateHits, 0);
        expect(reads).toBeGreaterThan(plan.coldSlots - plan.coldKept);
        const n = native();
        const ud = pack.upBytes + pack.downBytes;
        for (const g of kept) {
          expect(cache.holdsWhole(g), `neuron ${g}`).toBe(true);
        }
        // while the LRU did evict what it held at the start
        expect(others.filter((g) => !cache.holdsWhole(g)).length).toBeGreaterThan(0);
        for (const g of kept.filter((_, i) => i % 97 === 0)) {
          const s = cache.slotOfNeuron(g);
          const at = pack.layers[Math.floor(g / nFF)]!.bundlesOffset + (g % nFF) * pack.bundleBytes;
          expect(Buffer.from(n.viewU8(cache.arena, s * cache.slotBytes + cache.upOffset, ud)).equals(fileBytes(packPath, at + pack.gateBlock, ud)), `neuron ${g}`).toBe(true);
        }
        expect(ids).toEqual(await tokens(defaultModel, { contextSize: ctx }, 24));
      } finally {
        await m[Symbol.asyncDispose]();
      }
    }, 120_000);
  }
});
