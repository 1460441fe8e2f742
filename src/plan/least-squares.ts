// Least squares with non-negative unknowns, for the planner's few-parameter fits (a matvec call's
// costs from the probe's shapes, a decoder's own costs from its calibration runs). Costs are never
// negative; a plain fit on a noisy machine can make a small one so. With k ≤ 12 unknowns (the
// fits here have 3 to 5) every subset of them is tried (2^k small solves), which is exact and
// short; a general solver (Lawson–Hanson) would be longer code than the problem.

/**
 * min ‖X·w − y‖² subject to w ≥ 0, X given by rows (one per observation, k columns). Columns that
 * are all zero get 0. Returns the weights and the residuals y − X·w.
 */
export function nonNegativeLeastSquares(X: readonly (readonly number[])[], y: readonly number[]): { w: number[]; residuals: number[] } {
  const k = X[0]?.length ?? 0;
  if (X.length !== y.length) throw new Error(`least squares: ${X.length} rows of X but ${y.length} values`);
  if (k > 12) throw new Error(`least squares: ${k} unknowns is too many to try every subset`);
  const residualsOf = (w: number[]) => y.map((v, n) => v - X[n]!.reduce((a, x, j) => a + x * w[j]!, 0));
  // columns scaled to unit length, so that unknowns of very different sizes (ns per byte, µs per
  // call) pivot alike; an all-zero column stays out of every subset
  const norm = [...Array(k).keys()].map((j) => Math.sqrt(X.reduce((a, r) => a + r[j]! * r[j]!, 0)));
  const Z = X.map((r) => r.map((x, j) => (norm[j]! > 0 ? x / norm[j]! : 0)));
  let best: { w: number[]; residuals: number[]; sse: number } | undefined;
  for (let mask = 0; mask < 1 << k; mask++) {
    const free = [...Array(k).keys()].filter((j) => mask & (1 << j));
    if (free.some((j) => norm[j] === 0)) continue;
    const w = new Array<number>(k).fill(0);
    if (free.length > 0) {
      // normal equations on the free columns
      const A = free.map((i) => [...free.map((j) => Z.reduce((a, r) => a + r[i]! * r[j]!, 0)), Z.reduce((a, r, n) => a + r[i]! * y[n]!, 0)]);
      const x = solve(A);
      if (!x || x.some((v) => v < 0)) continue;
      free.forEach((j, q) => (w[j] = x[q]! / norm[j]!));
    }
    const residuals = residualsOf(w);
    const sse = residuals.reduce((a, r) => a + r * r, 0);
    // ties (fits equal to 1e-12): the subset met first, in mask order
    if (!best || sse < best.sse * (1 - 1e-12)) best = { w, residuals, sse };
  }
  return { w: best!.w, residuals: best!.residuals };
}

/** Gaussian elimination with partial pivoting on an augmented k × (k + 1) matrix; undefined when singular (a pivot below 1e-12 of the largest coefficient). */
function solve(A: number[][]): number[] | undefined {
  const k = A.length;
  const scale = Math.max(1e-300, ...A.map((r) => Math.max(...r.slice(0, k).map(Math.abs))));
  for (let i = 0; i < k; i++) {
    let p = i;
    for (let r = i + 1; r < k; r++) if (Math.abs(A[r]![i]!) > Math.abs(A[p]![i]!)) p = r;
    [A[i], A[p]] = [A[p]!, A[i]!];
    if (Math.abs(A[i]![i]!) <= scale * 1e-12) return undefined;
    for (let r = i + 1; r < k; r++) {
      const f = A[r]![i]! / A[i]![i]!;
      for (let j = i; j <= k; j++) A[r]![j]! -= f * A[i]![j]!;
    }
  }
  const x = new Array<number>(k).fill(0);
  for (let i = k - 1; i >= 0; i--) {
    let v = A[i]![k]!;
    for (let j = i + 1; j < k; j++) v -= A[i]![j]! * x[j]!;
    x[i] = v / A[i]![i]!;
  }
  return x;
}
