// The actor pipeline of a sparse model: the scheduler (this thread) drives, for every token,
// the token machine (actors/token-machine.ts) whose actors post descriptors to worker threads —
// a compute worker (role big: attention, predictor, cluster kernels, dense prefill) and the I/O
// loader's worker (role little: reads and copies into cache slots). Data stays in native
// memory; messages name buffers, layers and clusters.
//
// pipeline mode, one layer's FFN (PowerInfer-2 §4.3, "neuron-cluster pipeline"):
//   P = predictor(x)                                  (predictor actor)
//   for each cluster c of P (pack positions [c·W, (c+1)·W)):
//     plan gates (cache tables) → gate reads          (I/O actor, as soon as planned)
//     gate reads done → gate rows                     (compute, as soon as ready)
//     fired neurons → up+down reads (priority)        (I/O actor)
//     up+down reads done → up rows, activation        (compute, as soon as ready)
//     down columns, accumulated into o in cluster order (compute, posted in order)
//   so gate compute of one cluster runs while reads of others are in flight; the worker runs
//   tasks in posting order, and downs are posted in cluster order: the sum is the same as the
//   synchronous engine's, bit for bit.
// blocking mode (LLMFlash): P = predictor(x); read every missing bundle; then compute.
import { createActor, fromPromise, toPromise } from "xstate";
import { existsSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Piscina } from "piscina";
import { tokenMachine, type LayerInput } from "../../actors/token-machine.js";
import type { KVCache, RunState } from "../model/forward.js";
import type { Weights } from "../model/weights.js";
import { native } from "../native.js";
import type { CacheBatch, LayerCacheStats } from "../sparse/neuron-cache.js";
import type { SparseRuntime } from "../sparse/sparse-model.js";
import { ComputeActor } from "./compute-actor.js";
import { bundleLayoutOf } from "./dense-bundles.js";
import { IoLoader } from "./io-loader.js";
import { inspectInto, nowUs, type TraceRecorder } from "./trace.js";
import { WindowCache } from "./window-cache.js";

export type PipelineMode = "pipeline" | "blocking";

export interface PipelineOptions {
  mode?: PipelineMode;
  /** Pack positions per pipeline cluster (default: the FFN in 8 clusters, a multiple of the cache's cluster size; one cluster when ≥ 98% of the FFN is resident). */
  clusterNeurons?: number;
  /** Hot clusters of layer L+1 read while layer L's attention runs (pipeline mode; default 4). */
  prefetchClusters?: number;
  /** Tokens whose neurons the blocking mode's window cache keeps (default 5, as LLMFlash). */
  window?: number;
  /** Pin the compute worker to the big cores and the I/O worker to the little ones (default true). */
  affinity?: boolean;
  bigCores?: number[];
  littleCores?: number[];
  /** Read batches handed to the I/O worker at once (default: every staging chunk). */
  ioInFlight?: number;
}

/** Every knob the pipeline runs with, resolved (printed by the CLI, recorded in benchmarks). */
export interface PipelineKnobs {
  mode: PipelineMode;
  clusterNeurons: number;
  prefetchClusters: number;
  window: number;
  bigCores?: number[];
  littleCores?: number[];
  ioInFlight: number;
  stagingChunks: number;
  stagingChunkBytes: number;
  threads: number;
}

function workerFile(name: string): string {
  const here = dirname(fileURLToPath(import.meta.url));
  // built: dist/src/pipeline → dist/workers; from sources (tests) the built file is used
  for (const p of [join(here, "..", "..", "workers", `${name}.js`), join(here, "..", "..", "dist", "workers", `${name}.js`)]) {
    if (existsSync(p)) return p;
  }
  throw new Error(`neuronpipe: dist/workers/${name}.js missing; run \`npm run build:ts\``);
}

function abortError(signal?: AbortSignal): Error {
  const e = new Error(`generation cancelled${signal?.reason !== undefined ? `: ${String((signal.reason as Error)?.message ?? signal.reason)}` : ""}`);
  e.name = "AbortError";
  return e;
}

export class PipelineRuntime {
  readonly knobs: PipelineKnobs;
  private readonly computePool: Piscina;
  private readonly ioPool: Piscina;
  private readonly compute: ComputeActor;
  private readonly io: IoLoader;
  private readonly window?: WindowCache;
  private readonly v: { P: Int32Array; slots: Int32Array; aPos: Int32Array; aSlots: Int32Array };
  private attached?: { rs: RunState; kv: KVCache };
  private epoch = 0;
  private step = 0;
  private active?: Promise<unknown>;
  private traceRec?: TraceRecorder;
  // the next layer's attention and predictor, posted as soon as the last down of this layer is
  // (the worker runs tasks in order): the layer boundary costs no round trip to this thread
  private ahead?: { layer: number; attention: Promise<unknown>; predict: Promise<number> };
  private cur?: { token: number; pos: number; signal?: AbortSignal };

  constructor(
    private readonly sp: SparseRuntime,
    private readonly weights: Weights,
    readonly threads: number,
    opts: PipelineOptions = {},
  ) {
    const { pack, plan, cache, engine } = sp;
    const C = plan.clusterSize;
    const nFF = pack.config.nFF;
    const mode = opts.mode ?? "pipeline";
    // 8 clusters per layer give reads something to overlap (16 measured 20% slower at 7B: more hops); with (nearly: ≥ 98%) the whole FFN
    // resident there is little to read, and one task per matrix costs the fewest messages
    const clusterNeurons = opts.clusterNeurons ?? (plan.ffnResident >= 0.98 ? C * Math.ceil(nFF / C) : C * Math.max(1, Math.ceil(nFF / (8 * C))));
    if (!(Number.isInteger(clusterNeurons) && clusterNeurons >= C && clusterNeurons % C === 0)) {
      throw new RangeError(`clusterNeurons must be a multiple of the cache's cluster size (${C}), got ${clusterNeurons}`);
    }
    const nCpu = availableParallelism();
    const affinity = opts.affinity ?? true;
    const bigCores = affinity ? (opts.bigCores ?? (nCpu > 1 ? [nCpu - 1] : [0])) : undefined;
    const littleCores = affinity ? (opts.littleCores ?? [0]) : undefined;
    // staging: chunks of whole hot clusters, so reads of several batches can be in flight
    const B = pack.bundleBytes;
    const chunks = Math.max(1, Math.min(4, Math.floor(plan.stagingBytes / (C * B))));
    const chunkBytes = Math.floor(plan.stagingBytes / chunks / 4096) * 4096;
    this.knobs = {
      mode,
      clusterNeurons,
      prefetchClusters: mode === "pipeline" ? (opts.prefetchClusters ?? 4) : 0,
      window: opts.window ?? 5,
      bigCores,
      littleCores,
      ioInFlight: opts.ioInFlight ?? chunks,
      stagingChunks: chunks,
      stagingChunkBytes: chunkBytes,
      threads,
    };
    cache.setDeferred(chunkBytes);
    if (mode === "blocking") this.window = new WindowCache(pack, plan, cache.arena, cache.slotBytes, chunkBytes, this.knobs.window);
    this.computePool = new Piscina({ filename: workerFile("compute-worker"), minThreads: 1, maxThreads: 1, idleTimeout: Infinity, concurrentTasksPerWorker: 64 });
    this.ioPool = new Piscina({ filename: workerFile("io-worker"), minThreads: 1, maxThreads: 1, idleTimeout: Infinity, concurrentTasksPerWorker: 8 });
    this.compute = new ComputeActor(this.computePool, "big");
    this.io = new IoLoader({
      pool: this.ioPool,
      loader: sp.loaderId,
      staging: cache.staging,
      chunkBytes,
      chunks,
      inFlight: this.knobs.ioInFlight,
      cores: littleCores,
      device: pack.path,
    });
    const n = native();
    const o = engine.off;
    this.v = {
      P: n.viewI32(engine.scratch, o.P, nFF),
      slots: n.viewI32(engine.scratch, o.slots, nFF),
      aPos: n.viewI32(engine.scratch, o.aPos, nFF),
      aSlots: n.viewI32(engine.scratch, o.aSlots, nFF),
    };
  }

  get mode(): PipelineMode {
    return this.knobs.mode;
  }

  /** Cache statistics of the active policy (the window cache in blocking mode). */
  get cacheStats(): LayerCacheStats[] {
    return this.window?.stats ?? this.sp.cache.stats;
  }

  /** Zero the window cache's statistics (the neuron cache's are the sparse runtime's). */
  resetStats(): void {
    this.window?.resetStats();
  }

  set trace(t: TraceRecorder | undefined) {
    this.traceRec = t;
    this.compute.trace = t;
    this.io.trace = t;
  }
  get trace(): TraceRecorder | undefined {
    return this.traceRec;
  }

  /** Every knob, one line (printed at load). */
  describe(): string {
    const k = this.knobs;
    return `pipeline: mode ${k.mode}, clusters of ${k.clusterNeurons} pack positions, prefetch ${k.prefetchClusters} hot clusters of the next layer${k.mode === "blocking" ? `, window cache of ${k.window} tokens` : ""}, staging ${k.stagingChunks} × ${(k.stagingChunkBytes / 1024).toFixed(0)} KiB, ${k.ioInFlight} read batches in flight, compute worker ${k.bigCores ? `on core ${k.bigCores.join(",")}` : "unpinned"} with ${k.threads} kernel threads, I/O worker ${k.littleCores ? `on core ${k.littleCores.join(",")}` : "unpinned"}`;
  }

  /** The worker threads (tests kill one to check failure handling; tools read their ids). */
  workerThreads(): { compute: import("node:worker_threads").Worker; io: import("node:worker_threads").Worker } {
    return { compute: this.computePool.threads[0]!, io: this.ioPool.threads[0]! };
  }

  /** Wait until nothing this runtime started is still running (after a cancelled token, say). */
  async idle(): Promise<void> {
    while (this.active) await this.active.catch(() => {});
    await this.io.drain();
  }

  /** Dense batched prompt evaluation on the accelerator role; returns the logits' offset in rs. */
  async prefill(rs: RunState, kv: KVCache, tokens: readonly number[], pos0: number, signal?: AbortSignal): Promise<number> {
    return this.exclusive(async () => {
      await this.attach(rs, kv);
      await this.io.drain();
      const t0 = nowUs();
      let logits = -1;
      for (let i = 0; i < tokens.length; i += rs.maxBatch) {
        if (signal?.aborted) throw abortError(signal);
        const batch = tokens.slice(i, i + rs.maxBatch);
        const r = await this.compute.run({ op: "prefill", tokens: batch, pos0: pos0 + i }, { lane: "prefill", name: "prefill", neurons: batch.length });
        logits = r.logits!;
      }
      this.traceRec?.token({ index: -1, t0, t1: nowUs() });
      return logits;
    });
  }

  /** One decode step: the token at position `pos` through every layer; returns the logits' offset in rs. */
  async decode(rs: RunState, kv: KVCache, token: number, pos: number, signal?: AbortSignal): Promise<number> {
    return this.exclusive(async () => {
      await this.attach(rs, kv);
      const step = this.step++;
      this.compute.token = step;
      this.io.token = step;
      this.window?.beginToken();
      this.ahead = undefined;
      this.cur = { token, pos, signal };
      const t0 = nowUs();
      const { cache } = this.sp;
      const trace = this.traceRec;
      const machine = tokenMachine.provide({
        actors: {
          attention: fromPromise<void, LayerInput>(async ({ input }) => {
            if (this.ahead?.layer !== input.layer) {
              if (signal?.aborted) throw abortError(signal);
              this.postLayerStart(input.layer);
            }
            await this.ahead!.attention;
          }),
          predictor: fromPromise<number, LayerInput>(async ({ input }) => {
            const nP = await this.ahead!.predict;
            this.ahead = undefined;
            const st = this.sp.engine.stats[input.layer]!;
            st.tokens++;
            st.predicted += nP;
            return nP;
          }),
          ffn: fromPromise<void, LayerInput & { nP: number }>(async ({ input }) =>
            this.window ? this.blockingLayer(input.layer, input.nP, signal) : this.clusterLayer(input.layer, input.nP, signal),
          ),
          logits: fromPromise<number, LayerInput>(async () => (await this.compute.run({ op: "logits" }, { lane: "compute", name: "logits" })).logits!),
        },
        actions: {
          prefetchNext: (_, params: { layer: number }) => {
            if (this.knobs.prefetchClusters > 0 && params.layer < this.sp.pack.config.nLayer) {
              cache.prefetchHot(params.layer, this.knobs.prefetchClusters);
              this.submit(cache.takeBatches(), cache.arena);
            }
          },
        },
      });
      const inspect = trace ? inspectInto(trace) : undefined;
      const actor = createActor(machine, { input: { nLayer: this.sp.pack.config.nLayer, pos, step }, inspect, id: `token-${step}` });
      actor.start();
      const out = await toPromise(actor);
      trace?.token({ index: step, t0, t1: nowUs(), token });
      this.sp.sample();
      if (out.cancelled) throw abortError(signal);
      if (out.error !== undefined) throw new Error(out.error);
      return out.logits;
    });
  }

  /** Post layer `layer`'s attention and predictor tasks (they run after everything posted before). */
  private postLayerStart(layer: number): void {
    const { token, pos } = this.cur!;
    const attention = this.compute.run(
      { op: "attention", layer, pos0: pos, nTok: 1, tokens: layer === 0 ? [token] : undefined },
      { lane: "compute", name: "attention", layer },
    );
    const predict = this.compute
      .run({ op: "predict", layer, oracle: this.sp.engine.mode === "oracle" }, { lane: "predictor", name: "predict", layer })
      .then((r) => r.nP!);
    attention.catch(() => {});
    predict.catch(() => {});
    this.ahead = { layer, attention, predict };
  }

  /** After a layer's last FFN task is posted: queue the next layer's start behind it, unless cancelled. */
  private lookahead(layer: number): void {
    if (layer + 1 < this.sp.pack.config.nLayer && !this.cur?.signal?.aborted) this.postLayerStart(layer + 1);
  }

  /** One call at a time; on failure the cache forgets unfinished reads and workers re-initialise. */
  private async exclusive<T>(f: () => Promise<T>): Promise<T> {
    if (this.active) throw new Error("pipeline: a forward pass is already running on this model");
    const p = (async () => {
      try {
        return await f();
      } catch (e) {
        await this.io.drain();
        if (this.io.failed.size > 0) {
          const failed = this.io.failed;
          this.sp.cache.forget((b) => failed.has(b));
          this.window?.forget((b) => failed.has(b));
        }
        this.io.recover();
        if ((e as Error).name !== "AbortError") this.attached = undefined; // a crashed worker is replaced: send the descriptors again
        throw e;
      }
    })();
    this.active = p;
    try {
      return await p;
    } finally {
      this.active = undefined;
    }
  }

  private async attach(rs: RunState, kv: KVCache): Promise<void> {
    if (this.attached?.rs === rs && this.attached.kv === kv && this.compute.key) return;
    const { pack, cache, engine, plan } = this.sp;
    const cfg = pack.config;
    const { sparseFfn: _s, buffers: _b, ...weights } = this.weights;
    await this.compute.init({
      op: "init",
      key: `${++this.epoch}:${rs.buf}:${kv.buf}`,
      cfg,
      weights,
      rs,
      kv,
      ffn: {
        ...bundleLayoutOf(pack, engine.kind),
        arena: cache.arena,
        slotBytes: cache.slotBytes,
        slots: plan.slots,
        gateBytes: pack.gateBytes,
        scratch: engine.scratch,
        off: engine.off,
        pred: engine.pred,
      },
      prefill: {
        loader: this.sp.loaderId,
        layerOffsets: pack.layers.map((l) => l.bundlesOffset),
        staging: cache.staging,
        stagingBytes: plan.stagingBytes,
        bundleScratch: engine.scratch, // free during prefill: the decode scratch doubles as the dense FFN's
      },
      threads: this.threads,
      cores: this.knobs.bigCores,
      role: "big",
    });
    this.attached = { rs, kv };
  }

  private submit(batches: CacheBatch[], arena: number): void {
    for (const b of batches) this.io.submit(b, arena).catch(() => {}); // failures reach the waiting cluster through io.wait
  }

  /** Distinct batches still to land in the slots arr[start, start+count). */
  private pendingOf(slotBatch: Int32Array, arr: Int32Array, start: number, count: number): Set<number> {
    const ids = new Set<number>();
    for (let k = start; k < start + count; k++) {
      const b = slotBatch[arr[k]!]!;
      if (b > 0) ids.add(b);
    }
    return ids;
  }

  /** pipeline mode: one layer's FFN as a stream of clusters (see the top of this file). */
  private async clusterLayer(layer: number, nP: number, signal?: AbortSignal): Promise<void> {
    const { cache } = this.sp;
    const { P, slots } = this.v;
    const W = this.knobs.clusterNeurons;
    const running: Promise<void>[] = [];
    let prevPosted: Promise<void> = Promise.resolve();
    let failed = false;
    cache.beginWindow();
    let cluster = 0;
    for (let i = 0; i < nP; ) {
      if (signal?.aborted || failed) break;
      const tp = nowUs();
      const c = Math.floor(P[i]! / W);
      let e = i;
      while (e < nP && Math.floor(P[e]! / W) === c) e++;
      const end = cache.loadGates(layer, P, i, e, slots.subarray(i));
      if (end === i) {
        // the cache cannot hold more at once: let the clusters in flight finish, then go on
        if (running.length === 0) throw new Error(`pipeline: the neuron cache cannot hold one neuron of layer ${layer} (internal accounting error)`);
        await Promise.allSettled(running.splice(0));
        cache.beginWindow();
        continue;
      }
      this.submit(cache.takeBatches(), cache.arena);
      const deps = this.pendingOf(cache.slotBatch, slots, i, end - i);
      this.traceRec?.span({ lane: "scheduler", name: "plan", t0: tp, t1: nowUs(), token: this.compute.token, layer, cluster, neurons: end - i });
      const prev = prevPosted;
      let posted!: () => void;
      prevPosted = new Promise<void>((r) => (posted = r));
      const p = this.cluster(layer, cluster++, i, end - i, deps, prev, posted);
      p.catch(() => (failed = true));
      running.push(p);
      i = end;
    }
    if (!failed && !signal?.aborted) void prevPosted.then(() => (failed || signal?.aborted ? undefined : this.lookahead(layer)));
    const results = await Promise.allSettled(running);
    const bad = results.find((r) => r.status === "rejected") as PromiseRejectedResult | undefined;
    if (bad) throw bad.reason;
    if (signal?.aborted) throw abortError(signal);
  }

  private async cluster(layer: number, cluster: number, start: number, m: number, deps: Set<number>, prev: Promise<void>, posted: () => void): Promise<void> {
    const { cache, engine } = this.sp;
    const { slots, aPos, aSlots } = this.v;
    try {
      await this.io.wait(deps);
      const g = await this.compute.run({ op: "gate", layer, start, count: m }, { lane: "compute", name: "gate", layer, cluster, neurons: m });
      const nA = g.nA!;
      engine.stats[layer]!.fired += nA;
      cache.demoteSilent(layer, slots.subarray(start), g.nSilent!);
      let up: Promise<unknown> | undefined;
      if (nA > 0) {
        cache.loadUpDown(layer, aPos.subarray(start), nA);
        this.submit(cache.takeBatches(), cache.arena);
        await this.io.wait(this.pendingOf(cache.slotBatch, aSlots, start, nA));
        up = this.compute.run({ op: "up", layer, start, nA }, { lane: "compute", name: "up", layer, cluster, neurons: nA });
      }
      await prev; // downs are posted in cluster order: the sum's order is fixed
      const down = nA > 0 ? this.compute.run({ op: "down", layer, start, nA }, { lane: "compute", name: "down", layer, cluster, neurons: nA }) : undefined;
      posted();
      await up;
      await down;
    } finally {
      posted();
    }
  }

  /** blocking mode: read every missing bundle of the layer's predicted neurons, then compute them. */
  private async blockingLayer(layer: number, nP: number, signal?: AbortSignal): Promise<void> {
    const wc = this.window!;
    const { P, slots } = this.v;
    for (let i = 0; i < nP; ) {
      if (signal?.aborted) throw abortError(signal);
      const end = wc.load(layer, P, i, nP, slots.subarray(i));
      if (end === i) throw new Error(`blocking: the window cache cannot hold one neuron of layer ${layer}`);
      const batches = wc.takeBatches();
      this.submit(batches, this.sp.cache.arena);
      await this.io.wait(batches.map((b) => b.id));
      const ffn = this.compute.run({ op: "ffn", layer, start: i, count: end - i }, { lane: "compute", name: "ffn", layer, neurons: end - i });
      i = end;
      if (i >= nP) this.lookahead(layer);
      this.sp.engine.stats[layer]!.fired += (await ffn).nA!;
    }
  }

  async dispose(): Promise<void> {
    await this.idle().catch(() => {});
    await Promise.all([this.computePool.destroy(), this.ioPool.destroy()]);
  }
}
