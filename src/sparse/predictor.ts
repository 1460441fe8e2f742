// Activation predictors (PowerInfer's per-layer fc2·relu(fc1·x), no biases): collection of
// training data through the forward pass, native training, held-out evaluation, and the file.
//
// Input x is the residual stream entering the FFN, i.e. BEFORE ffn_norm: in forward.ts the
// onFfnActivations hook fires after gatedAct and before `x += W_down·hb`, so at that moment
// rs.x still holds exactly the FFN block's input residual (and rs.hb the gated activations).
// Label: neuron i is active for a token when hb[i] != 0 (for ReGLU exactly relu(gate)·up ≠ 0).
import { readGGUF } from "../gguf/reader.js";
import { GGUFWriter } from "../gguf/writer.js";
import { ValueType } from "../gguf/types.js";
import type { Model } from "../model/model.js";
import { native } from "../native.js";

/** Per-layer activations collected for training / evaluation, in native buffers. */
export interface Collected {
  nTok: number;
  nEmbd: number;
  nFF: number;
  nLayer: number;
  /** per layer: native buffer id of x (nTok, nEmbd) f32 */
  x: number[];
  /** per layer: native buffer id of label bits (nTok, nFF/8), bit i LSB-first = neuron i active */
  y: number[];
  /** per layer: mean active neurons per token */
  activeMean: number[];
  dispose(): void;
}

/** Collect (x before ffn_norm, active bits) per layer over `tokens`, in fresh-context windows. */
export function collectActivations(
  model: Model,
  tokens: readonly number[],
  opts: { window?: number; onProgress?: (done: number, total: number) => void; signal?: AbortSignal } = {},
): Collected {
  const { nLayer, nFF, nEmbd } = model.config;
  if (nFF % 8 !== 0) throw new Error(`collectActivations: nFF ${nFF} is not a multiple of 8`);
  const window = opts.window ?? 256;
  const n = native();
  const nTok = tokens.length;
  const rowBytes = nFF / 8;
  const x: number[] = [];
  const y: number[] = [];
  const dispose = () => {
    for (const id of [...x, ...y]) n.free(id);
    x.length = 0;
    y.length = 0;
  };
  const active = new Float64Array(nLayer);
  try {
    for (let l = 0; l < nLayer; l++) {
      x.push(n.alloc(Math.max(4, nTok * nEmbd * 4)));
      y.push(n.alloc(Math.max(1, nTok * rowBytes)));
    }
    const s = model.createSession({ contextSize: window, batchSize: Math.min(window, 256) });
    try {
      let base = 0; // index of the first token of the current evaluate() batch
      for (let w0 = 0; w0 < nTok; w0 += window) {
        opts.signal?.throwIfAborted();
        const win = tokens.slice(w0, w0 + window);
        s.reset();
        base = w0;
        s.evaluate(win, false, {
          onFfnActivations: (layer, rs, nt) => {
            n.copy(x[layer]!, base * nEmbd * 4, rs.buf, rs.x, nt * nEmbd * 4);
            const hb = n.viewF32(rs.buf, rs.hb, nt * nFF);
            const yb = n.viewU8(y[layer]!, base * rowBytes, nt * rowBytes);
            let cnt = 0;
            for (let t = 0; t < nt; t++) {
              const r = t * nFF;
              const o = t * rowBytes;
              for (let b = 0; b < rowBytes; b++) {
                let v = 0;
                for (let k = 0; k < 8; k++) if (hb[r + 8 * b + k] !== 0) v |= 1 << k;
                yb[o + b] = v;
                if (v) cnt += popcount8(v);
              }
            }
            active[layer] += cnt;
            if (layer === nLayer - 1) base += nt; // next batch of this window
          },
        });
        opts.onProgress?.(Math.min(w0 + window, nTok), nTok);
      }
    } finally {
      s.dispose();
    }
  } catch (e) {
    dispose();
    throw e;
  }
  return { nTok, nEmbd, nFF, nLayer, x, y, activeMean: Array.from(active, (a) => a / Math.max(1, nTok)), dispose };
}

function popcount8(v: number): number {
  v = v - ((v >> 1) & 0x55);
  v = (v & 0x33) + ((v >> 2) & 0x33);
  return (v + (v >> 4)) & 0x0f;
}

export interface TrainOptions {
  /** Share of `tokens` (from the start) used for training; the rest is the evaluation split. Default 0.8. */
  trainFraction?: number;
  /** Context window of the collection passes. Default 256. */
  window?: number;
  epochs?: number; // default 3
  batch?: number; // default 64
  lr?: number; // default 3e-3
  seed?: number; // default 1
  /** Recall the per-layer threshold must reach on the training split. Default 0.998. */
  targetRecall?: number;
  /** hidden = clamp(roundTo32(widthFactor · activeMean), 32, maxHidden). Default 0.75. */
  widthFactor?: number;
  maxHidden?: number; // default 256
  /**
   * Share of the training tokens held out of fitting to choose each layer's threshold (the
   * largest with recall ≥ targetRecall on them). 0 (default): chosen on the fitting tokens,
   * which overstates recall when the predictor overfits (many epochs, few tokens).
   */
  calibrationFraction?: number;
  /** Total predictor parameters must stay ≤ sizeBudget · FFN parameters (3·nEmbd·nFF per layer); the widest layers shrink by 32 until they do. Default 0.1. */
  sizeBudget?: number;
  /** Use at most this many training tokens (after the split). */
  maxTrainTokens?: number;
  onProgress?: (phase: "collect-train" | "collect-eval" | "train" | "eval", done: number, total: number) => void;
  signal?: AbortSignal;
}

export interface LayerPredictor {
  hidden: number;
  /** (hidden, nEmbd) row-major = ggml ne [nEmbd, hidden] */
  fc1: Float32Array;
  /** (nFF, hidden) row-major = ggml ne [hidden, nFF] */
  fc2: Float32Array;
  /** predict active when fc2·relu(fc1·x) > threshold */
  threshold: number;
}

export interface LayerReport {
  layer: number;
  hidden: number;
  params: number;
  threshold: number;
  posWeight: number;
  loss: number;
  trainRecall: number;
  trainActiveFrac: number;
  /** evaluation split */
  recall: number;
  precision: number;
  predictedActiveFrac: number;
  trueActiveFrac: number;
  activeMean: number;
  trainMs: number;
}

export interface PredictorResult {
  nLayer: number;
  nEmbd: number;
  nFF: number;
  layers: LayerPredictor[];
  report: LayerReport[];
  predictorParams: number;
  ffnParams: number;
  trainTokens: number;
  evalTokens: number;
  options: Required<Omit<TrainOptions, "onProgress" | "signal" | "maxTrainTokens">>;
  meanRecall: number;
  collectMs: number;
  trainMs: number;
}

/** Hidden width per layer from its sparsity, then shrunk (widest first) to the size budget. */
export function chooseHidden(activeMean: number[], nEmbd: number, nFF: number, widthFactor: number, maxHidden: number, sizeBudget: number): number[] {
  const h = activeMean.map((a) => Math.min(maxHidden, Math.max(32, Math.round((widthFactor * a) / 32) * 32)));
  const budget = sizeBudget * 3 * nEmbd * nFF * activeMean.length;
  const size = () => h.reduce((s, v) => s + v * (nEmbd + nFF), 0);
  while (size() > budget) {
    let w = 0;
    for (let i = 1; i < h.length; i++) if (h[i]! > h[w]!) w = i;
    if (h[w]! <= 32) break;
    h[w] = h[w]! - 32;
  }
  return h;
}

/** The largest threshold with recall(score > threshold) ≥ target on rows [r0, r0+nRows) of (x, y). */
function calibrateThreshold(fc1: number, fc2: number, nEmbd: number, hidden: number, nFF: number, x: number, y: number, r0: number, nRows: number, target: number): number {
  const n = native();
  const scores = n.alloc(nRows * nFF * 4);
  try {
    n.predictorScores(fc1, 0, fc2, 0, nEmbd, hidden, nFF, x, r0 * nEmbd * 4, nRows, scores, 0);
    const s = n.viewF32(scores, 0, nRows * nFF);
    const bits = n.viewU8(y, r0 * (nFF / 8), nRows * (nFF / 8));
    const pos: number[] = [];
    for (let t = 0; t < nRows; t++)
      for (let i = 0; i < nFF; i++) if ((bits[t * (nFF / 8) + (i >> 3)]! >> (i & 7)) & 1) pos.push(s[t * nFF + i]!);
    if (pos.length === 0) return Infinity; // never fired: predict nothing
    pos.sort((a, b) => a - b);
    const misses = Math.floor((1 - target) * pos.length); // positives allowed below the threshold
    const v = pos[misses]!;
    return v - Math.max(1e-6, Math.abs(v) * 1e-6); // just below: that positive and all above pass
  } finally {
    n.free(scores);
  }
}

/**
 * Train per-layer predictors on the first trainFraction of `tokens`, evaluate them on the rest.
 * Deterministic for given tokens and options.
 */
export function trainPredictors(model: Model, tokens: readonly number[], opts: TrainOptions = {}): PredictorResult {
  const o = {
    trainFraction: opts.trainFraction ?? 0.8,
    window: opts.window ?? 256,
    epochs: opts.epochs ?? 3,
    batch: opts.batch ?? 64,
    lr: opts.lr ?? 3e-3,
    seed: opts.seed ?? 1,
    targetRecall: opts.targetRecall ?? 0.998,
    widthFactor: opts.widthFactor ?? 0.75,
    maxHidden: opts.maxHidden ?? 256,
    sizeBudget: opts.sizeBudget ?? 0.1,
    calibrationFraction: opts.calibrationFraction ?? 0,
  };
  if (!(o.calibrationFraction >= 0 && o.calibrationFraction < 1)) throw new RangeError(`calibrationFraction must be in [0, 1), got ${o.calibrationFraction}`);
  const { nLayer, nEmbd, nFF } = model.config;
  const n = native();
  const cut = Math.floor(tokens.length * o.trainFraction);
  let trainToks = tokens.slice(0, cut);
  if (opts.maxTrainTokens !== undefined) trainToks = trainToks.slice(0, opts.maxTrainTokens);
  const evalToks = tokens.slice(cut);
  const t0 = performance.now();
  const tr = collectActivations(model, trainToks, { window: o.window, signal: opts.signal, onProgress: (d, t) => opts.onProgress?.("collect-train", d, t) });
  let ev: Collected | undefined;
  try {
    ev = collectActivations(model, evalToks, { window: o.window, signal: opts.signal, onProgress: (d, t) => opts.onProgress?.("collect-eval", d, t) });
    const collectMs = performance.now() - t0;
    const hidden = chooseHidden(tr.activeMean, nEmbd, nFF, o.widthFactor, o.maxHidden, o.sizeBudget);
    const layers: LayerPredictor[] = [];
    const report: LayerReport[] = [];
    const t1 = performance.now();
    for (let l = 0; l < nLayer; l++) {
      opts.signal?.throwIfAborted();
      opts.onProgress?.("train", l, nLayer);
      const h = hidden[l]!;
      const fc1 = n.alloc(h * nEmbd * 4);
      const fc2 = n.alloc(nFF * h * 4);
      try {
        const pos = tr.activeMean[l]! / nFF;
        // positives upweighted by sqrt(neg/pos) (≈ 4–7 at 95–98% sparsity); the threshold then sets the recall
        const posWeight = Math.sqrt((1 - pos) / Math.max(pos, 1e-6));
        const ts = performance.now();
        // the last calibrationFraction of the training rows choose the threshold, the rest fit
        const nCal = Math.floor(tr.nTok * o.calibrationFraction);
        const nFit = tr.nTok - nCal;
        const r = n.trainPredictor(tr.x[l]!, 0, tr.y[l]!, 0, nFit, nEmbd, nFF, h, o.epochs, o.batch, o.lr, posWeight, o.seed + l, o.targetRecall, fc1, 0, fc2, 0);
        if (nCal > 0) r.threshold = calibrateThreshold(fc1, fc2, nEmbd, h, nFF, tr.x[l]!, tr.y[l]!, nFit, nCal, o.targetRecall);
        const trainMs = performance.now() - ts;
        opts.onProgress?.("eval", l, nLayer);
        const c = n.predictorEval(fc1, 0, fc2, 0, nEmbd, h, nFF, ev.x[l]!, 0, ev.y[l]!, 0, ev.nTok, r.threshold);
        const total = ev.nTok * nFF;
        layers.push({ hidden: h, fc1: n.viewF32(fc1, 0, h * nEmbd).slice(), fc2: n.viewF32(fc2, 0, nFF * h).slice(), threshold: r.threshold });
        report.push({
          layer: l,
          hidden: h,
          params: h * (nEmbd + nFF),
          threshold: r.threshold,
          posWeight,
          loss: r.loss,
          trainRecall: r.trainRecall,
          trainActiveFrac: r.trainActive,
          recall: c.tp + c.fn > 0 ? c.tp / (c.tp + c.fn) : 1,
          precision: c.tp + c.fp > 0 ? c.tp / (c.tp + c.fp) : 1,
          predictedActiveFrac: total > 0 ? (c.tp + c.fp) / total : 0,
          trueActiveFrac: total > 0 ? (c.tp + c.fn) / total : 0,
          activeMean: tr.activeMean[l]!,
          trainMs,
        });
      } finally {
        n.free(fc1);
        n.free(fc2);
      }
    }
    opts.onProgress?.("train", nLayer, nLayer);
    const predictorParams = report.reduce((s, r) => s + r.params, 0);
    return {
      nLayer,
      nEmbd,
      nFF,
      layers,
      report,
      predictorParams,
      ffnParams: 3 * nEmbd * nFF * nLayer,
      trainTokens: tr.nTok,
      evalTokens: ev.nTok,
      options: o,
      meanRecall: report.reduce((s, r) => s + r.recall, 0) / Math.max(1, nLayer),
      collectMs,
      trainMs: performance.now() - t1,
    };
  } finally {
    tr.dispose();
    ev?.dispose();
  }
}

/** Per-layer table for printing. */
export function formatReport(r: PredictorResult): string {
  const lines = ["layer hidden  params   thresh   recall  precision  pred-active  true-active  train-recall  train-ms"];
  for (const l of r.report)
    lines.push(
      `${String(l.layer).padStart(5)} ${String(l.hidden).padStart(6)} ${String(l.params).padStart(7)} ${l.threshold.toFixed(3).padStart(8)} ${l.recall.toFixed(4).padStart(8)} ${l.precision.toFixed(4).padStart(10)} ${l.predictedActiveFrac.toFixed(4).padStart(12)} ${l.trueActiveFrac.toFixed(4).padStart(12)} ${l.trainRecall.toFixed(4).padStart(13)} ${l.trainMs.toFixed(0).padStart(9)}`,
    );
  lines.push(
    `mean recall ${r.meanRecall.toFixed(4)}; predictor params ${r.predictorParams} = ${((100 * r.predictorParams) / r.ffnParams).toFixed(2)}% of FFN params ${r.ffnParams}; train ${r.trainTokens} tokens, eval ${r.evalTokens} tokens`,
  );
  return lines.join("\n");
}

// ---- file: GGUF with PowerInfer's tensor names (docs/formats.md, "Predictors") ----------

export const PREDICTOR_KIND = "neuronpipe.predictor";

export async function writePredictors(path: string, r: PredictorResult, extra: { modelName?: string; corpus?: string; modelFingerprint?: string } = {}): Promise<number> {
  const w = new GGUFWriter();
  w.setString("general.architecture", PREDICTOR_KIND);
  if (extra.modelName) w.setString("neuronpipe.predictor.model_name", extra.modelName);
  if (extra.corpus) w.setString("neuronpipe.predictor.corpus", extra.corpus);
  if (extra.modelFingerprint) w.setString("neuronpipe.predictor.model_fingerprint", extra.modelFingerprint);
  w.setU32("neuronpipe.predictor.n_layer", r.nLayer);
  w.setU32("neuronpipe.predictor.n_embd", r.nEmbd);
  w.setU32("neuronpipe.predictor.n_ff", r.nFF);
  w.setString("neuronpipe.predictor.input", "residual stream entering the FFN block (before ffn_norm)");
  w.setString("neuronpipe.predictor.rule", "neuron i predicted active when (fc2 · relu(fc1 · x))[i] > threshold[layer]");
  w.setF32("powerinfer.sparse_threshold", 0);
  const arr = (k: string, f: (l: LayerReport) => number) => w.setArray(`neuronpipe.predictor.${k}`, ValueType.FLOAT32, Float32Array.from(r.report, f));
  arr("threshold", (l) => l.threshold);
  arr("recall", (l) => l.recall);
  arr("precision", (l) => l.precision);
  arr("predicted_active", (l) => l.predictedActiveFrac);
  arr("train_recall", (l) => l.trainRecall);
  w.setU32("neuronpipe.predictor.train_tokens", r.trainTokens);
  w.setU32("neuronpipe.predictor.eval_tokens", r.evalTokens);
  r.layers.forEach((l, i) => {
    w.addTensor({ name: `blk.${i}.fc1.weight`, ne: [r.nEmbd, l.hidden], type: 0, data: () => new Uint8Array(l.fc1.buffer, l.fc1.byteOffset, l.fc1.byteLength) });
    w.addTensor({ name: `blk.${i}.fc2.weight`, ne: [l.hidden, r.nFF], type: 0, data: () => new Uint8Array(l.fc2.buffer, l.fc2.byteOffset, l.fc2.byteLength) });
  });
  return w.write(path);
}

/**
 * Read blk.N.fc1/fc2 (F32, or F16 converted) from any GGUF / PWRI file. Threshold per layer:
 * neuronpipe.predictor.threshold[N] if present, else powerinfer.sparse_threshold, else 0.
 */
export function readPredictors(path: string): { nEmbd: number; nFF: number; layers: LayerPredictor[]; modelFingerprint?: string } {
  const f = readGGUF(path);
  const fp = f.metadata.get("neuronpipe.predictor.model_fingerprint")?.value;
  const thrArr = f.metadata.get("neuronpipe.predictor.threshold")?.value as Float32Array | number[] | undefined;
  const thrGlobal = Number(f.metadata.get("powerinfer.sparse_threshold")?.value ?? 0);
  const layers: LayerPredictor[] = [];
  let nEmbd = 0;
  let nFF = 0;
  // map the file (a PowerInfer model holds GBs of weights besides the predictors) and convert
  // rows with the native dequantiser
  const n = native();
  const mapped = n.mapFile(path);
  const load = (name: string, cols: number, rows: number): Float32Array => {
    const t = f.tensorsByName.get(name)!;
    if (t.type !== 0 && t.type !== 1) throw new Error(`${path}: tensor ${name} has type ${t.type}; only F32 (0) and F16 (1) predictors are supported`);
    const dst = n.alloc(cols * rows * 4);
    try {
      for (let r = 0; r < rows; r++) n.dequantizeRow(t.type, mapped.id, t.offset, cols, r, dst, r * cols * 4);
      return Float32Array.from(n.viewF32(dst, 0, cols * rows));
    } finally {
      n.free(dst);
    }
  };
  try {
    for (let i = 0; ; i++) {
      const t1 = f.tensorsByName.get(`blk.${i}.fc1.weight`);
      const t2 = f.tensorsByName.get(`blk.${i}.fc2.weight`);
      if (!t1 && !t2) break;
      if (!t1 || !t2) throw new Error(`${path}: layer ${i} has only one of fc1/fc2`);
      const [e, h] = [t1.ne[0]!, t1.ne[1] ?? 1];
      if (t2.ne[0] !== h) throw new Error(`${path}: blk.${i}.fc2.weight ne[0] ${t2.ne[0]} ≠ fc1 hidden ${h}`);
      const ff = t2.ne[1] ?? 1;
      if (i === 0) [nEmbd, nFF] = [e, ff];
      else if (e !== nEmbd || ff !== nFF) throw new Error(`${path}: blk.${i} predictor shape [${e}, ${ff}] differs from layer 0 [${nEmbd}, ${nFF}]`);
      const thr = thrArr !== undefined && i < thrArr.length ? Number(thrArr[i]) : thrGlobal;
      layers.push({ hidden: h, fc1: load(`blk.${i}.fc1.weight`, e, h), fc2: load(`blk.${i}.fc2.weight`, h, ff), threshold: thr });
    }
  } finally {
    n.free(mapped.id);
  }
  if (layers.length === 0) throw new Error(`${path}: no predictor tensors (blk.N.fc1.weight / blk.N.fc2.weight)`);
  return { nEmbd, nFF, layers, ...(fp !== undefined ? { modelFingerprint: String(fp) } : {}) };
}
