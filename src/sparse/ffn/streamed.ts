// The dense FFN of a pack for a batch of tokens (prefill), streamed from storage: every neuron of
// a layer, no predictor, the pack's bundles read in large sequential direct-I/O reads into one of
// two halves of a staging buffer while the other half is computed (bundleRange: GEMMs for gate,
// up and down). The read of a layer's next chunk is
// in flight while this one computes, and the read of the next layer's first chunk while this
// layer finishes and the next one runs its attention.
//
//   layer L:  [read c0]  compute c0 | compute c1 | … | compute cN         layer L+1: compute c0 …
//                        read c1    | read c2    | … | read L+1's c0
//
// Bundles hold gate, up and down of a neuron together in pack order (formats.md), so a chunk of
// bundles is what the GEMMs take with a row stride: no re-layout pass. Neurons the cache holds
// whole are used in place (inPlace): a chunk reads only the runs of the others, and the GEMMs
// pick each position's rows from the cache or the staging (bundleBatch). The staging is the
// memory plan's I/O staging (decode reads none while a prompt is evaluated), so prefill holds
// nothing the budget does not count.
import { native } from "../../native.js";
import { nowUs } from "../../trace/recorder.js";
import { NEURON_FULL } from "../cache/neuron-cache.js";
import { DOWN_GROUP, type FfnLayout } from "./layout.js";
import { bundleBatch, fillTables, type BundleScratch } from "./steps.js";

export interface StreamedFfnOptions {
  /** Native loader of the pack (direct I/O: offsets and lengths are 4 KiB multiples). */
  loader: number;
  /** The staging buffer and its usable bytes (two halves of whole bundles each). */
  staging: number;
  stagingBytes: number;
  /** File offset of each layer's first bundle. */
  layerOffsets: readonly number[];
  scratch: BundleScratch;
  /** Use the neurons the cache holds whole in place instead of reading them. */
  inPlace: boolean;
  /** Whether a slot's last read has landed (the pipeline's slot flags); without it every held slot counts. */
  slotReady?: (slot: number) => boolean;
}

/** Bytes and reads of a streamed FFN, how long the computing thread waited for them, and per layer the time spent computing and reading. */
export interface StreamedStats {
  bytes: number;
  reads: number;
  /** Neurons taken from the cache in place (not read). */
  inPlace: number;
  waitUs: number;
  /** Per layer, summed over runs: µs in the GEMMs, and µs the reads of its chunks took (in the background or not). */
  computeUs: number[];
  readUs: number[];
  /** With recordSpans: every read's interval (µs, process.hrtime's clock: the trace's), per layer; `background` when it ran while the thread computed. */
  spans: { layer: number; t0: number; t1: number; bytes: number; background: boolean }[];
  /** With recordSpans: each chunk's GEMMs as [t0, t1, layer, neurons]… (µs). */
  chunks: number[];
}

/** A chunk of a layer: positions [start, end), the staged ones read into one half in runs. */
interface Chunk {
  start: number;
  end: number;
  /** Pack positions not resident, in order: the k-th lands at staging bundle k. */
  staged: number[];
}

/** A layer's chunks and each position's resident slot (-1: read it). */
interface LayerPlan {
  layer: number;
  slot: Int32Array;
  chunks: Chunk[];
}

export class StreamedFfn {
  /** Bundles a staging half holds (whole DOWN_GROUPs when the staging allows). */
  readonly chunk: number;
  readonly stats: StreamedStats;
  private readonly half: number;
  private pending?: { ticket: number; layer: number; index: number; slot: number };
  /** Keep every read's and chunk's interval in stats.spans / stats.chunks for a trace (takeSpans); off, nothing accumulates. */
  recordSpans = false;
  private slot = 0; // the half the next read goes to
  private plans: LayerPlan[] = []; // this layer's and the next one's

  constructor(
    readonly L: FfnLayout,
    readonly o: StreamedFfnOptions,
  ) {
    // whole multiples of DOWN_GROUP bundles when the staging allows: the down GEMM's sums are
    // then the same whatever the staging's size (layout.ts DOWN_GROUP)
    const fit = Math.floor(o.stagingBytes / 2 / L.bundleBytes);
    this.chunk = fit >= DOWN_GROUP ? fit - (fit % DOWN_GROUP) : fit;
    if (this.chunk < 1) throw new RangeError(`streamed FFN: a staging buffer of ${o.stagingBytes} bytes cannot hold two bundles of ${L.bundleBytes} bytes`);
    this.half = this.chunk * L.bundleBytes;
    const nLayer = o.layerOffsets.length;
    this.stats = { bytes: 0, reads: 0, inPlace: 0, waitUs: 0, computeUs: new Array<number>(nLayer).fill(0), readUs: new Array<number>(nLayer).fill(0), spans: [], chunks: [] };
  }

  /** Zero the statistics (a benchmark's measured runs). */
  resetStats(): void {
    const st = this.stats;
    st.bytes = st.reads = st.inPlace = st.waitUs = 0;
    st.computeUs.fill(0);
    st.readUs.fill(0);
    st.spans.length = 0;
    st.chunks.length = 0;
  }

  /** The recorded intervals as flat arrays — chunks [t0, t1, layer, neurons]…, reads [t0, t1, layer, bytes]… (what a worker posts back) — and forget them. */
  takeSpans(): { chunks: number[]; reads: number[] } {
    const st = this.stats;
    const out = { chunks: st.chunks.splice(0), reads: st.spans.flatMap((r) => [r.t0, r.t1, r.layer, r.bytes]) };
    st.spans.length = 0;
    return out;
  }

  /** o (nTok rows) = the dense FFN of `layer` for xb (nTok rows) of the run state. */
  run(layer: number, rs: { buf: number; xb: number; o: number }, nTok: number): void {
    const n = native();
    const { L } = this;
    const s = this.o.scratch;
    if (layer === 0) {
      fillTables(s, L.nFF); // the scratch may be shared with decode's steps, which wrote over it
      this.plans = [];
    }
    n.viewF32(rs.buf, rs.o, nTok * L.dim).fill(0);
    const plan = this.planOf(layer);
    for (let c = 0; c < plan.chunks.length; c++) {
      const ch = plan.chunks[c]!;
      const slot = this.arrive(plan, c);
      // the next chunk of this layer, or the first of the next one, into the other half
      if (c + 1 < plan.chunks.length) this.start(plan, c + 1);
      else if (layer + 1 < this.o.layerOffsets.length) this.start(this.planOf(layer + 1), 0);
      const t = nowUs();
      bundleBatch(L, this.pick(plan, ch, slot), ch.end - ch.start, rs, nTok, s);
      const t1 = nowUs();
      this.stats.computeUs[layer]! += t1 - t;
      this.stats.inPlace += ch.end - ch.start - ch.staged.length;
      if (this.recordSpans) this.stats.chunks.push(t, t1, layer, ch.end - ch.start);
    }
  }

  /** Wait for a read in flight (an aborted forward leaves one); throws its error. */
  finish(): void {
    const p = this.pending;
    if (!p) return;
    this.pending = undefined;
    native().readBatchWait(p.ticket);
  }

  /**
   * A layer's chunks: positions in whole DOWN_GROUPs while the staged ones fit a half (a chunk of
   * resident neurons only reads nothing), each position's slot when the cache holds it whole.
   */
  private planOf(layer: number): LayerPlan {
    const known = this.plans.find((p) => p.layer === layer);
    if (known) return known;
    const { L } = this;
    const nFF = L.nFF;
    const slot = new Int32Array(nFF).fill(-1);
    if (this.o.inPlace) {
      const n = native();
      const slotOf = n.viewI32(L.slotOf.buf, L.slotOf.off + layer * nFF * 4, nFF);
      const state = n.viewU8(L.stateOf.buf, L.stateOf.off + layer * nFF, nFF);
      const ready = this.o.slotReady;
      for (let p = 0; p < nFF; p++) {
        const sl = slotOf[p]!;
        if (sl >= 0 && state[p] === NEURON_FULL && (!ready || ready(sl))) slot[p] = sl;
      }
    }
    const chunks: Chunk[] = [];
    const group = Math.min(DOWN_GROUP, this.chunk);
    let cur: Chunk = { start: 0, end: 0, staged: [] };
    for (let g = 0; g < nFF; g += group) {
      const e = Math.min(nFF, g + group);
      const staged: number[] = [];
      for (let p = g; p < e; p++) if (slot[p]! < 0) staged.push(p);
      if (cur.staged.length + staged.length > this.chunk) {
        chunks.push(cur);
        cur = { start: g, end: g, staged: [] };
      }
      cur.end = e;
      for (const p of staged) cur.staged.push(p);
    }
    chunks.push(cur);
    const plan = { layer, slot, chunks };
    this.plans = [...this.plans.filter((p) => p.layer === layer - 1), plan];
    return plan;
  }

  /** The row picks of a chunk whose staged bundles are in half `half` (BatchRows for bundleBatch). */
  private pick(plan: LayerPlan, ch: Chunk, half: number) {
    const { L } = this;
    const n = native();
    const s = this.o.scratch;
    const m = ch.end - ch.start;
    const selGate = n.viewI32(s.buf, s.selGate, m), selUD = n.viewI32(s.buf, s.selUpDown, m);
    const pinned = L.pinned;
    let k = 0;
    for (let i = 0; i < m; i++) {
      const p = ch.start + i;
      const sl = plan.slot[p]!;
      const v = sl >= 0 ? sl : -1 - k++;
      selUD[i] = v;
      selGate[i] = pinned ? plan.layer * L.nFF + p : v;
    }
    const gr = L.gateRows;
    return {
      gate: { buf: gr.buf, off: 0, stride: gr.stride, rows: gr.rows },
      up: { buf: L.arena, off: L.upOffset, stride: L.slotBytes, rows: L.slots },
      down: { buf: L.arena, off: L.downOffset, stride: L.slotBytes, rows: L.slots },
      staging: { buf: this.o.staging, off: half * this.half, bundles: ch.staged.length },
      selGate: s.selGate,
      selUpDown: s.selUpDown,
    };
  }

  /** The half holding chunk `index` of `plan`: the read in flight if it is that one, else read now (none to read: either half). */
  private arrive(plan: LayerPlan, index: number): number {
    const p = this.pending;
    if (p && p.layer === plan.layer && p.index === index) {
      this.pending = undefined;
      const t = nowUs();
      const r = native().readBatchWait(p.ticket);
      this.stats.waitUs += nowUs() - t;
      if (this.recordSpans) this.stats.spans.push({ layer: plan.layer, t0: r.t0, t1: r.t1, bytes: r.bytes, background: true });
      this.stats.readUs[plan.layer]! += r.t1 - r.t0;
      return p.slot;
    }
    this.finish(); // a read of something else (a forward that ended early): let it land first
    const req = this.request(plan, index, this.slot);
    if (!req) return this.slot;
    const slot = this.slot;
    this.slot ^= 1;
    const t = nowUs();
    native().readBatch(this.o.loader, req.request);
    const t1 = nowUs();
    this.stats.waitUs += t1 - t;
    this.stats.readUs[plan.layer]! += t1 - t;
    if (this.recordSpans) this.stats.spans.push({ layer: plan.layer, t0: t, t1, bytes: req.bytes, background: false });
    return slot;
  }

  private start(plan: LayerPlan, index: number): void {
    const req = this.request(plan, index, this.slot);
    if (!req) return; // nothing to read: the chunk is resident
    const slot = this.slot;
    this.slot ^= 1;
    const ticket = native().readBatchStart(this.o.loader, req.request, this.o.staging, this.o.staging, new Float64Array());
    this.pending = { ticket, layer: plan.layer, index, slot };
  }

  /** Sequential reads of a chunk's staged bundles (one per run of consecutive positions) into half `slot`; undefined when none. */
  private request(plan: LayerPlan, index: number, slot: number): { request: Float64Array; bytes: number } | undefined {
    const { L } = this;
    const staged = plan.chunks[index]!.staged;
    if (staged.length === 0) return undefined;
    const B = L.bundleBytes;
    const base = this.o.layerOffsets[plan.layer]!;
    const out: number[] = [];
    for (let k = 0; k < staged.length; ) {
      let e = k + 1;
      while (e < staged.length && staged[e] === staged[e - 1]! + 1) e++;
      out.push(base + staged[k]! * B, (e - k) * B, this.o.staging, slot * this.half + k * B);
      this.stats.reads++;
      k = e;
    }
    this.stats.bytes += staged.length * B;
    return { request: Float64Array.from(out), bytes: staged.length * B };
  }
}
