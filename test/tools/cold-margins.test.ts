// Two margins for a linear predictor (tools/cold-margins.ts): the cheapest pair by hand, the
// cold group and the grouped scores by hand.
import { describe, expect, it } from "vitest";
import { coldMargins, coldNeurons, groupScores } from "../../src/tools/cold-margins.js";

const f64 = (a: number[]) => Float64Array.from(a);

describe("coldMargins", () => {
  // 5 hot and 3 cold positives, target 7/8: one positive may go unflagged
  const scores = {
    hotPositive: f64([-3, -2, -1, 0, 1]),
    coldPositive: f64([-2, 0, 2]),
    hotNegative: f64([0.2, 0.4, 0.6, 0.8]),
    coldNegative: f64([0.5, 1, 1.5]),
  };

  it("a cheap cold flag: the miss goes to the hot group", () => {
    // miss none cold: hot flags z < 0+ (4 positives, no negative) = 4, cold z < 2+ (3 + 3) = 6 → 4 + 6 = 10
    // miss one cold: hot flags z < 1+ (5 + 4) = 9, cold z < 0+ (2 + 0) = 2 → 9 + 2 = 11
    const m = coldMargins(scores, 7 / 8, 1)!;
    expect([m.hotMissed, m.coldMissed, m.cost]).toEqual([1, 0, 10]);
    expect(m.hot).toBeGreaterThan(0);
    expect(m.hot).toBeLessThan(0.2);
    expect(m.cold).toBeGreaterThan(2);
  });

  it("a dear cold flag: the miss goes to the cold group", () => {
    // cost 10: 4 + 60 = 64 against 9 + 20 = 29
    const m = coldMargins(scores, 7 / 8, 10)!;
    expect([m.hotMissed, m.coldMissed, m.cost]).toEqual([0, 1, 29]);
    expect(m.hot).toBeGreaterThan(1);
    expect(m.hot).toBeLessThan(1.001);
    expect(m.cold).toBeGreaterThan(0);
    expect(m.cold).toBeLessThan(0.5);
  });

  it("target 1 flags every positive; a group without positives leaves one margin", () => {
    const m = coldMargins(scores, 1, 10)!;
    expect([m.hotMissed, m.coldMissed]).toEqual([0, 0]);
    expect(coldMargins({ ...scores, coldPositive: f64([]) }, 0.9, 10)).toBeUndefined();
  });
});

describe("coldNeurons and groupScores", () => {
  // 3 tokens × 8 neurons; firings per neuron: 3 1 0 2 1 0 3 1
  const fired = [
    [1, 1, 0, 1, 0, 0, 1, 0],
    [1, 0, 0, 1, 1, 0, 1, 0],
    [1, 0, 0, 0, 0, 0, 1, 1],
  ];
  const labels = Uint8Array.from(fired, (row) => row.reduce((b, y, i) => b | (y << i), 0));

  it("the share that fired least, ties broken towards the higher index", () => {
    // ascending by firings: 5 (0), 2 (0), 7 (1), 4 (1), 1 (1), 3 (2), 6 (3), 0 (3)
    expect(Array.from(coldNeurons(labels, 3, 8, 0.5))).toEqual([0, 0, 1, 0, 1, 1, 0, 1]);
    expect(Array.from(coldNeurons(labels, 3, 8, 0.25))).toEqual([0, 0, 1, 0, 0, 1, 0, 0]);
  });

  it("z = −s/σ by group and label, sorted; negatives above their group's largest positive left out", () => {
    const cold = coldNeurons(labels, 3, 8, 0.5);
    const sigma = Float64Array.from([1, 2, 1, 1, 1, 1, 0.5, 1]);
    const s = Float32Array.from([
      [2, 1, -1, 3, 0.5, -2, 1, 0.25],
      [1, -4, 0, -1, -2, 0, 0.5, -6],
      [-1, 2, 4, 0, 1, -3, -1, 1],
    ].flat());
    const g = groupScores(s, sigma, labels, 3, 8, cold);
    // hot: 0, 1, 3, 6. Positives (token, neuron): (0,0) −2, (0,1) −0.5, (0,3) −3, (0,6) −2, (1,0) −1, (1,3) 1, (1,6) −1, (2,0) 1, (2,6) 2
    expect(Array.from(g.hotPositive)).toEqual([-3, -2, -2, -1, -1, -0.5, 1, 1, 2]);
    // hot negatives: (1,1) 2, (2,1) −1, (2,3) −0; none above 2
    expect(Array.from(g.hotNegative)).toEqual([-1, -0, 2]);
    // cold: 2, 4, 5, 7. Positives: (1,4) 2, (2,7) −1
    expect(Array.from(g.coldPositive)).toEqual([-1, 2]);
    // cold negatives: (0,2) 1, (0,4) −0.5, (0,5) 2, (0,7) −0.25, (1,2) −0, (1,5) −0, (1,7) 6 (left out), (2,2) −4, (2,4) −1, (2,5) 3 (left out)
    expect(Array.from(g.coldNegative)).toEqual([-4, -1, -0.5, -0.25, -0, -0, 1, 2]);
  });
});
