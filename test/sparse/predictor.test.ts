// Activation predictors: native scoring against a plain f64 reference, the trainer on a
// synthetic rule, and the default model (train on the first 80% of heldout.u16, evaluate on
// the last 20%), plus determinism and the file round trip.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { loadModel } from "../../src/index.js";
import { native } from "../../src/native.js";
import { rng } from "../native/helpers.js";
import { collectActivations, formatReport, trainPredictors } from "../../src/tools/train-predictor.js";
import { readPredictors, writePredictors, type MlpPredictor } from "../../src/sparse/predictor-file.js";

const root = join(import.meta.dirname, "..", "..");
const dir = mkdtempSync(join(tmpdir(), "np-predictor-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const n = native();

function put(data: Float32Array | Uint8Array): number {
  const id = n.alloc(Math.max(4, data.byteLength));
  n.viewU8(id, 0, data.byteLength).set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  return id;
}

/** f64 reference scores (nTok, nFF) = fc2 · relu(fc1 · x). */
function refScores(fc1: Float32Array, fc2: Float32Array, x: Float32Array, nEmbd: number, hidden: number, nFF: number, nTok: number) {
  const out = new Float64Array(nTok * nFF);
  const h = new Float64Array(hidden);
  for (let t = 0; t < nTok; t++) {
    for (let k = 0; k < hidden; k++) {
      let s = 0;
      for (let j = 0; j < nEmbd; j++) s += fc1[k * nEmbd + j]! * x[t * nEmbd + j]!;
      h[k] = Math.max(0, s);
    }
    for (let i = 0; i < nFF; i++) {
      let s = 0;
      for (let k = 0; k < hidden; k++) s += fc2[i * hidden + k]! * h[k]!;
      out[t * nFF + i] = s;
    }
  }
  return out;
}

it("predictorScores equals an f64 computation of fc2·relu(fc1·x); bad arguments are rejected", () => {
  const r = rng(7);
  const [nEmbd, hidden, nFF, nTok] = [24, 8, 40, 5];
  const u = (len: number) => Float32Array.from({ length: len }, () => 2 * r() - 1);
  const fc1 = u(hidden * nEmbd);
  const fc2 = u(nFF * hidden);
  const x = u(nTok * nEmbd);
  const ids = [put(fc1), put(fc2), put(x), n.alloc(nTok * nFF * 4)];
  try {
    n.predictorScores(ids[0]!, 0, ids[1]!, 0, nEmbd, hidden, nFF, ids[2]!, 0, nTok, ids[3]!, 0);
    const got = n.viewF32(ids[3]!, 0, nTok * nFF);
    const ref = refScores(fc1, fc2, x, nEmbd, hidden, nFF, nTok);
    for (let i = 0; i < ref.length; i++) expect(Math.abs(got[i]! - ref[i]!)).toBeLessThan(1e-4 * (1 + Math.abs(ref[i]!)));
    expect(() => n.predictorScores(ids[0]!, 0, ids[1]!, 0, nEmbd, hidden + 1, nFF, ids[2]!, 0, nTok, ids[3]!, 0)).toThrow(/predictorScores: fc1 buffer \d+ too small/);
    expect(() => n.predictorScores(ids[0]!, 0, ids[1]!, 0, nEmbd, hidden, nFF, ids[2]!, 2, nTok, ids[3]!, 0)).toThrow(/predictorScores: x offset 2 is not 4-byte aligned/);
    expect(() => n.predictorEval(ids[0]!, 0, ids[1]!, 0, nEmbd, hidden, 41, ids[2]!, 0, ids[2]!, 0, nTok, 0)).toThrow(/predictorEval: nFF 41 is not a multiple of 8/);
    expect(() => n.trainPredictor(ids[2]!, 0, ids[2]!, 0, nTok, nEmbd, nFF, hidden, 1, 4, -1, 1, 1, 0.99, ids[0]!, 0, ids[1]!, 0)).toThrow(/trainPredictor: lr must be > 0/);
  } finally {
    ids.forEach((id) => n.free(id));
  }
});

it("the trainer learns a known random predictor's rule to recall ≥ 0.99", () => {
  const r = rng(11);
  const [nEmbd, hTrue, nFF, nTok, hidden] = [32, 16, 64, 24000, 32];
  const g = () => {
    // approx. normal
    let s = 0;
    for (let i = 0; i < 4; i++) s += r();
    return (s - 2) * 1.7;
  };
  const fc1 = Float32Array.from({ length: hTrue * nEmbd }, () => g() / Math.sqrt(nEmbd));
  const fc2 = Float32Array.from({ length: nFF * hTrue }, () => g() / Math.sqrt(hTrue));
  const x = Float32Array.from({ length: nTok * nEmbd }, () => 3 * g());
  const sc = refScores(fc1, fc2, x, nEmbd, hTrue, nFF, nTok);
  // threshold for ~10% active
  const sorted = Array.from(sc).sort((a, b) => a - b);
  const cut = sorted[Math.floor(0.9 * sorted.length)]!;
  const y = new Uint8Array((nTok * nFF) / 8);
  let pos = 0;
  sc.forEach((v, i) => {
    if (v > cut) {
      y[i >> 3]! |= 1 << (i & 7);
      pos++;
    }
  });
  const split = 20000;
  const ids = [put(x), put(y), n.alloc(hidden * nEmbd * 4), n.alloc(nFF * hidden * 4)];
  try {
    const res = n.trainPredictor(ids[0]!, 0, ids[1]!, 0, split, nEmbd, nFF, hidden, 30, 32, 3e-3, 3, 5, 0.998, ids[2]!, 0, ids[3]!, 0);
    const c = n.predictorEval(ids[2]!, 0, ids[3]!, 0, nEmbd, hidden, nFF, ids[0]!, split * nEmbd * 4, ids[1]!, (split * nFF) / 8, nTok - split, res.threshold);
    const recall = c.tp / (c.tp + c.fn);
    const predFrac = (c.tp + c.fp) / ((nTok - split) * nFF);
    console.log(`[predictor] synthetic: loss ${res.loss.toFixed(4)} threshold ${res.threshold.toFixed(3)} train recall ${res.trainRecall.toFixed(4)}; held-out recall ${recall.toFixed(4)}, predicted-active ${predFrac.toFixed(3)} (true ${(pos / (nTok * nFF)).toFixed(3)})`);
    expect(res.trainRecall).toBeGreaterThanOrEqual(0.998);
    expect(recall).toBeGreaterThanOrEqual(0.99);
    expect(predFrac).toBeLessThan(0.3); // learned, not "everything active"
  } finally {
    ids.forEach((id) => n.free(id));
  }
});

it("default model, mlp form: held-out recall ≥ 0.99 at ≤ 10% of FFN parameters; deterministic; the file round-trips", async () => {
  const b = readFileSync(join(root, "tools", "train", "out", "reference", "heldout.u16"));
  const tokens = Array.from(new Uint16Array(b.buffer, b.byteOffset, b.length / 2));
  const model = await loadModel(join(root, "models", "neuronpipe-default.gguf"));
  try {
    // train on (at most 40k tokens of) the first 80%, evaluate on the last 20% (22,654 tokens)
    const res = trainPredictors(model, tokens, { form: "mlp", maxTrainTokens: 40000, epochs: 2, lr: 3e-3, widthFactor: 0.75, targetRecall: 0.998 });
    console.log(`[predictor] default model (collect ${(res.collectMs / 1000).toFixed(1)} s, train ${(res.trainMs / 1000).toFixed(1)} s)\n${formatReport(res)}`);
    expect(res.evalTokens).toBe(tokens.length - Math.floor(tokens.length * 0.8));
    expect(res.meanRecall).toBeGreaterThanOrEqual(0.99);
    expect(res.predictorParams).toBeLessThanOrEqual(0.1 * res.ffnParams);
    for (const l of res.report) expect(l.hidden % 32).toBe(0);

    const path = join(dir, "p.predictor.gguf");
    await writePredictors(path, res, { modelName: "neuronpipe-default", corpus: "heldout.u16[0:80%]" });
    const back = readPredictors(path);
    expect(back.nEmbd).toBe(res.nEmbd);
    expect(back.nFF).toBe(res.nFF);
    back.layers.forEach((bl, i) => {
      const l = bl as MlpPredictor;
      const o = res.layers[i] as MlpPredictor;
      expect(l.form).toBeUndefined();
      expect(l.hidden).toBe(o.hidden);
      expect(l.threshold).toBe(o.threshold);
      expect(Buffer.from(l.fc1.buffer).equals(Buffer.from(o.fc1.buffer))).toBe(true);
      expect(Buffer.from(l.fc2.buffer).equals(Buffer.from(o.fc2.buffer))).toBe(true);
    });
    expect(() => readPredictors(join(root, "models", "neuronpipe-default.gguf"))).toThrow(/no predictor tensors/);

    // determinism: the same training twice gives bit-identical weights (small slice, two layers)
    const c = collectActivations(model, tokens.slice(0, 4096));
    try {
      const { nEmbd, nFF } = model.config;
      for (const layer of [0, 3]) {
        const w: Uint8Array[] = [];
        for (let rep = 0; rep < 2; rep++) {
          const f1 = n.alloc(32 * nEmbd * 4);
          const f2 = n.alloc(nFF * 32 * 4);
          const r = n.trainPredictor(c.x[layer]!, 0, c.y[layer]!, 0, c.nTok, nEmbd, nFF, 32, 1, 64, 3e-3, 4, 9, 0.99, f1, 0, f2, 0);
          w.push(Uint8Array.from([...n.viewU8(f1, 0, 32 * nEmbd * 4), ...n.viewU8(f2, 0, nFF * 32 * 4), ...new Uint8Array(Float32Array.of(r.threshold).buffer)]));
          n.free(f1);
          n.free(f2);
        }
        expect(Buffer.from(w[0]!).equals(Buffer.from(w[1]!))).toBe(true);
      }
    } finally {
      c.dispose();
    }
  } finally {
    model.dispose();
  }
}, 180_000);

it("mlp --calibration: thresholds chosen on held-out training rows keep the recall target on unseen tokens where training-set thresholds overstate it", async () => {
  // an over-trained predictor (many epochs, few tokens) on a planted-sparsity model with predictable gates
  const path = join(dir, "calib.gguf");
  const w = process.stderr.write.bind(process.stderr);
  process.stderr.write = (() => true) as typeof process.stderr.write;
  const { main } = await import("../../src/cli/main.js");
  const code = await main(["synth", "--out", path, "--embd", "256", "--ff", "1024", "--layers", "1", "--heads", "8", "--type", "f16", "--activation", "reglu", "--active-fraction", "0.1", "--gate-rank", "32"]);
  process.stderr.write = w;
  expect(code).toBe(0);
  const model = await loadModel(path);
  const text = readFileSync(join(root, "models", "heldout.txt"), "utf8").slice(0, 80000);
  const tokens = model.tokenizer.encode(text).slice(0, 5000);
  const target = 0.99;
  const plain = trainPredictors(model, tokens, { form: "mlp", epochs: 12, targetRecall: target });
  const calibrated = trainPredictors(model, tokens, { form: "mlp", epochs: 12, targetRecall: target, calibrationFraction: 0.2 });
  model.dispose();
  // both reach the target on the rows that chose their threshold …
  expect(plain.report[0]!.trainRecall).toBeGreaterThanOrEqual(target);
  // … but only the calibrated one on the held-out fifth of the tokens (measured: 0.977 vs 0.989;
  // predicted sets 15% vs 24% of the neurons, 10% fire)
  expect(plain.report[0]!.recall).toBeLessThan(target - 0.01);
  expect(calibrated.report[0]!.recall).toBeGreaterThan(target - 0.005);
  // and it pays for it with a larger predicted set
  expect(calibrated.report[0]!.predictedActiveFrac).toBeGreaterThan(plain.report[0]!.predictedActiveFrac);
}, 120_000);
