import { describe, expect, it } from "vitest";
import { nonNegativeLeastSquares } from "../../src/plan/least-squares.js";

describe("nonNegativeLeastSquares", () => {
  it("is the plain least-squares fit when that is non-negative: y = 2·a + 3·b recovered exactly, columns of very different sizes", () => {
    const X = [
      [1e6, 1],
      [2e6, 0],
      [3e6, 5],
      [0, 2],
    ];
    const y = X.map(([a, b]) => 2e-6 * a! + 3 * b!);
    const { w, residuals } = nonNegativeLeastSquares(X, y);
    expect(w[0]).toBeCloseTo(2e-6, 15);
    expect(w[1]).toBeCloseTo(3, 10);
    for (const r of residuals) expect(Math.abs(r)).toBeLessThan(1e-9);
  });

  it("holds an unknown the plain fit makes negative at 0 and refits the rest (worked by hand)", () => {
    // plain: [[2,1],[1,2]]·w = [1,−1] gives w = (1, −1); with w₂ = 0, (1 − w₁)² + 1 + w₁² is least at w₁ = ½
    const { w, residuals } = nonNegativeLeastSquares(
      [
        [1, 0],
        [0, 1],
        [1, 1],
      ],
      [1, -1, 0],
    );
    expect(w).toEqual([0.5, 0]);
    expect(residuals).toEqual([0.5, -1, -0.5]);
  });

  it("gives an all-zero column 0 and refuses rows and values that do not match", () => {
    const { w } = nonNegativeLeastSquares(
      [
        [0, 1],
        [0, 2],
      ],
      [2, 4],
    );
    expect(w[0]).toBe(0);
    expect(w[1]).toBeCloseTo(2, 12);
    expect(() => nonNegativeLeastSquares([[1]], [1, 2])).toThrow(/1 rows of X but 2 values/);
  });
});
