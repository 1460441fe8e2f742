// Training activation predictors (PowerInfer never released its trainer): the corpus split
// into training and evaluation tokens, what the predictors learn from collected through the
// forward pass (collect-activations.ts), then one of two forms — the low-rank linear predictor
// fitted in closed form (predictor-fit.ts, the default) or PowerInfer's fc2·relu(fc1·x) trained
// in native code — and a held-out evaluation. The file they are written to is
// sparse/predictor-file.ts.
import type { Model } from "../api/model.js";
import { native } from "../native.js";
import { collectActivations, type Collected } from "./collect-activations.js";

export { collectActivations, type Collected } from "./collect-activations.js";
import type { LayerPredictor, LayerReport } from "../sparse/predictor-file.js";
import { DEFAULT_TARGET_RECALL, fitLinearPredictors } from "./predictor-fit.js";
import { firedBit } from "../sparse/fired-bits.js";

export interface TrainOptions {
  /**
   * "linear" (default): a low-rank estimate of the gate pre-activations with per-neuron margins,
   * fitted in closed form (predictor-fit.ts). "mlp": PowerInfer's fc2·relu(fc1·x), trained with
   * Adam on the labels (the options from epochs to widthFactor apply to it only).
   */
  form?: "linear" | "mlp";
  /** linear: largest rank tried (multiple of 32; default min(256, n_embd)). */
  maxRank?: number;
  /** Share of `tokens` (from the start) used for training; the rest is the evaluation split. Default 0.8. */
  trainFraction?: number;
  /** Context window of the collection passes. Default 256. */
  window?: number;
  epochs?: number; // default 3
  batch?: number; // default 64
  lr?: number; // default 3e-3
  seed?: number; // default 1
  /** Recall the threshold(s) must reach on the training split (mlp) or the calibration tokens (linear). Default DEFAULT_TARGET_RECALL (0.998). */
  targetRecall?: number;
  /** hidden = clamp(roundTo32(widthFactor · activeMean), 32, maxHidden). Default 0.75. */
  widthFactor?: number;
  maxHidden?: number; // default 256
  /**
   * Share of the training tokens held out of fitting to choose each layer's threshold (the
   * largest with recall ≥ targetRecall on them). mlp: default 0, chosen on the fitting tokens,
   * which overstates recall when the predictor overfits (many epochs, few tokens). linear:
   * default 0.15.
   */
  calibrationFraction?: number;
  /**
   * mlp: total predictor parameters ≤ sizeBudget · FFN parameters (3·nEmbd·nFF per layer; the
   * widest layers shrink by 32 until they do), default 0.1. linear: each layer's predictor bytes
   * ≤ sizeBudget · that layer's FFN bytes as stored, default 0.15.
   */
  sizeBudget?: number;
  /** linear: share of a layer's neurons (fewest firings) with a margin of their own (predictor-fit.ts, cold-margins.ts); default 0. */
  coldShare?: number;
  /** linear, with coldShare: a cold neuron's flag costs this many hot ones' (default 32). */
  coldCost?: number;
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
  /** linear: predictor bytes read per token and the dense FFN's, all layers. */
  predictorBytes?: number;
  ffnBytes?: number;
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
      for (let i = 0; i < nFF; i++) if (firedBit(bits, nFF / 8, t, i)) pos.push(s[t * nFF + i]!);
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
  const form = opts.form ?? "linear";
  if (form !== "linear" && form !== "mlp") throw new RangeError(`form must be "linear" or "mlp", got ${String(form)}`);
  const o = {
    form,
    maxRank: opts.maxRank ?? Math.min(256, model.config.nEmbd),
    trainFraction: opts.trainFraction ?? 0.8,
    window: opts.window ?? 256,
    epochs: opts.epochs ?? 3,
    batch: opts.batch ?? 64,
    lr: opts.lr ?? 3e-3,
    seed: opts.seed ?? 1,
    targetRecall: opts.targetRecall ?? DEFAULT_TARGET_RECALL,
    widthFactor: opts.widthFactor ?? 0.75,
    maxHidden: opts.maxHidden ?? 256,
    sizeBudget: opts.sizeBudget ?? (form === "linear" ? 0.15 : 0.1),
    calibrationFraction: opts.calibrationFraction ?? (form === "linear" ? 0.15 : 0),
    coldShare: opts.coldShare ?? 0,
    coldCost: opts.coldCost ?? 32,
  };
  if (!(o.calibrationFraction >= 0 && o.calibrationFraction < 1)) throw new RangeError(`calibrationFraction must be in [0, 1), got ${o.calibrationFraction}`);
  const { nLayer, nEmbd, nFF } = model.config;
  const n = native();
  const cut = Math.floor(tokens.length * o.trainFraction);
  let trainToks = tokens.slice(0, cut);
  if (opts.maxTrainTokens !== undefined) trainToks = trainToks.slice(0, opts.maxTrainTokens);
  const evalToks = tokens.slice(cut);
  if (o.form === "linear") return trainLinear(model, trainToks, evalToks, o, opts);
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

function trainLinear(model: Model, trainToks: readonly number[], evalToks: readonly number[], o: PredictorResult["options"], opts: TrainOptions): PredictorResult {
  const { nLayer, nEmbd, nFF } = model.config;
  if (!(o.calibrationFraction > 0 && o.calibrationFraction < 1)) throw new RangeError(`a linear predictor needs calibration tokens: calibrationFraction must be in (0, 1), got ${o.calibrationFraction}`);
  const nCal = Math.max(1, Math.floor(trainToks.length * o.calibrationFraction));
  const fitToks = trainToks.slice(0, trainToks.length - nCal);
  const calToks = trainToks.slice(trainToks.length - nCal);
  if (fitToks.length < nEmbd) {
    process.emitWarning(`train-predictor: ${fitToks.length} fitting tokens for an input of ${nEmbd} dimensions; the fit is underdetermined (use a corpus of several times n_embd tokens)`);
  }
  const t0 = performance.now();
  const collect = (toks: readonly number[], phase: "collect-train" | "collect-eval") =>
    collectActivations(model, toks, { window: o.window, input: "xb", signal: opts.signal, onProgress: (d, t) => opts.onProgress?.(phase, d, t) });
  const done: Collected[] = [];
  try {
    const fit = collect(fitToks, "collect-train");
    done.push(fit);
    const cal = collect(calToks, "collect-train");
    done.push(cal);
    const ev = collect(evalToks, "collect-eval");
    done.push(ev);
    const collectMs = performance.now() - t0;
    const t1 = performance.now();
    const r = fitLinearPredictors(model, fit, cal, ev, {
      maxRank: o.maxRank,
      targetRecall: o.targetRecall,
      sizeBudget: o.sizeBudget,
      coldShare: o.coldShare,
      coldCost: o.coldCost,
      seed: o.seed,
      onLayer: (l) => {
        opts.signal?.throwIfAborted();
        opts.onProgress?.("train", l, nLayer);
      },
    });
    opts.onProgress?.("train", nLayer, nLayer);
    const predictorParams = r.report.reduce((s, l) => s + l.params, 0);
    return {
      nLayer,
      nEmbd,
      nFF,
      layers: r.layers,
      report: r.report,
      predictorParams,
      ffnParams: 3 * nEmbd * nFF * nLayer,
      trainTokens: fit.nTok + cal.nTok,
      evalTokens: ev.nTok,
      options: o,
      meanRecall: r.report.reduce((s, l) => s + l.recall, 0) / Math.max(1, nLayer),
      collectMs,
      trainMs: performance.now() - t1,
      predictorBytes: r.predictorBytes,
      ffnBytes: r.ffnBytes,
    };
  } finally {
    for (const c of done) c.dispose();
  }
}

/** Per-layer table for printing. */
export function formatReport(r: PredictorResult): string {
  const lines = ["layer  width  params   recall  precision  flagged/fired  pred-active  true-active  cal/train-recall  ms"];
  for (const l of r.report)
    lines.push(
      `${String(l.layer).padStart(5)} ${String(l.hidden).padStart(6)} ${String(l.params).padStart(7)} ${l.recall.toFixed(4).padStart(8)} ${l.precision.toFixed(4).padStart(10)} ${(l.trueActiveFrac > 0 ? l.predictedActiveFrac / l.trueActiveFrac : 0).toFixed(2).padStart(14)} ${l.predictedActiveFrac.toFixed(4).padStart(12)} ${l.trueActiveFrac.toFixed(4).padStart(12)} ${l.trainRecall.toFixed(4).padStart(17)} ${l.trainMs.toFixed(0).padStart(5)}`,
    );
  const flagged = r.report.reduce((s, l) => s + l.predictedActiveFrac, 0);
  const fired = r.report.reduce((s, l) => s + l.trueActiveFrac, 0);
  const size =
    r.predictorBytes !== undefined && r.ffnBytes
      ? `predictor ${(r.predictorBytes / 2 ** 20).toFixed(2)} MiB read per token = ${((100 * r.predictorBytes) / r.ffnBytes).toFixed(1)}% of the dense FFN's ${(r.ffnBytes / 2 ** 20).toFixed(1)} MiB`
      : `predictor params ${r.predictorParams} = ${((100 * r.predictorParams) / r.ffnParams).toFixed(2)}% of FFN params ${r.ffnParams}`;
  lines.push(`${r.options.form}: mean recall ${r.meanRecall.toFixed(4)}, flagged/fired ${(fired > 0 ? flagged / fired : 0).toFixed(2)}; ${size}; train ${r.trainTokens} tokens, eval ${r.evalTokens} tokens`);
  return lines.join("\n");
}
