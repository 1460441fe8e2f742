// The profiler's reuse counter against a case computed by hand: one neuron's firings in two
// windows, the spans each position may count, and the pooled probabilities.
import { expect, it } from "vitest";
import { ReuseCounter, REUSE_RATE_CLASSES, reuseClassOf, reuseAt, reuseSpans } from "../../src/sparse/reuse.js";

it("counts recent firings and re-firings per span, only where the span lies inside the window", () => {
  expect(reuseSpans(8)).toEqual([1, 2, 3, 4]);
  expect(reuseSpans(256)).toEqual([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128]);
  const c = new ReuseCounter(1, 2, 8);
  // window 1 (8 tokens): neuron 0 fires at 0, 1, 5; neuron 1 never
  c.startWindow();
  for (let t = 0; t < 8; t++) c.addToken(0, (i) => i === 0 && [0, 1, 5].includes(t));
  // window 2 (3 tokens): neuron 0 fires at 2, with no firing before it in this window
  c.startWindow();
  for (let t = 0; t < 3; t++) c.addToken(0, (i) => i === 0 && t === 2);
  const r = c.finish([Uint32Array.of(4, 0)], 11);
  expect(r.spans).toEqual([1, 2, 3, 4]);
  const p = 4 / 11;
  const cls = reuseClassOf(p);
  expect(cls).toBe(22);
  const at = (a: Float32Array, k: number) => a[cls * 4 + k]!;
  // recent: of the positions with pos ≥ T − 1 (11, 9, 7, 5), those whose last firing is < T old
  // (ages 0 0 1 2 3 0 1 2 | − − 0): T=1: 3 + 1; T=2: 4 + 1; T=3: 5 + 1; T=4: 5 + 0
  expect(Array.from({ length: 4 }, (_, k) => at(r.recent, k))).toEqual([4 / 11, 5 / 9, 6 / 7, 1].map(Math.fround));
  // firedRecent: of the firings at pos ≥ T (1, 5 | 2 for T=1), those with one within the T tokens
  // before (gaps 1, 4 | none): T=1: 1 of 3; T=2: 0 of 2; T=3: 0 of 1; T=4: 1 of 1
  expect(Array.from({ length: 4 }, (_, k) => at(r.firedRecent, k))).toEqual([1 / 3, 0, 0, 1].map(Math.fround));
  // every other class had no neuron
  expect(r.recent.length).toBe(REUSE_RATE_CLASSES * 4);
  expect(Array.from(r.recent).filter((x) => Number.isNaN(x)).length).toBe((REUSE_RATE_CLASSES - 1) * 4);
  // interpolation in log T between spans; no measurement: undefined
  expect(reuseAt(r, "recent", 0, p, Math.SQRT2)).toBeCloseTo((4 / 11 + 5 / 9) / 2, 6);
  expect(reuseAt(r, "recent", 0, 0.001, 2)).toBeUndefined();
});

it("beyond the last span, what is not yet reached decays as with independent tokens; below the first, the first", () => {
  const C = REUSE_RATE_CLASSES;
  const recent = new Float32Array(C * 2).fill(NaN);
  const cls = reuseClassOf(0.1);
  recent.set([0.1, 0.4], cls * 2);
  const r = { spans: [2, 4], recent, firedRecent: new Float32Array(C * 2).fill(NaN) };
  expect(reuseAt(r, "recent", 0, 0.1, 1)).toBeCloseTo(0.1, 6);
  expect(reuseAt(r, "recent", 0, 0.1, 2 * Math.SQRT2)).toBeCloseTo(0.25, 6);
  expect(reuseAt(r, "recent", 0, 0.1, 6)).toBeCloseTo(1 - 0.6 * 0.9 * 0.9, 6);
  expect(reuseAt(r, "firedRecent", 0, 0.1, 3)).toBeUndefined();
});
