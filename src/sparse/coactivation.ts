// Neurons that fire together, read together (issue 14; PowerInfer-2's neuron bundles). A layer's
// cold neurons — pack positions past its hot set, where a token's misses come from — cost one
// read request each when they sit apart in the pack. Ordered by co-activation instead of by
// frequency alone, neurons that fired together on the profiled tokens sit side by side, and the
// neuron cache (cache/neuron-cache.ts) reads a run of adjacent misses in one request.
//
// The order: the hot set stays hot-first by frequency (its positions are what a budget keeps
// resident); the cold neurons follow as a greedy chain — after a neuron, the unplaced one that
// fired with it most often, normalised by its own frequency — starting from the most frequent
// cold neuron. Where no unplaced neuron co-fired with the last, the chain goes on with the most
// frequent unplaced one, so without co-activation the order stays hot-first.

import { firedBit } from "./fired-bits.js";

/** Fired flags of one layer: `tokens` rows of `rowBytes` bytes, bit i of a row (LSB first) set when neuron i fired. */
export interface FiredBits {
  bits: Uint8Array;
  rowBytes: number;
  tokens: number;
}

function fired(f: FiredBits, t: number, id: number): boolean {
  return firedBit(f.bits, f.rowBytes, t, id) === 1;
}

/** Requests for ascending positions when one request covers a run with at most `gap` unneeded positions inside, and the positions it reads. */
export function runRequests(positions: ArrayLike<number>, gap: number): { requests: number; read: number } {
  let requests = 0;
  let read = 0;
  let start = -1;
  let last = -Infinity;
  for (let i = 0; i < positions.length; i++) {
    const p = positions[i]!;
    if (p - last - 1 > gap) {
      if (start >= 0) read += last - start + 1;
      requests++;
      start = p;
    }
    last = p;
  }
  if (start >= 0) read += last - start + 1;
  return { requests, read };
}

/** For each token of [t0, t1), the indices j of `cold` (neuron ids) that fired, ascending. */
function firedLists(f: FiredBits, cold: Int32Array, t0: number, t1: number): Int32Array[] {
  const out: Int32Array[] = [];
  const buf = new Int32Array(cold.length);
  for (let t = t0; t < t1; t++) {
    let n = 0;
    for (let j = 0; j < cold.length; j++) if (fired(f, t, cold[j]!)) buf[n++] = j;
    out.push(buf.slice(0, n));
  }
  return out;
}

/** The m cold neurons (indices) as a greedy co-activation chain over the fired lists (see the file's comment). */
export function coactivationChain(m: number, lists: readonly Int32Array[]): Int32Array {
  const co = new Uint32Array(m * m); // (m, m) tokens on which both fired
  const freq = new Uint32Array(m);
  for (const f of lists) {
    for (let x = 0; x < f.length; x++) {
      const a = f[x]!;
      freq[a]!++;
      const row = a * m;
      for (let y = 0; y < f.length; y++) if (y !== x) co[row + f[y]!]!++;
    }
  }
  // score(j | cur) = co[cur, j] / sqrt((freq[cur]+1)(freq[j]+1)); the cur factor does not change the argmax
  const inv = Float64Array.from(freq, (c) => 1 / Math.sqrt(c + 1));
  const placed = new Uint8Array(m);
  const chain = new Int32Array(m);
  let cur = 0; // the most frequent cold neuron
  for (let k = 0; k < m; k++) {
    chain[k] = cur;
    placed[cur] = 1;
    let best = -1;
    let bestScore = -1;
    const row = cur * m;
    for (let j = 0; j < m; j++) {
      if (placed[j]) continue;
      const s = co[row + j]! * inv[j]!;
      if (s > bestScore) [best, bestScore] = [j, s]; // ties: the lowest index, the most frequent
    }
    if (best < 0) break;
    cur = best;
  }
  return chain;
}

/** `hotFirst` with positions [from, n) holding its cold neurons in `chain` order (indices into the cold ones). */
function withChain(hotFirst: Int32Array, from: number, chain: Int32Array): Int32Array {
  const order = Int32Array.from(hotFirst);
  for (let k = 0; k < chain.length; k++) order[from + k] = hotFirst[from + chain[k]!]!;
  return order;
}

/** Requests per fired neuron of fired lists (cold indices) when neuron j sits at position[j] (absent: at j) and a run of adjacent ones is one request. */
function requestsPerFired(lists: readonly Int32Array[], position?: Int32Array): number {
  let requests = 0;
  let firedCount = 0;
  for (const l of lists) {
    const ps = position ? Int32Array.from(l, (j) => position[j]!).sort() : l;
    requests += runRequests(ps, 0).requests;
    firedCount += l.length;
  }
  return firedCount > 0 ? requests / firedCount : 1;
}

/** A layer's pack order: `hotFirst` (neuron ids by frequency) with positions [from, n) re-ordered by co-activation learned on tokens [t0, t1). */
export function coactivationOrder(hotFirst: Int32Array, from: number, f: FiredBits, t0 = 0, t1 = f.tokens): Int32Array {
  const cold = hotFirst.subarray(from);
  return withChain(hotFirst, from, coactivationChain(cold.length, firedLists(f, cold, t0, t1)));
}

/**
 * Read requests per fired neuron at positions [from, n) of `order` over tokens [t0, t1), when one
 * request covers a run of adjacent fired positions (gap 0): 1 when no two ever sit side by side.
 */
export function coldRequestsPerFired(order: Int32Array, from: number, f: FiredBits, t0: number, t1: number): number {
  return requestsPerFired(firedLists(f, order.subarray(from), t0, t1));
}

/**
 * What the profiler writes for a layer, from one pass over its fired bits: the pack order learned
 * on every token, and the requests per fired cold neuron on the second half of the tokens in
 * hot-first order and in the order learned on the first half — what the order is worth on
 * tokens it did not see. The same as coactivationOrder(hotFirst, from, f) and
 * coldRequestsPerFired over the hot-first and the half-learned orders.
 */
export function learnLayerOrder(hotFirst: Int32Array, from: number, f: FiredBits): { order: Int32Array; coldRequests: { hotFirst: number; coactivation: number } } {
  const cold = hotFirst.subarray(from);
  const lists = firedLists(f, cold, 0, f.tokens);
  const half = f.tokens >> 1;
  const heldOut = lists.slice(half);
  const learned = coactivationChain(cold.length, lists.slice(0, half));
  const position = new Int32Array(cold.length); // cold index j → its position in the learned chain
  learned.forEach((j, k) => (position[j] = k));
  return {
    order: withChain(hotFirst, from, coactivationChain(cold.length, lists)),
    coldRequests: { hotFirst: requestsPerFired(heldOut), coactivation: requestsPerFired(heldOut, position) },
  };
}
