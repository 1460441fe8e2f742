// bench/alternate.js switches a decoder knob between blocks of tokens of one generation. The
// knobs change only the schedule and where bytes come from, so the greedy tokens must be the
// dense decoder's (reference: the plain default model, decoded densely; the pack with the oracle
// predictor computes every gate, as dense does) — with every knob switched, half of the FFN on
// disk and reads ahead on. The block bookkeeping is checked against hand counts.
import { describe, expect, it } from "vitest";
// @ts-expect-error: a plain .mjs module of the bench scripts
import { alternate } from "../../bench/lib/alternate.mjs";
import { loadModel, native, type Model } from "../../src/index.js";
import { defaultModel, scratchDefaultPack } from "../helpers/default-pack.js";

const { packPath } = scratchDefaultPack("np-alternate-");
const prompt = "Once upon a time";
const tokens = 24;

/** The greedy tokens of the plain model through the library's session (not this bench's loop). */
async function denseIds(): Promise<number[]> {
  const m = await loadModel(defaultModel, { decoder: "dense", contextSize: 64 });
  try {
    const s = m.createSession();
    const ids: number[] = [];
    for await (const p of s.generate(prompt, { maxTokens: tokens, temperature: 0 })) ids.push(p.token);
    return ids;
  } finally {
    await m.close();
  }
}

async function withPack<T>(f: (m: Model) => Promise<T>): Promise<T> {
  const m = await loadModel(packPath, { memory: "26MiB", decoder: "inline", predictor: "oracle", readAhead: 64, contextSize: 64 });
  try {
    return await f(m);
  } finally {
    await m.close();
  }
}

describe("bench/alternate (knobs switched between blocks of one generation)", () => {
  it.each([
    ["aheadLayers", "1", "2"],
    ["readAhead", "true", "false"],
    ["readNow", "false", "true"],
    ["demote", "true", "false"],
    ["threads", "2", "1"],
  ])("switching %s between %s and %s keeps the dense decoder's tokens", async (knob, a, b) => {
    const dense = await denseIds();
    const { r, aheadReads } = await withPack(async (m) => {
      const value = () => (knob === "threads" ? native().getThreads() : (m.decoder as unknown as Record<string, unknown>)[knob]);
      const original = value();
      const r = await alternate(m, { knob, a, b, tokens, block: 3, prompt, check: true });
      expect(value()).toBe(original); // the knob is left as it was found
      return { r, aheadReads: m.sparse!.cache.stats.reduce((t, s) => t + s.aheadReads, 0) };
    });
    expect(r.ids).toEqual(dense);
    expect(new Set(dense).size).toBeGreaterThan(4); // a generation, not one token repeated
    expect(aheadReads).toBeGreaterThan(0); // half of the FFN on disk: reads ahead did happen
    expect(r.checked).toBe(true);
    // 24 steps in blocks of 3: A B A B A B A B; the first A and B blocks are warm-up
    expect(r.a.tokens).toBe(9);
    expect(r.b.tokens).toBe(9);
    // pairs (B after A) among the blocks kept: A B A B A B → 3
    expect(r.paired.n).toBe(3);
    expect(r.paired.p10).toBeLessThanOrEqual(r.paired.median);
    expect(r.paired.median).toBeLessThanOrEqual(r.paired.p90);
  }, 120_000);

  it("refuses an unknown knob, a knob the decoder has not, and a bad value, by name", async () => {
    await withPack(async (m) => {
      await expect(alternate(m, { knob: "speed", a: "1", b: "2", tokens, block: 3, prompt })).rejects.toThrow(/unknown knob "speed" \(one of aheadLayers, readAhead, readNow, demote, threads\)/);
      await expect(alternate(m, { knob: "aheadLayers", a: "two", b: "2", tokens, block: 3, prompt })).rejects.toThrow(/"two" is not a positive integer/);
      await expect(alternate(m, { knob: "readNow", a: "yes", b: "false", tokens, block: 3, prompt })).rejects.toThrow(/"yes" is not true or false/);
      // more positions than the model was trained on (its GGUF's context_length): refused up front, the knob left as it was
      const limit = m.config.nCtxTrain;
      const before = (m.decoder as unknown as { aheadLayers: number }).aheadLayers;
      await expect(alternate(m, { knob: "aheadLayers", a: "1", b: "3", tokens: limit, block: 3, prompt })).rejects.toThrow(new RegExp(`\\+ ${limit} to decode = \\d+ positions, more than the model's training context \\(${limit}\\)`));
      expect((m.decoder as unknown as { aheadLayers: number }).aheadLayers).toBe(before);
    });
    const m = await loadModel(defaultModel, { decoder: "dense", contextSize: 64 });
    try {
      await expect(alternate(m, { knob: "aheadLayers", a: "1", b: "2", tokens, block: 3, prompt })).rejects.toThrow(/the dense decoder has no knob aheadLayers/);
    } finally {
      await m.close();
    }
  }, 120_000);
});
