// Loading a neuron pack as a Model that decodes sparsely under a hard memory budget.
//
// Everything the process holds for the model is a native buffer listed in `buffers`: the fixed
// region (read into anonymous memory, not mapped, so page-cache residency of the pack never
// counts as ours), predictors, the neuron cache arena, its tables, the I/O staging buffer, the
// sparse-FFN scratch and each session's KV cache and run state. `residentBytes()` asks the
// kernel (mincore) how much of that is in RAM; `peakResidentBytes` is its maximum, sampled after
// load and after every token.
import { closeSync, openSync } from "node:fs";
import { applyThreads, Model, type LoadOptions } from "../api/model.js";
import { bindWeights } from "../model/weights.js";
import { vocabFromGGUF } from "../model/vocab.js";
import { native } from "../native.js";
import { createTokenizer } from "../tokenizer/index.js";
import { describePlan, fixedLayout, pageRound, parseBytes, planMemory, planOptions, type MemoryPlan } from "../sparse/memory-plan.js";
import { NeuronCache, type LayerCacheStats } from "../sparse/cache/neuron-cache.js";
import { openPack } from "../sparse/pack/open.js";
import type { Pack } from "../sparse/pack/format.js";
import { readIntoNative } from "../sparse/read-native.js";
import { SparseFfnEngine, type LayerFfnStats, type PredictorMode } from "./inline.js";
import { PipelineRuntime, type PipelineMode, type PipelineOptions } from "./pipeline/runtime.js";

export interface SparseLoadOptions extends LoadOptions {
  /** Hard bound on the bytes held for the model, e.g. "2GiB" or a number of bytes. */
  memory: number | string;
  /** "trained" (the pack's predictors, default) or "oracle" (compute every gate; testing). */
  predictor?: PredictorMode;
  /** Storage reads: io_uring or a pread pool, queue depth, O_DIRECT (default auto, 32, true). */
  io?: { backend?: "auto" | "uring" | "pread"; queueDepth?: number; directIO?: boolean };
  /** Context length and batch size the plan reserves for the one session (defaults min(train ctx, 2048) and 32). */
  contextSize?: number;
  batchSize?: number;
  /** Neurons per hot cluster (default 32), hot-region share of the cache (0.75), cold neurons per I/O batch (256). */
  clusterSize?: number;
  hotShare?: number;
  /** Share of a non-resident hot cluster that must be predicted to read it whole (default 0.5: one sequential read of C bundles costs about C/2 random 4 KiB reads at queue depth 32 here). */
  clusterAdmit?: number;
  stagingNeurons?: number;
  /** Keep every gate row resident and cache up+down only: true, false, or "auto" (default: when the gate rows take ≤ 75% of the neuron cache; never in blocking mode, whose LLMFlash cache holds whole bundles). */
  pinGates?: boolean | "auto";
  /**
   * How decoding runs: "sync" (default) — the sparse FFN inline on the caller's thread (one layer at a
   * time, reads then compute); "pipeline" — the actor pipeline on worker threads, reads
   * overlapping compute; "blocking" — the same actors as LLMFlash runs them: a window
   * cache of the last tokens' neurons, every missing neuron read before compute.
   */
  engine?: "sync" | PipelineMode;
  pipeline?: Omit<PipelineOptions, "mode">;
  /** Progress of the hot-region preload. */
  onProgress?: (done: number, total: number) => void;
}

export interface SparseLayerReport extends LayerCacheStats, LayerFfnStats {
  layer: number;
  /** (gateHits + upDownHits) / (gateAccesses + upDownAccesses). */
  hitRate: number;
  bytesPerToken: number;
}

/** The sparse parts of a Model loaded from a pack. */
export class SparseRuntime {
  peakResidentBytes = 0;
  /** The actor pipeline, when the model decodes with engine "pipeline" or "blocking". */
  pipeline?: PipelineRuntime;
  /** Settles when the pipeline's workers have stopped (after dispose). */
  closed: Promise<void> = Promise.resolve();
  private sessionBuffers = new Set<number>();

  constructor(
    readonly pack: Pack,
    readonly plan: MemoryPlan,
    readonly cache: NeuronCache,
    readonly engine: SparseFfnEngine,
    readonly fixedBuffers: number[],
    readonly loaderId: number,
    readonly io: { backend: "uring" | "pread"; queueDepth: number; directIO: boolean; note?: string },
  ) {
    engine.onToken = () => this.sample();
  }

  /** Every native buffer held for the model right now. */
  get buffers(): number[] {
    return [...this.fixedBuffers, ...this.cache.buffers, ...this.engine.buffers, ...this.sessionBuffers];
  }

  /** Bytes of those buffers resident in RAM, measured by the kernel. */
  residentBytes(): number {
    const n = native();
    let b = 0;
    for (const id of this.buffers) b += n.residentBytes(id);
    return b;
  }

  /** Bytes allocated for those buffers (what the plan accounts). */
  allocatedBytes(): number {
    const n = native();
    let b = 0;
    for (const id of this.buffers) b += pageRound(n.bufferSize(id));
    return b;
  }

  sample(): void {
    const r = this.residentBytes();
    if (r > this.peakResidentBytes) this.peakResidentBytes = r;
  }

  /** Sessions register their KV cache and run state; the plan reserved room for one session. */
  addSessionBuffers(ids: number[]): void {
    if (this.sessionBuffers.size > 0) {
      throw new Error(`the memory plan of ${this.pack.path} holds one session; dispose the other session first`);
    }
    for (const id of ids) this.sessionBuffers.add(id);
    this.sample();
  }
  removeSessionBuffers(ids: number[]): void {
    for (const id of ids) this.sessionBuffers.delete(id);
  }

  /** Per-layer hit rate and bytes read per token since load (or the last resetStats). */
  report(): SparseLayerReport[] {
    return (this.pipeline?.cacheStats ?? this.cache.stats).map((c, l) => {
      const f = this.engine.stats[l]!;
      const acc = c.gateAccesses + c.upDownAccesses;
      return {
        layer: l,
        ...c,
        ...f,
        hitRate: acc > 0 ? (c.gateHits + c.upDownHits) / acc : 1,
        bytesPerToken: f.tokens > 0 ? c.bytesRead / f.tokens : 0,
      };
    });
  }

  resetStats(): void {
    this.cache.resetStats();
    this.engine.resetStats();
    this.pipeline?.resetStats();
  }

  describe(): string {
    return `${describePlan(this.plan)}\nI/O: ${this.io.backend}, queue depth ${this.io.queueDepth}, ${this.io.directIO ? "O_DIRECT" : "buffered"}${this.io.note ? ` (${this.io.note})` : ""}; predictor: ${this.engine.mode}; hot-region preload read ${(this.cache.preloadBytes / 2 ** 20).toFixed(1)} MiB${this.pipeline ? `\n${this.pipeline.describe()}` : "\nengine: sync (sparse FFN inline on the calling thread)"}`;
  }

  dispose(): void {
    if (this.pipeline) this.closed = this.pipeline.dispose();
    this.cache.dispose();
    this.engine.dispose();
    native().closeLoader(this.loaderId);
  }
}

/** Open a neuron pack (`neuronpipe pack`) for sparse decoding within `opts.memory` bytes. */
export async function loadSparseModel(path: string, opts: SparseLoadOptions): Promise<Model> {
  opts.signal?.throwIfAborted();
  const n = native();
  applyThreads("loadSparseModel", opts.threads);
  const pack = openPack(path);
  const cfg = pack.config;
  const budget = typeof opts.memory === "number" ? opts.memory : parseBytes(opts.memory);
  const mode = opts.predictor ?? "trained";
  const engineKind = opts.engine ?? "sync";
  if (engineKind !== "sync" && engineKind !== "pipeline" && engineKind !== "blocking") {
    throw new RangeError(`engine must be "sync", "pipeline" or "blocking", got ${String(engineKind)}`);
  }
  if (mode !== "trained" && mode !== "oracle") throw new RangeError(`predictor must be "trained" or "oracle", got ${String(mode)}`);
  if (mode === "trained" && !pack.predictor) {
    throw new Error(
      `${path}: the pack has no predictors (blk.N.fc1.weight / blk.N.fc2.weight); train them with \`neuronpipe train-predictor\` and pack again, or use the oracle predictor`,
    );
  }
  // the actor pipeline keeps several read batches in flight: a larger staging buffer (1% of the
  // budget, 256..2048 neurons) lets each batch fill the loader's queue
  const pipelined = engineKind !== "sync";
  const stagingNeurons = opts.stagingNeurons ?? (pipelined ? Math.min(2048, Math.max(256, Math.floor((0.01 * budget) / pack.bundleBytes))) : undefined);
  if (engineKind === "blocking" && opts.pinGates === true) throw new RangeError("pinGates: the blocking engine (LLMFlash) caches whole bundles; it cannot pin gate rows");
  const pinGates = engineKind === "blocking" ? false : opts.pinGates;
  const plan = planMemory(pack, budget, planOptions(cfg, { ...opts, stagingNeurons, pinGates, predictor: mode === "trained" })); // throws with the numbers when it cannot fit

  const io = { backend: opts.io?.backend ?? "auto", queueDepth: opts.io?.queueDepth ?? 32, directIO: opts.io?.directIO ?? true } as const;
  let loaderId: number;
  try {
    loaderId = n.openLoader(path, io);
  } catch (e) {
    // a filesystem without O_DIRECT (tmpfs): buffered reads, said in the I/O note
    if (!io.directIO || opts.io?.directIO === true) throw e;
    loaderId = n.openLoader(path, { ...io, directIO: false });
  }
  const info = n.loaderInfo(loaderId);
  const owned: number[] = [];
  let cache: NeuronCache | undefined;
  let engine: SparseFfnEngine | undefined;
  try {
    // fixed region: read into one anonymous buffer, tensors back to back (the plan counted this layout)
    const { tensors: fixed, offsets, bytes: size } = fixedLayout(pack);
    const fixedBuf = n.alloc(Math.max(1, size));
    owned.push(fixedBuf);
    const fd = openSync(path, "r");
    try {
      for (const t of fixed) {
        readIntoNative(fd, path, `tensor ${t.name}`, t.offset, t.nbytes, fixedBuf, offsets.get(t.name)!);
        opts.signal?.throwIfAborted();
      }
    } finally {
      closeSync(fd);
    }
    const weights = bindWeights(pack.file, cfg, fixedBuf, { ffn: false, offsetOf: (t) => offsets.get(t.name)! });
    owned.push(...weights.buffers.slice(1));
    cache = new NeuronCache(pack, plan, { id: loaderId, backend: info.backend, directIO: info.directIO });
    engine = new SparseFfnEngine(pack, cache, mode);
    if (engineKind !== "blocking") cache.preload(opts.onProgress); // LLMFlash's window cache starts empty
    weights.sparseFfn = engine;
    const runtime = new SparseRuntime(pack, plan, cache, engine, owned, loaderId, {
      backend: info.backend,
      queueDepth: info.queueDepth,
      directIO: info.directIO,
      note: info.note ?? (io.directIO && !info.directIO ? "the filesystem refused O_DIRECT" : undefined),
    });
    if (engineKind !== "sync") runtime.pipeline = new PipelineRuntime(runtime, weights, n.getThreads(), { ...opts.pipeline, mode: engineKind });
    weights.buffers = owned; // Model.dispose frees these; the runtime frees its own
    const model = new Model(path, pack.file, cfg, createTokenizer(vocabFromGGUF(pack.file)), weights, runtime);
    runtime.sample();
    return model;
  } catch (e) {
    engine?.dispose();
    cache?.dispose();
    for (const b of owned) n.free(b);
    n.closeLoader(loaderId);
    throw e;
  }
}
