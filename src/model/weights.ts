// Model weights as references into native memory: the mapped GGUF file (zero copy) or, for
// the few tensors a kernel needs in another type (norms in F32), a small native copy.
import { GGUFError, type GGUFFile, type TensorInfo } from "../gguf/reader.js";
import { computeTypes, tensorTypeName } from "../gguf/types.js";
import { GGMLType, native } from "../native.js";
import { classifierTensor, type ModelConfig } from "./config.js";

/** A weight matrix of `rows` rows by `cols` columns (GGUF ne = [cols, rows]) in native memory. */
export interface Tensor {
  name: string;
  buf: number; // native buffer id
  off: number; // byte offset in the buffer
  type: number; // GGML type id
  rows: number;
  cols: number;
}

export interface LayerWeights {
  attnNorm: Tensor; // (dim) f32
  wq: Tensor; // (nHead*headDim, dim)
  wk: Tensor; // (nHeadKv*headDim, dim)
  wv: Tensor; // (nHeadKv*headDim, dim)
  wo: Tensor; // (dim, nHead*headDim)
  ffnNorm: Tensor; // (dim) f32
  // dense FFN; absent when a sparse FFN (neuron cache over a pack) computes it
  ffnGate?: Tensor; // (hidden_dim, dim)
  ffnUp?: Tensor; // (hidden_dim, dim)
  ffnDown?: Tensor; // (dim, hidden_dim)
}

export interface Weights {
  tokenEmbd: Tensor; // (vocab, dim)
  layers: LayerWeights[];
  outputNorm: Tensor; // (dim) f32
  output: Tensor; // (vocab, dim); the embedding itself when tied
  tiedOutput: boolean;
  /** Native buffers owned by these weights (the file mapping and converted copies). */
  buffers: number[];
}

export interface BindOptions {
  /** Bind the dense FFN matrices (false for a neuron pack, whose FFN lives in the neuron cache). */
  ffn?: boolean;
  /** Where a tensor's bytes are in `fileBuf` (default: its offset in the file, for a mapping). */
  offsetOf?: (t: TensorInfo) => number;
}

/** Bind every tensor of a llama-family model, checking names, shapes and types. */
export function bindWeights(f: GGUFFile, cfg: ModelConfig, fileBuf: number, opts: BindOptions = {}): Weights {
  const at = opts.offsetOf ?? ((t: TensorInfo) => t.offset);
  const withFfn = opts.ffn ?? true;
  const owned: number[] = [];
  const get = (name: string, cols: number, rows: number): TensorInfo => {
    const t = f.tensorsByName.get(name);
    if (!t) throw new GGUFError(f.path, `missing tensor ${name}`);
    const [c, r = 1, ...more] = t.ne;
    if (c !== cols || r !== rows || more.some((d) => d !== 1)) {
      throw new GGUFError(f.path, `tensor ${name} has shape [${t.ne.join(", ")}], expected [${cols}, ${rows}]`, t.offset);
    }
    if (!computeTypes.has(t.type)) {
      throw new GGUFError(
        f.path,
        `tensor ${name} has type ${tensorTypeName(t.type)}; supported weight types are F32, F16, Q8_0, Q4_0`,
        t.offset,
      );
    }
    return t;
  };
  const matrix = (name: string, cols: number, rows: number): Tensor => {
    const t = get(name, cols, rows);
    return { name, buf: fileBuf, off: at(t), type: t.type, rows, cols };
  };
  // Norm weights are used as f32 vectors; convert other types once at load.
  const vector = (name: string, n: number): Tensor => {
    const t = get(name, n, 1);
    if (t.type === GGMLType.F32) return { name, buf: fileBuf, off: at(t), type: t.type, rows: 1, cols: n };
    const nat = native();
    const buf = nat.alloc(n * 4);
    owned.push(buf);
    nat.dequantizeRow(t.type, fileBuf, at(t), n, 0, buf, 0);
    return { name, buf, off: 0, type: GGMLType.F32, rows: 1, cols: n };
  };

  const { nEmbd: dim, nFF: hidden, nHead, nHeadKv, headDim, nVocab } = cfg;
  const layers: LayerWeights[] = [];
  for (let l = 0; l < cfg.nLayer; l++) {
    const p = `blk.${l}.`;
    const ffn = (m: "gate" | "up" | "down") =>
      cfg.arch === "smallthinker" && !f.tensorsByName.has(`${p}ffn_${m}.weight`) ? `${p}ffn_${m}_exps.weight` : `${p}ffn_${m}.weight`;
    layers.push({
      attnNorm: vector(`${p}attn_norm.weight`, dim),
      wq: matrix(`${p}attn_q.weight`, dim, nHead * headDim),
      wk: matrix(`${p}attn_k.weight`, dim, nHeadKv * headDim),
      wv: matrix(`${p}attn_v.weight`, dim, nHeadKv * headDim),
      wo: matrix(`${p}attn_output.weight`, nHead * headDim, dim),
      ffnNorm: vector(`${p}ffn_norm.weight`, dim),
      ...(withFfn && {
        ffnGate: matrix(ffn("gate"), dim, hidden),
        ffnUp: matrix(ffn("up"), dim, hidden),
        ffnDown: matrix(ffn("down"), hidden, dim),
      }),
    });
  }
  const tokenEmbd = matrix("token_embd.weight", dim, nVocab);
  const tiedOutput = classifierTensor(f) === "token_embd.weight";
  return {
    tokenEmbd,
    layers,
    outputNorm: vector("output_norm.weight", dim),
    output: tiedOutput ? tokenEmbd : matrix("output.weight", dim, nVocab),
    tiedOutput,
    buffers: [fileBuf, ...owned],
  };
}
