// The sparse parts of a model opened from a neuron pack under a hard memory budget: the
// memory plan, the fixed region, the neuron cache, the predictors, the FFN scratch and the
// loader — what the inline, pipeline and blocking decoders share — with their statistics.
//
// Everything the process holds for the model is a native buffer listed in `buffers`: the fixed
// region (read into anonymous memory, not mapped, so page-cache residency of the pack never
// counts as ours), predictors, the neuron cache arena, its tables, the I/O staging buffer, the
// FFN scratch and each session's KV cache and run state. `residentBytes()` asks the kernel
// (mincore) how much of that is in RAM; `peakResidentBytes` is its maximum, sampled after load,
// every SAMPLE_EVERY tokens, before a session lets its buffers go and when the peak is read. The
// buffers' pages only grow while they are held (committed on first touch, given back when freed),
// so the last sample before a release is the peak; mincore over the resident 7B's 3.9 GB took
// 0.49 ms, 1% of its token.
import { closeSync, openSync } from "node:fs";
import { bindWeights, type Weights } from "../model/weights.js";
import { native, type NativeAddon } from "../native.js";
import { NeuronCache, type LayerCacheStats } from "./cache/neuron-cache.js";
import { loadPredictorWeights } from "./ffn/predictor-weights.js";
import { bundleLayoutOf, createFfnScratch, type FfnLayout } from "./ffn/layout.js";
import { describePlan, fixedLayout, pageRound, planMemory, type MemoryPlan, type PlanOptions } from "./memory-plan.js";
import type { Pack } from "./pack/format.js";
import { readIntoNative } from "./read-native.js";

export type PredictorMode = "trained" | "oracle";

/** Storage reads: io_uring or a pread pool, queue depth, O_DIRECT. */
export interface IoOptions {
  backend?: "auto" | "uring" | "pread";
  queueDepth?: number;
  directIO?: boolean;
  /**
   * Where background reads (reads ahead) are submitted and completed: "caller" (default, io_uring
   * only) by the decoding thread itself, which submits a batch and reaps it when it needs the
   * neurons; "background" by a thread of their own, woken for each batch (the pread backend's way).
   */
  readLane?: "caller" | "background";
}

export interface LayerFfnStats {
  /** Neurons predicted active (gate computed) and neurons that fired (relu(gate) != 0), summed over tokens. */
  predicted: number;
  fired: number;
  tokens: number;
}

export interface SparseLayerReport extends LayerCacheStats, LayerFfnStats {
  layer: number;
  /** (gateHits + upDownHits) / (gateAccesses + upDownAccesses). */
  hitRate: number;
  bytesPerToken: number;
}

/** Tokens between samples of the resident memory (see the header). */
const SAMPLE_EVERY = 16;

export class SparseParts {
  private peak = 0;
  private sinceSample = 0;
  private disposed = false;
  /** Per layer: neurons predicted and fired, tokens. */
  readonly ffnStats: LayerFfnStats[];
  /** The cache policy whose statistics report() shows: the neuron cache, or the LLMFlash window cache (blocking). */
  policy: { stats: LayerCacheStats[]; resetStats(): void };
  private readonly sessionBuffers = new Set<number>();

  constructor(
    readonly pack: Pack,
    readonly plan: MemoryPlan,
    readonly weights: Weights, // the fixed region's tensors
    readonly cache: NeuronCache,
    readonly ffn: FfnLayout,
    readonly predictor: PredictorMode,
    readonly loaderId: number,
    /**
     * fixedBuffers: the staging buffers registered with the rings (READ_FIXED), or why not;
     * aheadRing: the reads ahead's io_uring ring, single-issuer (completions batched) or why not.
     */
    readonly io: { backend: "uring" | "pread"; queueDepth: number; directIO: boolean; note?: string; fixedBuffers: string; aheadRing?: string },
  ) {
    this.ffnStats = Array.from({ length: pack.config.nLayer }, () => ({ predicted: 0, fired: 0, tokens: 0 }));
    this.policy = cache;
  }

  /** Every native buffer held for the model right now. */
  get buffers(): number[] {
    return [...this.weights.buffers, ...this.cache.buffers, this.ffn.scratch, ...(this.ffn.pred ? [this.ffn.pred.buf] : []), ...this.sessionBuffers];
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

  /** The most of the model's buffers resident in RAM so far (sampled now, while they are held). */
  get peakResidentBytes(): number {
    if (!this.disposed) this.sample();
    return this.peak;
  }

  /** Sample resident memory now. */
  sample(): void {
    this.sinceSample = 0;
    const r = this.residentBytes();
    if (r > this.peak) this.peak = r;
  }

  /** A token was decoded: sample every SAMPLE_EVERY tokens. */
  tokenDone(): void {
    if (++this.sinceSample >= SAMPLE_EVERY) this.sample();
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
    if (!this.disposed) this.sample();
    for (const id of ids) this.sessionBuffers.delete(id);
  }

  /** Neurons predicted and fired so far, all layers (a token's are the difference across it). */
  neuronTotals(): { predicted: number; fired: number } {
    let predicted = 0;
    let fired = 0;
    for (const f of this.ffnStats) {
      predicted += f.predicted;
      fired += f.fired;
    }
    return { predicted, fired };
  }

  /** Per-layer hit rate and bytes read per token since load (or the last resetStats). */
  report(): SparseLayerReport[] {
    return this.policy.stats.map((c, l) => {
      const f = this.ffnStats[l]!;
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
    if (this.policy !== this.cache) this.policy.resetStats();
    for (const s of this.ffnStats) Object.assign(s, { predicted: 0, fired: 0, tokens: 0 });
  }

  /** The memory plan, reads and predictor, in words. */
  describe(): string {
    return `${describePlan(this.plan)}\nI/O: ${this.describeIo()}; predictor: ${this.predictor}; hot-region preload read ${(this.cache.preloadBytes / 2 ** 20).toFixed(1)} MiB`;
  }

  /** How the pack is read, in words: backend, depth, direct I/O, registered buffers, and where the reads ahead run (also in a trace's header). */
  describeIo(): string {
    const io = this.io;
    return `${io.backend}, queue depth ${io.queueDepth}, ${io.directIO ? `O_DIRECT (${this.cache.loader.align}-byte aligned: a bundle read as ${this.cache.bundleRead} of its ${this.pack.bundleBytes} bytes)` : "buffered"}${io.note ? ` (${io.note})` : ""}, ${io.fixedBuffers}${io.aheadRing ? `, reads ahead on ${io.aheadRing}` : ""}`;
  }

  dispose(): void {
    const n = native();
    if (!this.disposed) {
      try {
        this.sample();
      } catch {
        // a session's buffer freed without being removed: the last sample stands, and freeing goes on
      }
    }
    this.disposed = true;
    this.cache.dispose();
    n.free(this.ffn.scratch);
    if (this.ffn.pred) n.free(this.ffn.pred.buf);
    for (const b of this.weights.buffers.splice(0)) n.free(b);
    n.closeLoader(this.loaderId);
    if (this.cache.loader.aheadId >= 0) n.closeLoader(this.cache.loader.aheadId);
    if (this.cache.loader.nowId >= 0) n.closeLoader(this.cache.loader.nowId);
  }
}

export interface SparseOpenOptions {
  budget: number;
  predictor: PredictorMode;
  io: Required<Pick<IoOptions, "backend" | "queueDepth" | "directIO">> & Pick<IoOptions, "readLane"> & { directIOAsked: boolean };
  plan: PlanOptions;
  /** Fill the hot and cold regions at load (LLMFlash's window cache starts empty: false). */
  preload: boolean;
  onProgress?: (done: number, total: number) => void;
  signal?: AbortSignal;
}

/** Plan the memory, read the fixed region and predictors, build and fill the neuron cache. */
export function openSparseParts(path: string, pack: Pack, o: SparseOpenOptions): SparseParts {
  const n = native();
  const cfg = pack.config;
  const plan = planMemory(pack, o.budget, o.plan); // throws with the numbers when it cannot fit
  const readLane = o.io.readLane ?? "caller";
  if (readLane !== "caller" && readLane !== "background") throw new RangeError(`io.readLane must be "caller" or "background", got ${JSON.stringify(readLane)}`);
  let loaderId: number;
  try {
    loaderId = n.openLoader(path, o.io);
  } catch (e) {
    // a filesystem without O_DIRECT (tmpfs): buffered reads, said in the I/O note
    if (!o.io.directIO || o.io.directIOAsked) throw e;
    loaderId = n.openLoader(path, { ...o.io, directIO: false });
  }
  const info = n.loaderInfo(loaderId);
  // background batches submitted and reaped by the decoding thread: no thread woken for a batch
  // (measured on the 7B half offloaded: ~190 fewer context switches a token, docs/benchmarks.md);
  // the pread backend's reads need its threads
  if (o.io.readLane === "caller" && info.backend !== "uring") {
    n.closeLoader(loaderId);
    throw new RangeError(`io.readLane "caller" needs the io_uring backend; this loader reads through pread${info.note ? ` (${info.note})` : ""}`);
  }
  const callerReads = readLane === "caller" && info.backend === "uring";
  // reads ahead go through their own loader, deep enough to take a whole batch in one submission,
  // its ring used by the background thread alone (singleIssuer): that thread then needs no core
  // until the batch is done (with the loader's depth of 32 it must wake to refill the queue, and
  // on a plain ring each completion wakes it; both wait for a core the compute threads hold)
  // Without pinned gate rows, a layer's own missing neurons are read in the background too, on
  // a loader and lane of their own: on the reads ahead's lane they would queue behind the batch
  // for a later layer (measured: ~0.4 ms a layer on the 7B)
  let aheadId = -1;
  let nowId = -1;
  if (plan.readAheadBytes > 0) {
    try {
      const queueDepth = Math.max(info.queueDepth, Math.min(4096, Math.floor(plan.readAheadBytes / pack.upDownBlock)));
      const background = () => n.openLoader(path, { backend: info.backend, directIO: info.directIO, queueDepth, singleIssuer: true });
      aheadId = background();
      if (!plan.gatesPinned) nowId = background();
    } catch (e) {
      n.closeLoader(loaderId);
      if (aheadId >= 0) n.closeLoader(aheadId);
      throw e;
    }
  }
  const owned: number[] = []; // the fixed region's buffers
  let cache: NeuronCache | undefined;
  let pred: FfnLayout["pred"];
  let scratch: ReturnType<typeof createFfnScratch> | undefined;
  try {
    // fixed region: read into one anonymous buffer, tensors back to back (the plan counted this layout)
    const { tensors: fixed, offsets, bytes: size } = fixedLayout(pack);
    const fixedBuf = n.alloc(Math.max(1, size));
    owned.push(fixedBuf);
    const fd = openSync(path, "r");
    try {
      for (const t of fixed) {
        readIntoNative(fd, path, `tensor ${t.name}`, t.offset, t.nbytes, fixedBuf, offsets.get(t.name)!);
        o.signal?.throwIfAborted();
      }
    } finally {
      closeSync(fd);
    }
    const weights = bindWeights(pack.file, cfg, fixedBuf, { ffn: false, offsetOf: (t) => offsets.get(t.name)! });
    owned.push(...weights.buffers.slice(1));
    weights.buffers = owned;
    const bundles = bundleLayoutOf(pack);
    cache = new NeuronCache(pack, plan, { id: loaderId, backend: info.backend, directIO: info.directIO, align: info.align, aheadId, nowId, callerReads: callerReads && aheadId >= 0 });
    scratch = createFfnScratch(cfg.nFF, cfg.nEmbd, plan.options.batchSize);
    pred = o.predictor === "trained" ? loadPredictorWeights(pack) : undefined;
    const ffn: FfnLayout = {
      ...bundles,
      arena: cache.arena,
      slotBytes: cache.slotBytes,
      slots: plan.slots,
      upOffset: cache.upOffset,
      downOffset: cache.downOffset,
      gateRows: cache.gateRows,
      pinned: cache.pinned,
      slotOf: cache.slotTable,
      stateOf: cache.stateTable,
      scratch: scratch.buf,
      off: scratch.off,
      pred,
    };
    const fixedBuffers = fixStaging(loaderId, cache.staging, aheadId, cache.aheadStaging, nowId);
    if (o.preload) cache.preload(o.onProgress);
    const parts = new SparseParts(pack, plan, weights, cache, ffn, o.predictor, loaderId, {
      backend: info.backend,
      queueDepth: info.queueDepth,
      directIO: info.directIO,
      note: info.note ?? (o.io.directIO && !info.directIO ? "the filesystem refused O_DIRECT" : undefined),
      fixedBuffers,
      aheadRing: aheadId >= 0 ? aheadRing(n.loaderInfo(aheadId), callerReads) : undefined,
    });
    parts.sample();
    return parts;
  } catch (e) {
    cache?.dispose();
    if (scratch) n.free(scratch.buf);
    if (pred) n.free(pred.buf);
    for (const b of owned) n.free(b);
    n.closeLoader(loaderId);
    if (aheadId >= 0) n.closeLoader(aheadId);
    if (nowId >= 0) n.closeLoader(nowId);
    throw e;
  }
}

/** The reads ahead's ring and who submits and reaps its batches, in words (undefined for the pread backend, which has none). */
function aheadRing(info: ReturnType<NativeAddon["loaderInfo"]>, caller: boolean): string | undefined {
  if (info.backend !== "uring") return undefined;
  const ring = info.singleIssuer ? "a single-issuer ring" : `a plain ring${info.note ? ` (${info.note})` : ""}`;
  return `${ring}, ${caller ? "submitted and reaped by the decoding thread" : "on background threads"}`;
}

/**
 * Register the staging buffers reads land in with their loaders' rings (READ_FIXED: the kernel
 * does not pin and unpin the destination's pages on every request; native/bench/read-cost.mjs
 * --fixed measures it). Where it cannot (the pread backend, RLIMIT_MEMLOCK below the buffer's
 * size without CAP_IPC_LOCK), reads go on as before; the returned words say which.
 */
function fixStaging(loaderId: number, staging: number, aheadId: number, aheadStaging: number, nowId: number): string {
  const n = native();
  const why = n.loaderFixBuffer(loaderId, staging);
  // the read-ahead staging, with both rings that read into it ("" once registered with both)
  let whyAhead: string | undefined;
  if (aheadId >= 0 && aheadStaging >= 0) {
    whyAhead = n.loaderFixBuffer(aheadId, aheadStaging);
    if (!whyAhead && nowId >= 0) whyAhead = n.loaderFixBuffer(nowId, aheadStaging);
  }
  if (whyAhead === undefined) return why ? `staging not registered (${why})` : "staging registered (READ_FIXED)";
  if (!why && !whyAhead) return "staging and read-ahead staging registered (READ_FIXED)";
  if (why && whyAhead) return `no registered buffers (${why === whyAhead ? why : `staging: ${why}; read-ahead staging: ${whyAhead}`})`;
  return why ? `read-ahead staging registered, not the staging (${why})` : `staging registered, not the read-ahead staging (${whyAhead})`;
}
