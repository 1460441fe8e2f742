// The predictor file (docs/formats.md, "Predictors"): a GGUF with PowerInfer's tensor names
// blk.N.fc1.weight / blk.N.fc2.weight. Two forms:
//   mlp     PowerInfer's fc2·relu(fc1·x) on the residual x before ffn_norm, F32, one threshold
//           per layer (neuronpipe.predictor.threshold) — what PowerInfer's files hold
//   linear  fc2·(fc1·x̂) on the ffn_norm output x̂, a low-rank estimate of the gate
//           pre-activations (Q8_0 or F32), one threshold per neuron (blk.N.fc2.threshold)
// Written by the trainers (tools/train-predictor.ts, tools/predictor-fit.ts), read by the pack writer.
import { readGGUF } from "../gguf/reader.js";
import { GGUFWriter } from "../gguf/writer.js";
import { ValueType } from "../gguf/types.js";
import { native } from "../native.js";

/** PowerInfer's predictor of one layer: active when fc2·relu(fc1·x) > threshold, x before ffn_norm. */
export interface MlpPredictor {
  form?: "mlp";
  hidden: number;
  /** (hidden, nEmbd) row-major = ggml ne [nEmbd, hidden] */
  fc1: Float32Array;
  /** (nFF, hidden) row-major = ggml ne [hidden, nFF] */
  fc2: Float32Array;
  threshold: number;
}

/** A low-rank linear predictor of one layer: neuron i active when (fc2·fc1·x̂)[i] > thresholds[i], x̂ the ffn_norm output. */
export interface LinearPredictor {
  form: "linear";
  /** rank: fc1 is (rank, nEmbd), fc2 (nFF, rank); a multiple of 32 for Q8_0 */
  hidden: number;
  type: number; // GGML type of fc1 and fc2 rows (Q8_0 or F32)
  fc1: Uint8Array; // (rank, nEmbd) rows in `type` = ggml ne [nEmbd, rank]
  fc2: Uint8Array; // (nFF, rank) rows in `type` = ggml ne [rank, nFF]
  thresholds: Float32Array; // (nFF)
  /** (nFF) per neuron, the share of the evaluation tokens it did not fire on that it was flagged on (optional; the planner's cache model uses it). */
  falseFlags?: Float32Array;
}

export type LayerPredictor = MlpPredictor | LinearPredictor;

export const isLinear = (l: LayerPredictor): l is LinearPredictor => l.form === "linear";

export interface LayerReport {
  layer: number;
  hidden: number;
  params: number;
  threshold: number;
  /** linear with a cold share: the cold neurons' margin (threshold is the hot ones'). */
  coldThreshold?: number;
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

/** What a predictor file holds (the trainer's result has more). */
export interface PredictorFileContents {
  nLayer: number;
  nEmbd: number;
  nFF: number;
  layers: LayerPredictor[];
  report: Pick<LayerReport, "threshold" | "recall" | "precision" | "predictedActiveFrac" | "trainRecall">[];
  trainTokens: number;
  evalTokens: number;
}

export const PREDICTOR_KIND = "neuronpipe.predictor";

export async function writePredictors(path: string, r: PredictorFileContents, extra: { modelName?: string; corpus?: string; modelFingerprint?: string; notes?: Record<string, string> } = {}): Promise<number> {
  const w = new GGUFWriter();
  const linear = r.layers.length > 0 && r.layers.every(isLinear);
  if (!linear && r.layers.some(isLinear)) throw new Error("writePredictors: every layer must have the same form");
  w.setString("general.architecture", PREDICTOR_KIND);
  if (extra.modelName) w.setString("neuronpipe.predictor.model_name", extra.modelName);
  if (extra.corpus) w.setString("neuronpipe.predictor.corpus", extra.corpus);
  if (extra.modelFingerprint) w.setString("neuronpipe.predictor.model_fingerprint", extra.modelFingerprint);
  w.setU32("neuronpipe.predictor.n_layer", r.nLayer);
  w.setU32("neuronpipe.predictor.n_embd", r.nEmbd);
  w.setU32("neuronpipe.predictor.n_ff", r.nFF);
  w.setString("neuronpipe.predictor.form", linear ? "linear" : "mlp");
  if (linear) {
    w.setString("neuronpipe.predictor.input", "ffn_norm output (the FFN's normalised input)");
    w.setString("neuronpipe.predictor.rule", "neuron i predicted active when (fc2 · fc1 · x)[i] > blk.N.fc2.threshold[i]");
  } else {
    w.setString("neuronpipe.predictor.input", "residual stream entering the FFN block (before ffn_norm)");
    w.setString("neuronpipe.predictor.rule", "neuron i predicted active when (fc2 · relu(fc1 · x))[i] > threshold[layer]");
    w.setF32("powerinfer.sparse_threshold", 0);
  }
  for (const [k, v] of Object.entries(extra.notes ?? {})) w.setString(`neuronpipe.predictor.${k}`, v);
  const arr = (k: string, f: (l: PredictorFileContents["report"][number]) => number) => w.setArray(`neuronpipe.predictor.${k}`, ValueType.FLOAT32, Float32Array.from(r.report, f));
  if (!linear) arr("threshold", (l) => l.threshold);
  arr("recall", (l) => l.recall);
  arr("precision", (l) => l.precision);
  arr("predicted_active", (l) => l.predictedActiveFrac);
  arr("train_recall", (l) => l.trainRecall);
  w.setU32("neuronpipe.predictor.train_tokens", r.trainTokens);
  w.setU32("neuronpipe.predictor.eval_tokens", r.evalTokens);
  const bytes = (a: Float32Array | Uint8Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  r.layers.forEach((l, i) => {
    const type = isLinear(l) ? l.type : 0;
    w.addTensor({ name: `blk.${i}.fc1.weight`, ne: [r.nEmbd, l.hidden], type, data: () => bytes(l.fc1) });
    w.addTensor({ name: `blk.${i}.fc2.weight`, ne: [l.hidden, r.nFF], type, data: () => bytes(l.fc2) });
    if (isLinear(l)) w.addTensor({ name: `blk.${i}.fc2.threshold`, ne: [r.nFF], type: 0, data: () => bytes(l.thresholds) });
    if (isLinear(l) && l.falseFlags) w.addTensor({ name: `blk.${i}.fc2.false_flags`, ne: [r.nFF], type: 0, data: () => bytes(l.falseFlags!) });
  });
  return w.write(path);
}

/**
 * Read the predictors of a predictor file (or a PowerInfer model with blk.N.fc1/fc2). mlp: F32 or
 * F16 (converted), threshold per layer from neuronpipe.predictor.threshold[N], else
 * powerinfer.sparse_threshold, else 0. linear: the rows as stored, thresholds per neuron.
 */
export function readPredictors(path: string): { nEmbd: number; nFF: number; layers: LayerPredictor[]; modelFingerprint?: string } {
  const f = readGGUF(path);
  const fp = f.metadata.get("neuronpipe.predictor.model_fingerprint")?.value;
  const form = String(f.metadata.get("neuronpipe.predictor.form")?.value ?? "mlp");
  if (form !== "mlp" && form !== "linear") throw new Error(`${path}: neuronpipe.predictor.form is "${form}", expected "mlp" or "linear"`);
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
    if (t.type !== 0 && t.type !== 1) throw new Error(`${path}: tensor ${name} has type ${t.type}; only F32 (0) and F16 (1) mlp predictors are supported`);
    const dst = n.alloc(cols * rows * 4);
    try {
      for (let r = 0; r < rows; r++) n.dequantizeRow(t.type, mapped.id, t.offset, cols, r, dst, r * cols * 4);
      return Float32Array.from(n.viewF32(dst, 0, cols * rows));
    } finally {
      n.free(dst);
    }
  };
  const raw = (name: string, type: number, ne: number[]): Uint8Array => {
    const t = f.tensorsByName.get(name);
    if (!t) throw new Error(`${path}: missing tensor ${name}`);
    if (t.type !== type || t.ne.length !== ne.length || t.ne.some((d, i) => d !== ne[i])) throw new Error(`${path}: tensor ${name} is type ${t.type} [${t.ne.join(", ")}], expected type ${type} [${ne.join(", ")}]`);
    if (t.offset + t.nbytes > f.fileSize) throw new Error(`${path}: tensor ${name} runs past the end of the file (truncated)`);
    return Uint8Array.from(n.viewU8(mapped.id, t.offset, t.nbytes));
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
      if (form === "linear") {
        const type = t1.type;
        const th = raw(`blk.${i}.fc2.threshold`, 0, [ff]);
        const ff2 = f.tensorsByName.has(`blk.${i}.fc2.false_flags`) ? raw(`blk.${i}.fc2.false_flags`, 0, [ff]) : undefined;
        const falseFlags = ff2 && new Float32Array(ff2.buffer, ff2.byteOffset, ff);
        if (falseFlags?.some((x) => !(x >= 0 && x <= 1))) throw new Error(`${path}: blk.${i}.fc2.false_flags holds a value outside [0, 1]`);
        layers.push({ form: "linear", hidden: h, type, fc1: raw(t1.name, type, [e, h]), fc2: raw(t2.name, type, [h, ff]), thresholds: new Float32Array(th.buffer, th.byteOffset, ff), ...(falseFlags && { falseFlags }) });
      } else {
        const thr = thrArr !== undefined && i < thrArr.length ? Number(thrArr[i]) : thrGlobal;
        layers.push({ hidden: h, fc1: load(`blk.${i}.fc1.weight`, e, h), fc2: load(`blk.${i}.fc2.weight`, h, ff), threshold: thr });
      }
    }
  } finally {
    n.free(mapped.id);
  }
  if (layers.length === 0) throw new Error(`${path}: no predictor tensors (blk.N.fc1.weight / blk.N.fc2.weight)`);
  return { nEmbd, nFF, layers, ...(fp !== undefined ? { modelFingerprint: String(fp) } : {}) };
}
