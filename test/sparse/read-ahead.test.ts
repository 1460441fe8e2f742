// Reads ahead (inline decoder): at the end of layer L the neurons of layers L+1 and L+2 that look
// likely to fire are read in the background — their up+down blocks with pinned gate rows, their
// whole bundles without (here with 90% of the cold region kept, as the plan chooses on the 7B).
// They change where bytes come from, never what is computed: the logits are bit-identical to the
// same budget without reads ahead, whose tokens are the dense engine's (oracle) at every budget;
// the reads ahead are real (counted, used, traced with the background thread's times) and the
// budget holds. Both read lanes: batches submitted and reaped by the decoding thread (the
// default) and on background threads.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../../src/index.js";
import { loadSparseModel } from "../../src/api/model.js";
import { budgetForFfnFraction, planOptions } from "../../src/sparse/memory-plan.js";
import { openPack } from "../../src/sparse/pack/open.js";
import { writePack } from "../../src/sparse/pack/write.js";
import type { SpanRecord, TokenRecord } from "../../src/trace/recorder.js";
import { tokenBudget } from "../../src/trace-tools/budget.js";
import type { MachineBounds } from "../../src/plan/machine.js";
import type { InlineDecoder } from "../../src/decode/inline.js";

const root = join(import.meta.dirname, "..", "..");
const defaultModel = join(root, "models", "neuronpipe-default.gguf");
const dir = mkdtempSync(join(tmpdir(), "np-read-ahead-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const packPath = join(dir, "default.pack.gguf");
const ctx = 128;
const steps = 24;

let dense: number[];
beforeAll(async () => {
  await writePack(defaultModel, packPath, { profile: `${defaultModel}.profile.gguf`, predictor: `${defaultModel}.predictor.gguf` });
  // the dense engine's greedy continuation of "The whale", fed back one token at a time below
  const m = await loadModel(defaultModel);
  const s = m.createSession({ contextSize: ctx });
  dense = [];
  for await (const p of s.generate("The whale", { maxTokens: steps, temperature: 0 })) if (p.token >= 0) dense.push(p.token);
  s.dispose();
  m.dispose();
}, 120_000);

function budget(f: number, predictor: boolean): number {
  const pack = openPack(packPath);
  return budgetForFfnFraction(pack, f, planOptions(pack.config, { contextSize: ctx, predictor }));
}

/** Logits of each decode step, evaluating the dense tokens one at a time (decode steps: reads ahead run). */
function logitsPerStep(m: Model): Float32Array[] {
  const s = m.createSession({ contextSize: ctx });
  try {
    const prompt = m.tokenizer.encode("The whale");
    const out = [s.evaluate(prompt)];
    for (const t of dense.slice(0, steps - 1)) out.push(s.evaluate([t]));
    return out;
  } finally {
    s.dispose();
  }
}

const argmax = (a: Float32Array) => a.reduce((best, v, i) => (v > a[best]! ? i : best), 0);

// pinned gate rows are a third of the FFN's bytes: budgets of more than a quarter; whole bundles
// with the cold region kept leave nothing to read ahead at 80% on this model
describe.each([
  { pinGates: true, coldKeep: 0, budgets: [0.45, 0.6, 0.8] },
  { pinGates: false, coldKeep: 0.9, budgets: [0.3, 0.45, 0.6] },
])("reads ahead, gate rows pinned: $pinGates, cold region kept: $coldKeep", ({ pinGates, coldKeep, budgets }) => {
  it("are read, used and bit-identical to no reads ahead at three budgets, on either read lane, with the oracle and the trained predictor; the budget holds", async () => {
    for (const predictor of ["oracle", "trained"] as const) {
      for (const f of budgets) {
        const memory = budget(f, predictor === "trained");
        const runs = [];
        const lanes = [
          { readAhead: 0, readLane: undefined },
          { readAhead: 64, readLane: "caller" },
          { readAhead: 64, readLane: "background" },
        ] as const;
        for (const { readAhead, readLane } of lanes) {
          const m = await loadSparseModel(packPath, { memory, predictor, decoder: "inline", contextSize: ctx, pinGates, readAhead, coldKeep, io: { readLane } });
          try {
            const sp = m.sparse!;
            expect(sp.cache.pinned).toBe(pinGates);
            // (at 45% the cold region is smaller than the room the LRU keeps: nothing kept)
            if (f >= 0.6) expect(sp.plan.coldKept > 0, `${f}`).toBe(coldKeep > 0);
            expect(sp.plan.readAheadBytes > 0, `readAhead ${readAhead}`).toBe(readAhead > 0);
            // the reads ahead go through their own ring, single-issuer where io_uring is the backend (kernel ≥ 6.1),
            // by default submitted and reaped by the decoding thread
            const by = readLane === "background" ? "on background threads" : "submitted and reaped by the decoding thread";
            expect(sp.io.aheadRing).toBe(readAhead > 0 && sp.io.backend === "uring" ? `a single-issuer ring, ${by}` : undefined);
            const logits = logitsPerStep(m);
            sp.sample();
            const st = sp.cache.stats;
            const sum = (k: keyof (typeof st)[number]) => st.reduce((a, s) => a + s[k], 0);
            runs.push({ logits, aheadReads: sum("aheadReads"), aheadUsed: sum("aheadUsed"), aheadBytes: sum("aheadBytes"), neuronRead: pinGates ? sp.cache.upDownRead : sp.cache.bundleRead });
            expect(sp.peakResidentBytes, `${predictor} ${f} readAhead ${readAhead}`).toBeLessThanOrEqual(memory);
          } finally {
            await m[Symbol.asyncDispose]();
          }
        }
        const [off, ...ons] = runs;
        for (const [k, on] of ons.entries()) {
          const what = `${predictor} at ${f} of the FFN, ${lanes[k + 1]!.readLane} lane`;
          // real reads ahead, some of them used (whether they pay depends on the model: on this one
          // the staging's share of a small cache and the look-ahead's precision cost more reads on
          // the critical path than they save, so the plan turns them off by default)
          expect(on!.aheadReads, what).toBeGreaterThan(0);
          expect(on!.aheadUsed, what).toBeGreaterThan(0);
          // no more used than read: a request reads a run of neurons, each at least its rows (up+down, or the bundle's)
          expect(on!.aheadUsed, what).toBeLessThanOrEqual(on!.aheadBytes / on!.neuronRead);
          expect(off!.aheadReads, what).toBe(0);
          for (let i = 0; i < steps; i++) expect(Buffer.from(on!.logits[i]!.buffer).equals(Buffer.from(off!.logits[i]!.buffer)), `${what}: step ${i}`).toBe(true);
        }
        // the oracle's logits pick the dense engine's tokens
        if (predictor === "oracle") expect(off!.logits.map(argmax)).toEqual(dense.slice(0, steps));
      }
    }
  }, 300_000);

  it("a read lane that is not caller or background is refused by name", async () => {
    await expect(loadSparseModel(packPath, { memory: budget(0.5, true), decoder: "inline", contextSize: ctx, pinGates, readAhead: 64, io: { readLane: "main" as "caller" } })).rejects.toThrow(
      'io.readLane must be "caller" or "background", got "main"',
    );
  });

  it.each(["caller", "background"] as const)("are traced on the I/O lane with the reading's times (%s lane), inside their token; the budget table's reads count their bytes", async (readLane) => {
    const m = await loadSparseModel(packPath, { memory: budget(0.5, true), predictor: "trained", decoder: "inline", contextSize: ctx, pinGates, readAhead: 64, coldKeep, io: { readLane } });
    const rec = m.createTrace();
    try {
      const s = m.createSession({ contextSize: ctx });
      const ids: number[] = [];
      for await (const p of s.generate("The whale", { maxTokens: 16, temperature: 0, trace: rec })) if (p.token >= 0) ids.push(p.token);
      s.dispose();
      expect(ids.length).toBe(16);
    } finally {
      await m[Symbol.asyncDispose]();
    }
    const spans = rec.records.filter((r): r is SpanRecord => r.kind === "span");
    const tokens = rec.records.filter((r): r is TokenRecord => r.kind === "token" && r.index >= 0);
    const ahead = spans.filter((s) => s.phase === "ahead");
    expect(ahead.length).toBeGreaterThan(0);
    // reads ahead happen in decode steps only (a prompt batch computes layer by layer for all its
    // tokens), so the cache's count of bytes read ahead is exactly what the trace shows
    const aheadBytes = m.sparse!.cache.stats.reduce((a, s) => a + s.aheadBytes, 0);
    expect(ahead.reduce((a, s) => a + s.bytes!, 0)).toBe(aheadBytes);
    // the look-ahead reads layers 1 and up; without pinned gate rows a layer's own missing
    // neurons are read in the background too (while its resident gates are computed), layer 0's
    // among them
    expect(ahead.some((s) => s.layer === 0)).toBe(!pinGates);
    for (const s of ahead) {
      expect(s.lane).toBe("io");
      expect(s.layer).toBeGreaterThanOrEqual(0);
      const t = tokens.find((t) => t.index === s.token)!;
      // the native clock is the trace's: the batch ran within its decode step (background lane:
      // the thread's start and end; caller lane: its submission and when its reads were reaped)
      expect(s.t0).toBeGreaterThanOrEqual(t.t0);
      expect(s.t1).toBeLessThanOrEqual(t.t1);
      expect(s.t1).toBeGreaterThanOrEqual(s.t0);
    }
    // 10^9 bytes/s everywhere: the reads row's bytes are every read span's, ahead ones included
    const machine: MachineBounds = { version: 1, measuredAt: "", host: "h", cpu: "c", memory: [{ threads: 1, readGBps: 1 }], disk: { path: "/x", backend: "pread", directIO: true, sequentialGBps: 1, random4kIops: 1e5, queueDepth: 32 } };
    const b = tokenBudget(rec.records, machine)!;
    const reads = b.rows.find((r) => r.step.startsWith("reads"))!;
    const inTokens = spans.filter((s) => s.lane === "io" && s.name === "read" && s.token !== undefined && s.token >= 0).reduce((a, s) => a + s.bytes!, 0);
    expect(reads.bytes! * b.tokens).toBeCloseTo(inTokens, 3);
    expect(inTokens).toBeGreaterThan(aheadBytes);
  }, 120_000);
});

// A layer's own misses read in the background (without pinned gate rows) are still misses: the
// hit rate counts what was resident when the layer's predictor asked, whoever then reads the rest.
// Reference: the same first decode step with those misses read on the critical path instead
// (same cache state before it, same predicted and fired neurons).
// (the greedy next token, and another: on the critical path a layer's misses once evicted neurons
// the same layer then asked for, and read them again — 97 misses against 42 after token 42)
it.each([["the greedy next token", -1], ["token 42", 42]])("a layer's own misses read in the background count as misses, as many as when read on the critical path (%s)", async (_, token) => {
  const memory = budget(0.45, true);
  const firstStep: { gateMisses: number; upDownMisses: number; logits: Float32Array }[] = [];
  for (const readNow of [false, true]) {
    const m = await loadSparseModel(packPath, { memory, predictor: "trained", decoder: "inline", contextSize: ctx, pinGates: false, readAhead: 64, coldKeep: 0.9 });
    try {
      (m.decoder as InlineDecoder).readNow = readNow;
      const sp = m.sparse!;
      const s = m.createSession({ contextSize: ctx });
      s.evaluate(m.tokenizer.encode("The whale"));
      sp.cache.resetStats();
      const logits = s.evaluate([token < 0 ? dense[0]! : token]);
      s.dispose();
      // layer 0: the first the step computes, so no read ahead of this step reached it yet
      const st = sp.cache.stats[0]!;
      expect(st.aheadReads > 0, `readNow ${readNow}`).toBe(readNow);
      firstStep.push({ gateMisses: st.gateAccesses - st.gateHits, upDownMisses: st.upDownAccesses - st.upDownHits, logits });
    } finally {
      await m[Symbol.asyncDispose]();
    }
  }
  const [critical, background] = firstStep;
  expect(Buffer.from(background!.logits.buffer).equals(Buffer.from(critical!.logits.buffer))).toBe(true);
  expect(critical!.gateMisses).toBeGreaterThan(0);
  expect(background!.gateMisses).toBe(critical!.gateMisses);
  expect(background!.upDownMisses).toBe(critical!.upDownMisses);
}, 120_000);
