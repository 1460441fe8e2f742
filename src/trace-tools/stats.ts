// How well a trace hid I/O behind compute, and where each token's time went. All of it is
// interval arithmetic over spans: a lane's spans may overlap (several workers on one lane), so
// times are lengths of unions, never sums of durations.
import type { Lane, TraceRecord } from "../trace/recorder.js";

export type Interval = [number, number];

/** Lanes whose spans are model work (kernels); I/O overlapping them is hidden. */
export const COMPUTE_LANES: readonly Lane[] = ["compute", "predictor", "prefill"];

export interface TokenStats {
  index: number; // decode step; -1 for the prefill pass
  us: number; // t1 − t0
  kernelUs: number; // |∪compute ∩ [t0,t1]|
  ioWaitUs: number; // |(∪io \ ∪compute) ∩ [t0,t1]|: I/O nothing was computing under
  orchestrationUs: number; // us − |(∪compute ∪ ∪io) ∩ [t0,t1]|: neither kernel nor I/O
}

export interface LatencyStats {
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  count: number;
}

export interface TraceStats {
  ioUs: number; // |∪ io-lane spans|
  computeUs: number; // |∪ spans on COMPUTE_LANES|
  ioHiddenUs: number; // |∪io ∩ ∪compute|
  ioHiddenShare: number; // ioHiddenUs / ioUs; 0 when there was no I/O
  tokens: TokenStats[]; // every token record (prefill included), in trace order
  orchestrationShare: number; // Σ orchestrationUs / Σ us over decode tokens (index ≥ 0)
  latencyMs: LatencyStats; // decode token durations in ms; all 0 when there are none
}

/** Sorted, disjoint intervals covering the same points as `intervals` (touching ones merge). */
export function mergeIntervals(intervals: readonly Interval[]): Interval[] {
  const sorted = intervals.filter(([a, b]) => b > a).sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  const out: Interval[] = [];
  for (const [a, b] of sorted) {
    const last = out[out.length - 1];
    if (last && a <= last[1]) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}

/** |∪ intervals| */
export function unionLength(intervals: readonly Interval[]): number {
  return totalLength(mergeIntervals(intervals));
}

/** |(∪a) ∩ (∪b)| */
export function intersectionOfUnions(a: readonly Interval[], b: readonly Interval[]): number {
  return totalLength(intersectMerged(mergeIntervals(a), mergeIntervals(b)));
}

/** (∪a) ∩ (∪b) of two merged lists, itself merged: one sweep over both. */
export function intersectMerged(a: readonly Interval[], b: readonly Interval[]): Interval[] {
  const out: Interval[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    const lo = Math.max(a[i]![0], b[j]![0]);
    const hi = Math.min(a[i]![1], b[j]![1]);
    if (hi > lo) out.push([lo, hi]);
    // the interval that ends first cannot meet anything further in the other list
    if (a[i]![1] < b[j]![1]) i++;
    else j++;
  }
  return out;
}

function totalLength(merged: readonly Interval[]): number {
  let s = 0;
  for (const [a, b] of merged) s += b - a;
  return s;
}

/**
 * A merged interval list answering |∪ ∩ [t0,t1]| in O(log n), so per-token breakdowns stay
 * cheap on traces with a span per cluster per layer per token.
 */
export class CoverageIndex {
  private readonly starts: number[];
  private readonly ends: number[];
  private readonly before: number[]; // before[k] = total length of intervals 0..k-1

  constructor(merged: readonly Interval[]) {
    this.starts = merged.map((m) => m[0]);
    this.ends = merged.map((m) => m[1]);
    this.before = [0];
    for (const [a, b] of merged) this.before.push(this.before[this.before.length - 1]! + b - a);
  }

  /** |∪ ∩ (−∞, t]| */
  private upTo(t: number): number {
    // k = number of intervals starting before t; the last of them may be cut at t
    let lo = 0;
    let hi = this.starts.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.starts[mid]! < t) lo = mid + 1;
      else hi = mid;
    }
    if (lo === 0) return 0;
    return this.before[lo - 1]! + Math.min(t, this.ends[lo - 1]!) - this.starts[lo - 1]!;
  }

  within(t0: number, t1: number): number {
    return t1 > t0 ? this.upTo(t1) - this.upTo(t0) : 0;
  }
}

/** Nearest-rank percentile (p in 0..100) of ascending `sortedValues`: the ⌈p/100·n⌉-th value. */
export function percentile(sortedValues: readonly number[], p: number): number {
  if (sortedValues.length === 0) throw new RangeError("percentile of an empty list");
  if (!(p >= 0 && p <= 100)) throw new RangeError(`percentile must be in 0..100, got ${p}`);
  // p·n / 100, not (p / 100)·n: 0.07·100 is 7.000000000000001 and would round up a rank
  const rank = Math.max(1, Math.ceil((p * sortedValues.length) / 100));
  return sortedValues[rank - 1]!;
}

export function traceStats(records: readonly TraceRecord[]): TraceStats {
  const io: Interval[] = [];
  const compute: Interval[] = [];
  for (const r of records) {
    if (r.kind !== "span") continue;
    if (r.lane === "io") io.push([r.t0, r.t1]);
    else if (COMPUTE_LANES.includes(r.lane)) compute.push([r.t0, r.t1]);
    // scheduler spans are bookkeeping: they count as orchestration, like gaps
  }
  const ioU = mergeIntervals(io);
  const computeU = mergeIntervals(compute);
  const hiddenU = intersectMerged(ioU, computeU);
  const ioUs = totalLength(ioU);
  const ioHiddenUs = totalLength(hiddenU);

  const computeIdx = new CoverageIndex(computeU);
  const ioIdx = new CoverageIndex(ioU);
  const hiddenIdx = new CoverageIndex(hiddenU);
  const tokens: TokenStats[] = [];
  for (const r of records) {
    if (r.kind !== "token") continue;
    const us = r.t1 - r.t0;
    const kernelUs = computeIdx.within(r.t0, r.t1);
    const ioWaitUs = ioIdx.within(r.t0, r.t1) - hiddenIdx.within(r.t0, r.t1);
    // |(C ∪ I) ∩ W| = |C ∩ W| + |(I \ C) ∩ W|
    tokens.push({ index: r.index, us, kernelUs, ioWaitUs, orchestrationUs: us - kernelUs - ioWaitUs });
  }

  const decode = tokens.filter((t) => t.index >= 0);
  const decodeUs = sum(decode.map((t) => t.us));
  const latencies = decode.map((t) => t.us / 1000).sort((a, b) => a - b);
  return {
    ioUs,
    computeUs: totalLength(computeU),
    ioHiddenUs,
    ioHiddenShare: ioUs > 0 ? ioHiddenUs / ioUs : 0,
    tokens,
    orchestrationShare: decodeUs > 0 ? sum(decode.map((t) => t.orchestrationUs)) / decodeUs : 0,
    latencyMs:
      latencies.length === 0
        ? { mean: 0, p50: 0, p90: 0, p99: 0, count: 0 }
        : {
            mean: sum(latencies) / latencies.length,
            p50: percentile(latencies, 50),
            p90: percentile(latencies, 90),
            p99: percentile(latencies, 99),
            count: latencies.length,
          },
  };
}

const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);
