// The native helpers of the sparse decode path, each against an independent plain-TypeScript
// reference (never against another native call):
//   - matvecRows / axpyRows with the optional rowStride (neuron-cache slots: rows with gaps),
//   - copyBatch (many small copies, all bounds-checked before any byte moves),
//   - residentBytes (mincore residency of a buffer).
// Conventions follow scalar-reference.test.ts / simd.test.ts: weights are quantised natively
// (makeWeights) and read back as raw bytes, the f64 references dequantise those bytes in TS
// (dequantRowTS) and quantise x the way the kernel does (effectiveX: Q8_0 per 32-block for the
// quantised types, fp16 rounding for F16), and SIMD levels are switched with setSimd and restored.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  N, GGMLType, bufF32, bufI32, bufBytes, readF32, freeAll, rng, randF32, rowBytes, dequantRowTS, effectiveX,
  dot64, expectClose, bitsEqual, makeWeights, supportedLevels,
  withLevel,
} from "./helpers.js";
import type { SimdLevel } from "../../src/native.js";

const TYPES = [GGMLType.F32, GGMLType.F16, GGMLType.Q8_0, GGMLType.Q4_0] as const;
const NAME: Record<number, string> = { 0: "F32", 1: "F16", 2: "Q4_0", 8: "Q8_0" };
const LEVELS = supportedLevels();
const PAGE = 4096;

// Same dot-product tolerance as scalar-reference / simd tests: the kernels accumulate in f32
// (any lane order, fma or not) what the reference sums in f64 from the same operands, so the
// difference is f32 rounding of partial sums: relative 1e-5 of Σ|w·x| for cols <= ~1024.
const DOT_TOL = 1e-5;
// axpyRows: per output element nIdx running-sum roundings plus at most a couple of roundings per
// term (coef·d·q), each <= 2^-24 of |out0| + Σ|coef·w| (the `mag` below). For the 5-row case of
// scalar-reference this is the 1e-6 used there; with nIdx ≈ 300 the first-order bound grows
// linearly, so take (nIdx + 4)·2^-24 (still ~1e4 x smaller than any wrong row/scale error).
const axpyTol = (nIdx: number) => Math.max(1e-6, (nIdx + 4) * 2 ** -24);

let simd0: SimdLevel;
let threads0: number;
beforeAll(() => {
  simd0 = N.getSimd();
  threads0 = N.getThreads();
});
afterAll(() => {
  freeAll();
  N.setSimd(simd0);
  N.setThreads(threads0);
});


function withThreads<T>(n: number, f: () => T): T {
  const prev = N.getThreads();
  N.setThreads(n);
  try {
    return f();
  } finally {
    N.setThreads(prev);
  }
}

const roundUp = (v: number, m: number) => Math.ceil(v / m) * m;

/** Deterministic random bytes (TS generator). */
function randomBytes(n: number, seed: number): Uint8Array {
  const r = rng(seed);
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (r() * 256) | 0;
  return out;
}

/** A random subset of `n` row ids of [0, rows) in shuffled order (plus `dups` repeated ids). */
function randomIds(rows: number, n: number, seed: number, dups = 0): number[] {
  const r = rng(seed);
  const all = [...Array(rows).keys()];
  for (let i = rows - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [all[i], all[j]] = [all[j]!, all[i]!];
  }
  const ids = all.slice(0, n);
  for (let d = 0; d < dups; d++) ids.splice(Math.floor(r() * ids.length), 0, ids[Math.floor(r() * ids.length)]!);
  return ids;
}

/**
 * Copy the packed rows into a new buffer laid out as the neuron cache does: row r at
 * wOff + r·stride, garbage (random bytes: NaN/Inf patterns for float types) everywhere else
 * (before wOff, in every gap, after the last row). `size` defaults to wOff + rows·stride.
 */
function stridedWeights(t: number, packed: Uint8Array, rows: number, cols: number, wOff: number, stride: number, seed: number, size = wOff + rows * stride): number {
  const rb = rowBytes(t, cols);
  const id = bufBytes(size);
  const v = N.viewU8(id, 0, size);
  v.set(randomBytes(size, seed));
  for (let r = 0; r < rows; r++) v.set(packed.subarray(r * rb, (r + 1) * rb), wOff + r * stride);
  return id;
}

/** Strides used throughout: the packed row plus 200 bytes, rounded up to 64. */
const strideFor = (t: number, cols: number) => roundUp(rowBytes(t, cols) + 200, 64);

/** f64 reference of y[k] = W[ids[k],:] · x from the raw packed bytes, and Σ|terms| per row. */
function refMatvecRows(t: number, packed: Uint8Array, cols: number, xv: Float32Array, ids: number[]) {
  const xe = effectiveX(t, xv);
  const rb = rowBytes(t, cols);
  const v: number[] = [], mag: number[] = [];
  for (const r of ids) {
    const d = dot64(dequantRowTS(t, packed.subarray(r * rb, (r + 1) * rb), cols), xe);
    v.push(d.v);
    mag.push(d.mag);
  }
  return { v, mag };
}

/** f64 reference of out0 + Σ_k coef[k]·W[ids[k],:] from the raw packed bytes, and |out0| + Σ|terms|. */
function refAxpyRows(t: number, packed: Uint8Array, cols: number, ids: number[], coefs: Float32Array, out0: Float32Array) {
  const rb = rowBytes(t, cols);
  const want = Float64Array.from(out0);
  const mag = Float64Array.from(out0, Math.abs);
  ids.forEach((r, k) => {
    const w = dequantRowTS(t, packed.subarray(r * rb, (r + 1) * rb), cols);
    const c = coefs[k]!;
    for (let i = 0; i < cols; i++) {
      want[i]! += c * w[i]!;
      mag[i]! += Math.abs(c * w[i]!);
    }
  });
  return { want, mag };
}

// Columns as simd.test.ts's "big" case: SIMD tails for F types, 27 blocks (8-block groups,
// pair, odd block) for Q types; <= 1024 so DOT_TOL applies.
const matvecCols = (t: number) => (t === GGMLType.F32 || t === GGMLType.F16 ? 32 * 27 + 5 : 32 * 27);

describe.each(LEVELS)("matvecRows with rowStride on %s", (level) => {
  for (const t of TYPES) {
    it(`${NAME[t]}: strided rows, wOff > 0, shuffled subset == f64 reference; == packed bit-for-bit`, () => {
      // reference: f64 dot of dequantRowTS(row bytes) with effectiveX(x) (x as the kernel quantises it)
      const rows = 97, cols = matvecCols(t), rb = rowBytes(t, cols);
      const stride = strideFor(t, cols), wOff = 320;
      const { id: packedId, bytes } = makeWeights(t, rows, cols, 1000 + t);
      const w = stridedWeights(t, bytes, rows, cols, wOff, stride, 1100 + t);
      const ids = randomIds(rows, 61, 1200 + t, 3);
      const xv = randF32(cols, 1300 + t);
      const x = bufF32(xv), idx = bufI32(ids);
      const ref = refMatvecRows(t, bytes, cols, xv, ids);
      const run = (wid: number, off: number, s: number | undefined, threads: number) =>
        withThreads(threads, () =>
          withLevel(level, () => {
            const y = bufBytes(ids.length * 4);
            N.matvecRows(t, wid, off, rows, cols, idx, 0, ids.length, x, 0, y, 0, s);
            return readF32(y, ids.length);
          }),
        );
      for (const threads of [1, 2]) {
        const strided = run(w, wOff, stride, threads);
        expectClose(strided, ref.v, ref.mag, DOT_TOL, `matvecRows ${NAME[t]} ${level} strided threads=${threads}`);
        // same row contents packed (no rowStride, and rowStride = packed row size) -> same bits
        bitsEqual(strided, run(packedId, 0, undefined, threads), "strided vs packed");
        bitsEqual(strided, run(packedId, 0, rb, threads), "strided vs rowStride = rowBytes");
      }
    });
  }
});

describe.each(LEVELS)("matmul with rowStride (neuron bundles in staging) on %s", (level) => {
  for (const t of TYPES) {
    it(`${NAME[t]}: strided rows, 5 tokens == f64 reference per token; == packed bit-for-bit; threads 1 == 2`, () => {
      const rows = 70, cols = matvecCols(t), rb = rowBytes(t, cols), nTok = 5;
      const stride = strideFor(t, cols), wOff = 256;
      const { id: packedId, bytes } = makeWeights(t, rows, cols, 5000 + t);
      const w = stridedWeights(t, bytes, rows, cols, wOff, stride, 5100 + t);
      const xs = Array.from({ length: nTok }, (_, i) => randF32(cols, 5200 + t + i));
      const x = bufF32(Float32Array.from(xs.flatMap((v) => [...v])));
      const ids = [...Array(rows).keys()];
      const run = (wid: number, off: number, s: number | undefined, threads: number) =>
        withThreads(threads, () =>
          withLevel(level, () => {
            const y = bufBytes(nTok * rows * 4);
            N.matmul(t, wid, off, rows, cols, x, 0, nTok, y, 0, s);
            return readF32(y, nTok * rows);
          }),
        );
      const got = run(w, wOff, stride, 1);
      for (let i = 0; i < nTok; i++) {
        const ref = refMatvecRows(t, bytes, cols, xs[i]!, ids);
        expectClose(got.subarray(i * rows, (i + 1) * rows), ref.v, ref.mag, DOT_TOL, `matmul ${NAME[t]} ${level} token ${i}`);
      }
      bitsEqual(got, run(w, wOff, stride, 2), "threads 1 vs 2");
      bitsEqual(got, run(packedId, 0, undefined, 1), "strided vs packed");
      bitsEqual(got, run(packedId, 0, rb, 2), "strided vs rowStride = rowBytes");
      expect(() => N.matmul(t, w, wOff, rows, cols, x, 0, nTok, bufBytes(nTok * rows * 4), 0, rb - 1)).toThrow(/matmul: rowStride \d+ is less than a row/);
    });
  }
});

/**
 * f64 reference for matmulTAcc: out0 + Σ_n heff[t][n]·W[n][c] with W dequantised from its bytes.
 * Q4_0/Q8_0: h as the kernel quantises it (Q8_0 per 32, zeros past `rows`); the kernel also
 * requantises each 32-row group of a column to int8 with step s = amax/127, so each term errs by
 * at most |heff|·s/2 and `bound` (per output) = Σ_n |heff[t][n]|·s_G(c)/2 plus f32 rounding of
 * the sum. F32/F16: h as it is, f32 FMAs: the bound is the rounding of the running sum.
 */
function refMatmulTAcc(t: number, packed: Uint8Array, rows: number, cols: number, h: Float32Array[], out0: Float32Array[]) {
  const rb = rowBytes(t, cols);
  const W = Array.from({ length: rows }, (_, n) => dequantRowTS(t, packed.subarray(n * rb, (n + 1) * rb), cols));
  const n32 = Math.ceil(rows / 32) * 32;
  return h.map((ht, i) => {
    const padded = new Float32Array(n32);
    padded.set(ht.subarray(0, rows));
    const quantised = t === GGMLType.Q4_0 || t === GGMLType.Q8_0;
    const he = quantised ? effectiveX(GGMLType.Q8_0, padded) : Float64Array.from(padded);
    const want = Float64Array.from(out0[i]!), bound = new Float64Array(cols), mag = Float64Array.from(out0[i]!, Math.abs);
    for (let c = 0; c < cols; c++) {
      for (let g = 0; g < n32; g += 32) {
        let amax = 0;
        for (let n = g; n < Math.min(rows, g + 32); n++) amax = Math.max(amax, Math.abs(W[n]![c]!));
        const step = quantised ? amax / 127 : 0;
        for (let n = g; n < Math.min(rows, g + 32); n++) {
          want[c]! += he[n]! * W[n]![c]!;
          mag[c]! += Math.abs(he[n]! * W[n]![c]!);
          bound[c]! += (Math.abs(he[n]!) * step) / 2;
        }
      }
      bound[c]! += ((quantised ? n32 / 32 : rows) + 4) * 2 ** -24 * (mag[c]! + bound[c]!);
    }
    return { want, bound };
  });
}

describe("matmulTAcc (the prefill's down projection: rows are the reduction)", () => {
  for (const t of TYPES) {
    it(`${NAME[t]}: 150 strided rows x 5 tokens == f64 reference within the bound (Q types: of the requantisation); the same bits at every SIMD level, threads 1 and 2, and split at 64 rows`, () => {
      const rows = 150, cols = t === GGMLType.F32 || t === GGMLType.F16 ? 1000 : 1024, nTok = 5, ldh = 160, wOff = 64;
      const stride = strideFor(t, cols);
      const { bytes } = makeWeights(t, rows, cols, 7000 + t);
      const w = stridedWeights(t, bytes, rows, cols, wOff, stride, 7100 + t);
      // h: ReLU-like (a third zeros), a few large values
      const h = Array.from({ length: nTok }, (_, i) => randF32(ldh, 7200 + t + i).map((v, j) => (j % 3 === 0 ? 0 : j % 17 === 0 ? 8 * v : v)));
      const out0 = Array.from({ length: nTok }, (_, i) => randF32(cols, 7300 + t + i));
      const hb = bufF32(Float32Array.from(h.flatMap((v) => [...v])));
      const run = (level: SimdLevel, threads: number, split?: number) =>
        withThreads(threads, () =>
          withLevel(level, () => {
            const out = bufF32(Float32Array.from(out0.flatMap((v) => [...v])));
            if (split === undefined) N.matmulTAcc(t, w, wOff, rows, cols, hb, 0, ldh, nTok, out, 0, stride);
            else {
              N.matmulTAcc(t, w, wOff, split, cols, hb, 0, ldh, nTok, out, 0, stride);
              N.matmulTAcc(t, w, wOff + split * stride, rows - split, cols, hb, split * 4, ldh, nTok, out, 0, stride);
            }
            return readF32(out, nTok * cols);
          }),
        );
      const ref = refMatmulTAcc(t, bytes, rows, cols, h, out0);
      const s1 = run("scalar", 1);
      for (let i = 0; i < nTok; i++) {
        const got = s1.subarray(i * cols, (i + 1) * cols);
        const { want, bound } = ref[i]!;
        let worst = 0, usedBound = false;
        for (let c = 0; c < cols; c++) {
          const err = Math.abs(got[c]! - want[c]!);
          if (err > bound[c]!) throw new Error(`matmulTAcc ${NAME[t]} token ${i} col ${c}: ${got[c]} vs ${want[c]} (error ${err} > bound ${bound[c]})`);
          worst = Math.max(worst, err / bound[c]!);
          if (err > 1e-4 * bound[c]!) usedBound = true;
        }
        expect(worst).toBeLessThanOrEqual(1);
        // Q types: the requantisation is really there (not an f32 GEMM)
        if (t === GGMLType.Q4_0 || t === GGMLType.Q8_0) expect(usedBound).toBe(true);
      }
      for (const level of LEVELS) {
        bitsEqual(run(level, 1), s1, `${level} 1 thread vs scalar`);
        bitsEqual(run(level, 2), s1, `${level} 2 threads vs scalar`);
        bitsEqual(run(level, 2, 64), s1, `${level} rows split at 64 vs one call`);
      }
      expect(() => N.matmulTAcc(t, w, wOff, rows, cols, hb, 0, 100, nTok, bufBytes(nTok * cols * 4), 0, stride)).toThrow(/matmulTAcc: ldh 100 is less than rows 150/);
    });
  }
});

describe("matmulSel / matmulTAccSel (rows picked from the cache and the staging)", () => {
  for (const t of TYPES) {
    it(`${NAME[t]}: 70 rows picked from two strided sources == matmul / matmulTAcc over the same rows laid out packed, bit for bit; a pick out of range is named`, () => {
      const rows = 70, cols = t === GGMLType.F32 || t === GGMLType.F16 ? 96 : 128, nTok = 9, rb = rowBytes(t, cols);
      const { bytes } = makeWeights(t, rows, cols, 8000 + t);
      // source a: rows 0..39 at stride sa, in reverse order of slots; b: rows 40..69 at stride sb
      const sa = strideFor(t, cols), sb = strideFor(t, cols) + 4096;
      const aRows = 40, bRows = 30;
      const a = bufBytes(64 + aRows * sa), b = bufBytes(128 + bRows * sb);
      const va = N.viewU8(a, 0, 64 + aRows * sa), vb = N.viewU8(b, 0, 128 + bRows * sb);
      const sel: number[] = [];
      for (let r = 0; r < rows; r++) {
        if (r % 3 !== 2 && r < 60) {
          const slot = aRows - 1 - sel.filter((v) => v >= 0).length;
          va.set(bytes.subarray(r * rb, (r + 1) * rb), 64 + slot * sa);
          sel.push(slot);
        } else {
          const k = sel.filter((v) => v < 0).length;
          vb.set(bytes.subarray(r * rb, (r + 1) * rb), 128 + k * sb);
          sel.push(-1 - k);
        }
      }
      const packed = bufBytes(rows * rb);
      N.viewU8(packed, 0, rows * rb).set(bytes);
      const selBuf = bufI32(sel);
      const X = bufF32(randF32(nTok * cols, 8100 + t));
      process.env.NEURONPIPE_NO_BLAS = "1"; // matmul of F32 otherwise goes through OpenBLAS
      try {
        const want = bufBytes(nTok * rows * 4), got = bufBytes(nTok * rows * 4);
        N.matmul(t, packed, 0, rows, cols, X, 0, nTok, want, 0);
        N.matmulSel(t, a, 64, sa, aRows, b, 128, sb, bRows, selBuf, 0, rows, cols, X, 0, nTok, got, 0);
        bitsEqual(readF32(got, nTok * rows), readF32(want, nTok * rows), "matmulSel vs matmul");
      } finally {
        delete process.env.NEURONPIPE_NO_BLAS;
      }
      const H = bufF32(randF32(nTok * rows, 8200 + t)), out0 = randF32(nTok * cols, 8300 + t);
      const o1 = bufF32(out0), o2 = bufF32(out0);
      N.matmulTAcc(t, packed, 0, rows, cols, H, 0, rows, nTok, o1, 0);
      N.matmulTAccSel(t, a, 64, sa, aRows, b, 128, sb, bRows, selBuf, 0, rows, cols, H, 0, rows, nTok, o2, 0);
      bitsEqual(readF32(o2, nTok * cols), readF32(o1, nTok * cols), "matmulTAccSel vs matmulTAcc");
      const bad = bufI32([0, -1 - bRows]);
      expect(() => N.matmulSel(t, a, 64, sa, aRows, b, 128, sb, bRows, bad, 0, 2, cols, X, 0, 1, bufBytes(8), 0)).toThrow(/matmulSel: sel\[1\] = -31: row 30 of b out of range \(rows 30\)/);
      expect(() => N.matmulTAccSel(t, a, 64, sa, aRows, b, 128, sb, bRows, bufI32([aRows]), 0, 1, cols, H, 0, 1, 1, bufBytes(cols * 4), 0)).toThrow(/matmulTAccSel: sel\[0\] = 40: row 40 of a out of range \(rows 40\)/);
    });
  }
});

describe.each(LEVELS)("axpyRows with rowStride on %s", (level) => {
  for (const t of TYPES) {
    for (const cols of [256, 4096]) {
      it(`${NAME[t]} cols ${cols}, nIdx 360: strided == f64 reference, == packed, threads 1 == 2 bit-for-bit`, () => {
        // reference: f64 out0 + Σ coef·dequantRowTS(row bytes), k in the given order
        const rows = 512, rb = rowBytes(t, cols), stride = strideFor(t, cols), wOff = 192;
        const { id: packedId, bytes } = makeWeights(t, rows, cols, 2000 + t + cols);
        const w = stridedWeights(t, bytes, rows, cols, wOff, stride, 2100 + t + cols);
        // 360 ids (3 repeated): enough work that 2 threads split the columns for every type
        // (the pool takes a second thread per 64 KiB of strided rows: Q4_0 cols 256 needs > 341)
        const ids = randomIds(rows, 357, 2200 + t + cols, 3);
        const coefs = randF32(ids.length, 2300 + t + cols);
        const out0 = randF32(cols, 2400 + t + cols);
        const idx = bufI32(ids), coef = bufF32(coefs);
        const { want, mag } = refAxpyRows(t, bytes, cols, ids, coefs, out0);
        const run = (wid: number, off: number, s: number | undefined, threads: number) =>
          withThreads(threads, () =>
            withLevel(level, () => {
              const out = bufF32(out0);
              N.axpyRows(t, wid, off, rows, cols, idx, 0, ids.length, coef, 0, out, 0, s);
              return readF32(out, cols);
            }),
          );
        const jobs0 = N.poolStats().jobs;
        const s1 = run(w, wOff, stride, 1);
        expect(N.poolStats().jobs).toBe(jobs0); // one thread: nothing dispatched
        const s2 = run(w, wOff, stride, 2);
        expect(N.poolStats().jobs).toBeGreaterThan(jobs0); // two threads: the columns were split
        expectClose(s1, want, mag, axpyTol(ids.length), `axpyRows ${NAME[t]} ${level} cols ${cols}`);
        bitsEqual(s1, s2, "threads 1 vs 2");
        bitsEqual(s1, run(packedId, 0, undefined, 1), "strided vs packed (1 thread)");
        bitsEqual(s1, run(packedId, 0, undefined, 2), "strided vs packed (2 threads)");
        bitsEqual(s1, run(packedId, 0, rb, 2), "strided vs rowStride = rowBytes");
      });
    }
  }
});

describe("rowStride argument checks", () => {
  // reference: the byte arithmetic of the layout, computed here: need = (rows-1)·stride + rowBytes
  for (const fn of ["matvecRows", "axpyRows"] as const) {
    const call = (t: number, w: number, wOff: number, rows: number, cols: number, s: number, ids: number[]) => {
      const idx = bufI32(ids), x = bufF32(randF32(cols, 5)), y = bufBytes(Math.max(cols, ids.length) * 4);
      if (fn === "matvecRows") N.matvecRows(t, w, wOff, rows, cols, idx, 0, ids.length, x, 0, y, 0, s);
      else N.axpyRows(t, w, wOff, rows, cols, idx, 0, ids.length, x, 0, y, 0, s);
      return readF32(y, fn === "matvecRows" ? ids.length : cols);
    };

    it(`${fn}: stride smaller than a row (incl. 0), negative or fractional is refused naming rowStride`, () => {
      for (const t of TYPES) {
        const cols = 64, rb = rowBytes(t, cols), w = bufBytes(4 * 8 * rb);
        for (const s of [0, rb - 4, 1])
          expect(() => call(t, w, 0, 4, cols, s, [0])).toThrow(new RegExp(`^${fn}: rowStride ${s} .*row`));
        expect(() => call(t, w, 0, 4, cols, rb, [0])).not.toThrow(); // exactly one row = packed: accepted
        expect(() => call(t, w, 0, 4, cols, -64, [0])).toThrow(new RegExp(`^${fn}: rowStride`));
        expect(() => call(t, w, 0, 4, cols, rb + 0.5, [0])).toThrow(new RegExp(`^${fn}: rowStride`));
      }
    });

    it(`${fn}: stride not a multiple of the element size (F32: 4, F16: 2) is refused naming rowStride`, () => {
      const cols = 64;
      for (const [t, bad] of [[GGMLType.F32, [1, 2, 3]], [GGMLType.F16, [1, 3]]] as const) {
        const rb = rowBytes(t, cols), w = bufBytes(4 * (rb + 64));
        for (const d of bad) {
          const e = (() => { try { call(t, w, 0, 4, cols, rb + d, [0, 3]); } catch (err) { return err; } })();
          expect(e).toBeInstanceOf(RangeError);
          expect((e as Error).message).toMatch(new RegExp(`^${fn}: rowStride ${rb + d} is not a multiple`));
        }
      }
    });

    it(`${fn}: strided span past the buffer end names the weight buffer; exactly (rows-1)·stride + rowBytes fits`, () => {
      for (const t of TYPES) {
        const rows = 9, cols = 96, rb = rowBytes(t, cols), stride = strideFor(t, cols), wOff = 128;
        const need = (rows - 1) * stride + rb; // the last row needs only its own bytes
        const { bytes } = makeWeights(t, rows, cols, 3000 + t);
        const short = stridedWeights(t, bytes.subarray(0, (rows - 1) * rb), rows - 1, cols, wOff, stride, 3100, wOff + need - 1);
        let err: unknown;
        try { call(t, short, wOff, rows, cols, stride, [0]); } catch (e) { err = e; }
        expect(err).toBeInstanceOf(RangeError);
        expect((err as Error).message).toBe(
          `${fn}: weight buffer ${short} too small: need ${need} bytes at offset ${wOff}, have ${wOff + need - 1}`,
        );
        // exact fit: the last row is the last rb bytes of the buffer, and it is used correctly
        const exact = stridedWeights(t, bytes.subarray(0, (rows - 1) * rb), rows - 1, cols, wOff, stride, 3200, wOff + need);
        N.viewU8(exact, wOff + (rows - 1) * stride, rb).set(bytes.subarray((rows - 1) * rb, rows * rb));
        if (fn === "matvecRows") {
          const xv = randF32(cols, 3300 + t);
          const ids = [rows - 1, 0, rows - 1];
          const y = bufBytes(ids.length * 4);
          N.matvecRows(t, exact, wOff, rows, cols, bufI32(ids), 0, ids.length, bufF32(xv), 0, y, 0, stride);
          const ref = refMatvecRows(t, bytes, cols, xv, ids);
          expectClose(readF32(y, ids.length), ref.v, ref.mag, DOT_TOL, `exact-fit matvecRows ${NAME[t]}`);
        } else {
          const ids = [rows - 1, 2], coefs = randF32(2, 3400 + t), out0 = randF32(cols, 3500 + t);
          const out = bufF32(out0);
          N.axpyRows(t, exact, wOff, rows, cols, bufI32(ids), 0, ids.length, bufF32(coefs), 0, out, 0, stride);
          const { want, mag } = refAxpyRows(t, bytes, cols, ids, coefs, out0);
          expectClose(readF32(out, cols), want, mag, axpyTol(ids.length), `exact-fit axpyRows ${NAME[t]}`);
        }
      }
    });
  }

  it("Q types have no element alignment: an odd stride >= a row is accepted and reads the right bytes", () => {
    // reference: f64 dot / axpy of dequantRowTS(row bytes), rows placed at odd byte offsets
    for (const level of LEVELS)
      for (const t of [GGMLType.Q8_0, GGMLType.Q4_0]) {
        const rows = 11, cols = 32 * 9, stride = rowBytes(t, cols) + 37, wOff = 3;
        const { bytes } = makeWeights(t, rows, cols, 3600 + t);
        const w = stridedWeights(t, bytes, rows, cols, wOff, stride, 3700 + t);
        const ids = [10, 3, 7, 0];
        const xv = randF32(cols, 3800 + t);
        const y = bufBytes(ids.length * 4);
        withLevel(level, () => N.matvecRows(t, w, wOff, rows, cols, bufI32(ids), 0, ids.length, bufF32(xv), 0, y, 0, stride));
        const ref = refMatvecRows(t, bytes, cols, xv, ids);
        expectClose(readF32(y, ids.length), ref.v, ref.mag, DOT_TOL, `odd stride matvecRows ${NAME[t]} ${level}`);
        const coefs = randF32(ids.length, 3900 + t), out0 = randF32(cols, 4000 + t), out = bufF32(out0);
        withLevel(level, () => N.axpyRows(t, w, wOff, rows, cols, bufI32(ids), 0, ids.length, bufF32(coefs), 0, out, 0, stride));
        const ax = refAxpyRows(t, bytes, cols, ids, coefs, out0);
        expectClose(readF32(out, cols), ax.want, ax.mag, axpyTol(ids.length), `odd stride axpyRows ${NAME[t]} ${level}`);
      }
  });
});

describe("copyBatch", () => {
  const SIZE = 1 << 16;
  /** TS reference: apply the triples in order with Uint8Array.set on copies of the bytes. */
  function refCopy(dst: Uint8Array, src: Uint8Array, req: Float64Array): Uint8Array {
    const out = Uint8Array.from(dst);
    for (let i = 0; i < req.length; i += 3) out.set(src.subarray(req[i + 1]!, req[i + 1]! + req[i + 2]!), req[i]!);
    return out;
  }
  function filled(n: number, seed: number): { id: number; bytes: Uint8Array } {
    const bytes = randomBytes(n, seed);
    const id = bufBytes(n);
    N.viewU8(id, 0, n).set(bytes);
    return { id, bytes };
  }
  const snapshot = (id: number, n: number) => Uint8Array.from(N.viewU8(id, 0, n));

  it("many copies (odd sizes and offsets, zero-length ones, ranges ending at the buffer end) land exactly", () => {
    // reference: the same triples applied with Uint8Array.set on TS copies
    const dst = filled(SIZE, 1), src = filled(SIZE, 2);
    const r = rng(3);
    const triples: number[] = [];
    // disjoint destination slots (as the neuron cache uses it), random order, random sources
    const slots: [number, number][] = [];
    for (let off = 0; off < SIZE; ) {
      const len = Math.min(SIZE - off, 1 + Math.floor(r() * 700));
      slots.push([off, len]);
      off += len + Math.floor(r() * 5);
    }
    for (let i = slots.length - 1; i > 0; i--) {
      const j = Math.floor(r() * (i + 1));
      [slots[i], slots[j]] = [slots[j]!, slots[i]!];
    }
    for (const [dOff, len] of slots) {
      const n = r() < 0.1 ? 0 : len; // some zero-length requests
      triples.push(dOff, Math.floor(r() * (SIZE - n + 1)), n);
    }
    triples.push(SIZE, SIZE, 0, 0, 0, 0); // zero-length at the very end and at 0
    const req = Float64Array.from(triples);
    expect(req.length / 3).toBeGreaterThan(150);
    const want = refCopy(dst.bytes, src.bytes, req);
    N.copyBatch(dst.id, src.id, req);
    expect(Buffer.from(snapshot(dst.id, SIZE)).equals(Buffer.from(want))).toBe(true);
    // ranges touching either end of both buffers exactly (second call: disjoint destinations again)
    const edge = Float64Array.from([SIZE - 17, 0, 17, 0, SIZE - 9, 9]);
    const want2 = refCopy(want, src.bytes, edge);
    N.copyBatch(dst.id, src.id, edge);
    expect(Buffer.from(snapshot(dst.id, SIZE)).equals(Buffer.from(want2))).toBe(true);
    // the source is untouched
    expect(Buffer.from(snapshot(src.id, SIZE)).equals(Buffer.from(src.bytes))).toBe(true);
  });

  it("an empty request list and all-zero-length requests change nothing", () => {
    // reference: the destination bytes before the call
    const dst = filled(4096, 4), src = filled(4096, 5);
    N.copyBatch(dst.id, src.id, new Float64Array(0));
    N.copyBatch(dst.id, src.id, Float64Array.from([0, 0, 0, 4096, 4096, 0, 17, 100, 0]));
    expect(Buffer.from(snapshot(dst.id, 4096)).equals(Buffer.from(dst.bytes))).toBe(true);
  });

  it("an out-of-range request on either side throws a RangeError naming its index; nothing is copied", () => {
    // reference: the destination bytes before the call (earlier valid requests must not have run)
    const n = 8192;
    const dst = filled(n, 6), src = filled(n / 2, 7);
    const valid = [0, 0, 100, 500, 17, 1000, 4000, 0, 96];
    const cases: [number[], number, RegExp][] = [
      [[...valid, n - 10, 0, 11], 3, /dst/], // dst end one byte past
      [[...valid, n + 1, 0, 0], 3, /dst/], // zero-length but starting past the end
      [[...valid, 0, 0, 1, 0, n / 2 - 5, 6], 4, /src/], // src end one byte past
      [[...valid, 0, n, 1], 3, /src/],
      [[...valid, -1, 0, 4], 3, /./], // negative offset
      [[...valid, 0, 0.5, 4], 3, /./], // fractional offset
    ];
    for (const [triples, bad, side] of cases) {
      let err: unknown;
      try { N.copyBatch(dst.id, src.id, Float64Array.from(triples)); } catch (e) { err = e; }
      expect(err, `request ${bad} of ${triples}`).toBeInstanceOf(RangeError);
      const msg = (err as Error).message;
      expect(msg).toMatch(new RegExp(`^copyBatch: request ${bad}\\b`));
      expect(msg).toMatch(side);
      expect(Buffer.from(snapshot(dst.id, n)).equals(Buffer.from(dst.bytes))).toBe(true);
    }
  });

  it("requests must be a Float64Array whose length is a multiple of 3", () => {
    // reference: the documented argument contract
    const dst = filled(256, 8), src = filled(256, 9);
    expect(() => N.copyBatch(dst.id, src.id, [0, 0, 4] as unknown as Float64Array)).toThrow(/^copyBatch: requests/);
    expect(() => N.copyBatch(dst.id, src.id, Float32Array.from([0, 0, 4]) as unknown as Float64Array)).toThrow(
      /^copyBatch: requests/,
    );
    expect(() => N.copyBatch(dst.id, src.id, Float64Array.from([0, 0, 4, 1]))).toThrow(
      /^copyBatch: requests length 4 is not a multiple of 3/,
    );
    expect(() => N.copyBatch(dst.id, src.id, Float64Array.from([0, 0]))).toThrow(RangeError);
    expect(Buffer.from(snapshot(dst.id, 256)).equals(Buffer.from(dst.bytes))).toBe(true);
  });

  it("a mapFile destination is refused; a mapFile source copies its file bytes", () => {
    // reference: the bytes written to the file
    const dir = mkdtempSync(join(tmpdir(), "np-cb-"));
    try {
      const fileBytes = randomBytes(10_000, 10);
      const p = join(dir, "f.bin");
      writeFileSync(p, fileBytes);
      const m = N.mapFile(p);
      try {
        const src = filled(10_000, 11);
        let err: unknown;
        try { N.copyBatch(m.id, src.id, Float64Array.from([0, 0, 16])); } catch (e) { err = e; }
        expect(err).toBeInstanceOf(RangeError);
        expect((err as Error).message).toMatch(new RegExp(`^copyBatch: dst buffer ${m.id}\\b`));
        expect(Buffer.from(N.viewU8(m.id, 0, 10_000)).equals(Buffer.from(fileBytes))).toBe(true);
        const dst = filled(10_000, 12);
        const req = Float64Array.from([5000, 1, 4999, 0, 9000, 1000, 4999, 123, 1]);
        const want = refCopy(dst.bytes, fileBytes, req);
        N.copyBatch(dst.id, m.id, req);
        expect(Buffer.from(snapshot(dst.id, 10_000)).equals(Buffer.from(want))).toBe(true);
      } finally {
        N.free(m.id);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("residentBytes", () => {
  it("large alloc (anonymous, lazily committed): ~0 fresh, >= touched pages after writes, <= the pages allocated", () => {
    // reference: page arithmetic (4 KiB pages; which pages this test wrote)
    const nbytes = 8 * (1 << 20) + 1000; // not a page multiple: rounds up to 2049 pages
    const allocated = roundUp(nbytes, PAGE);
    const id = N.alloc(nbytes);
    try {
      expect(N.residentBytes(id)).toBeLessThanOrEqual(4 * PAGE);
      const touched = 300;
      const v = N.viewU8(id, 0, touched * PAGE);
      for (let p = 0; p < touched; p++) v[p * PAGE] = 1;
      const r = N.residentBytes(id);
      expect(r % PAGE).toBe(0);
      expect(r).toBeGreaterThanOrEqual(touched * PAGE);
      expect(r).toBeLessThanOrEqual(allocated);
      // touching every page makes the whole allocation resident
      const all = N.viewU8(id, 0, nbytes);
      for (let i = 0; i < nbytes; i += PAGE) all[i] = 2;
      all[nbytes - 1] = 3;
      const r2 = N.residentBytes(id);
      expect(r2).toBeGreaterThanOrEqual(allocated);
      expect(r2).toBeLessThanOrEqual(allocated + PAGE); // +64 bytes of over-read slack may spill into one page
    } finally {
      N.free(id);
    }
  });

  it("small alloc (< 1 MiB, zero-filled by the allocator) is resident in full", () => {
    // reference: the requested size
    for (const nbytes of [1, 4096, 100_000, 500_000]) {
      const id = N.alloc(nbytes);
      try {
        expect(N.residentBytes(id)).toBeGreaterThanOrEqual(nbytes);
      } finally {
        N.free(id);
      }
    }
  });

  it("unknown and freed ids throw", () => {
    // reference: the id is not live
    expect(() => N.residentBytes(123456789)).toThrow(/^residentBytes: .*123456789/);
    const id = N.alloc(64);
    N.free(id);
    expect(() => N.residentBytes(id)).toThrow(RangeError);
  });
});

describe("flagAbove (a linear predictor's decision)", () => {
  it("the positions whose score is above their threshold, ascending, against a plain filter; ties and NaN are not above", () => {
    const r = rng(77);
    const n = 11008;
    const s = Float32Array.from({ length: n }, () => r() - 0.5);
    const t = Float32Array.from({ length: n }, () => (r() - 0.5) * 0.5);
    s[5] = t[5]!; // equal: not above
    s[9] = NaN;
    const out = bufBytes(n * 4);
    const count = N.flagAbove(bufF32(s), 0, bufF32(t), 0, n, out, 0);
    const want: number[] = [];
    for (let p = 0; p < n; p++) if (s[p]! > t[p]!) want.push(p);
    expect(count).toBe(want.length);
    expect(Array.from(N.viewI32(out, 0, count))).toEqual(want);
    expect(want).not.toContain(5);
    expect(want).not.toContain(9);
  });

  it("refuses an output shorter than n, naming it", () => {
    const s = bufF32(new Float32Array(64));
    expect(() => N.flagAbove(s, 0, s, 0, 64, bufBytes(60 * 4), 0)).toThrow(/flagAbove.*out/);
  });
});
