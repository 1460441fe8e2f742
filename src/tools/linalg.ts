// The little linear algebra the predictor fit needs: F32 matrices in native memory multiplied by
// the native matmul (OpenBLAS when the build found it), small symmetric eigenproblems and
// Gram–Schmidt in JS doubles. Written here because the sizes are small (q ≤ ~600) or the
// heavy part is one native call; a LAPACK binding would be a new native dependency for this.
import { GGMLType, native } from "../native.js";

/** A rows × cols F32 matrix, row-major, in a native buffer this object owns. */
export class Mat {
  readonly buf: number;
  constructor(
    readonly rows: number,
    readonly cols: number,
  ) {
    this.buf = native().alloc(Math.max(4, rows * cols * 4));
  }
  get data(): Float32Array {
    return native().viewF32(this.buf, 0, this.rows * this.cols);
  }
  /** Frees the buffer and its pages at once (the fit's loops are synchronous: views of it cannot be collected before they end). */
  free(): void {
    native().discard(this.buf);
  }
  static from(rows: number, cols: number, fill: (data: Float32Array) => void): Mat {
    const m = new Mat(rows, cols);
    fill(m.data);
    return m;
  }
}

/** X·Wᵀ: (X.rows × W.rows), entry [t][r] = W[r]·X[t] (one native matmul; X's rows are the "tokens"). */
export function mulT(X: Mat, W: Mat): Mat {
  if (X.cols !== W.cols) throw new RangeError(`mulT: X has ${X.cols} columns, W ${W.cols}`);
  const Y = new Mat(X.rows, W.rows);
  native().matmul(GGMLType.F32, W.buf, 0, W.rows, W.cols, X.buf, 0, X.rows, Y.buf, 0);
  return Y;
}

export function transpose(A: Mat): Mat {
  const T = new Mat(A.cols, A.rows);
  const a = A.data;
  const t = T.data;
  const R = A.rows;
  const C = A.cols;
  // blocked so both sides stay in cache
  const B = 64;
  for (let r0 = 0; r0 < R; r0 += B)
    for (let c0 = 0; c0 < C; c0 += B)
      for (let r = r0; r < Math.min(R, r0 + B); r++) for (let c = c0; c < Math.min(C, c0 + B); c++) t[c * R + r] = a[r * C + c]!;
  return T;
}

/**
 * Rows of Y made orthonormal, in order (Gram–Schmidt in doubles, each row orthogonalised twice:
 * power iterations make the rows nearly parallel, where a Cholesky-based QR breaks down). A row
 * that vanishes against the ones before it is replaced by a seeded pseudo-random direction.
 */
export function orthonormalizeRows(Y: Mat): Mat {
  const q = Y.rows;
  const F = Y.cols;
  const src = Y.data;
  const rows: Float64Array[] = [];
  let seed = 0x9e3779b9;
  const noise = () => {
    seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
    return seed / 2 ** 32 - 0.5;
  };
  for (let i = 0; i < q; i++) {
    const v = Float64Array.from(src.subarray(i * F, (i + 1) * F));
    let norm0 = 0;
    for (let k = 0; k < F; k++) norm0 += v[k]! * v[k]!;
    for (let attempt = 0; ; attempt++) {
      for (let pass = 0; pass < 2; pass++) {
        for (const u of rows) {
          let d = 0;
          for (let k = 0; k < F; k++) d += u[k]! * v[k]!;
          for (let k = 0; k < F; k++) v[k] -= d * u[k]!;
        }
      }
      let norm = 0;
      for (let k = 0; k < F; k++) norm += v[k]! * v[k]!;
      if (norm > 1e-20 * norm0 && norm > 0) {
        const inv = 1 / Math.sqrt(norm);
        for (let k = 0; k < F; k++) v[k] *= inv;
        break;
      }
      if (attempt > 3) throw new Error(`orthonormalizeRows: cannot complete a basis of ${q} rows in ${F} dimensions`);
      for (let k = 0; k < F; k++) v[k] = noise();
      norm0 = F / 12;
    }
    rows.push(v);
  }
  return Mat.from(q, F, (d) => rows.forEach((r, i) => d.set(r, i * F)));
}

/**
 * Eigen-decomposition of a symmetric n × n matrix (cyclic Jacobi, doubles): eigenvalues in
 * descending order and their unit eigenvectors as rows (vectors[k·n + j] = component j of the k-th).
 */
export function symmetricEigen(A: Float64Array, n: number): { values: Float64Array; vectors: Float64Array } {
  const a = Float64Array.from(A);
  const v = new Float64Array(n * n);
  for (let i = 0; i < n; i++) v[i * n + i] = 1;
  let norm = 0;
  for (let i = 0; i < n * n; i++) norm += a[i]! * a[i]!;
  for (let sweep = 0; sweep < 50; sweep++) {
    let off = 0;
    for (let p = 0; p < n; p++) for (let q = p + 1; q < n; q++) off += a[p * n + q]! * a[p * n + q]!;
    if (off <= 1e-26 * norm) break;
    for (let p = 0; p < n; p++)
      for (let q = p + 1; q < n; q++) {
        const apq = a[p * n + q]!;
        if (apq === 0) continue;
        const theta = (a[q * n + q]! - a[p * n + p]!) / (2 * apq);
        const t = (theta >= 0 ? 1 : -1) / (Math.abs(theta) + Math.sqrt(theta * theta + 1));
        const c = 1 / Math.sqrt(t * t + 1);
        const s = t * c;
        for (let k = 0; k < n; k++) {
          const akp = a[k * n + p]!;
          const akq = a[k * n + q]!;
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (let k = 0; k < n; k++) {
          const apk = a[p * n + k]!;
          const aqk = a[q * n + k]!;
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
        for (let k = 0; k < n; k++) {
          const vkp = v[k * n + p]!;
          const vkq = v[k * n + q]!;
          v[k * n + p] = c * vkp - s * vkq;
          v[k * n + q] = s * vkp + c * vkq;
        }
      }
  }
  const order = Array.from({ length: n }, (_, i) => i).sort((i, j) => a[j * n + j]! - a[i * n + i]! || i - j);
  const values = Float64Array.from(order, (i) => a[i * n + i]!);
  const vectors = new Float64Array(n * n);
  order.forEach((i, k) => {
    for (let j = 0; j < n; j++) vectors[k * n + j] = v[j * n + i]!;
  });
  return { values, vectors };
}
