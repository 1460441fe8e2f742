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
import { createActor, toPromise } from "xstate";
import { availableParallelism } from "node:os";
import { Piscina } from "piscina";
import { stepsActor, tokenMachine } from "../../../actors/token-machine.js";
import type { KVCache, RunState } from "../../model/forward.js";
import type { Weights } from "../../model/weights.js";
import { native } from "../../native.js";
import { workerFile } from "../../util/package-files.js";
import type { CacheBatch, LayerCacheStats } from "../../sparse/cache/neuron-cache.js";
import type { ComputeResult, FrontTask } from "../../../actors/protocol.js";
import type { SparseRuntime } from "../sparse-model.js";
import { ComputeActor, type SpanInfo } from "./compute-actor.js";
import { bundleLayoutOf } from "../../sparse/ffn/dense-bundles.js";
import { IoLoader } from "./io-loader.js";
import { inspectInto, nowUs, type TraceRecorder } from "../../trace/recorder.js";
import { WindowCache } from "../../sparse/cache/window-cache.js";

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
  private ahead?: { layer: number; attention: Promise<unknown>; predict: Promise<number>; front?: Promise<ComputeResult> };
  private layerFront?: Promise<ComputeResult>; // the front task of the layer whose FFN runs now (pinned gates)
  /** Pinned gate rows in pipeline mode: each layer is a front task (attention, predictor, gates) and a back task (up, down). */
  private readonly frontBack: boolean;
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
      // with pinned gates the hot up+down rows are resident and a prefetched cluster's gate
      // blocks are read for nothing (7B, 50%: +70 MiB per token): no prefetch by default
      prefetchClusters: mode === "pipeline" ? (opts.prefetchClusters ?? (cache.pinned ? 0 : 4)) : 0,
      window: opts.window ?? 5,
      bigCores,
      littleCores,
      ioInFlight: opts.ioInFlight ?? chunks,
      stagingChunks: chunks,
      stagingChunkBytes: chunkBytes,
      threads,
    };
    cache.setDeferred(chunkBytes);
    // a layer's predicted neurons always fit the cold region's window: no chunking, one front and one back task
    this.frontBack = mode === "pipeline" && cache.pinned && plan.coldSlots >= nFF;
    if (mode === "blocking") this.window = new WindowCache(pack, plan, cache.reads, cache.slotBytes, this.knobs.window);
    this.computePool = new Piscina({ filename: workerFile("compute-worker"), minThreads: 1, maxThreads: 1, idleTimeout: Infinity, concurrentTasksPerWorker: 64, atomics: "async" });
    this.ioPool = new Piscina({ filename: workerFile("io-worker"), minThreads: 1, maxThreads: 1, idleTimeout: Infinity, concurrentTasksPerWorker: 8, atomics: "async" });
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
    return `pipeline: mode ${k.mode}, ${this.frontBack ? "gate rows pinned: one front (attention, predictor, gates) and one back (up, down) task per layer" : `clusters of ${k.clusterNeurons} pack positions`}, prefetch ${k.prefetchClusters} hot clusters of the next layer${k.mode === "blocking" ? `, window cache of ${k.window} tokens` : ""}, staging ${k.stagingChunks} × ${(k.stagingChunkBytes / 1024).toFixed(0)} KiB, ${k.ioInFlight} read batches in flight, compute worker ${k.bigCores ? `on core ${k.bigCores.join(",")}` : "unpinned"} with ${k.threads} kernel threads, I/O worker ${k.littleCores ? `on core ${k.littleCores.join(",")}` : "unpinned"}`;
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
          steps: stepsActor({
            attention: async ({ layer }) => {
              if (this.ahead?.layer !== layer) {
                if (signal?.aborted) throw abortError(signal);
                this.postLayerStart(layer);
              }
              await this.ahead!.attention;
              return 0;
            },
            predict: async ({ layer }) => {
              const a = this.ahead!;
              const nP = await a.predict;
              this.layerFront = a.front;
              this.ahead = undefined;
              const st = this.sp.engine.stats[layer]!;
              st.tokens++;
              st.predicted += nP;
              return nP;
            },
            ffn: async ({ layer, nP }) => {
              if (this.window) await this.blockingLayer(layer, nP, signal);
              else if (this.frontBack) await this.pinnedLayer(layer, nP, signal);
              else await this.clusterLayer(layer, nP, signal);
              return 0;
            },
            logits: async () => (await this.compute.run({ op: "logits" }, { lane: "compute", name: "logits" })).logits!,
          }),
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
    const f = this.frontTask(layer);
    if (this.frontBack) {
      const front = this.compute.run(f, this.frontSpans(layer));
      front.catch(() => {});
      this.ahead = { layer, attention: front, predict: front.then((r) => r.nP!), front };
      this.ahead.predict.catch(() => {});
      return;
    }
    const attention = this.compute.run({ op: "attention", layer, pos0: f.pos0, nTok: f.nTok, tokens: f.tokens }, { lane: "compute", name: "attention", layer });
    const predict = this.compute.run({ op: "predict", layer, oracle: f.oracle }, { lane: "predictor", name: "predict", layer }).then((r) => r.nP!);
    attention.catch(() => {});
    predict.catch(() => {});
    this.ahead = { layer, attention, predict };
  }

  private frontTask(layer: number): FrontTask {
    const { token, pos } = this.cur!;
    return {
      op: "front",
      key: this.compute.key,
      layer,
      pos0: pos,
      nTok: 1,
      tokens: layer === 0 ? [token] : undefined,
      oracle: this.sp.engine.mode === "oracle",
      prefix: this.knobs.prefetchClusters === 0, // a prefetch in flight would make "resident" not "landed"
    };
  }

  private frontSpans(layer: number): SpanInfo[] {
    return [
      { lane: "compute", name: "attention", layer },
      { lane: "predictor", name: "predict", layer },
      { lane: "compute", name: "gate", layer, cluster: 0 },
    ];
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
        upOffset: cache.upOffset,
        downOffset: cache.downOffset,
        gateRows: cache.gateRows,
        pinned: cache.pinned,
        slotOf: cache.slotTable,
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
      ioDone: this.io.ioDone,
      cores: this.knobs.bigCores,
      role: "big",
    });
    this.attached = { rs, kv };
  }

  private submit(batches: CacheBatch[], arena: number): void {
    for (const b of batches) this.io.submit(b, arena).catch(() => {}); // failures reach the waiting cluster through io.wait
  }

  /** Distinct batches the slots arr[start, start+count) still wait for (queued, in flight, or failed). */
  private pendingOf(slotBatch: Int32Array, arr: Int32Array, start: number, count: number): Set<number> {
    // batches that landed long ago are no dependency; failed ones are (waiting on them throws)
    const ids = new Set<number>();
    for (let k = start; k < start + count; k++) {
      const b = slotBatch[arr[k]!]!;
      if (b > 0 && (this.io.isPending(b) || this.io.failed.has(b))) ids.add(b);
    }
    return ids;
  }

  /** pipeline mode: one layer's FFN as a stream of clusters (see the top of this file). */
  private async clusterLayer(layer: number, nP: number, signal?: AbortSignal): Promise<void> {
    const { cache } = this.sp;
    const { P, slots } = this.v;
    const W = this.knobs.clusterNeurons;
    const running: Promise<void>[] = [];
    // clusters whose down is posted (or who have none), in order: cluster c may accumulate
    // into o as soon as downsPosted === c
    const order = { downsPosted: 0, chain: Promise.resolve() };
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
      // pinned gate rows never wait for reads
      const deps = cache.pinned ? new Set<number>() : this.pendingOf(cache.slotBatch, slots, i, end - i);
      // every neuron complete and landed: gate, up and down in one task, no round trip between
      const resident = deps.size === 0 && cache.allFull(layer, P, i, end);
      this.traceRec?.span({ lane: "scheduler", name: "plan", t0: tp, t1: nowUs(), token: this.compute.token, layer, cluster, neurons: end - i });
      const p = this.cluster(layer, cluster++, i, end - i, deps, resident, order);
      p.catch(() => (failed = true));
      running.push(p);
      i = end;
    }
    if (!failed && !signal?.aborted) void order.chain.then(() => (failed || signal?.aborted ? undefined : this.lookahead(layer)));
    const results = await Promise.allSettled(running);
    const bad = results.find((r) => r.status === "rejected") as PromiseRejectedResult | undefined;
    if (bad) throw bad.reason;
    if (signal?.aborted) throw abortError(signal);
  }

  /**
   * One cluster: gate → (reads of the fired) → up → down, the down posted after the previous
   * cluster's. A resident cluster whose turn to accumulate has come runs as one `ffn` task.
   */
  private async cluster(
    layer: number,
    cluster: number,
    start: number,
    m: number,
    deps: Set<number>,
    resident: boolean,
    order: { downsPosted: number; chain: Promise<void> },
  ): Promise<void> {
    const { cache } = this.sp;
    const { aPos, aSlots } = this.v;
    const prev = order.chain;
    let posted!: () => void;
    order.chain = new Promise<void>((r) => {
      posted = () => {
        order.downsPosted = Math.max(order.downsPosted, cluster + 1);
        r();
      };
    });
    try {
      if (resident && order.downsPosted === cluster) {
        const f = this.compute.run({ op: "ffn", layer, start, count: m }, { lane: "compute", name: "ffn", layer, cluster, neurons: m });
        posted();
        const g = await f;
        this.afterGate(layer, start, g.nA!, g.nSilent!);
        if (g.nA! > 0) {
          cache.loadUpDown(layer, aPos.subarray(start), g.nA!, aSlots.subarray(start)); // all hits: counts only
          if (cache.takeBatches().length > 0) throw new Error(`pipeline: layer ${layer} cluster ${cluster} was resident but needs reads (internal accounting error)`);
        }
        return;
      }
      await this.io.wait(deps);
      const g = await this.compute.run({ op: "gate", layer, start, count: m }, { lane: "compute", name: "gate", layer, cluster, neurons: m });
      const nA = g.nA!;
      this.afterGate(layer, start, nA, g.nSilent!);
      let up: Promise<unknown> | undefined;
      if (nA > 0) {
        cache.loadUpDown(layer, aPos.subarray(start), nA, aSlots.subarray(start));
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

  /** Bookkeeping once a cluster's gates are known: counts, silent neurons to the LRU's tail. */
  private afterGate(layer: number, start: number, nA: number, nSilent: number): void {
    const { cache, engine } = this.sp;
    engine.stats[layer]!.fired += nA;
    cache.demoteSilent(layer, this.v.slots.subarray(start), nSilent);
  }

  /**
   * pipeline mode with pinned gate rows: the front task has computed every predicted gate; read
   * the up+down rows of the fired neurons that are not resident, and post the back task (which
   * waits on the reads' completion flags in the worker) and the next layer's front behind it —
   * the scheduler is off the path from reads to compute.
   */
  private async pinnedLayer(layer: number, nP: number, signal?: AbortSignal): Promise<void> {
    const { cache, engine } = this.sp;
    const { P, slots, aPos, aSlots } = this.v;
    const front = await this.layerFront!;
    this.layerFront = undefined;
    if (signal?.aborted) throw abortError(signal);
    const tp = nowUs();
    cache.beginWindow();
    if (cache.loadGates(layer, P, 0, nP, slots) !== nP) throw new Error(`pipeline: layer ${layer}'s predicted neurons do not fit the cold region (internal accounting error)`);
    const nA = front.nA!;
    engine.stats[layer]!.fired += nA;
    if (nA > 0) {
      cache.loadUpDown(layer, aPos, nA, aSlots);
      this.submit(cache.takeBatches(), cache.arena);
    }
    // batches the fired neurons wait for (this layer's reads; a prefetch still in flight)
    const ids = [...this.pendingOf(cache.slotBatch, aSlots, 0, nA)];
    this.traceRec?.span({ lane: "scheduler", name: "plan", t0: tp, t1: nowUs(), token: this.compute.token, layer, cluster: 0, neurons: nP });
    const next = layer + 1 < this.sp.pack.config.nLayer && !signal?.aborted ? this.frontTask(layer + 1) : undefined;
    const up = { lane: "compute", name: "up", layer, cluster: 0, neurons: nA } as const;
    const down = { lane: "compute", name: "down", layer, cluster: 0, neurons: nA } as const;
    const back = this.compute.run({ op: "back", layer, nA, batches: ids, next }, [up, down, up, down]);
    if (next) {
      // the next layer's front runs in the same task, right after this back
      const f = back.then((r) => {
        this.compute.record(r.front!, this.frontSpans(layer + 1));
        return r.front!;
      });
      f.catch(() => {});
      this.ahead = { layer: layer + 1, attention: f, predict: f.then((r) => r.nP!), front: f };
      this.ahead.predict.catch(() => {});
    }
    // an I/O failure is reported with its own cause, not as the back task's "batch failed"
    const [io, b] = await Promise.allSettled([this.io.wait(ids), back]);
    if (io.status === "rejected") throw io.reason;
    if (b.status === "rejected") throw b.reason;
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
    this.compute.close();
    this.io.close();
    await Promise.all([this.computePool.destroy(), this.ioPool.destroy()]);
  }
}
