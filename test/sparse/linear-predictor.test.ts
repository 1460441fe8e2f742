// The low-rank linear predictor (tools/predictor-fit.ts): its linear algebra against plain
// references, the fit on the default model judged on tokens it never saw (recall, flagged per
// fired neuron, bytes against the dense FFN's), determinism, the file round trip, and the
// runtime's predicted sets against an f64 computation from the stored weights.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../../src/index.js";
import { GGMLType, native } from "../../src/native.js";
import { rng } from "../native/helpers.js";
import { readPredictors, writePredictors, type LinearPredictor } from "../../src/sparse/predictor-file.js";
import { Mat, mulT, orthonormalizeRows, symmetricEigen } from "../../src/tools/linalg.js";
import { collectActivations, formatReport, trainPredictors, type PredictorResult } from "../../src/tools/train-predictor.js";
import { confusion } from "../../src/tools/predictor-fit.js";

const root = join(import.meta.dirname, "..", "..");
const dir = mkdtempSync(join(tmpdir(), "np-linear-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const n = native();

describe("linear algebra", () => {
  it("mulT is X·Wᵀ; orthonormalizeRows gives orthonormal rows spanning the same space, even for nearly parallel rows", () => {
    const r = rng(3);
    const X = Mat.from(7, 50, (d) => d.forEach((_, i) => (d[i] = r() - 0.5)));
    const W = Mat.from(5, 50, (d) => d.forEach((_, i) => (d[i] = r() - 0.5)));
    const Y = mulT(X, W);
    for (let t = 0; t < 7; t++)
      for (let k = 0; k < 5; k++) {
        let s = 0;
        for (let c = 0; c < 50; c++) s += X.data[t * 50 + c]! * W.data[k * 50 + c]!;
        expect(Y.data[t * 5 + k]!).toBeCloseTo(s, 5);
      }
    // rows 1..5 almost parallel to row 0 (what power iterations produce)
    const A = Mat.from(6, 200, (d) => {
      for (let j = 0; j < 200; j++) d[j] = Math.sin(j);
      for (let i = 1; i < 6; i++) for (let j = 0; j < 200; j++) d[i * 200 + j] = d[j]! + 1e-4 * (r() - 0.5);
    });
    const Q = orthonormalizeRows(A);
    for (let i = 0; i < 6; i++)
      for (let k = 0; k < 6; k++) {
        let s = 0;
        for (let j = 0; j < 200; j++) s += Q.data[i * 200 + j]! * Q.data[k * 200 + j]!;
        expect(s).toBeCloseTo(i === k ? 1 : 0, 5);
      }
    // each row of A lies in the span of Q's rows: its projection keeps its norm
    for (let i = 0; i < 6; i++) {
      let norm = 0;
      let proj = 0;
      for (let j = 0; j < 200; j++) norm += A.data[i * 200 + j]! ** 2;
      for (let k = 0; k < 6; k++) {
        let d = 0;
        for (let j = 0; j < 200; j++) d += A.data[i * 200 + j]! * Q.data[k * 200 + j]!;
        proj += d * d;
      }
      expect(proj / norm).toBeCloseTo(1, 4);
    }
    for (const m of [X, W, Y, A, Q]) m.free();
  });

  it("symmetricEigen: A·v = λ·v for every pair, eigenvalues descending, vectors orthonormal", () => {
    const r = rng(5);
    const N = 24;
    const B = Array.from({ length: N * N }, () => r() - 0.5);
    const A = new Float64Array(N * N);
    for (let i = 0; i < N; i++) for (let j = 0; j < N; j++) for (let k = 0; k < N; k++) A[i * N + j] += B[i * N + k]! * B[j * N + k]!;
    const { values, vectors } = symmetricEigen(A, N);
    for (let k = 0; k + 1 < N; k++) expect(values[k]!).toBeGreaterThanOrEqual(values[k + 1]!);
    for (let k = 0; k < N; k++) {
      for (let i = 0; i < N; i++) {
        let s = 0;
        for (let j = 0; j < N; j++) s += A[i * N + j]! * vectors[k * N + j]!;
        expect(s).toBeCloseTo(values[k]! * vectors[k * N + i]!, 8);
      }
      let dot = 0;
      for (let j = 0; j < N; j++) dot += vectors[k * N + j]! * vectors[((k + 1) % N) * N + j]!;
      expect(Math.abs(dot)).toBeLessThan(1e-9);
    }
  });
});

describe("held-out statistics", () => {
  it("confusion counts and each neuron's false-flag rate (flagged ÷ the tokens it did not fire on), by hand", () => {
    // 4 tokens × 8 neurons; neuron i flagged when score > threshold 0
    const s = Float32Array.from([
      [1, -1, 1, -1, 1, 1, -1, -1],
      [1, 1, -1, -1, 1, -1, -1, -1],
      [-1, 1, 1, -1, 1, -1, -1, -1],
      [1, -1, -1, -1, 1, -1, -1, 1],
    ].flat());
    const fired = [
      [1, 0, 0, 0, 1, 0, 0, 0],
      [1, 0, 0, 1, 0, 0, 0, 0],
      [0, 1, 0, 0, 0, 0, 0, 0],
      [1, 0, 0, 0, 0, 0, 0, 0],
    ];
    const bits = Uint8Array.from(fired, (row) => row.reduce((b, y, i) => b | (y << i), 0));
    const c = confusion(s, new Float32Array(8), bits, 4, 8);
    // flagged & fired: (0,0) (1,0) (2,1) (3,0) (0,4) = 5; flagged, silent: (0,2) (0,5) (1,1) (1,4) (2,2) (2,4) (3,4) (3,7) = 8; fired, not flagged: (1,3) = 1
    expect([c.tp, c.fp, c.fn, c.tokens]).toEqual([5, 8, 1, 4]);
    // neuron 0 never silent but token 2 (not flagged): 0/1; 1: silent on 0,1,3, flagged on 1: 1/3; 2: silent on all 4, flagged on 0,2: 2/4;
    // 3: silent on 0,2,3, never flagged: 0; 4: silent on 1,2,3, flagged on all three: 1; 5: 1/4; 6: 0; 7: 1/4
    expect(Array.from(c.falseFlags)).toEqual([0, 1 / 3, 0.5, 0, 1, 0.25, 0, 0.25].map(Math.fround));
  });
});

describe("the default model", () => {
  let model: Model;
  let tokens: number[];
  let res: PredictorResult;
  beforeAll(async () => {
    const b = readFileSync(join(root, "tools", "train", "out", "reference", "heldout.u16"));
    tokens = Array.from(new Uint16Array(b.buffer, b.byteOffset, b.length / 2));
    model = await loadModel(join(root, "models", "neuronpipe-default.gguf"));
    // fit on (at most 40k tokens of) the first 80% (the last 15% of them calibrate), evaluate on the last 20%
    res = trainPredictors(model, tokens, { maxTrainTokens: 40000 });
    console.log(`[linear predictor] default model (collect ${(res.collectMs / 1000).toFixed(1)} s, fit ${(res.trainMs / 1000).toFixed(1)} s)\n${formatReport(res)}`);
  }, 300_000);
  afterAll(() => model?.dispose());

  it("on tokens it never saw: recall ≥ 0.99, at most 2× the neurons that fire flagged, predictor bytes ≤ 15% of the dense FFN's", () => {
    expect(res.options.form).toBe("linear");
    expect(res.evalTokens).toBe(tokens.length - Math.floor(tokens.length * 0.8));
    let flagged = 0;
    let fired = 0;
    for (const l of res.report) {
      expect(l.recall).toBeGreaterThanOrEqual(0.99);
      expect(l.hidden % 32).toBe(0);
      flagged += l.predictedActiveFrac;
      fired += l.trueActiveFrac;
    }
    expect(flagged / fired).toBeLessThanOrEqual(2);
    expect(res.predictorBytes!).toBeLessThanOrEqual(0.15 * res.ffnBytes!);
    // the FFN bytes a dense token reads: gate, up and down of every layer, F32
    expect(res.ffnBytes).toBe(model.config.nLayer * 3 * model.config.nEmbd * model.config.nFF * 4);
  });

  it("is deterministic, round-trips through its file, and the runtime flags what an f64 computation from the stored rows flags", async () => {
    const again = trainPredictors(model, tokens, { maxTrainTokens: 40000 });
    again.layers.forEach((l, i) => {
      const a = l as LinearPredictor;
      const b = res.layers[i] as LinearPredictor;
      expect(Buffer.from(a.fc1).equals(Buffer.from(b.fc1))).toBe(true);
      expect(Buffer.from(a.fc2).equals(Buffer.from(b.fc2))).toBe(true);
      expect(Buffer.from(a.thresholds.buffer).equals(Buffer.from(b.thresholds.buffer))).toBe(true);
    });
    const path = join(dir, "p.predictor.gguf");
    await writePredictors(path, res, { modelName: "neuronpipe-default" });
    const back = readPredictors(path);
    back.layers.forEach((bl, i) => {
      const l = bl as LinearPredictor;
      const o = res.layers[i] as LinearPredictor;
      expect([l.form, l.hidden, l.type]).toEqual(["linear", o.hidden, GGMLType.Q8_0]);
      expect(Buffer.from(l.fc1).equals(Buffer.from(o.fc1))).toBe(true);
      expect(Buffer.from(l.fc2).equals(Buffer.from(o.fc2))).toBe(true);
      expect(Array.from(l.thresholds)).toEqual(Array.from(o.thresholds));
      expect(Array.from(l.falseFlags!)).toEqual(Array.from(o.falseFlags!));
    });

    // runtime path (two Q8_0 matvecs, as FfnSteps.predict) against f64 from the dequantised rows
    const { nEmbd: E, nFF: F } = model.config;
    const c = collectActivations(model, tokens.slice(tokens.length - 600), { input: "xb" });
    try {
      let agree = 0;
      let total = 0;
      for (let layer = 0; layer < model.config.nLayer; layer++) {
        const p = back.layers[layer] as LinearPredictor;
        const r = p.hidden;
        const [w1, w2, h, s, d1, d2] = [n.alloc(p.fc1.length), n.alloc(p.fc2.length), n.alloc(r * 4), n.alloc(F * 4), n.alloc(r * E * 4), n.alloc(F * r * 4)];
        try {
          n.viewU8(w1, 0, p.fc1.length).set(p.fc1);
          n.viewU8(w2, 0, p.fc2.length).set(p.fc2);
          for (let k = 0; k < r; k++) n.dequantizeRow(p.type, w1, 0, E, k, d1, k * E * 4);
          for (let i = 0; i < F; i++) n.dequantizeRow(p.type, w2, 0, r, i, d2, i * r * 4);
          const f1 = n.viewF32(d1, 0, r * E);
          const f2 = n.viewF32(d2, 0, F * r);
          const X = n.viewF32(c.x[layer]!, 0, c.nTok * E);
          const absF1 = Float64Array.from(f1, Math.abs);
          for (let t = 0; t < c.nTok; t++) {
            n.matvec(p.type, w1, 0, r, E, c.x[layer]!, t * E * 4, h, 0);
            n.matvec(p.type, w2, 0, F, r, h, 0, s, 0);
            const got = n.viewF32(s, 0, F);
            // the runtime quantises each input to Q8_0 (blocks of 32, step amax/127): rounding moves
            // an element by at most half a step, which bounds how far h and then s can move
            const dX = new Float64Array(E);
            for (let b = 0; b < E; b += 32) {
              let amax = 0;
              for (let j = b; j < b + 32; j++) amax = Math.max(amax, Math.abs(X[t * E + j]!));
              dX.fill(amax / 254, b, b + 32);
            }
            const hv = new Float64Array(r);
            const dh = new Float64Array(r);
            for (let k = 0; k < r; k++) {
              for (let j = 0; j < E; j++) {
                hv[k] += f1[k * E + j]! * X[t * E + j]!;
                dh[k] += absF1[k * E + j]! * dX[j]!;
              }
            }
            for (let b = 0; b < r; b += 32) {
              let amax = 0;
              for (let k = b; k < b + 32; k++) amax = Math.max(amax, Math.abs(hv[k]!) + dh[k]!);
              for (let k = b; k < b + 32; k++) dh[k] += amax / 254;
            }
            for (let i = 0; i < F; i++) {
              let ref = 0;
              let bound = 0;
              for (let k = 0; k < r; k++) {
                ref += f2[i * r + k]! * hv[k]!;
                bound += Math.abs(f2[i * r + k]!) * dh[k]!;
              }
              const th = p.thresholds[i]!;
              if (got[i]! > th === ref > th) agree++;
              // a decision that differs lies within the rounding bound of the margin
              else expect(Math.abs(ref - th)).toBeLessThanOrEqual(bound * 1.001 + 1e-6);
              total++;
            }
          }
        } finally {
          for (const b of [w1, w2, h, s, d1, d2]) n.free(b);
        }
      }
      // the runtime quantises its inputs to Q8_0 like the dense kernels: decisions differ only at the margin
      expect(agree / total).toBeGreaterThan(0.995);
    } finally {
      c.dispose();
    }
  }, 300_000);

  it("with a cold share, the half of the neurons firing least takes fewer flags at the same recall (judged on tokens it never saw)", () => {
    const cold = trainPredictors(model, tokens, { maxTrainTokens: 40000, coldShare: 0.5, coldCost: 32 });
    expect([cold.options.coldShare, cold.options.coldCost]).toEqual([0.5, 32]);
    for (const l of cold.report) {
      expect(l.trainRecall).toBeGreaterThanOrEqual(0.9975); // the target, on the calibration tokens
      expect(l.recall).toBeGreaterThanOrEqual(0.99);
      expect(l.coldThreshold).toBeTypeOf("number");
    }
    // the last 600 tokens, grouped by this test's own count of firings on them
    const { nEmbd: E, nFF: F } = model.config;
    const c = collectActivations(model, tokens.slice(tokens.length - 600), { input: "xb" });
    const flags = (r: PredictorResult) => {
      let hot = 0;
      let coldFlags = 0;
      let found = 0;
      let positives = 0;
      for (let layer = 0; layer < model.config.nLayer; layer++) {
        const y = n.viewU8(c.y[layer]!, 0, c.nTok * (F / 8));
        const bit = (t: number, i: number) => (y[t * (F / 8) + (i >> 3)]! >> (i & 7)) & 1;
        const fired = new Uint32Array(F);
        for (let t = 0; t < c.nTok; t++) for (let i = 0; i < F; i++) fired[i] += bit(t, i);
        const byFirings = Array.from(fired.keys()).sort((a, b) => fired[a]! - fired[b]! || b - a);
        const isCold = new Uint8Array(F);
        for (let k = 0; k < F / 2; k++) isCold[byFirings[k]!] = 1;
        const p = r.layers[layer] as LinearPredictor;
        const [w1, w2, h, s] = [n.alloc(p.fc1.length), n.alloc(p.fc2.length), n.alloc(c.nTok * p.hidden * 4), n.alloc(c.nTok * F * 4)];
        try {
          n.viewU8(w1, 0, p.fc1.length).set(p.fc1);
          n.viewU8(w2, 0, p.fc2.length).set(p.fc2);
          n.matmul(p.type, w1, 0, p.hidden, E, c.x[layer]!, 0, c.nTok, h, 0);
          n.matmul(p.type, w2, 0, F, p.hidden, h, 0, c.nTok, s, 0);
          const sv = n.viewF32(s, 0, c.nTok * F);
          for (let t = 0; t < c.nTok; t++)
            for (let i = 0; i < F; i++) {
              const flagged = sv[t * F + i]! > p.thresholds[i]!;
              if (flagged && isCold[i]) coldFlags++;
              else if (flagged) hot++;
              positives += bit(t, i);
              if (flagged && bit(t, i)) found++;
            }
        } finally {
          for (const b of [w1, w2, h, s]) n.free(b);
        }
      }
      return { hot, cold: coldFlags, recall: found / positives };
    };
    try {
      const one = flags(res);
      const two = flags(cold);
      console.log(`[linear predictor] flags per token, hot / cold half: one margin ${(one.hot / c.nTok).toFixed(1)} / ${(one.cold / c.nTok).toFixed(1)} (recall ${one.recall.toFixed(4)}), a cold margin ${(two.hot / c.nTok).toFixed(1)} / ${(two.cold / c.nTok).toFixed(1)} (recall ${two.recall.toFixed(4)})`);
      expect(two.recall).toBeGreaterThanOrEqual(0.99);
      expect(two.recall).toBeGreaterThan(one.recall - 0.001);
      expect(two.cold).toBeLessThan(0.95 * one.cold);
      expect(two.hot + 32 * two.cold).toBeLessThan(one.hot + 32 * one.cold);
    } finally {
      c.dispose();
    }
  }, 300_000);
});
