// The actor pipeline against independent references: the dense engine (plain model) and the
// synchronous sparse engine of the sparse-decode issue decode the same greedy tokens as the
// `pipeline` and `blocking` modes at 50% of the FFN offloaded; the traces show I/O hidden under
// compute in pipeline mode and none in blocking mode; cancellation, a killed compute worker and
// an I/O error end the generation in the right state with a clear message, and the next
// generation decodes the reference tokens again.
import { copyFileSync, truncateSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../../src/index.js";
import { budgetForFfnFraction, planOptions } from "../../src/sparse/memory-plan.js";
import { openPack } from "../../src/sparse/pack/open.js";
import { loadSparseModel, type LoadOptions } from "../../src/api/model.js";
import type { PipelineDecoder } from "../../src/decode/pipeline/pipeline.js";
import { TraceRecorder, type SpanRecord } from "../../src/trace/recorder.js";
import { traceStats } from "../../src/trace-tools/stats.js";
import type { InspectionEvent } from "xstate";
import { defaultModel, scratchDefaultPack } from "../helpers/default-pack.js";

const { dir, packPath } = scratchDefaultPack("np-pipeline-");
const ctx = 128;
const prompt = "The whale";

function budget(f: number, predictor: boolean): number {
  const pack = openPack(packPath);
  return budgetForFfnFraction(pack, f, planOptions(pack.config, { contextSize: ctx, predictor }));
}

async function load(decoder: LoadOptions["decoder"], predictor: "trained" | "oracle", path = packPath): Promise<Model> {
  return loadSparseModel(path, { memory: budget(0.5, predictor === "trained"), predictor, decoder, contextSize: ctx });
}

/** Greedy tokens through Session.generate; the session machine's final state alongside. */
async function generate(m: Model, tokens: number, opts: { trace?: TraceRecorder; signal?: AbortSignal; onToken?: (i: number) => void } = {}) {
  const s = m.createSession({ contextSize: ctx });
  const ids: number[] = [];
  let state: unknown;
  let error: Error | undefined;
  const inspect = (ev: InspectionEvent) => {
    // the session machine's snapshots (inspect also sees the decoder's actor system)
    if (ev.type === "@xstate.snapshot" && ev.actorRef.id === "session") state = (ev.snapshot as { value?: unknown }).value;
  };
  try {
    for await (const p of s.generate(prompt, { maxTokens: tokens, temperature: 0, trace: opts.trace, signal: opts.signal, inspect })) {
      if (p.token >= 0) ids.push(p.token);
      opts.onToken?.(ids.length);
    }
  } catch (e) {
    error = e as Error;
  } finally {
    s.dispose();
  }
  return { ids, state, error };
}

async function closeModel(m: Model) {
  await m[Symbol.asyncDispose]();
}

let dense: number[];
beforeAll(async () => {
  const m = await loadModel(defaultModel);
  dense = (await generate(m, 64)).ids;
  m.dispose();
  expect(dense.length).toBe(64);
}, 60_000);

describe("modes on one pack, 50% of the FFN offloaded", () => {
  it("oracle predictor: pipeline, blocking, sync sparse and mmap decode the dense engine's 64 greedy tokens", async () => {
    for (const engine of ["pipeline", "blocking", "inline"] as const) {
      const m = await load(engine, "oracle");
      try {
        expect(m.sparse!.plan.ffnResident).toBeCloseTo(0.5, 2);
        const r = await generate(m, 64);
        expect(r.error).toBeUndefined();
        expect(r.ids, engine).toEqual(dense);
        // it really read from storage while decoding
        expect(m.sparse!.report().reduce((a, l) => a + l.bytesRead, 0), engine).toBeGreaterThan(0);
      } finally {
        await closeModel(m);
      }
    }
    const mm = await loadModel(packPath, { decoder: "mmap" });
    try {
      expect((await generate(mm, 64)).ids).toEqual(dense);
    } finally {
      mm.dispose();
    }
  }, 120_000);

  it("oracle predictor, whole FFN resident (one cluster per layer): pipeline decodes the dense engine's 64 tokens", async () => {
    const m = await loadSparseModel(packPath, { memory: budget(1, false), predictor: "oracle", decoder: "pipeline", contextSize: ctx });
    try {
      expect((m.decoder as PipelineDecoder).knobs.clusterNeurons).toBe(1024);
      expect((await generate(m, 64)).ids).toEqual(dense);
    } finally {
      await closeModel(m);
    }
  }, 120_000);

  it("gate rows pinned, front/back tasks per layer (cold region ≥ one layer): oracle and trained decode the dense engine's 64 tokens, with reads", async () => {
    // a small hot share leaves a cold region holding a whole layer: the front/back path
    for (const predictor of ["oracle", "trained"] as const) {
      const m = await loadSparseModel(packPath, { memory: budget(0.5, predictor === "trained"), predictor, decoder: "pipeline", pinGates: true, hotShare: 0.25, contextSize: ctx });
      try {
        expect(m.sparse!.plan.gatesPinned).toBe(true);
        expect(m.decoder.describe()).toMatch(/one front .* and one back .* task per layer/);
        const r = await generate(m, 64);
        expect(r.error).toBeUndefined();
        expect(r.ids, predictor).toEqual(dense);
        const rep = m.sparse!.report();
        expect(rep.reduce((a, l) => a + l.bytesRead, 0), predictor).toBeGreaterThan(0); // up+down rows were read
        expect(rep.every((l) => l.gateHits === l.gateAccesses)).toBe(true); // never a gate
      } finally {
        await closeModel(m);
      }
    }
  }, 120_000);

  it("trained predictor: pipeline and blocking decode the same 64 tokens, and the dense engine's", async () => {
    const got: number[][] = [];
    for (const engine of ["pipeline", "blocking"] as const) {
      const m = await load(engine, "trained");
      try {
        const r = await generate(m, 64);
        expect(r.error).toBeUndefined();
        got.push(r.ids);
        const rep = m.sparse!.report();
        const predicted = rep.reduce((a, l) => a + l.predicted, 0) / rep[0]!.tokens;
        expect(predicted).toBeLessThan(0.5 * 6 * 1024); // the predictor, not every neuron
      } finally {
        await closeModel(m);
      }
    }
    expect(got[0]).toEqual(got[1]);
    expect(got[0]).toEqual(dense);
  }, 120_000);

  it("every mode decodes at every budget from the smallest workable one (as the refusal names it) to the whole FFN: oracle gives the dense tokens, trained the same tokens at every budget", async () => {
    // the hot region's prefetch once took frames the lease did not count: at the smallest
    // budgets (one or two hot frames) the pipeline then found no frame free
    for (const predictor of ["oracle", "trained"] as const) {
      const refusal = await loadSparseModel(packPath, { memory: "4MiB", predictor, contextSize: ctx }).then(
        () => "",
        (e: Error) => e.message,
      );
      const smallest = Number(/the smallest workable budget is [^(]*\((\d+) bytes\)/.exec(refusal)?.[1]);
      expect(smallest, refusal).toBeGreaterThan(4 * 2 ** 20);
      const budgets = [smallest, smallest + 2 ** 19, smallest + 2 ** 20, smallest + 2 * 2 ** 20, budget(0.25, predictor === "trained"), budget(0.5, predictor === "trained"), budget(1, predictor === "trained")];
      let reference: number[] | undefined = predictor === "oracle" ? dense.slice(0, 24) : undefined;
      for (const memory of budgets) {
        for (const engine of ["pipeline", "blocking", "inline"] as const) {
          const m = await loadSparseModel(packPath, { memory, predictor, decoder: engine, contextSize: ctx });
          try {
            const r = await generate(m, 24);
            expect(r.error, `${predictor} ${engine} at ${memory} bytes`).toBeUndefined();
            reference ??= r.ids;
            expect(r.ids, `${predictor} ${engine} at ${memory} bytes`).toEqual(reference);
          } finally {
            await closeModel(m);
          }
        }
      }
      // the trained predictor misses a few neurons, yet here it keeps dense's greedy tokens
      expect(reference).toEqual(dense.slice(0, 24));
    }
  }, 300_000);

  it("trained predictor: a second generation on the same session (prefill after decoding) decodes the same tokens again", async () => {
    for (const engine of ["pipeline", "blocking"] as const) {
      const m = await load(engine, "trained");
      const s = m.createSession({ contextSize: ctx });
      try {
        const run = async () => {
          const ids: number[] = [];
          for await (const p of s.generate(prompt, { maxTokens: 16, temperature: 0 })) if (p.token >= 0) ids.push(p.token);
          return ids;
        };
        const a = await run();
        s.reset(); // same session: the second prefill follows decode steps on the same scratch
        const b = await run();
        expect(b, engine).toEqual(a);
        expect(a).toEqual(dense.slice(0, 16));
      } finally {
        s.dispose();
        await closeModel(m);
      }
    }
  }, 120_000);
});

describe("traces", () => {
  it("pipeline mode hides I/O under compute; blocking mode does not", async () => {
    const shares: Record<string, number> = {};
    for (const mode of ["pipeline", "blocking"] as const) {
      // the cluster pipeline: 8 clusters per layer, gate rows read too (the default model's
      // defaults are one cluster and pinned gate rows: its layers hold too little compute to hide reads under)
      const opts = mode === "pipeline" ? { pinGates: false, pipeline: { clusterNeurons: 128 } } : {};
      const m = await loadSparseModel(packPath, { memory: budget(0.5, true), predictor: "trained", decoder: mode, contextSize: ctx, ...opts });
      const rec = new TraceRecorder({ mode, model: packPath, threads: {} });
      try {
        const r = await generate(m, 24, { trace: rec });
        expect(r.error).toBeUndefined();
      } finally {
        await closeModel(m);
      }
      // decode only: the prompt's streamed prefill reads in the background in every mode
      const st = traceStats(rec.records.filter((x) => x.kind !== "span" || x.token !== -1));
      const spans = rec.records.filter((x): x is SpanRecord => x.kind === "span");
      expect(spans.some((s) => s.token === -1 && s.lane === "io" && s.phase === "bundle"), `${mode}: prefill reads traced`).toBe(true);
      // every decode step has attention, predictor and FFN spans for every layer, and reads
      for (const name of ["attention", "predict", "read"]) expect(spans.some((s) => s.name === name), `${mode} ${name}`).toBe(true);
      expect(rec.records.some((x) => x.kind === "actor")).toBe(true);
      expect(st.ioUs).toBeGreaterThan(0);
      expect(st.computeUs).toBeGreaterThan(0);
      shares[mode] = st.ioHiddenShare;
      if (mode === "blocking") {
        // every read finishes before the compute that needs it starts (the I/O worker stamps a
        // read's end before it flags the slots ready; the clock is in whole µs)
        expect(st.ioHiddenShare).toBeLessThan(0.002);
        expect(spans.some((s) => s.name === "ffn")).toBe(true);
      } else {
        expect(st.ioHiddenShare).toBeGreaterThan(0.01);
        expect(spans.filter((s) => s.name === "gate").length).toBeGreaterThan(spans.filter((s) => s.name === "attention").length); // several clusters per layer
      }
    }
    console.log(`I/O hidden under compute: pipeline ${(100 * shares.pipeline!).toFixed(1)}%, blocking ${(100 * shares.blocking!).toFixed(1)}%`);
  }, 120_000);
});

describe("cancellation and failure", () => {
  it("an abort stops the generation within the layer it arrives in; the next generation decodes the reference tokens", async () => {
    const m = await load("pipeline", "oracle");
    try {
      const ac = new AbortController();
      // abort from inside the pipeline: when layer 2's first gate span of decode step 3 is recorded
      const rec = new TraceRecorder({ mode: "pipeline", model: packPath, threads: {} });
      const span = rec.span.bind(rec);
      rec.span = (s) => {
        span(s);
        if (s.token === 3 && s.layer === 2 && s.name === "gate" && !ac.signal.aborted) ac.abort(new Error("user pressed stop"));
      };
      const r = await generate(m, 64, { trace: rec, signal: ac.signal });
      expect(r.state).toBe("cancelled");
      expect(r.error?.message).toMatch(/user pressed stop/);
      const later = rec.records.filter((x): x is SpanRecord => x.kind === "span" && x.token === 3 && x.name === "attention");
      expect(Math.max(...later.map((s) => s.layer!))).toBe(2); // layer 3's attention never started
      expect(rec.records.some((x) => x.kind === "span" && (x.token ?? 0) > 3)).toBe(false);
      const again = await generate(m, 64);
      expect(again.error).toBeUndefined();
      expect(again.ids).toEqual(dense);
    } finally {
      await closeModel(m);
    }
  }, 120_000);

  it("a killed compute worker fails the session with the cause; the next generation works", async () => {
    const m = await load("pipeline", "oracle");
    try {
      const pipeline = m.decoder as PipelineDecoder;
      const r = await generate(m, 64, {
        onToken: (i) => {
          if (i === 4) void pipeline.workerThreads().compute.terminate();
        },
      });
      expect(r.state).toBe("failed");
      expect(r.error?.message).toMatch(/generation failed: compute worker \(big\)/);
      console.log(`killed worker: ${r.error?.message}`);
      expect(r.ids.length).toBeGreaterThanOrEqual(4);
      expect(r.ids.length).toBeLessThan(64);
      const again = await generate(m, 64);
      expect(again.error).toBeUndefined();
      expect(again.ids).toEqual(dense);
    } finally {
      await closeModel(m);
    }
  }, 120_000);

  /**
   * Truncate a copy of the pack at layer 1's bundles while token 4 is decoded: the session must
   * fail naming the loader, the file and an offset; with the file whole again (same inode: the
   * open loader reads it again) the next generation decodes the dense tokens.
   */
  async function ioErrorCase(name: string, opts: Partial<LoadOptions>, check: (m: Model) => void): Promise<string> {
    const copy = join(dir, name);
    copyFileSync(packPath, copy);
    const pack = openPack(copy);
    const m = await loadSparseModel(copy, { memory: budget(0.5, false), predictor: "oracle", decoder: "pipeline", contextSize: ctx, ...opts });
    try {
      check(m);
      const r = await generate(m, 64, { onToken: (i) => (i === 4 ? truncateSync(copy, pack.layers[1]!.bundlesOffset) : undefined) });
      expect(r.state).toBe("failed");
      expect(r.error?.message).toMatch(new RegExp(`I/O loader .*${name.replace(/\./g, "\\.")}.*offset \\d+`));
      copyFileSync(packPath, copy);
      const again = await generate(m, 64);
      expect(again.error).toBeUndefined();
      expect(again.ids).toEqual(dense);
      return r.error!.message;
    } finally {
      await closeModel(m);
    }
  }

  it("an I/O error fails the session naming the file and offset; after the file is whole again the next generation works", async () => {
    // gate rows cached, not pinned: every token reads gate blocks of every layer, so the
    // truncation is hit on the next token
    const msg = await ioErrorCase("copy.pack.gguf", { pinGates: false }, (m) => expect(m.sparse!.plan.gatesPinned).toBe(false));
    console.log(`I/O error: ${msg}`);
  }, 120_000);

  it("an I/O error under front/back tasks (the compute worker waiting on a read's flag) fails the session with the loader's cause, without hanging", async () => {
    await ioErrorCase("copy-fb.pack.gguf", { hotShare: 0.25 }, (m) => expect(m.decoder.describe()).toMatch(/one front/));
  }, 120_000);
});
