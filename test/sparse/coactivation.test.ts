// The co-activation order (src/sparse/coactivation.ts) on hand-computed cases: requests for runs
// of positions, the greedy chain, a layer's order and the requests it takes.
import { expect, it } from "vitest";
import { coactivationChain, coactivationOrder, coldRequestsPerFired, learnLayerOrder, runRequests, type FiredBits } from "../../src/sparse/coactivation.js";
import { lcg } from "../../src/util/lcg.js";

/** Fired bits of 8 neurons over tokens given as lists of neuron ids. */
function bitsOf(tokens: number[][]): FiredBits {
  const bits = new Uint8Array(tokens.length);
  tokens.forEach((ids, t) => ids.forEach((i) => (bits[t]! |= 1 << i)));
  return { bits, rowBytes: 1, tokens: tokens.length };
}

it("runRequests: a request covers a run with at most `gap` unneeded positions inside", () => {
  // 0 1 2 | 5 | 7: three runs, five positions read; with gap 1, 5 and 7 share one (6 read unneeded)
  expect(runRequests([0, 1, 2, 5, 7], 0)).toEqual({ requests: 3, read: 5 });
  expect(runRequests([0, 1, 2, 5, 7], 1)).toEqual({ requests: 2, read: 6 });
  expect(runRequests([], 0)).toEqual({ requests: 0, read: 0 });
});

it("coactivationChain: after a neuron, the one that fired with it most; else the most frequent left", () => {
  // 0&3 fire together on 4 tokens, 1&4 on 3, 2&5 on 2
  const lists = [...Array(4).fill([0, 3]), ...Array(3).fill([1, 4]), ...Array(2).fill([2, 5])].map((l: number[]) => Int32Array.from(l));
  expect(Array.from(coactivationChain(6, lists))).toEqual([0, 3, 1, 4, 2, 5]);
  // nothing co-fires: the order stays as given (hot-first)
  expect(Array.from(coactivationChain(4, [Int32Array.from([2]), Int32Array.from([0])]))).toEqual([0, 1, 2, 3]);
});

it("coactivationOrder keeps the hot set and chains the rest; coldRequestsPerFired counts a run as one request", () => {
  // neurons 6 and 7 hot; the cold pairs (0,3), (1,4), (2,5) fire together
  const f = bitsOf([...Array(4).fill([6, 7, 0, 3]), ...Array(3).fill([6, 1, 4]), ...Array(2).fill([7, 2, 5])]);
  const hotFirst = Int32Array.from([6, 7, 0, 1, 2, 3, 4, 5]);
  const order = coactivationOrder(hotFirst, 2, f);
  expect(Array.from(order)).toEqual([6, 7, 0, 3, 1, 4, 2, 5]);
  // each token's two fired cold neurons: apart in hot-first order (2 requests), side by side after (1)
  expect(coldRequestsPerFired(hotFirst, 2, f, 0, f.tokens)).toBe(1);
  expect(coldRequestsPerFired(order, 2, f, 0, f.tokens)).toBe(0.5);
  // learned on the first 4 tokens only (just 0&3): 1&4 and 2&5 stay apart on the rest
  const learned = coactivationOrder(hotFirst, 2, f, 0, 4);
  expect(Array.from(learned)).toEqual([6, 7, 0, 3, 1, 2, 4, 5]);
  expect(coldRequestsPerFired(learned, 2, f, 4, f.tokens)).toBe(1);
});

it("learnLayerOrder, from one pass over the fired bits, is the order and held-out requests the separate functions give", () => {
  // the hand case above: learned on tokens 0–3 only the pair 0&3 is known, so held out both orders take 1
  const hand = bitsOf([...Array(4).fill([6, 7, 0, 3]), ...Array(3).fill([6, 1, 4]), ...Array(2).fill([7, 2, 5])]);
  const hotFirst = Int32Array.from([6, 7, 0, 1, 2, 3, 4, 5]);
  expect(learnLayerOrder(hotFirst, 2, hand)).toEqual({ order: Int32Array.from([6, 7, 0, 3, 1, 4, 2, 5]), coldRequests: { hotFirst: 1, coactivation: 1 } });
  // 64 neurons over 200 seeded tokens, each firing on about a quarter of them (two random bytes ANDed)
  const next = lcg(7);
  const rowBytes = 8;
  const f: FiredBits = { bits: Uint8Array.from({ length: 200 * rowBytes }, () => (next() >>> 24) & (next() >>> 24)), rowBytes, tokens: 200 };
  const order = Int32Array.from({ length: 64 }, (_, i) => (i * 37) % 64);
  const half = 100;
  const got = learnLayerOrder(order, 16, f);
  expect(got.order).toEqual(coactivationOrder(order, 16, f));
  expect(got.coldRequests.hotFirst).toBe(coldRequestsPerFired(order, 16, f, half, 200));
  expect(got.coldRequests.coactivation).toBe(coldRequestsPerFired(coactivationOrder(order, 16, f, 0, half), 16, f, half, 200));
  expect(got.coldRequests.coactivation).toBeLessThan(1);
});
