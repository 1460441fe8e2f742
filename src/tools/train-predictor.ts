// Training activation predictors (PowerInfer's per-layer fc2·relu(fc1·x), no biases; PowerInfer
// never released its trainer): collection of training data through the forward pass, native
// training, held-out evaluation. The file they are written to is sparse/predictor-file.ts.
//
// Input x is the residual stream entering the FFN, i.e. BEFORE ffn_norm: in forward.ts the
// onFfnActivations hook fires after gatedAct and before `x += W_down·hb`, so at that moment
// rs.x still holds exactly the FFN block's input residual (and rs.hb the gated activations).
// Label: neuron i is active for a token when hb[i] != 0 (for ReGLU exactly relu(gate)·up ≠ 0).
import type { Model } from "../api/model.js";
import { native } from "../native.js";
import type { LayerPredictor, LayerReport } from "../sparse/predictor-file.js";

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

