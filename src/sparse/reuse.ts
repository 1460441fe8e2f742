// How soon a neuron fires again, measured by the profiler for the planner's cache model.
//
// An LRU region holds what was used within its last T tokens, so what it saves depends on two
// numbers per neuron, both over spans of T tokens (Che's approximation, src/plan/cache-model.ts):
//
//   recent        P(the neuron fired within the last T tokens, the current one included): the
//                 share of the region it takes;
//   firedRecent   P(it fired within the T tokens before | it fires now): its hit rate.
//
// Independent tokens give 1 − (1 − p)^T for both (p the neuron's firing rate). Real text does
// not: a neuron that fired tends to fire again soon, over spans longer than one token (a topic,
// a phrase), which a one-token chain fitted to consecutive overlap does not see. Both are kept
// per layer and class of firing rate (quarter decades), pooled over the class (recent over its
// neurons' tokens, firedRecent over its firings, so the class's totals at a measured span are
// exact: Σ_i recent_i and Σ_i p_i·firedRecent_i), at spans 1, 2, 3, 4, 6, 8, 12, … up to half
// the profile's window. A span is counted only at positions whose T tokens before lie in the
// same window (each window is a fresh context), so no firing before the window is guessed at.

/** Classes of firing rate: quarter decades from 1e-6 to 1. */
export const REUSE_RATE_CLASSES = 24;
const MIN_RATE = 1e-6;

/** The class of firing rate p (p > 0). */
export const reuseClassOf = (p: number) =>
  Math.min(REUSE_RATE_CLASSES - 1, Math.max(0, Math.floor((Math.log10(Math.max(p, MIN_RATE)) + 6) * (REUSE_RATE_CLASSES / 6))));

export interface FiringReuse {
  /** (K) spans T in tokens, ascending: 1, 2, 3, 4, 6, 8, … */
  spans: number[];
  /** (nLayer·REUSE_RATE_CLASSES·K) P(fired within the last T tokens); NaN where the class has no neuron. */
  recent: Float32Array;
  /** (nLayer·REUSE_RATE_CLASSES·K) P(fired within the T tokens before | fires); NaN where the class never fired at a counted position. */
  firedRecent: Float32Array;
}

/** Spans for a profile window: 1, 2, 3, 4, 6, 8, 12, … (half octaves) up to half of it (at least 1). */
export function reuseSpans(window: number): number[] {
  const spans = [1];
  for (let s = 2; s <= window / 2; s *= 2) {
    spans.push(s);
    if (1.5 * s <= window / 2) spans.push(1.5 * s);
  }
  return spans;
}

/** Counts, token by token and layer by layer, what FiringReuse reports. */
export class ReuseCounter {
  readonly spans: number[];
  private readonly K: number;
  /** per layer: position of the current token in its window */
  private readonly pos: Int32Array;
  /** per layer (nFF): position of the neuron's last firing in this window, −1 none */
  private readonly last: Int32Array[];
  /** per layer (nFF·K): tokens at which the neuron had fired within the last T_k */
  private readonly recentHits: Uint32Array[];
  /** per layer (nFF·K): firings preceded by one within T_k, and firings counted at T_k */
  private readonly firedHits: Uint32Array[];
  private readonly firedCounted: Uint32Array[];
  /** per layer (K): tokens counted at T_k (the same for every neuron) */
  private readonly tokensCounted: Float64Array[];

  constructor(
    readonly nLayer: number,
    readonly nFF: number,
    window: number,
  ) {
    this.spans = reuseSpans(window);
    this.K = this.spans.length;
    this.pos = new Int32Array(nLayer);
    const per = () => Array.from({ length: nLayer }, () => new Uint32Array(nFF * this.K));
    this.last = Array.from({ length: nLayer }, () => new Int32Array(nFF).fill(-1));
    this.recentHits = per();
    this.firedHits = per();
    this.firedCounted = per();
    this.tokensCounted = Array.from({ length: nLayer }, () => new Float64Array(this.K));
  }

  /** A fresh context: nothing before it counts. */
  startWindow(): void {
    this.pos.fill(0);
    for (const l of this.last) l.fill(-1);
  }

  /** The next token of `layer`: fired(i) says whether neuron i fired. */
  addToken(layer: number, fired: (i: number) => boolean): void {
    const { spans, K } = this;
    const pos = this.pos[layer]!;
    const last = this.last[layer]!;
    const recent = this.recentHits[layer]!;
    const hits = this.firedHits[layer]!;
    const counted = this.firedCounted[layer]!;
    for (let i = 0; i < this.nFF; i++) {
      if (fired(i)) {
        // the gap to the previous firing (none in the window: longer than pos)
        const gap = last[i]! >= 0 ? pos - last[i]! : Infinity;
        for (let k = 0; k < K && pos >= spans[k]!; k++) {
          counted[i * K + k]!++;
          if (gap <= spans[k]!) hits[i * K + k]!++;
        }
        last[i] = pos;
      }
      if (last[i]! < 0) continue;
      const age = pos - last[i]!; // 0: fired now
      for (let k = K - 1; k >= 0 && spans[k]! > age; k--) if (pos >= spans[k]! - 1) recent[i * K + k]!++;
    }
    const t = this.tokensCounted[layer]!;
    for (let k = 0; k < K; k++) if (pos >= spans[k]! - 1) t[k]!++;
    this.pos[layer] = pos + 1;
  }

  /** The pooled probabilities, given each layer's firing counts over `tokens` tokens (for the classes). */
  finish(counts: readonly Uint32Array[], tokens: number): FiringReuse {
    const { K, spans, nLayer, nFF } = this;
    const C = REUSE_RATE_CLASSES;
    const recent = new Float32Array(nLayer * C * K);
    const firedRecent = new Float32Array(nLayer * C * K);
    for (let l = 0; l < nLayer; l++) {
      const num = new Float64Array(C * K);
      const den = new Float64Array(C * K);
      const fNum = new Float64Array(C * K);
      const fDen = new Float64Array(C * K);
      for (let i = 0; i < nFF; i++) {
        const p = counts[l]![i]! / Math.max(1, tokens);
        if (!(p > 0)) continue;
        const c = reuseClassOf(p);
        for (let k = 0; k < K; k++) {
          num[c * K + k]! += this.recentHits[l]![i * K + k]!;
          den[c * K + k]! += this.tokensCounted[l]![k]!;
          fNum[c * K + k]! += this.firedHits[l]![i * K + k]!;
          fDen[c * K + k]! += this.firedCounted[l]![i * K + k]!;
        }
      }
      for (let j = 0; j < C * K; j++) {
        recent[l * C * K + j] = den[j]! > 0 ? num[j]! / den[j]! : NaN;
        firedRecent[l * C * K + j] = fDen[j]! > 0 ? fNum[j]! / fDen[j]! : NaN;
      }
    }
    return { spans: [...spans], recent, firedRecent };
  }
}

/**
 * `which` for layer l's class of rate p, as a function of the span T (T ≥ 1): interpolated in
 * log T between the measured spans; below the first, its value; beyond the last, what is not yet
 * reached decays as with independent tokens, (1 − v)·(1 − p)^(T − last); undefined when the class
 * has no measurement. The class's spans are looked up once, for a caller that asks at many T.
 */
export function reuseCurve(reuse: FiringReuse, which: "recent" | "firedRecent", l: number, p: number): ((T: number) => number) | undefined {
  const K = reuse.spans.length;
  const base = (l * REUSE_RATE_CLASSES + reuseClassOf(p)) * K;
  const v = reuse[which];
  const xs: number[] = [];
  const logs: number[] = [];
  const ys: number[] = [];
  for (let k = 0; k < K; k++) {
    if (!Number.isFinite(v[base + k]!)) continue;
    xs.push(reuse.spans[k]!);
    logs.push(Math.log2(reuse.spans[k]!));
    ys.push(v[base + k]!);
  }
  if (xs.length === 0) return undefined;
  const last = xs.length - 1;
  return (T) => {
    let i = last;
    while (i >= 0 && xs[i]! > T) i--; // the last measured span ≤ T
    if (i < 0) return ys[0]!;
    if (i === last) return 1 - (1 - ys[last]!) * Math.pow(1 - Math.min(1, p), T - xs[last]!);
    const w = (Math.log2(T) - logs[i]!) / (logs[i + 1]! - logs[i]!);
    return ys[i]! * (1 - w) + ys[i + 1]! * w;
  };
}

/** `which` for layer l's class of rate p at span T (T ≥ 1), as reuseCurve has it; undefined when the class has no measurement. */
export const reuseAt = (reuse: FiringReuse, which: "recent" | "firedRecent", l: number, p: number, T: number): number | undefined => reuseCurve(reuse, which, l, p)?.(T);
