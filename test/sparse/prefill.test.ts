// The streamed dense prefill (src/sparse/ffn/streamed.ts): a prompt batch through every neuron of
// each layer, the bundles streamed from the pack through the plan's staging while the previous
// chunk computes. Against the dense engine on the plain GGUF (an independent path: mapped
// weights, its own FFN matmuls): logits after the prompt within the stated tolerance and the
// same greedy tokens after it, for every decoder of a pack at 25%, 50% and 100% of the FFN; the
// prefill's logits do not depend on the budget or the decoder (chunks aligned to 32 neurons,
// rows taken in place or from staging alike); what it reads is every bundle the cache does not
// hold, once per batch; and the budget holds.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../../src/index.js";
import { loadSparseModel } from "../../src/api/model.js";
import { budgetForFfnFraction, planOptions } from "../../src/sparse/memory-plan.js";
import { openPack } from "../../src/sparse/pack/open.js";
import { writePack } from "../../src/sparse/pack/write.js";
import { native } from "../../src/native.js";
import { main } from "../../src/cli/main.js";
import { profileActivations } from "../../src/tools/profile.js";
import { writeProfile } from "../../src/sparse/profile-file.js";
import { quietly } from "../helpers/quiet.js";

const root = join(import.meta.dirname, "..", "..");
const defaultModel = join(root, "models", "neuronpipe-default.gguf");
const dir = mkdtempSync(join(tmpdir(), "np-prefill-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const packPath = join(dir, "default.pack.gguf");
const ctx = 256;
// 40 tokens or so: one batch of 32 and a second of the rest
const text = "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, and nothing particular to interest me on shore, I thought I would sail about";

const synthPath = join(dir, "synth-q4_0.gguf");
const synthPack = join(dir, "synth-q4_0.pack.gguf");
beforeAll(async () => {
  await writePack(defaultModel, packPath, { profile: `${defaultModel}.profile.gguf`, predictor: `${defaultModel}.predictor.gguf` });
  // a Q4_0 model with planted ~10% activity (no predictors: decode with the oracle)
  expect(await quietly(() => main(["synth", "--out", synthPath, "--embd", "256", "--ff", "1024", "--layers", "3", "--heads", "8", "--type", "q4_0", "--activation", "reglu", "--active-fraction", "0.1"]))).toBe(0);
  const m = await loadModel(synthPath);
  const p = profileActivations(m, m.tokenizer.encode(text.repeat(20)).slice(0, 256), 128);
  m.dispose();
  await writeProfile(`${synthPath}.profile.gguf`, p);
  await writePack(synthPath, synthPack, { profile: `${synthPath}.profile.gguf` });
}, 180_000);

async function greedy(m: Model, n: number): Promise<number[]> {
  // through a session: the prompt takes the decoder's prefill, then n decode steps
  const s = m.createSession({ contextSize: ctx });
  const ids: number[] = [];
  try {
    for await (const p of s.generate(text, { maxTokens: n, temperature: 0 })) if (p.token >= 0) ids.push(p.token);
  } finally {
    s.dispose();
  }
  return ids;
}

function budget(path: string, f: number, predictor: boolean): number {
  const pack = openPack(path);
  return budgetForFfnFraction(pack, f, planOptions(pack.config, { contextSize: ctx, predictor }));
}

/** Logits after the prompt through the decoder's prefill (every decoder, worker threads or not), in batches of 32 as a session does. */
async function prefillLogits(m: Model, prompt: number[]): Promise<Float32Array> {
  const d = m.decoder;
  const c = d.createContext({ contextSize: ctx });
  try {
    let off = -1;
    for (let i = 0; i < prompt.length; i += 32) off = await d.prefill(c, prompt.slice(i, i + 32), i);
    return Float32Array.from(native().viewF32(c.rs.buf, off, m.config.nVocab));
  } finally {
    d.releaseContext(c);
  }
}

const maxAbs = (a: Float32Array) => a.reduce((m, v) => Math.max(m, Math.abs(v)), 0);

describe.each([
  // [model, plain GGUF, pack, predictor, tolerance relative to max |logit|, greedy tokens that must match]
  // F32: the streamed path's down projection sums h·W in f32 as the dense engine's sgemm does,
  // only the order of the sums differs. Q4_0: both quantise h to Q8_0 per 32 neurons, and the
  // streamed path also requantises its down columns (stored along n_embd in the pack) to int8 per
  // 32 neurons: up to 1/254 of a group's largest |w| per term. Its random weights
  // give flat logits, and sparse decode's own f32 down projection differs from dense's the same
  // way, so after 12 tokens a near-tie goes the other way: the first 8 are held to dense's.
  ["the default model (F32)", defaultModel, () => packPath, "trained", 1e-4, 16],
  ["a synthetic Q4_0 model", synthPath, () => synthPack, "oracle", 3e-2, 8],
] as const)("streamed dense prefill, %s", (_name, plain, pack, predictor, tol, same) => {
  it("every decoder at 25/50/100% of the FFN: logits after the prompt within the tolerance of dense's, the same greedy tokens, the same bits at every budget and decoder; the prefill reads nothing through the neuron cache; the budget holds", async () => {
    const d = await loadModel(plain);
    const prompt = d.tokenizer.encode(text);
    expect(prompt.length).toBeGreaterThan(32); // two batches
    const denseLogits = await prefillLogits(d, prompt);
    const denseTokens = await greedy(d, 16);
    d.dispose();
    let reference: Float32Array | undefined;
    const scale = maxAbs(denseLogits);
    for (const f of [0.25, 0.5, 1]) {
      for (const decoder of ["inline", "pipeline", "blocking"] as const) {
        const what = `${decoder} at ${f} of the FFN`;
        const memory = budget(pack(), f, predictor === "trained");
        const m = await loadSparseModel(pack(), { memory, decoder, predictor, contextSize: ctx });
        try {
          const sp = m.sparse!;
          const before = sp.cache.stats.reduce((a, st) => a + st.bytesRead, 0);
          const logits = await prefillLogits(m, prompt);
          sp.sample();
          expect(sp.peakResidentBytes, what).toBeLessThanOrEqual(memory);
          // the prefill reads through its own streams, not the neuron cache
          expect(sp.cache.stats.reduce((a, st) => a + st.bytesRead, 0), what).toBe(before);
          let worst = 0;
          for (let i = 0; i < logits.length; i++) worst = Math.max(worst, Math.abs(logits[i]! - denseLogits[i]!));
          expect(worst / scale, what).toBeLessThan(tol);
          reference ??= logits;
          expect(Buffer.from(logits.buffer).equals(Buffer.from(reference.buffer)), `${what}: bits`).toBe(true);
          expect((await greedy(m, 16)).slice(0, same), what).toEqual(denseTokens.slice(0, same));
        } finally {
          await m[Symbol.asyncDispose]();
        }
      }
    }
  }, 300_000);
});

describe("streamed dense prefill, reads", () => {
  it("inline: reads each bundle the cache does not hold once per prompt batch, in runs within chunks of whole 32-neuron groups, with the next chunk's read in flight; uses the held ones in place", async () => {
    const m = await loadSparseModel(packPath, { memory: budget(packPath, 0.5, true), decoder: "inline", contextSize: ctx });
    try {
      const prompt = m.tokenizer.encode(text);
      await prefillLogits(m, prompt);
      const streamed = (m.decoder as unknown as { streamed: import("../../src/sparse/ffn/streamed.js").StreamedFfn }).streamed;
      // again, keeping every read's interval
      streamed.resetStats();
      streamed.recordSpans = true;
      await prefillLogits(m, prompt);
      const pack = openPack(packPath);
      const { nLayer, nFF } = pack.config;
      const batches = Math.ceil(prompt.length / 32);
      // what the cache holds whole (its own accessor), and the runs of the rest
      let held = 0, runs = 0;
      const cache = m.sparse!.cache;
      for (let l = 0; l < nLayer; l++)
        for (let p = 0; p < nFF; p++) {
          const whole = cache.holdsWhole(l * nFF + p);
          if (whole) held++;
          else if (p === 0 || cache.holdsWhole(l * nFF + p - 1)) runs++;
        }
      expect(held).toBeGreaterThan(0);
      expect(held).toBeLessThan(nLayer * nFF);
      expect(streamed.stats.inPlace).toBe(batches * held);
      expect(streamed.stats.bytes).toBe(batches * (nLayer * nFF - held) * pack.bundleBytes);
      expect(streamed.chunk % 32).toBe(0);
      // one read per run, or more where a chunk boundary splits a run
      const chunksPerLayer = Math.ceil(nFF / streamed.chunk);
      expect(streamed.stats.reads).toBeGreaterThanOrEqual(batches * runs);
      expect(streamed.stats.reads).toBeLessThanOrEqual(batches * (runs + nLayer * chunksPerLayer));
      // every chunk's reads (one batch of its runs) have an interval; all but a batch's first ran in the background
      const spans = streamed.stats.spans;
      expect(spans.length).toBeGreaterThan(0);
      expect(spans.length).toBeLessThanOrEqual(streamed.stats.reads);
      expect(spans.filter((r) => !r.background).length).toBeLessThanOrEqual(batches);
      expect(streamed.stats.spans.reduce((a, r) => a + r.bytes, 0)).toBe(streamed.stats.bytes);
      for (const sp of streamed.stats.spans) expect(sp.t1).toBeGreaterThanOrEqual(sp.t0);
      // a slot whose read has not landed (slotReady false: here, every one) is read from the pack
      // instead; the logits are the same bits wherever the rows came from
      const inPlaceLogits = await prefillLogits(m, prompt);
      streamed.resetStats();
      (streamed.o as { slotReady?: (s: number) => boolean }).slotReady = () => false;
      const readLogits = await prefillLogits(m, prompt);
      expect(streamed.stats.inPlace).toBe(0);
      expect(streamed.stats.bytes).toBe(batches * nLayer * nFF * pack.bundleBytes);
      expect(Buffer.from(readLogits.buffer).equals(Buffer.from(inPlaceLogits.buffer))).toBe(true);
    } finally {
      await m[Symbol.asyncDispose]();
    }
  }, 120_000);

  it("inline: the neuron cache is left as decode wants it (the same neurons resident in every layer, no statistics touched)", async () => {
    const m = await loadSparseModel(packPath, { memory: budget(packPath, 0.5, true), decoder: "inline", contextSize: ctx });
    try {
      const { cache, pack } = m.sparse!;
      const layers = [...Array(pack.config.nLayer).keys()];
      const before = layers.map((l) => cache.residentNeurons(l));
      const slots = layers.map((l) => Array.from({ length: pack.config.nFF }, (_, p) => cache.slotOfNeuron(l * pack.config.nFF + p)));
      await prefillLogits(m, m.tokenizer.encode(text));
      expect(layers.map((l) => cache.residentNeurons(l))).toEqual(before);
      expect(layers.map((l) => Array.from({ length: pack.config.nFF }, (_, p) => cache.slotOfNeuron(l * pack.config.nFF + p)))).toEqual(slots);
      expect(cache.stats.every((st) => st.gateAccesses === 0 && st.upDownAccesses === 0 && st.bytesRead === 0)).toBe(true);
      expect(before.some((n) => n > 0)).toBe(true);
    } finally {
      await m[Symbol.asyncDispose]();
    }
  }, 120_000);

  for (const decoder of ["inline", "pipeline"] as const)
  it(`${decoder}, traced: the prefill's GEMMs per chunk on the prefill lane and its reads on the I/O lane, inside the prefill record; trace plot draws them`, async () => {
    const m = await loadSparseModel(packPath, { memory: budget(packPath, 0.5, true), decoder, pinGates: true, contextSize: ctx });
    const rec = m.createTrace();
    try {
      const s = m.createSession({ contextSize: ctx });
      for await (const _ of s.generate(text, { maxTokens: 2, temperature: 0, trace: rec })) void _;
      s.dispose();
      const spans = rec.records.filter((r): r is import("../../src/trace/recorder.js").SpanRecord => r.kind === "span");
      const compute = spans.filter((x) => x.lane === "prefill");
      const reads = spans.filter((x) => x.lane === "io" && x.phase === "bundle");
      const pack = openPack(packPath);
      const batches = Math.ceil(m.tokenizer.encode(text).length / 32);
      // every neuron computed once per batch; the bundles the cache does not hold whole read once
      const { nLayer, nFF } = pack.config;
      let held = 0;
      for (let g = 0; g < nLayer * nFF; g++) if (m.sparse!.cache.holdsWhole(g)) held++;
      expect(held).toBeGreaterThan(0);
      expect(compute.length).toBeGreaterThanOrEqual(batches * nLayer);
      expect(compute.reduce((a, x) => a + x.neurons!, 0)).toBe(batches * nLayer * nFF);
      expect(reads.length).toBeGreaterThan(0);
      expect(reads.reduce((a, x) => a + x.bytes!, 0)).toBe(batches * (nLayer * nFF - held) * pack.bundleBytes);
      const prefills = rec.records.filter((r): r is import("../../src/trace/recorder.js").TokenRecord => r.kind === "token" && r.index === -1);
      expect(prefills.length).toBe(batches);
      for (const x of [...compute, ...reads]) expect(prefills.some((p) => x.t0 >= p.t0 && x.t1 <= p.t1), `${x.lane} span inside a prefill record`).toBe(true);
      const { traceSvg } = await import("../../src/trace-tools/plot.js");
      const svg = traceSvg(rec.records);
      expect(svg).toMatch(/class="lane"[^>]*>prefill</);
      expect(svg).toMatch(/class="lane"[^>]*>io</);
    } finally {
      await m[Symbol.asyncDispose]();
    }
  }, 120_000);
});
