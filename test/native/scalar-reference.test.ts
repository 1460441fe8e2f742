// The scalar native path against independent plain-TypeScript references.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  N, GGMLType, bufF32, bufI32, bufBytes, readF32, freeAll, randF32, rowBytes, quantizeRowTS, dequantRowTS,
  effectiveX, dot64, expectClose, f16ToF32, f32ToF16, makeWeights, fr, supportedLevels, withLevel,
} from "./helpers.js";

const TYPES = [GGMLType.F32, GGMLType.F16, GGMLType.Q8_0, GGMLType.Q4_0] as const;
const NAME: Record<number, string> = { 0: "F32", 1: "F16", 2: "Q4_0", 8: "Q8_0" };

// Native scalar kernels accumulate in f32 (block scale products for Q types) while the TS
// reference sums in f64 from the same effective operands (dequantised weights, x as the kernel
// quantises it), so the only difference is f32 rounding of the running sum: bounded by
// ~n·2^-24·Σ|terms|; for n <= 1024 a relative 1e-5 of Σ|terms| is ample and still catches
// any wrong element/scale (errors of that kind are O(1) relative).
const DOT_TOL = 1e-5;

beforeAll(() => {
  N.setSimd("scalar");
  N.setThreads(1);
});
afterAll(() => {
  freeAll();
  N.setSimd(N.bestSimd());
});

describe("quantisation: hand-computed blocks", () => {
  it("Q8_0: d = amax/127 (= 1 here), q = roundf(x/d)", () => {
    const x = new Float32Array(32);
    x.set([127, -127, 0.5, -0.5, 1.5, 2.49, -2.5, 100.4]);
    const src = bufF32(x);
    const dst = bufBytes(34);
    N.quantize(GGMLType.Q8_0, src, 0, dst, 0, 1, 32);
    const b = N.viewU8(dst, 0, 34);
    const want = new Uint8Array(34);
    want.set([0x00, 0x3c]); // fp16(1.0)
    const q = [127, -127, 1, -1, 2, 2, -3, 100];
    q.forEach((v, j) => (want[2 + j] = v & 0xff));
    expect(Array.from(b)).toEqual(Array.from(want));
  });

  it("Q4_0: d = max/-8, q = min(15, (int8)(x/d + 8.5)), low nibbles first", () => {
    const x = new Float32Array(64);
    // block 0: max |x| is -8 -> d = 1
    x.set([-8, 7, 0, 0.5, -0.5, 3.2], 0);
    x[16] = 7.9; // high nibble of qs[0]
    x[17] = -7.9;
    // block 1: max |x| is +8 -> d = -1 (values are negated)
    x.set([8, -7, 1], 32);
    const src = bufF32(x);
    const dst = bufBytes(36);
    N.quantize(GGMLType.Q4_0, src, 0, dst, 0, 1, 64);
    const b = Array.from(N.viewU8(dst, 0, 36));
    // block 0: d = fp16(1.0) = 0x3c00
    expect(b.slice(0, 2)).toEqual([0x00, 0x3c]);
    // x+8.5 truncated: -8->0, 7->15, 0->8, 0.5->9, -0.5->8, 3.2->11; zeros -> 8; 7.9 -> 16 -> min 15; -7.9 -> 0
    const lo0 = [0, 15, 8, 9, 8, 11, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8];
    const hi0 = [15, 0, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8];
    expect(b.slice(2, 18)).toEqual(lo0.map((l, j) => l | (hi0[j]! << 4)));
    // block 1: d = fp16(-1.0) = 0xbc00; x*id = -x: 8 -> 0, -7 -> 15, 1 -> 7
    expect(b.slice(18, 20)).toEqual([0x00, 0xbc]);
    const lo1 = [0, 15, 7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8];
    expect(b.slice(20, 36)).toEqual(lo1.map((l) => l | (8 << 4)));
  });

  it("F16: round to nearest even, exact back", () => {
    const vals = [1, -2, 0.1, 65504, 1e-7, 6.1e-5, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 70000, -0];
    const src = bufF32(vals);
    const dst = bufBytes(vals.length * 2);
    N.quantize(GGMLType.F16, src, 0, dst, 0, 1, vals.length);
    const got = new Uint16Array(Uint8Array.from(N.viewU8(dst, 0, vals.length * 2)).buffer);
    expect(Array.from(got)).toEqual(vals.map((v) => f32ToF16(v)));
    expect(got[6]).toBe(0x3c00); // tie -> even (down)
    expect(got[7]).toBe(0x3c02); // tie -> even (up)
    expect(got[8]).toBe(0x7c00); // overflow -> inf
  });
});

describe("quantize / dequantizeRow on random data (bit-exact vs TS)", () => {
  for (const t of TYPES) {
    it(NAME[t]!, () => {
      const rows = 5, cols = 32 * 7;
      const x = randF32(rows * cols, 11 + t, 3);
      const { id, bytes } = makeWeights(t, rows, cols, 11 + t);
      void x;
      const src = randF32(rows * cols, 11 + t); // same generator as makeWeights
      const rb = rowBytes(t, cols);
      for (let r = 0; r < rows; r++) {
        const want = quantizeRowTS(t, src.subarray(r * cols, (r + 1) * cols));
        expect(Array.from(bytes.subarray(r * rb, (r + 1) * rb))).toEqual(Array.from(want));
        const out = bufBytes(cols * 4);
        N.dequantizeRow(t, id, 0, cols, r, out, 0);
        const deq = dequantRowTS(t, bytes.subarray(r * rb, (r + 1) * rb), cols);
        expect(Array.from(readF32(out, cols))).toEqual(Array.from(deq));
      }
    });
  }
});

function refMatvec(t: number, bytes: Uint8Array, rows: number, cols: number, xv: Float32Array, rowIds: number[]) {
  const xe = effectiveX(t, xv);
  const rb = rowBytes(t, cols);
  const v: number[] = [], mag: number[] = [];
  for (const r of rowIds) {
    const w = dequantRowTS(t, bytes.subarray(r * rb, (r + 1) * rb), cols);
    const d = dot64(w, xe);
    v.push(d.v);
    mag.push(d.mag);
  }
  return { v, mag };
}

describe("matrix kernels vs TS reference (scalar path)", () => {
  for (const t of TYPES) {
    const rows = 13, cols = 32 * 9;
    it(`matvec ${NAME[t]}`, () => {
      const { id, bytes } = makeWeights(t, rows, cols, 100 + t);
      const xv = randF32(cols, 200 + t);
      const x = bufF32(xv), y = bufBytes(rows * 4);
      N.matvec(t, id, 0, rows, cols, x, 0, y, 0);
      const ref = refMatvec(t, bytes, rows, cols, xv, [...Array(rows).keys()]);
      expectClose(readF32(y, rows), ref.v, ref.mag, DOT_TOL, `matvec ${NAME[t]}`);
    });
    it(`matvecRows ${NAME[t]}`, () => {
      const { id, bytes } = makeWeights(t, rows, cols, 110 + t);
      const xv = randF32(cols, 210 + t);
      const ids = [12, 0, 5, 5, 7, 1, 11];
      const x = bufF32(xv), y = bufBytes(ids.length * 4), idx = bufI32(ids);
      N.matvecRows(t, id, 0, rows, cols, idx, 0, ids.length, x, 0, y, 0);
      const ref = refMatvec(t, bytes, rows, cols, xv, ids);
      expectClose(readF32(y, ids.length), ref.v, ref.mag, DOT_TOL, `matvecRows ${NAME[t]}`);
    });
    it(`matmul ${NAME[t]}`, () => {
      const nTok = 5;
      const { id, bytes } = makeWeights(t, rows, cols, 120 + t);
      const xs = randF32(nTok * cols, 220 + t);
      const x = bufF32(xs), y = bufBytes(nTok * rows * 4);
      N.matmul(t, id, 0, rows, cols, x, 0, nTok, y, 0);
      const got = readF32(y, nTok * rows);
      for (let tk = 0; tk < nTok; tk++) {
        const ref = refMatvec(t, bytes, rows, cols, xs.subarray(tk * cols, (tk + 1) * cols), [...Array(rows).keys()]);
        expectClose(got.subarray(tk * rows, (tk + 1) * rows), ref.v, ref.mag, DOT_TOL, `matmul ${NAME[t]} tok ${tk}`);
      }
    });
    // Shapes that cross the SIMD matmul's tiles: 2 full 16-row panels + 5 rows, tokens 8 + 8 + 2 + 1.
    it.each(supportedLevels())(`matmul ${NAME[t]} 37 rows x 19 tokens on %s`, (level) => {
      const r = 37, nTok = 19, c = 32 * 11;
      const { id, bytes } = makeWeights(t, r, c, 125 + t);
      const xs = randF32(nTok * c, 225 + t);
      const x = bufF32(xs), y = bufBytes(nTok * r * 4);
      withLevel(level, () => N.matmul(t, id, 0, r, c, x, 0, nTok, y, 0));
      const got = readF32(y, nTok * r);
      for (let tk = 0; tk < nTok; tk++) {
        const ref = refMatvec(t, bytes, r, c, xs.subarray(tk * c, (tk + 1) * c), [...Array(r).keys()]);
        expectClose(got.subarray(tk * r, (tk + 1) * r), ref.v, ref.mag, DOT_TOL, `matmul ${NAME[t]} ${level} tok ${tk}`);
      }
    });
    it(`axpyRows ${NAME[t]}`, () => {
      const { id, bytes } = makeWeights(t, rows, cols, 130 + t);
      const ids = [3, 9, 0, 12, 3];
      const coefs = randF32(ids.length, 230 + t);
      const out0 = randF32(cols, 240 + t);
      const idx = bufI32(ids), coef = bufF32(coefs), out = bufF32(out0);
      N.axpyRows(t, id, 0, rows, cols, idx, 0, ids.length, coef, 0, out, 0);
      const rb = rowBytes(t, cols);
      const want = Float64Array.from(out0);
      const mag = Float64Array.from(out0, Math.abs);
      ids.forEach((r, k) => {
        const w = dequantRowTS(t, bytes.subarray(r * rb, (r + 1) * rb), cols);
        for (let c = 0; c < cols; c++) {
          want[c]! += coefs[k]! * w[c]!;
          mag[c]! += Math.abs(coefs[k]! * w[c]!);
        }
      });
      // Per element: nIdx f32 roundings of the running sum (and of the product).
      expectClose(readF32(out, cols), want, mag, 1e-6, `axpyRows ${NAME[t]}`);
    });
  }
});

describe("elementwise kernels vs TS reference (scalar path)", () => {
  it("rmsnorm", () => {
    const n = 67, nTok = 3, eps = 1e-5;
    const xv = randF32(n * nTok, 1, 2), wv = randF32(n, 2);
    const x = bufF32(xv), w = bufF32(wv), out = bufBytes(n * nTok * 4);
    N.rmsnorm(x, 0, w, 0, n, nTok, eps, out, 0);
    const got = readF32(out, n * nTok);
    for (let t = 0; t < nTok; t++) {
      let ss = 0;
      for (let i = 0; i < n; i++) ss += xv[t * n + i]! ** 2;
      const s = 1 / Math.sqrt(ss / n + eps);
      const want = Array.from({ length: n }, (_, i) => xv[t * n + i]! * s * wv[i]!);
      // a handful of f32 roundings per element
      expectClose(got.subarray(t * n, (t + 1) * n), want, want.map(Math.abs), 1e-6, "rmsnorm", 1e-12);
    }
  });

  it("softmax", () => {
    const n = 67, rows = 3;
    const xv = randF32(n * rows, 3, 10);
    const x = bufF32(xv);
    N.softmax(x, 0, n, rows);
    const got = readF32(x, n * rows);
    for (let r = 0; r < rows; r++) {
      const row = Array.from(xv.subarray(r * n, (r + 1) * n));
      const m = Math.max(...row);
      const e = row.map((v) => Math.exp(v - m));
      const s = e.reduce((a, b) => a + b, 0);
      const want = e.map((v) => v / s);
      // expf is within ~1 ulp; plus f32 rounding of x-max and the final scaling
      expectClose(got.subarray(r * n, (r + 1) * n), want, want, 4e-6, "softmax", 1e-12);
    }
  });

  for (const kind of [0, 1, 2]) {
    it(`gatedAct kind ${kind}`, () => {
      const n = 67;
      const g = randF32(n, 4, 6), u = randF32(n, 5, 3);
      const out = bufBytes(n * 4);
      N.gatedAct(kind, bufF32(g), 0, bufF32(u), 0, out, 0, n);
      const want = Array.from({ length: n }, (_, i) => {
        const gi = g[i]!, ui = u[i]!;
        if (kind === 0) return (gi / (1 + Math.exp(-gi))) * ui;
        if (kind === 1) return Math.max(gi, 0) * ui;
        return Math.max(gi, 0) * Math.max(ui, 0);
      });
      expectClose(readF32(out, n), want, want.map(Math.abs), 1e-6, `gated ${kind}`, 1e-12);
    });
  }

  it("add (out aliasing a)", () => {
    const n = 67;
    const a = randF32(n, 6), b = randF32(n, 7);
    const ia = bufF32(a);
    N.add(ia, 0, bufF32(b), 0, ia, 0, n);
    expect(Array.from(readF32(ia, n))).toEqual(Array.from(a, (v, i) => fr(v + b[i]!)));
  });

  for (const neox of [false, true]) {
    it(`rope neox=${neox}`, () => {
      const nTok = 3, nHeads = 2, headDim = 10, ropeDim = 8, pos0 = 5, base = 10000;
      const xv = randF32(nTok * nHeads * headDim, 8);
      const x = bufF32(xv);
      N.rope(x, 0, nTok, nHeads, headDim, ropeDim, pos0, base, neox);
      const got = readF32(x, xv.length);
      const want = Float64Array.from(xv);
      const thetaScale = fr(Math.pow(base, -2 / ropeDim));
      for (let t = 0; t < nTok; t++) {
        let theta = fr(pos0 + t);
        for (let i0 = 0; i0 < ropeDim; i0 += 2) {
          const c = Math.cos(theta), s = Math.sin(theta);
          for (let h = 0; h < nHeads; h++) {
            const base0 = (t * nHeads + h) * headDim;
            const a = neox ? i0 / 2 : i0, b = neox ? i0 / 2 + ropeDim / 2 : i0 + 1;
            const x0 = xv[base0 + a]!, x1 = xv[base0 + b]!;
            want[base0 + a] = x0 * c - x1 * s;
            want[base0 + b] = x0 * s + x1 * c;
          }
          theta = fr(theta * thetaScale);
        }
      }
      // cosf/sinf vs Math.cos/sin differ by ~1 ulp; dims >= ropeDim must be untouched (exact).
      expectClose(got, want, 1, 1e-6, `rope neox=${neox}`);
      for (let t = 0; t < nTok * nHeads; t++)
        for (let i = ropeDim; i < headDim; i++) expect(got[t * headDim + i]).toBe(xv[t * headDim + i]);
    });
  }
});

describe("kvStore / attention vs TS reference (scalar path)", () => {
  for (const kvType of [GGMLType.F32, GGMLType.F16]) {
    it(`kvType ${NAME[kvType]}`, () => {
      const ctx = 12, nHead = 4, nHeadKv = 2, headDim = 8, rowLen = nHeadKv * headDim;
      const es = kvType === 0 ? 4 : 2;
      const kc = bufBytes(ctx * rowLen * es), vc = bufBytes(ctx * rowLen * es);
      const kAll = randF32(ctx * rowLen, 20), vAll = randF32(ctx * rowLen, 21);
      // store positions 0..6 in two calls
      const pos0 = 4, nTok = 3;
      N.kvStore(kvType, kc, 0, ctx, rowLen, 0, pos0, bufF32(kAll.subarray(0, pos0 * rowLen)), 0);
      N.kvStore(kvType, vc, 0, ctx, rowLen, 0, pos0, bufF32(vAll.subarray(0, pos0 * rowLen)), 0);
      N.kvStore(kvType, kc, 0, ctx, rowLen, pos0, nTok, bufF32(kAll.subarray(pos0 * rowLen, (pos0 + nTok) * rowLen)), 0);
      N.kvStore(kvType, vc, 0, ctx, rowLen, pos0, nTok, bufF32(vAll.subarray(pos0 * rowLen, (pos0 + nTok) * rowLen)), 0);
      const stored = (id: number, all: Float32Array) => {
        const n = (pos0 + nTok) * rowLen;
        if (kvType === 0) return Float64Array.from(readF32(id, n));
        const u = new Uint16Array(Uint8Array.from(N.viewU8(id, 0, n * 2)).buffer);
        // kvStore must round exactly like f32ToF16
        for (let i = 0; i < n; i++) expect(u[i]).toBe(f32ToF16(all[i]!));
        return Float64Array.from(u, f16ToF32);
      };
      const K = stored(kc, kAll), V = stored(vc, vAll);
      if (kvType === 0) expect(Array.from(K)).toEqual(Array.from(kAll.subarray(0, (pos0 + nTok) * rowLen)));
      const qv = randF32(nTok * nHead * headDim, 22);
      const out = bufBytes(qv.length * 4);
      N.attention(kvType, bufF32(qv), 0, kc, 0, vc, 0, ctx, nHead, nHeadKv, headDim, pos0, nTok, out, 0);
      const got = readF32(out, qv.length);
      const want = new Float64Array(qv.length);
      for (let t = 0; t < nTok; t++)
        for (let h = 0; h < nHead; h++) {
          const kvh = Math.floor(h / (nHead / nHeadKv));
          const n = pos0 + t + 1;
          const sc: number[] = [];
          for (let j = 0; j < n; j++) {
            let s = 0;
            for (let i = 0; i < headDim; i++) s += qv[(t * nHead + h) * headDim + i]! * K[j * rowLen + kvh * headDim + i]!;
            sc.push(s / Math.sqrt(headDim));
          }
          const m = Math.max(...sc);
          const e = sc.map((v) => Math.exp(v - m));
          const z = e.reduce((a, b) => a + b, 0);
          for (let i = 0; i < headDim; i++) {
            let o = 0;
            for (let j = 0; j < n; j++) o += (e[j]! / z) * V[j * rowLen + kvh * headDim + i]!;
            want[(t * nHead + h) * headDim + i] = o;
          }
        }
      // |V| <= 1 and the weights sum to 1: absolute error of a few f32 ulps of 1.
      expectClose(got, want, 1, 2e-6, `attention ${NAME[kvType]}`);
    });
  }
});

describe("fillUniform", () => {
  it("is in [-scale, scale), deterministic per seed, differs across seeds", () => {
    const n = 200_000;
    const a = bufBytes(n * 4), b = bufBytes(n * 4), c = bufBytes(n * 4);
    N.fillUniform(a, 0, n, 42n, 0.5);
    N.fillUniform(b, 0, n, 42n, 0.5);
    N.fillUniform(c, 0, n, 43n, 0.5);
    const va = readF32(a, n), vb = readF32(b, n), vc = readF32(c, n);
    expect(Buffer.from(va.buffer).equals(Buffer.from(vb.buffer))).toBe(true);
    let same = 0, mn = Infinity, mx = -Infinity, sum = 0;
    for (let i = 0; i < n; i++) {
      if (va[i] === vc[i]) same++;
      mn = Math.min(mn, va[i]!);
      mx = Math.max(mx, va[i]!);
      sum += va[i]!;
    }
    expect(same).toBeLessThan(100);
    expect(mn).toBeGreaterThanOrEqual(-0.5);
    expect(mx).toBeLessThan(0.5);
    expect(mx).toBeGreaterThan(0.499);
    expect(Math.abs(sum / n)).toBeLessThan(0.005);
  });
});
