// Results must be bit-identical for 1 and 2 threads, on every SIMD path.
import { afterAll, describe, expect, it } from "vitest";
import {
  N, GGMLType, bufF32, bufI32, bufBytes, readF32, freeAll, randF32, bitsEqual, makeWeights, supportedLevels, rowBytes,
} from "./helpers.js";

const TYPES = [GGMLType.F32, GGMLType.F16, GGMLType.Q8_0, GGMLType.Q4_0] as const;
const NAME: Record<number, string> = { 0: "F32", 1: "F16", 2: "Q4_0", 8: "Q8_0" };

afterAll(() => {
  freeAll();
  N.setSimd(N.bestSimd());
  N.setThreads(2);
});

function both(f: () => Float32Array): [Float32Array, Float32Array] {
  N.setThreads(1);
  const jobs0 = N.poolStats().jobs;
  const a = f();
  // with one thread nothing is dispatched to the pool
  expect(N.poolStats().jobs).toBe(jobs0);
  N.setThreads(2);
  const b = f();
  // the 2-thread run really went through the pool (whether the worker got CPU time to take
  // chunks depends on the machine's load, so workerChunks is not asserted)
  expect(N.poolStats().jobs).toBeGreaterThan(jobs0);
  return [a, b];
}

/** matvec and matvecRows (rows `ids`) of `w` on 1 and 2 threads: each bit-identical across thread counts, and matvecRows' rows equal matvec's. */
function matvecAndRows(t: number, w: number, rows: number, cols: number, x: number, ids: number[], what: string): void {
  const [a, b] = both(() => {
    const y = bufBytes(rows * 4);
    N.matvec(t, w, 0, rows, cols, x, 0, y, 0);
    return readF32(y, rows);
  });
  bitsEqual(a, b, `matvec ${what}`);
  const idx = bufI32(ids);
  const [c, d] = both(() => {
    const y = bufBytes(ids.length * 4);
    N.matvecRows(t, w, 0, rows, cols, idx, 0, ids.length, x, 0, y, 0);
    return readF32(y, ids.length);
  });
  bitsEqual(c, d, `matvecRows ${what}`);
  // matvecRows of row r must equal matvec's row r exactly (same kernel per row)
  bitsEqual(c, Float32Array.from(ids, (r) => a[r]!), "matvecRows == matvec rows");
}

describe.each(supportedLevels())("determinism on %s", (level) => {
  for (const t of TYPES) {
    // Big enough that every kernel actually splits across 2 threads.
    const rows = 517, cols = t === GGMLType.F32 || t === GGMLType.F16 ? 1283 : 32 * 41;
    it(`matvec, matvecRows, matmul, axpyRows ${NAME[t]}`, () => {
      N.setSimd(level);
      const { id: w } = makeWeights(t, rows, cols, 900 + t);
      const x = bufF32(randF32(cols, 901));
      const ids = Array.from({ length: 301 }, (_, i) => (i * 37) % rows);
      matvecAndRows(t, w, rows, cols, x, ids, NAME[t]!);
      const idx = bufI32(ids);

      const nTok = 9;
      const X = bufF32(randF32(nTok * cols, 902));
      for (const noBlas of ["0", "1"]) {
        process.env.NEURONPIPE_NO_BLAS = noBlas;
        const [e, f] = both(() => {
          const y = bufBytes(nTok * rows * 4);
          N.matmul(t, w, 0, rows, cols, X, 0, nTok, y, 0);
          return readF32(y, nTok * rows);
        });
        bitsEqual(e, f, `matmul ${NAME[t]} noBlas=${noBlas}`);
      }
      delete process.env.NEURONPIPE_NO_BLAS;

      const coef = bufF32(randF32(ids.length, 903));
      const out0 = randF32(cols, 904);
      const [g, h] = both(() => {
        const out = bufF32(out0);
        N.axpyRows(t, w, 0, rows, cols, idx, 0, ids.length, coef, 0, out, 0);
        return readF32(out, cols);
      });
      bitsEqual(g, h, `axpyRows ${NAME[t]}`);
      // the sparse decoders split the fired rows at budget-dependent points: any split of the
      // rows into consecutive calls must give the same bits as one call
      for (const cut of [1, 13, 150]) {
        const out = bufF32(out0);
        N.axpyRows(t, w, 0, rows, cols, idx, 0, cut, coef, 0, out, 0);
        N.axpyRows(t, w, 0, rows, cols, idx, cut * 4, ids.length - cut, coef, cut * 4, out, 0);
        bitsEqual(readF32(out, cols), g, `axpyRows ${NAME[t]} split at ${cut}`);
      }
      expect(rowBytes(t, cols)).toBe(N.rowBytes(t, cols));
    });
  }

  // short Q8_0 rows (a linear predictor's fc2: 16 rows per group, reduced together): 2 and 3
  // blocks, 11,008 rows split across threads at points that are not multiples of 16
  for (const cols of [64, 96]) {
    it(`matvec, matvecRows Q8_0 short rows (cols ${cols})`, () => {
      N.setSimd(level);
      const t = GGMLType.Q8_0;
      const rows = 11008;
      const { id: w } = makeWeights(t, rows, cols, 910 + cols);
      const x = bufF32(randF32(cols, 911));
      const ids = Array.from({ length: 3001 }, (_, i) => (i * 37) % rows);
      matvecAndRows(t, w, rows, cols, x, ids, `Q8_0 cols ${cols}`);
    });
  }

  for (const kvType of [GGMLType.F32, GGMLType.F16]) {
    it(`attention ${NAME[kvType]}`, () => {
      N.setSimd(level);
      const ctx = 96, nHead = 8, nHeadKv = 4, headDim = 64, rowLen = nHeadKv * headDim, pos0 = 60, nTok = 6;
      const es = kvType === 0 ? 4 : 2;
      const kc = bufBytes(ctx * rowLen * es), vc = bufBytes(ctx * rowLen * es);
      N.kvStore(kvType, kc, 0, ctx, rowLen, 0, pos0 + nTok, bufF32(randF32((pos0 + nTok) * rowLen, 905)), 0);
      N.kvStore(kvType, vc, 0, ctx, rowLen, 0, pos0 + nTok, bufF32(randF32((pos0 + nTok) * rowLen, 906)), 0);
      const q = bufF32(randF32(nTok * nHead * headDim, 907));
      const [a, b] = both(() => {
        const out = bufBytes(nTok * nHead * headDim * 4);
        N.attention(kvType, q, 0, kc, 0, vc, 0, ctx, nHead, nHeadKv, headDim, pos0, nTok, out, 0);
        return readF32(out, nTok * nHead * headDim);
      });
      bitsEqual(a, b, `attention ${NAME[kvType]}`);
    });
  }

  it("elementwise + fillUniform + quantize", () => {
    N.setSimd(level);
    const n = 300_001;
    const wNorm = bufF32(randF32(1000, 909));
    const [a, b] = both(() => {
      const o = bufBytes(n * 4);
      N.fillUniform(o, 0, n, 77n, 2);
      N.gatedAct(0, o, 0, o, 0, o, 0, n);
      N.add(o, 0, o, 0, o, 0, n);
      N.rmsnorm(o, 0, wNorm, 0, 1000, 300, 1e-5, o, 0); // in place (x == out), weight separate
      return readF32(o, n);
    });
    bitsEqual(a, b, "elementwise");
    const src = bufF32(randF32(1024 * 1024, 908));
    const [q1, q2] = both(() => {
      const d = bufBytes(1024 * 18 * 32);
      N.quantize(GGMLType.Q4_0, src, 0, d, 0, 1024, 1024);
      return new Float32Array(Uint8Array.from(N.viewU8(d, 0, 1024 * 18 * 32)).buffer);
    });
    bitsEqual(q1, q2, "quantize");
  });
});
