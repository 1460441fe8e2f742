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
// bundles is what the GEMMs take with a row stride: no re-layout pass. The staging is the memory
// plan's I/O staging (decode reads none while a prompt is evaluated), so prefill holds nothing
// the budget does not count.
import { native } from "../../native.js";
import { nowUs } from "../../trace/recorder.js";
import { DOWN_GROUP, type BundleLayout } from "./layout.js";
import { bundleRange, type BundleScratch } from "./steps.js";

export interface StreamedFfnOptions {
  /** Native loader of the pack (direct I/O: offsets and lengths are 4 KiB multiples). */
  loader: number;
  /** The staging buffer and its usable bytes (two halves of whole bundles each). */
  staging: number;
  stagingBytes: number;
  /** File offset of each layer's first bundle. */
  layerOffsets: readonly number[];
  scratch: BundleScratch;
}

/** Bytes and reads of a streamed FFN, how long the computing thread waited for them, and per layer the time spent computing and reading. */
export interface StreamedStats {
  bytes: number;
  reads: number;
  waitUs: number;
  /** Per layer, summed over runs: µs in the GEMMs, and µs the reads of its chunks took (in the background or not). */
  computeUs: number[];
  readUs: number[];
  /** With recordSpans: every read's interval (µs, process.hrtime's clock: the trace's), per layer; `background` when it ran while the thread computed. */
  spans: { layer: number; t0: number; t1: number; bytes: number; background: boolean }[];
  /** With recordSpans: each chunk's GEMMs as [t0, t1, layer, neurons]… (µs). */
  chunks: number[];
}

export class StreamedFfn {
  /** Bundles per chunk (half the staging). */
  readonly chunk: number;
  readonly stats: StreamedStats;
  private readonly half: number;
  private pending?: { ticket: number; layer: number; start: number; slot: number };
  /** Keep every read's and chunk's interval in stats.spans / stats.chunks for a trace (takeSpans); off, nothing accumulates. */
  recordSpans = false;
  private slot = 0; // the half the next read goes to

  constructor(
    readonly L: BundleLayout,
    readonly o: StreamedFfnOptions,
  ) {
    // whole multiples of DOWN_GROUP bundles when the staging allows: the down GEMM's sums are
    // then the same whatever the staging's size (layout.ts DOWN_GROUP)
    const fit = Math.floor(o.stagingBytes / 2 / L.bundleBytes);
    this.chunk = fit >= DOWN_GROUP ? fit - (fit % DOWN_GROUP) : fit;
    if (this.chunk < 1) throw new RangeError(`streamed FFN: a staging buffer of ${o.stagingBytes} bytes cannot hold two bundles of ${L.bundleBytes} bytes`);
    this.half = this.chunk * L.bundleBytes;
    const nLayer = o.layerOffsets.length;
    this.stats = { bytes: 0, reads: 0, waitUs: 0, computeUs: new Array<number>(nLayer).fill(0), readUs: new Array<number>(nLayer).fill(0), spans: [], chunks: [] };
  }

  /** Zero the statistics (a benchmark's measured runs). */
  resetStats(): void {
    const st = this.stats;
    st.bytes = st.reads = st.waitUs = 0;
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
    if (layer === 0) {
      // the scratch may be shared with decode's steps, which wrote over the iota since
      const s = this.o.scratch;
      const iota = n.viewI32(s.buf, s.iota, L.nFF);
      for (let i = 0; i < L.nFF; i++) iota[i] = i;
    }
    n.viewF32(rs.buf, rs.o, nTok * L.dim).fill(0);
    for (let a = 0; a < L.nFF; a += this.chunk) {
      const slot = this.arrive(layer, a);
      // the next chunk of this layer, or the first of the next one, into the other half
      const next = a + this.chunk < L.nFF ? { layer, start: a + this.chunk } : layer + 1 < this.o.layerOffsets.length ? { layer: layer + 1, start: 0 } : undefined;
      if (next) this.start(next.layer, next.start);
      const t = nowUs();
      const m = Math.min(this.chunk, L.nFF - a);
      bundleRange(L, this.o.staging, slot * this.half, m, rs, nTok, this.o.scratch);
      const t1 = nowUs();
      this.stats.computeUs[layer]! += t1 - t;
      if (this.recordSpans) this.stats.chunks.push(t, t1, layer, m);
    }
  }

  /** Wait for a read in flight (an aborted forward leaves one); throws its error. */
  finish(): void {
    const p = this.pending;
    if (!p) return;
    this.pending = undefined;
    native().readBatchWait(p.ticket);
  }

  /** The half holding chunk (layer, start): the read in flight if it is that one, else read now. */
  private arrive(layer: number, start: number): number {
    const p = this.pending;
    if (p && p.layer === layer && p.start === start) {
      this.pending = undefined;
      const t = nowUs();
      const r = native().readBatchWait(p.ticket);
      this.stats.waitUs += nowUs() - t;
      if (this.recordSpans) this.stats.spans.push({ layer, t0: r.t0, t1: r.t1, bytes: r.bytes, background: true });
      this.stats.readUs[layer]! += r.t1 - r.t0;
      return p.slot;
    }
    this.finish(); // a read of something else (a forward that ended early): let it land first
    const slot = this.slot;
    this.slot ^= 1;
    const t = nowUs();
    const req = this.request(layer, start, slot);
    native().readBatch(this.o.loader, req);
    const t1 = nowUs();
    this.stats.waitUs += t1 - t;
    this.stats.readUs[layer]! += t1 - t;
    if (this.recordSpans) this.stats.spans.push({ layer, t0: t, t1, bytes: req[1]!, background: false });
    return slot;
  }

  private start(layer: number, start: number): void {
    const slot = this.slot;
    this.slot ^= 1;
    const ticket = native().readBatchStart(this.o.loader, this.request(layer, start, slot), this.o.staging, this.o.staging, new Float64Array());
    this.pending = { ticket, layer, start, slot };
  }

  /** One sequential read of chunk (layer, start) into half `slot`. */
  private request(layer: number, start: number, slot: number): Float64Array {
    const { L } = this;
    const m = Math.min(this.chunk, L.nFF - start);
    this.stats.bytes += m * L.bundleBytes;
    this.stats.reads++;
    return Float64Array.of(this.o.layerOffsets[layer]! + start * L.bundleBytes, m * L.bundleBytes, this.o.staging, slot * this.half);
  }
}
