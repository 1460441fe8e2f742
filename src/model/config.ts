// Model hyper-parameters read from GGUF metadata, and the FFN activation as a property of the model.
import { GGUFError, type GGUFFile, metaBool, metaNumber, metaString, requireNumber } from "../gguf/reader.js";

/** FFN gate: SwiGLU silu(gate)*up; ReGLU relu(gate)*up (ReluLLaMA, ProSparse); dReLU relu(gate)*relu(up) (TurboSparse, PowerInfer `bamboo`). */
export type FfnActivation = "swiglu" | "reglu" | "drelu";

/** The classifier's tensor: `output.weight`, or the token embedding when the two are tied (no `output.weight`). */
export function classifierTensor(f: GGUFFile): "output.weight" | "token_embd.weight" {
  return f.tensorsByName.has("output.weight") ? "output.weight" : "token_embd.weight";
}

export interface ModelConfig {
  arch: string;
  nLayer: number;
  nEmbd: number; // model width (dim)
  nFF: number; // FFN hidden width (hidden_dim)
  nHead: number;
  nHeadKv: number; // grouped-query attention when < nHead
  headDim: number;
  nCtxTrain: number;
  rmsEps: number;
  ropeBase: number;
  ropeDim: number;
  ropeNeox: boolean; // rotate (i, i+d/2) instead of (2i, 2i+1)
  nVocab: number;
  activation: FfnActivation;
  /** Where the activation came from, stated so no knob is silent. */
  activationSource: string;
}

/** Architectures we run, with the FFN activation each implies. */
const ARCHS: Record<string, FfnActivation | "by-key"> = {
  llama: "by-key", // SwiGLU unless neuronpipe.ffn_activation (or PowerInfer predictors) say otherwise
  mistral: "by-key",
  bamboo: "drelu", // PowerInfer's dReLU arch
  smallthinker: "reglu", // llama.cpp's relu(gate)*up; we accept the dense (one-expert) form
};

/** Documented key that states the FFN activation explicitly (docs/formats.md). */
export const ACTIVATION_KEY = "neuronpipe.ffn_activation";

export function readConfig(f: GGUFFile): ModelConfig {
  const arch = metaString(f, "general.architecture");
  if (!arch) throw new GGUFError(f.path, "missing metadata key general.architecture");
  const rule = ARCHS[arch];
  if (!rule) {
    throw new GGUFError(
      f.path,
      `unsupported architecture "${arch}" (supported: ${Object.keys(ARCHS).join(", ")})`,
    );
  }
  const k = (s: string) => `${arch}.${s}`;
  // every number a kernel relies on is checked here, naming its key (a bad value would otherwise
  // surface as NaN logits or a kernel's range error at the first token)
  const whole = (key: string, v: number | undefined, max: number, min = 1): number | undefined => {
    if (v !== undefined && !(Number.isInteger(v) && v >= min && v <= max)) throw new GGUFError(f.path, `metadata ${key} = ${v} is not a whole number from ${min} to ${max}`);
    return v;
  };
  const positive = (key: string, v: number | undefined, max: number): number | undefined => {
    if (v !== undefined && !(Number.isFinite(v) && v > 0 && v < max)) throw new GGUFError(f.path, `metadata ${key} = ${v} is not a number above 0 and below ${max}`);
    return v;
  };
  const nEmbd = whole(k("embedding_length"), requireNumber(f, k("embedding_length")), 1 << 20)!;
  const nHead = whole(k("attention.head_count"), requireNumber(f, k("attention.head_count")), 1 << 12)!;
  const nHeadKv = whole(k("attention.head_count_kv"), metaNumber(f, k("attention.head_count_kv")), nHead) ?? nHead;
  const nLayer = whole(k("block_count"), requireNumber(f, k("block_count")), 1 << 12)!;
  // refuse what we would otherwise compute wrongly
  const scaling = metaString(f, k("rope.scaling.type"));
  if ((scaling !== undefined && scaling !== "none") || f.tensorsByName.has("rope_freqs.weight")) {
    throw new GGUFError(f.path, `rope scaling (${scaling ?? "rope_freqs.weight"}) is not supported yet (Llama 3.1-style long-context models)`);
  }
  if (arch !== "smallthinker" && (metaNumber(f, k("expert_count")) ?? 0) > 0) {
    throw new GGUFError(f.path, `mixture-of-experts models (${k("expert_count")} = ${metaNumber(f, k("expert_count"))}) are not supported`);
  }
  if (arch === "smallthinker") {
    const experts = metaNumber(f, k("expert_count")) ?? 1;
    if (experts !== 1) {
      throw new GGUFError(f.path, `smallthinker with ${experts} experts: only the dense one-expert form (a ReGLU FFN) is supported`);
    }
  }
  let nFF = metaNumber(f, k("feed_forward_length"));
  if (nFF === undefined && arch === "smallthinker") nFF = metaNumber(f, k("expert_feed_forward_length"));
  if (nFF === undefined) throw new GGUFError(f.path, `missing metadata key ${k("feed_forward_length")}`);
  whole(k("feed_forward_length"), nFF, 1 << 22);
  if (nEmbd % nHead !== 0) throw new GGUFError(f.path, `embedding_length ${nEmbd} not divisible by head_count ${nHead}`);
  if (nHead % nHeadKv !== 0) throw new GGUFError(f.path, `head_count ${nHead} not divisible by head_count_kv ${nHeadKv}`);
  const headDim = whole(k("attention.key_length"), metaNumber(f, k("attention.key_length")), 1 << 12) ?? nEmbd / nHead;
  if (headDim !== nEmbd / nHead) throw new GGUFError(f.path, `metadata ${k("attention.key_length")} = ${headDim}: only embedding_length / head_count (${nEmbd / nHead}) is supported`);
  if (headDim % 2 !== 0) throw new GGUFError(f.path, `the head dimension ${headDim} (embedding_length / head_count) is odd: rotary embeddings rotate pairs`);
  const ropeDim = whole(k("rope.dimension_count"), metaNumber(f, k("rope.dimension_count")), headDim, 0) ?? headDim;
  if (ropeDim % 2 !== 0) throw new GGUFError(f.path, `metadata ${k("rope.dimension_count")} = ${ropeDim} is odd: rotary embeddings rotate pairs`);
  const tokens = f.metadata.get("tokenizer.ggml.tokens")?.value as unknown[] | undefined;
  const embd = f.tensorsByName.get("token_embd.weight");
  const nVocab = whole(k("vocab_size"), metaNumber(f, k("vocab_size")), 1 << 24) ?? tokens?.length ?? embd?.ne[1];
  if (nVocab === undefined) throw new GGUFError(f.path, "cannot tell the vocabulary size (no tokenizer.ggml.tokens)");
  const nCtxTrain = whole(k("context_length"), metaNumber(f, k("context_length")), 1 << 24) ?? 2048;
  const rmsEps = positive(k("attention.layer_norm_rms_epsilon"), metaNumber(f, k("attention.layer_norm_rms_epsilon")), 1) ?? 1e-5;
  const ropeBase = positive(k("rope.freq_base"), metaNumber(f, k("rope.freq_base")), 1e12) ?? 10000;

  let activation: FfnActivation;
  let activationSource: string;
  const stated = metaString(f, ACTIVATION_KEY);
  if (stated !== undefined) {
    if (stated !== "swiglu" && stated !== "reglu" && stated !== "drelu") {
      throw new GGUFError(f.path, `${ACTIVATION_KEY} = "${stated}" is not one of swiglu, reglu, drelu`);
    }
    activation = stated;
    activationSource = `metadata ${ACTIVATION_KEY}`;
  } else if (rule !== "by-key") {
    activation = rule;
    activationSource = `architecture ${arch}`;
  } else if (f.magic === "PWRI" || f.metadata.has("powerinfer.sparse_threshold")) {
    activation = "reglu"; // PowerInfer's ReluLLaMA / ProSparse files: ReGLU under arch llama
    activationSource = "PowerInfer file (ReluLLaMA convention)";
  } else {
    activation = "swiglu";
    activationSource = `architecture ${arch} (default)`;
  }

  return {
    arch,
    nLayer,
    nEmbd,
    nFF,
    nHead,
    nHeadKv,
    headDim,
    nCtxTrain,
    rmsEps,
    ropeBase,
    ropeDim,
    // llama.cpp: llama/mistral/bamboo use normal rope; smallthinker NeoX. Overridable by key.
    ropeNeox: metaBool(f, "neuronpipe.rope_neox") ?? arch === "smallthinker",
    nVocab,
    activation,
    activationSource,
  };
}
