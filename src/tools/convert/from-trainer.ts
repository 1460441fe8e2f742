// GGUF from the trainer's export (tools/train/out: model.json + weights.bin + tokenizer.json),
// written with our own GGUF writer.
//
// Two architectures:
// - `smallthinker` (default): llama.cpp's one architecture with a relu(gate)*up FFN. It is a
//   mixture-of-experts; with one expert (router softmax over one logit = 1) it is exactly a
//   dense ReGLU FFN, so llama.cpp runs the file too. Its rope is NeoX-style, so the rows of
//   attn_q/attn_k are permuted from the trainer's adjacent-pair order (2i, 2i+1) to the
//   half-split order (i, i+d/2): q·k is unchanged because both get the same permutation.
// - `llama` + `neuronpipe.ffn_activation`: neuronpipe only (llama.cpp would read it as SwiGLU).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { GGUFWriter } from "../../gguf/writer.js";
import { ACTIVATION_KEY } from "../../model/config.js";
import { GGMLType, native } from "../../native.js";
import { writeVocab } from "../synth/synth.js";
import type { GgufVocab } from "../../tokenizer/vocab.js";

interface TrainerTensor {
  name: string;
  dtype: "f32";
  shape: number[]; // PyTorch order [out, in]
  gguf_ne: number[];
  offset: number;
  nbytes: number;
}

export interface TrainerExport {
  config: {
    n_vocab: number;
    n_embd: number;
    n_layer: number;
    n_head: number;
    n_head_kv: number;
    n_ff: number;
    ctx: number;
    rope_base: number;
    rms_eps: number;
    activation: "reglu" | "drelu";
    tied: boolean;
  };
  tensors: TrainerTensor[];
  weights_file: string;
}

export interface ConvertOptions {
  arch?: "smallthinker" | "llama";
  type?: number; // weight type of the matrices (norms stay F32)
  name?: string;
}

function readTokenizer(dir: string): GgufVocab {
  const j = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  return {
    model: "llama",
    pre: "default",
    tokens: j.tokens,
    scores: Float32Array.from(j.scores),
    tokenTypes: Int32Array.from(j.token_type),
    bosId: j.bos_id,
    eosId: j.eos_id,
    unkId: j.unk_id,
    padId: j.pad_id >= 0 ? j.pad_id : undefined,
    addBos: j.add_bos,
    addEos: j.add_eos,
    addSpacePrefix: true,
  };
}

/** Rows of a (rows, cols) f32 matrix reordered within each head from (2i, 2i+1) pairs to (i, i+d/2) halves. */
function permuteToNeox(src: Float32Array, nHeads: number, headDim: number, cols: number): Float32Array {
  const out = new Float32Array(src.length);
  const half = headDim / 2;
  for (let h = 0; h < nHeads; h++) {
    for (let i = 0; i < half; i++) {
      const base = h * headDim;
      out.set(src.subarray((base + 2 * i) * cols, (base + 2 * i + 1) * cols), (base + i) * cols);
      out.set(src.subarray((base + 2 * i + 1) * cols, (base + 2 * i + 2) * cols), (base + half + i) * cols);
    }
  }
  return out;
}

export function convertTrainerExport(dir: string, opts: ConvertOptions = {}): GGUFWriter {
  const meta = JSON.parse(readFileSync(join(dir, "model.json"), "utf8")) as TrainerExport;
  const c = meta.config;
  const arch = opts.arch ?? "smallthinker";
  const type = opts.type ?? GGMLType.F32;
  const bin = readFileSync(join(dir, meta.weights_file));
  const headDim = c.n_embd / c.n_head;
  const byName = new Map(meta.tensors.map((t) => [t.name, t]));
  const f32 = (name: string): Float32Array => {
    const t = byName.get(name);
    if (!t) throw new Error(`${dir}/model.json: no tensor ${name}`);
    if (t.offset + t.nbytes > bin.length) throw new Error(`${dir}/${meta.weights_file}: tensor ${name} at ${t.offset} runs past the end`);
    const a = new Float32Array(t.nbytes / 4);
    new Uint8Array(a.buffer).set(bin.subarray(t.offset, t.offset + t.nbytes));
    return a;
  };
  const encode = (a: Float32Array, rows: number, cols: number, tt: number): Uint8Array => {
    if (tt === GGMLType.F32) return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    const n = native();
    const src = n.alloc(a.byteLength);
    n.viewF32(src, 0, a.length).set(a);
    const rb = n.rowBytes(tt, cols);
    const dst = n.alloc(rows * rb);
    n.quantize(tt, src, 0, dst, 0, rows, cols);
    const out = Uint8Array.from(n.viewU8(dst, 0, rows * rb));
    n.free(src);
    n.free(dst);
    return out;
  };

  const w = new GGUFWriter();
  const k = (s: string) => `${arch}.${s}`;
  w.setString("general.architecture", arch);
  w.setString("general.name", opts.name ?? "neuronpipe-reglu-default");
  w.setU32("general.alignment", 32);
  w.setU32(k("context_length"), c.ctx);
  w.setU32(k("embedding_length"), c.n_embd);
  w.setU32(k("block_count"), c.n_layer);
  w.setU32(k("feed_forward_length"), c.n_ff);
  w.setU32(k("attention.head_count"), c.n_head);
  w.setU32(k("attention.head_count_kv"), c.n_head_kv);
  w.setF32(k("attention.layer_norm_rms_epsilon"), c.rms_eps);
  w.setF32(k("rope.freq_base"), c.rope_base);
  w.setU32(k("rope.dimension_count"), headDim);
  w.setU32(k("vocab_size"), c.n_vocab);
  if (arch === "smallthinker") {
    w.setU32(k("expert_count"), 1);
    w.setU32(k("expert_used_count"), 1);
    w.setU32(k("expert_feed_forward_length"), c.n_ff);
    w.setU32(k("expert_gating_func"), 1); // softmax: one expert gets weight 1
    if (c.activation !== "reglu") throw new Error(`smallthinker is ReGLU only; this model is ${c.activation} (use --arch llama)`);
  } else {
    w.setString(ACTIVATION_KEY, c.activation);
  }
  writeVocab(w, readTokenizer(dir));

  const mat = (name: string, rows: number, cols: number, transform?: (a: Float32Array) => Float32Array, ne?: number[], outName = name) => {
    const tt = cols % 32 === 0 ? type : GGMLType.F32;
    w.addTensor({
      name: outName,
      ne: ne ?? [cols, rows],
      type: tt,
      data: () => {
        const a = f32(name);
        return encode(transform ? transform(a) : a, rows, cols, tt);
      },
    });
  };
  const vec = (name: string, n: number) =>
    w.addTensor({ name, ne: [n], type: GGMLType.F32, data: () => new Uint8Array(f32(name).buffer) });

  const D = c.n_embd;
  const neox = arch === "smallthinker";
  mat("token_embd.weight", c.n_vocab, D);
  for (let l = 0; l < c.n_layer; l++) {
    const p = `blk.${l}.`;
    vec(`${p}attn_norm.weight`, D);
    mat(`${p}attn_q.weight`, c.n_head * headDim, D, neox ? (a) => permuteToNeox(a, c.n_head, headDim, D) : undefined);
    mat(`${p}attn_k.weight`, c.n_head_kv * headDim, D, neox ? (a) => permuteToNeox(a, c.n_head_kv, headDim, D) : undefined);
    mat(`${p}attn_v.weight`, c.n_head_kv * headDim, D);
    mat(`${p}attn_output.weight`, D, c.n_head * headDim);
    vec(`${p}ffn_norm.weight`, D);
    if (arch === "smallthinker") {
      // the one-expert router: its logit is irrelevant (softmax over one expert = 1)
      w.addTensor({ name: `${p}ffn_gate_inp.weight`, ne: [D, 1], type: GGMLType.F32, data: () => new Uint8Array(D * 4) });
      mat(`${p}ffn_gate.weight`, c.n_ff, D, undefined, [D, c.n_ff, 1], `${p}ffn_gate_exps.weight`);
      mat(`${p}ffn_up.weight`, c.n_ff, D, undefined, [D, c.n_ff, 1], `${p}ffn_up_exps.weight`);
      mat(`${p}ffn_down.weight`, D, c.n_ff, undefined, [c.n_ff, D, 1], `${p}ffn_down_exps.weight`);
    } else {
      mat(`${p}ffn_gate.weight`, c.n_ff, D);
      mat(`${p}ffn_up.weight`, c.n_ff, D);
      mat(`${p}ffn_down.weight`, D, c.n_ff);
    }
  }
  vec("output_norm.weight", D);
  if (!c.tied) mat("output.weight", c.n_vocab, D);
  return w;
}
