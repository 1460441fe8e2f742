// The predictor file (docs/formats.md, "Predictors"): a GGUF with PowerInfer's tensor names
// blk.N.fc1.weight / blk.N.fc2.weight and a threshold per layer. Written by the trainer
// (tools/train-predictor.ts), read by the pack writer.
import { readGGUF } from "../gguf/reader.js";
import { GGUFWriter } from "../gguf/writer.js";
import { ValueType } from "../gguf/types.js";
import { native } from "../native.js";

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

export async function writePredictors(path: string, r: PredictorFileContents, extra: { modelName?: string; corpus?: string; modelFingerprint?: string } = {}): Promise<number> {
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
  const arr = (k: string, f: (l: PredictorFileContents["report"][number]) => number) => w.setArray(`neuronpipe.predictor.${k}`, ValueType.FLOAT32, Float32Array.from(r.report, f));
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
