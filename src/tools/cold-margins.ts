// Two margins instead of one (`train-predictor --cold-share S --cold-cost W`, linear form).
// Under a memory budget the neurons that fire least are the ones left on storage, and a false
// flag of one of them costs a read (on the 7B here ~7 µs a request, docs/benchmarks.md) where a
// false flag of a resident one costs a gate row (~0.2 µs). One margin κ for every neuron spends
// most of its false flags on the rarely firing half: on the 7B they fire 4% of the times a
// neuron fires and take 7% of the flags, at precision 0.45. So the cold share of a layer's
// neurons (by firings on the fitting tokens) gets its own κ, and the pair is the cheapest that
// still flags the target share of all positives on the calibration tokens.

import { firedBit } from "../sparse/fired-bits.js";

/** A layer's two margins: a neuron is flagged when z = −s/σ is below its group's κ. */
export interface ColdMargins {
  hot: number;
  cold: number;
  /** Calibration positives of each group the margins leave unflagged. */
  hotMissed: number;
  coldMissed: number;
  /** Flags on the calibration tokens: hot ones + coldCost × cold ones. */
  cost: number;
}

/** Sorted (ascending) z values of the calibration tokens, by group and label. */
export interface GroupedScores {
  hotPositive: Float64Array;
  coldPositive: Float64Array;
  hotNegative: Float64Array;
  coldNegative: Float64Array;
}

/** How many of the sorted values are below x. */
function countBelow(a: Float64Array, x: number): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const m = (lo + hi) >> 1;
    if (a[m]! < x) lo = m + 1;
    else hi = m;
  }
  return lo;
}

/** The smallest κ above the largest z of the sorted values that are to be flagged (all but `missed`). */
function marginFlagging(z: Float64Array, missed: number): number {
  const v = z[z.length - missed - 1]!;
  return v + Math.abs(v) * 1e-6 + 1e-9;
}

/**
 * The margins that flag at least ceil(target · positives) of the calibration positives at the
 * least cost, each flag of a hot neuron costing 1 and of a cold one `coldCost`: every split of
 * the positives that may go unflagged between the two groups is tried (ties: fewer cold
 * misses). Undefined when a group has no positives (one margin then serves).
 */
export function coldMargins(s: GroupedScores, target: number, coldCost: number): ColdMargins | undefined {
  const PH = s.hotPositive.length;
  const PC = s.coldPositive.length;
  if (PH === 0 || PC === 0) return undefined;
  const P = PH + PC;
  const allowed = P - Math.ceil(target * P);
  let best: ColdMargins | undefined;
  for (let mC = 0; mC <= Math.min(allowed, PC - 1); mC++) {
    const mH = Math.min(allowed - mC, PH - 1);
    const hot = marginFlagging(s.hotPositive, mH);
    const cold = marginFlagging(s.coldPositive, mC);
    const cost = PH - mH + countBelow(s.hotNegative, hot) + coldCost * (PC - mC + countBelow(s.coldNegative, cold));
    if (!best || cost < best.cost) best = { hot, cold, hotMissed: mH, coldMissed: mC, cost };
  }
  return best;
}

/** The `share` of a layer's neurons that fired least on the fitting tokens' labels (ties: the lower index is hot), as a mask. */
export function coldNeurons(labels: Uint8Array, nTok: number, nFF: number, share: number): Uint8Array {
  const fired = new Uint32Array(nFF);
  const rb = nFF / 8;
  for (let t = 0; t < nTok; t++) for (let i = 0; i < nFF; i++) fired[i]! += firedBit(labels, rb, t, i);
  const order = Int32Array.from(fired.keys()).sort((a, b) => fired[a]! - fired[b]! || b - a);
  const cold = new Uint8Array(nFF);
  for (let k = 0; k < Math.floor(share * nFF); k++) cold[order[k]!] = 1;
  return cold;
}

/**
 * The calibration tokens' z = −s/σ by group and label, sorted. Negatives above the largest
 * positive of their group are left out: no margin chosen from the positives flags them.
 */
export function groupScores(s: Float32Array, sigma: Float64Array, labels: Uint8Array, nTok: number, nFF: number, cold: Uint8Array): GroupedScores {
  const rb = nFF / 8;
  const pass = (positive: boolean, cap: [number, number]): [Float64Array, Float64Array] => {
    const z: [number[], number[]] = [[], []];
    for (let t = 0; t < nTok; t++)
      for (let i = 0; i < nFF; i++) {
        if (firedBit(labels, rb, t, i) !== (positive ? 1 : 0)) continue;
        const v = -s[t * nFF + i]! / sigma[i]!;
        if (v < cap[cold[i]!]!) z[cold[i]!]!.push(v);
      }
    return [Float64Array.from(z[0]).sort(), Float64Array.from(z[1]).sort()];
  };
  const [hotPositive, coldPositive] = pass(true, [Infinity, Infinity]);
  const cap = (p: Float64Array) => (p.length ? marginFlagging(p, 0) : -Infinity);
  const [hotNegative, coldNegative] = pass(false, [cap(hotPositive), cap(coldPositive)]);
  return { hotPositive, coldPositive, hotNegative, coldNegative };
}
