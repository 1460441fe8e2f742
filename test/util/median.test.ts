// util/median: the median the probe and the calibration take over passes and rounds, against
// hand-computed cases.
import { describe, expect, it } from "vitest";
import { median } from "../../src/util/median.js";

describe("median", () => {
  it("the middle of an odd count, the upper middle of an even one, the input left in its order; none of no values", () => {
    const odd = [3, 1, 2];
    expect(median(odd)).toBe(2);
    expect(odd).toEqual([3, 1, 2]);
    expect(median([4, 1, 3, 2])).toBe(3);
    expect(median([10, 2])).toBe(10);
    expect(median([7])).toBe(7);
    expect(median([-1, 5, 100, 0, 3])).toBe(3); // numeric order, not string order
    expect(() => median([])).toThrow(/median of no values/);
  });
});
