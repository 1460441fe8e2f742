// Every SIMD path the CPU supports against the scalar path, for every kernel and weight type.
import { afterAll, describe, it } from "vitest";
import {
  N, GGMLType, bufF32, bufI32, bufBytes, readF32, freeAll, randF32, rowBytes, dequantRowTS, effectiveX,
  expectClose, makeWeights, supportedLevels,
  withLevel,
} from "./helpers.js";
import type { SimdLevel } from "../../src/native.js";

const TYPES = [GGMLType.F32, GGMLType.F16, GGMLType.Q8_0, GGMLType.Q4_0] as const;
const NAME: Record<number, string> = { 0: "F32", 1: "F16", 2: "Q4_0", 8: "Q8_0" };
const LEVELS = supportedLevels().filter((l) => l !== "scalar");

// Dot products: SIMD and scalar use the same operands (the activation quantisation is
// bit-identical across paths) but sum in a different order (8/16 lanes + horizontal sum
// vs sequential, fma vs mul+add), so they differ by f32 rounding of the partial sums only:
// a relative 1e-5 of Σ|w·x| covers n·2^-24 for the sizes here with margin.
const DOT_TOL = 1e-5;
// Elementwise ops that only differ by fma-vs-mul+add or summation order: a few ulps.
const ELEM_TOL = 1e-6;


function colsFor(t: number, big = false) {
  // F types: SIMD tails. Q types: 7 blocks (pairs + odd block); 27 blocks also runs the
  // 8-block groups of the AVX-512 Q4_0 kernel (3 groups + 1 pair + 1 odd block).
  if (t === GGMLType.F32 || t === GGMLType.F16) return big ? 32 * 27 + 5 : 32 * 7 + 3;
  return big ? 32 * 27 : 32 * 7;
}

function dotMag(t: number, bytes: Uint8Array, cols: number, rowIds: number[], xv: Float32Array): number[] {
  const xe = effectiveX(t, xv);
  const rb = rowBytes(t, cols);
  return rowIds.map((r) => {
    const w = dequantRowTS(t, bytes.subarray(r * rb, (r + 1) * rb), cols);
    let m = 0;
    for (let i = 0; i < cols; i++) m += Math.abs(w[i]! * xe[i]!);
    return m;
  });
}

afterAll(() => {
  freeAll();
  N.setSimd(N.bestSimd());
  N.setThreads(2);
});

describe.each(LEVELS)("SIMD %s vs scalar", (level) => {
  for (const threads of [1, 2]) {
    describe(`threads=${threads}`, () => {
      for (const [t, big] of TYPES.flatMap((t) => [[t, false], [t, true]] as const)) {
        const rows = 13, cols = colsFor(t, big);
        it(`quantize + dequantizeRow ${NAME[t]} cols ${cols} (bit-exact)`, () => {
          N.setThreads(threads);
          const src = bufF32(randF32(rows * cols, 5 + t, 2));
          const rb = rowBytes(t, cols);
          const a = bufBytes(rows * rb), b = bufBytes(rows * rb);
          withLevel("scalar", () => N.quantize(t, src, 0, a, 0, rows, cols));
          withLevel(level, () => N.quantize(t, src, 0, b, 0, rows, cols));
          expectClose(N.viewU8(b, 0, rows * rb), N.viewU8(a, 0, rows * rb), 0, 0, "quantize bytes");
          const da = bufBytes(cols * 4), db = bufBytes(cols * 4);
          withLevel("scalar", () => N.dequantizeRow(t, a, 0, cols, 12, da, 0));
          withLevel(level, () => N.dequantizeRow(t, a, 0, cols, 12, db, 0));
          expectClose(readF32(db, cols), readF32(da, cols), 0, 0, "dequantizeRow");
        });

        it(`matvec / matvecRows / matmul ${NAME[t]} cols ${cols}`, () => {
          N.setThreads(threads);
          // weights at a non-zero offset inside the buffer
          const { id: w0, bytes } = makeWeights(t, rows, cols, 300 + t);
          const rb = rowBytes(t, cols);
          const off = 4096;
          const w = bufBytes(off + rows * rb);
          N.copy(w, off, w0, 0, rows * rb);
          const xv = randF32(cols, 400 + t);
          const x = bufF32(xv);
          const run = (lv: SimdLevel) =>
            withLevel(lv, () => {
              const y = bufBytes(rows * 4);
              N.matvec(t, w, off, rows, cols, x, 0, y, 0);
              return readF32(y, rows);
            });
          const mag = dotMag(t, bytes, cols, [...Array(rows).keys()], xv);
          expectClose(run(level), run("scalar"), mag, DOT_TOL, `matvec ${NAME[t]} ${level}`);

          const ids = [12, 3, 3, 0, 9, 11, 5, 1, 2];
          const idx = bufI32(ids);
          const runRows = (lv: SimdLevel) =>
            withLevel(lv, () => {
              const y = bufBytes(ids.length * 4);
              N.matvecRows(t, w, off, rows, cols, idx, 0, ids.length, x, 0, y, 0);
              return readF32(y, ids.length);
            });
          expectClose(runRows(level), runRows("scalar"), dotMag(t, bytes, cols, ids, xv), DOT_TOL, "matvecRows");

          // nTok 7: 4-token tiles + tail; F32 also through OpenBLAS when built with it, and
          // without (NEURONPIPE_NO_BLAS=1) so the built-in fallback is always tested.
          const nTok = 7;
          const xs = randF32(nTok * cols, 500 + t);
          const X = bufF32(xs);
          const runMm = (lv: SimdLevel) =>
            withLevel(lv, () => {
              const y = bufBytes(nTok * rows * 4);
              N.matmul(t, w, off, rows, cols, X, 0, nTok, y, 0);
              return readF32(y, nTok * rows);
            });
          const s = runMm("scalar");
          for (const noBlas of ["0", "1"]) {
            process.env.NEURONPIPE_NO_BLAS = noBlas;
            const a = runMm(level);
            for (let tk = 0; tk < nTok; tk++) {
              const m = dotMag(t, bytes, cols, [...Array(rows).keys()], xs.subarray(tk * cols, (tk + 1) * cols));
              expectClose(a.subarray(tk * rows, (tk + 1) * rows), s.subarray(tk * rows, (tk + 1) * rows), m, DOT_TOL, `matmul tok ${tk} noBlas=${noBlas}`);
            }
          }
          delete process.env.NEURONPIPE_NO_BLAS;
        });

        it(`axpyRows ${NAME[t]} cols ${cols}`, () => {
          N.setThreads(threads);
          const { id: w } = makeWeights(t, rows, cols, 600 + t);
          // 6 rows: a group of 4 (AVX2 float rows) and one-row tails; 37: groups of 4 (AVX2) or 8
          // (AVX-512) rows and a tail
          const ids = cols % 32 === 0 ? Array.from({ length: 37 }, (_, i) => (i * 5) % rows) : [4, 0, 12, 4, 7, 1];
          const coefs = randF32(ids.length, 700 + t);
          const out0 = randF32(cols, 800 + t);
          const idx = bufI32(ids), coef = bufF32(coefs);
          const run = (lv: SimdLevel) =>
            withLevel(lv, () => {
              const out = bufF32(out0);
              N.axpyRows(t, w, 0, rows, cols, idx, 0, ids.length, coef, 0, out, 0);
              return readF32(out, cols);
            });
          const s = run("scalar");
          // fma vs mul+add per step: a few f32 roundings of |out| + Σ|coef·w| (<= ~4 here)
          expectClose(run(level), s, 8, 4e-6, `axpyRows ${NAME[t]}`);
        });
      }

      it("rmsnorm / softmax / gatedAct / add / rope (n = 67)", () => {
        N.setThreads(threads);
        const n = 67, nTok = 3;
        const xv = randF32(n * nTok, 1, 3), wv = randF32(n, 2);
        const both = (f: () => Float32Array) => [withLevel(level, f), withLevel("scalar", f)] as const;
        {
          const [a, s] = both(() => {
            const out = bufBytes(n * nTok * 4);
            N.rmsnorm(bufF32(xv), 0, bufF32(wv), 0, n, nTok, 1e-6, out, 0);
            return readF32(out, n * nTok);
          });
          expectClose(a, s, Array.from(s, Math.abs), ELEM_TOL, "rmsnorm", 1e-12);
        }
        {
          const [a, s] = both(() => {
            const x = bufF32(xv);
            N.softmax(x, 0, n, nTok);
            return readF32(x, n * nTok);
          });
          expectClose(a, s, s, ELEM_TOL, "softmax", 1e-12);
        }
        for (const kind of [0, 1, 2]) {
          const [a, s] = both(() => {
            const out = bufBytes(n * 4);
            N.gatedAct(kind, bufF32(xv), 0, bufF32(wv), 0, out, 0, n);
            return readF32(out, n);
          });
          expectClose(a, s, Array.from(s, Math.abs), ELEM_TOL, `gated ${kind}`, 1e-12);
        }
        {
          const [a, s] = both(() => {
            const out = bufBytes(n * 4);
            N.add(bufF32(xv), 0, bufF32(wv), 0, out, 0, n);
            return readF32(out, n);
          });
          expectClose(a, s, 0, 0, "add"); // exact
        }
        {
          const [a, s] = both(() => {
            const x = bufF32(xv.subarray(0, 3 * 2 * 10));
            N.rope(x, 0, 3, 2, 10, 8, 7, 10000, true);
            return readF32(x, 60);
          });
          expectClose(a, s, 0, 0, "rope"); // same scalar code on every path
        }
      });

      for (const kvType of [GGMLType.F32, GGMLType.F16]) {
        it(`kvStore + attention ${NAME[kvType]} (headDim 67: tails)`, () => {
          N.setThreads(threads);
          const ctx = 20, nHead = 6, nHeadKv = 2, headDim = 67, rowLen = nHeadKv * headDim, pos0 = 9, nTok = 5;
          const es = kvType === 0 ? 4 : 2;
          const kSrc = bufF32(randF32((pos0 + nTok) * rowLen, 31)), vSrc = bufF32(randF32((pos0 + nTok) * rowLen, 32));
          const q = bufF32(randF32(nTok * nHead * headDim, 33));
          const run = (lv: SimdLevel) =>
            withLevel(lv, () => {
              const kc = bufBytes(ctx * rowLen * es), vc = bufBytes(ctx * rowLen * es);
              N.kvStore(kvType, kc, 0, ctx, rowLen, 0, pos0 + nTok, kSrc, 0);
              N.kvStore(kvType, vc, 0, ctx, rowLen, 0, pos0 + nTok, vSrc, 0);
              const out = bufBytes(nTok * nHead * headDim * 4);
              N.attention(kvType, q, 0, kc, 0, vc, 0, ctx, nHead, nHeadKv, headDim, pos0, nTok, out, 0);
              return { out: readF32(out, nTok * nHead * headDim), k: Uint8Array.from(N.viewU8(kc, 0, ctx * rowLen * es)) };
            });
          const a = run(level), s = run("scalar");
          expectClose(a.k, s.k, 0, 0, "kvStore bytes"); // conversion is exact on every path
          // scores: dot of 67 terms (|q|,|k| <= 1) differ by ~1e-6 abs -> softmax weights relative
          // ~1e-6·67/sqrt(67); output |V| <= 1: absolute 2e-5 is a loose but meaningful bound.
          expectClose(a.out, s.out, 1, 2e-5, `attention ${NAME[kvType]}`);
        });
      }
    });
  }
});
