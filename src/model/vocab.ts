// The tokenizer vocabulary stored in a GGUF file (tokenizer.ggml.*), as the tokenizer reads it.
import { GGUFError, type GGUFFile, metaArray, metaBool, metaNumber, metaString } from "../gguf/reader.js";
import type { GgufVocab } from "../tokenizer/vocab.js";

export function vocabFromGGUF(f: GGUFFile): GgufVocab {
  const model = metaString(f, "tokenizer.ggml.model");
  if (model === undefined) throw new GGUFError(f.path, "missing metadata key tokenizer.ggml.model (no tokenizer in the file)");
  if (model !== "llama" && model !== "gpt2") {
    throw new GGUFError(f.path, `tokenizer.ggml.model "${model}" is not supported (supported: llama, gpt2)`);
  }
  const tokens = metaArray(f, "tokenizer.ggml.tokens");
  if (!Array.isArray(tokens) || tokens.length === 0 || typeof tokens[0] !== "string") {
    throw new GGUFError(f.path, "tokenizer.ggml.tokens missing or not an array of strings");
  }
  const scores = metaArray(f, "tokenizer.ggml.scores");
  const types = metaArray(f, "tokenizer.ggml.token_type");
  const merges = metaArray(f, "tokenizer.ggml.merges");
  if (scores !== undefined && !(scores instanceof Float32Array && scores.length === tokens.length)) {
    throw new GGUFError(f.path, `tokenizer.ggml.scores must be ${tokens.length} f32 values`);
  }
  if (scores instanceof Float32Array) {
    const bad = scores.findIndex((x) => !Number.isFinite(x));
    if (bad >= 0) throw new GGUFError(f.path, `tokenizer.ggml.scores[${bad}] is ${scores[bad]}, not a finite number`);
  }
  if (types !== undefined && !(types instanceof Int32Array && types.length === tokens.length)) {
    throw new GGUFError(f.path, `tokenizer.ggml.token_type must be ${tokens.length} i32 values`);
  }
  if (model === "gpt2" && !Array.isArray(merges)) throw new GGUFError(f.path, "BPE tokenizer without tokenizer.ggml.merges");
  const id = (k: string) => {
    const v = metaNumber(f, k);
    if (v !== undefined && !(Number.isInteger(v) && v >= 0 && v < tokens.length)) throw new GGUFError(f.path, `${k} = ${v} is not a token id (0 to ${tokens.length - 1})`);
    return v;
  };
  return {
    model,
    pre: metaString(f, "tokenizer.ggml.pre"),
    tokens: tokens as string[],
    scores: scores as Float32Array | undefined,
    tokenTypes: types as Int32Array | undefined,
    merges: merges as string[] | undefined,
    bosId: id("tokenizer.ggml.bos_token_id"),
    eosId: id("tokenizer.ggml.eos_token_id"),
    unkId: id("tokenizer.ggml.unknown_token_id"),
    padId: id("tokenizer.ggml.padding_token_id"),
    addBos: metaBool(f, "tokenizer.ggml.add_bos_token"),
    addEos: metaBool(f, "tokenizer.ggml.add_eos_token"),
    addSpacePrefix: metaBool(f, "tokenizer.ggml.add_space_prefix"),
  };
}
