// The dense steps of a decode token — attention's four matvecs per layer, the classifier, and a
// pack's trained predictor (its two matrices and the flagging per layer) — timed on this machine
// for a model's own matrix shapes and weight types, once per shape set and thread count, and kept
// with the probe (machine.json `denseSteps`). The kernel table and the probe's matvec by shape
// are Q4_0 over 128 MiB: on the shipped model (F32, 256 wide, 9 MiB of attention and classifier
// in the last-level cache) they said 14.5 µs for a call that takes 4.0, and the planner predicted
// its resident token a third slow. Timing the model's own shapes replaces that extrapolation. The
// predictor's short rows (the 7B's linear predictor: 11,008 rows of 64 Q8_0 weights) go through a
// blocked kernel the probe does not measure: from its bytes the model said 1.6 ms a 7B token,
// timed here it takes 2.5, inside a decode 3.9. The weights are a copy of one quantised matrix per
// shape (the rate does not depend on the values), in anonymous memory, so nothing of the model
// file is read.
import type { GGUFFile } from "../gguf/reader.js";
import { GGMLType, native } from "../native.js";
import { tensorTypeName } from "../gguf/types.js";
import type { Pack } from "../sparse/pack/format.js";
import type { DenseStepRate } from "./machine.js";

const ATTENTION = ["attn_q", "attn_k", "attn_v", "attn_output"] as const;

/** One matrix of a dense step: weight type, rows, columns. */
interface Matrix {
  type: number;
  rows: number;
  cols: number;
}

/** A pack's trained predictor per layer: fc1 (hidden, n_embd), fc2 (n_ff, hidden); mlp: F32, fc2·relu(fc1·x), linear: fc2·fc1·x̂. */
interface PredictorShape {
  form: "mlp" | "linear";
  fc1: Matrix;
  fc2: Matrix;
}

/** The matrices of a token's dense steps: per layer attention's four, then the classifier. */
export interface DenseShapes {
  nLayer: number;
  /** Per layer, q, k, v, output (as every layer of the model has). */
  attention: Matrix[];
  output: Matrix;
  /** Per layer, the pack's predictor (layer 0's shapes; a pack's predictor has one rank for all layers or is timed at layer 0's). */
  predictor?: PredictorShape;
  /** What identifies these shapes (two models with the same shapes and types take the same time). */
  key: string;
}

/**
 * The dense matrices of `file` (a model or a pack: the same tensor names), or undefined when layer
 * 0 lacks one; with `predictorForm` (a pack with trained predictors), blk.0.fc1/fc2 too.
 */
export function denseShapes(file: GGUFFile, nLayer: number, predictorForm?: "mlp" | "linear"): DenseShapes | undefined {
  const matrix = (name: string): Matrix | undefined => {
    const t = file.tensorsByName.get(name);
    return t && t.ne.length === 2 ? { type: t.type, rows: t.ne[1]!, cols: t.ne[0]! } : undefined;
  };
  const attention = ATTENTION.map((n) => matrix(`blk.0.${n}.weight`));
  const output = matrix(file.tensorsByName.has("output.weight") ? "output.weight" : "token_embd.weight");
  if (!output || attention.some((a) => !a)) return undefined;
  const name = (m: Matrix) => `${tensorTypeName(m.type)} ${m.rows}×${m.cols}`;
  const fc1 = matrix("blk.0.fc1.weight");
  const fc2 = matrix("blk.0.fc2.weight");
  // the mlp form runs on F32 weights only (the pack's format)
  const usable = fc1 && fc2 && (predictorForm === "linear" || (fc1.type === GGMLType.F32 && fc2.type === GGMLType.F32));
  const predictor = predictorForm && usable ? { form: predictorForm, fc1: fc1!, fc2: fc2! } : undefined;
  const key = `${nLayer} × (${(attention as Matrix[]).map(name).join(", ")}); ${name(output)}` + (predictor ? `; predictor ${predictor.form} ${name(predictor.fc1)}, ${name(predictor.fc2)}` : "");
  return { nLayer, attention: attention as Matrix[], output, predictor, key };
}

/**
 * The dense shapes a decode of `pack` runs: its attention, classifier and trained predictor. The
 * time model, the planner's timing at load and the calibration all key machine.json's
 * `denseSteps` by this, so one derivation keeps them agreeing (a key that differed would fall
 * back to the kernel table silently).
 */
export function packDenseShapes(pack: Pack): DenseShapes | undefined {
  return denseShapes(pack.file, pack.config.nLayer, pack.predictor?.[0]?.form);
}

/**
 * Time the dense steps of `shapes` on the pool's threads: every layer's four matvecs in turn over
 * a copy of the model's attention bytes (as a token touches them), then the classifier, then the
 * predictor; passes for about `seconds` after a warm-up of a third of it, each step the median of
 * its passes.
 */
export function measureDenseSteps(shapes: DenseShapes, seconds = 0.3): Omit<DenseStepRate, "measuredAt"> {
  const n = native();
  const { nLayer, attention, output, predictor } = shapes;
  const bytes = (m: Matrix) => n.rowBytes(m.type, m.cols) * m.rows;
  const layerBytes = attention.reduce((a, m) => a + bytes(m), 0);
  const predictorLayer = predictor ? [predictor.fc1, predictor.fc2] : [];
  const predictorBytes = predictorLayer.reduce((a, m) => a + bytes(m), 0);
  const all = [...attention, output, ...predictorLayer];
  const widest = Math.max(...all.map((m) => m.cols));
  const tallest = Math.max(...all.map((m) => m.rows));
  // (layer, attention) then the classifier then (layer, predictor), as back to back as in a model
  const outputAt = nLayer * layerBytes;
  const predictorAt = outputAt + bytes(output);
  const weights = n.alloc(predictorAt + nLayer * predictorBytes);
  const x = n.alloc(widest * 4);
  const y = n.alloc(tallest * 4);
  const h = n.alloc(tallest * 4);
  const flags = n.alloc(tallest * 4);
  const thresholds = n.alloc(tallest * 4); // 0: about half the neurons flagged
  try {
    // each matrix of layer 0 quantised from uniform values, then copied to every layer
    const src = n.alloc(Math.min(64, tallest) * widest * 4);
    try {
      n.fillUniform(src, 0, Math.min(64, tallest) * widest, 7n, 1);
      n.fillUniform(x, 0, widest, 8n, 1);
      const place = (m: Matrix, off: number) => {
        const rb = n.rowBytes(m.type, m.cols);
        for (let r = 0; r < m.rows; r += 64) n.quantize(m.type, src, 0, weights, off + r * rb, Math.min(64, m.rows - r), m.cols);
        return off + bytes(m);
      };
      attention.reduce((off, m) => place(m, off), 0);
      place(output, outputAt);
      predictorLayer.reduce((off, m) => place(m, off), predictorAt);
      for (let l = 1; l < nLayer; l++) {
        n.copy(weights, l * layerBytes, weights, 0, layerBytes);
        if (predictor) n.copy(weights, predictorAt + l * predictorBytes, weights, predictorAt, predictorBytes);
      }
    } finally {
      n.free(src);
    }
    const attend = () => {
      let off = 0;
      for (let l = 0; l < nLayer; l++)
        for (const m of attention) {
          n.matvec(m.type, weights, off, m.rows, m.cols, x, 0, y, 0);
          off += bytes(m);
        }
    };
    const classify = () => n.matvec(output.type, weights, outputAt, output.rows, output.cols, x, 0, y, 0);
    // what FfnSteps.predict does per layer: linear, two matvecs and the flagging; mlp, the fused
    // scores and the flagging loop on the calling thread
    const scores = n.viewF32(y, 0, tallest);
    const flagged = n.viewI32(flags, 0, tallest);
    const predict = () => {
      if (!predictor) return;
      const { fc1, fc2 } = predictor;
      for (let l = 0, off = predictorAt; l < nLayer; l++, off += predictorBytes) {
        if (predictor.form === "linear") {
          n.matvec(fc1.type, weights, off, fc1.rows, fc1.cols, x, 0, h, 0);
          n.matvec(fc2.type, weights, off + bytes(fc1), fc2.rows, fc2.cols, h, 0, y, 0);
          n.flagAbove(y, 0, thresholds, 0, fc2.rows, flags, 0);
        } else {
          n.predictorScores(weights, off, weights, off + bytes(fc1), fc1.cols, fc1.rows, fc2.rows, x, 0, 1, y, 0);
          let c = 0;
          for (let p = 0; p < fc2.rows; p++) if (scores[p]! > 0) flagged[c++] = p;
        }
      }
    };
    const attendUs: number[] = [];
    const classifyUs: number[] = [];
    const predictUs: number[] = [];
    const warm = performance.now();
    while (performance.now() - warm < (seconds * 1000) / 3) {
      attend();
      classify();
      predict();
    }
    const t0 = performance.now();
    while (performance.now() - t0 < seconds * 1000 || attendUs.length < 3) {
      const t1 = performance.now();
      attend();
      const t2 = performance.now();
      classify();
      const t3 = performance.now();
      predict();
      attendUs.push((t2 - t1) * 1000);
      classifyUs.push((t3 - t2) * 1000);
      predictUs.push((performance.now() - t3) * 1000);
    }
    const median = (v: number[]) => [...v].sort((p, q) => p - q)[(v.length - 1) >> 1]!;
    return { key: shapes.key, threads: n.getThreads(), attentionUs: median(attendUs), outputUs: median(classifyUs), ...(predictor ? { predictorUs: median(predictUs) } : {}) };
  } finally {
    for (const id of [weights, x, y, h, flags, thresholds]) n.free(id);
  }
}

/**
 * `shapes` timed now, as they run: for a second, each step the median of its passes. Not scaled
 * by a phase check to the probe's speed (as once): on the 7B, four timings a minute apart read
 * attention at 41.6–43.8 ms a token and scaled by their phase checks 33–48, where decoding traced
 * it at 40–44. The phase check of half a second moved more than the machine did.
 */
export function timeDenseSteps(shapes: DenseShapes, seconds = 1): DenseStepRate {
  return { ...measureDenseSteps(shapes, seconds), measuredAt: new Date().toISOString() };
}
