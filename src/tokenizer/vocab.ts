// GGUF vocabulary description and the loaded form used by the tokenizers.
// Loading mirrors llama_vocab::impl::load() in llama.cpp's src/llama-vocab.cpp.

import { resolvePreTokenizer, type PreTokenizerSpec } from "./pre-tokenizer.js";

export interface GgufVocab {
  model: "llama" | "gpt2"; // tokenizer.ggml.model
  pre?: string; // tokenizer.ggml.pre, e.g. "default", "llama-bpe" (llama3), "gpt-2", "qwen2", ...
  tokens: string[]; // tokenizer.ggml.tokens
  scores?: Float32Array; // tokenizer.ggml.scores (SPM)
  tokenTypes?: Int32Array; // tokenizer.ggml.token_type: 1 normal, 2 unknown, 3 control, 4 user_defined, 5 unused, 6 byte
  merges?: string[]; // tokenizer.ggml.merges (BPE), "a b" per line
  bosId?: number;
  eosId?: number;
  unkId?: number;
  padId?: number;
  addBos?: boolean; // tokenizer.ggml.add_bos_token
  addEos?: boolean; // tokenizer.ggml.add_eos_token
  addSpacePrefix?: boolean; // tokenizer.ggml.add_space_prefix (SPM; default true)
}

/** tokenizer.ggml.token_type values (llama_token_type). */
export const TokenType = {
  UNDEFINED: 0,
  NORMAL: 1,
  UNKNOWN: 2,
  CONTROL: 3,
  USER_DEFINED: 4,
  UNUSED: 5,
  BYTE: 6,
} as const;

/** llama_token_attr bits. */
export const TokenAttr = {
  UNDEFINED: 0,
  UNKNOWN: 1 << 0,
  UNUSED: 1 << 1,
  NORMAL: 1 << 2,
  CONTROL: 1 << 3,
  USER_DEFINED: 1 << 4,
  BYTE: 1 << 5,
  NORMALIZED: 1 << 6,
  LSTRIP: 1 << 7,
  RSTRIP: 1 << 8,
  SINGLE_WORD: 1 << 9,
} as const;

function typeToAttr(t: number): number {
  switch (t) {
    case TokenType.UNKNOWN:
      return TokenAttr.UNKNOWN;
    case TokenType.UNUSED:
      return TokenAttr.UNUSED;
    case TokenType.NORMAL:
      return TokenAttr.NORMAL;
    case TokenType.CONTROL:
      return TokenAttr.CONTROL;
    case TokenType.USER_DEFINED:
      return TokenAttr.USER_DEFINED;
    case TokenType.BYTE:
      return TokenAttr.BYTE;
    default:
      return TokenAttr.UNDEFINED;
  }
}

// Token texts llama.cpp recognises as special by text (see load()).
const EOT_TEXTS = new Set([
  "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
  "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
]);
const EOM_TEXTS = new Set(["<|eom_id|>"]);
const FIM_TEXTS = [
  ["<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"],
  ["<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"],
  ["<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"],
];
const FIM_PAD_TEXTS = ["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS = ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS = ["<|file_sep|>"];
const EOG_TEXTS = new Set([
  "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
  "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
  "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
  "<｜end▁of▁sentence｜>", "[e~[",
]);
const ALWAYS_USER_DEFINED = new Set(["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"]);

export type VocabKind = "spm" | "bpe";

/** Vocabulary after llama.cpp-style loading (attributes fixed up, special ids resolved). */
export class LoadedVocab {
  readonly kind: VocabKind;
  readonly tokens: string[];
  readonly tokenToId: Map<string, number>;
  readonly scores: Float32Array;
  readonly attrs: Int32Array;
  readonly nTokens: number;

  readonly bosId: number | undefined;
  readonly eosId: number | undefined;
  readonly unkId: number | undefined;
  readonly padId: number | undefined;
  readonly eotId: number | undefined;
  readonly eomId: number | undefined;
  readonly addBos: boolean;
  readonly addEos: boolean;
  readonly addSpacePrefix: boolean;
  readonly cleanSpaces: boolean;
  readonly ignoreMerges: boolean;
  readonly eogIds: Set<number>;
  /** CONTROL | USER_DEFINED | UNKNOWN token ids, longest text first. */
  readonly specialTokens: number[];
  /** BPE only */
  readonly pre: PreTokenizerSpec | undefined;
  readonly merges: string[];

  constructor(v: GgufVocab) {
    const n = v.tokens.length;
    if (n === 0) throw new Error("tokenizer: empty vocabulary");
    this.nTokens = n;
    let bos: number | undefined;
    let eos: number | undefined;
    let unk: number | undefined;
    let pad: number | undefined;
    let addBos = false;
    let addEos = false;
    let addSpacePrefix = false;
    let cleanSpaces = false;
    let ignoreMerges = false;

    if (v.model === "llama") {
      this.kind = "spm";
      bos = 1;
      eos = 2;
      unk = 0;
      addSpacePrefix = true;
      addBos = true;
      this.pre = undefined;
      this.merges = [];
    } else if (v.model === "gpt2") {
      this.kind = "bpe";
      bos = 11;
      eos = 11;
      if (!v.merges) throw new Error("tokenizer: BPE (gpt2) vocabulary without merges");
      this.merges = v.merges;
      cleanSpaces = true;
      const spec = resolvePreTokenizer(v.pre);
      this.pre = spec;
      if (spec.cleanSpaces !== undefined) cleanSpaces = spec.cleanSpaces;
      if (spec.ignoreMerges) ignoreMerges = true;
      if (spec.addBos) addBos = true;
    } else {
      throw new Error(`tokenizer: unknown tokenizer model '${String((v as { model: unknown }).model)}'`);
    }
    if (v.addSpacePrefix !== undefined) addSpacePrefix = v.addSpacePrefix;

    // tokens, scores, attributes
    const tokens: string[] = new Array<string>(n);
    const tokenToId = new Map<string, number>();
    const scores = new Float32Array(n);
    const attrs = new Int32Array(n);
    if (v.scores && v.scores.length < n) throw new Error("tokenizer: fewer scores than tokens");
    if (v.tokenTypes && v.tokenTypes.length < n) throw new Error("tokenizer: fewer token types than tokens");
    for (let i = 0; i < n; i++) {
      let word = v.tokens[i]!;
      if (word.length === 0) word = `[EMPTY_${i}]`;
      const prev = tokenToId.get(word);
      if (prev !== undefined) {
        throw new Error(`tokenizer: duplicate token in vocabulary: '${word}' has ids ${prev} and ${i}`);
      }
      tokenToId.set(word, i);
      tokens[i] = word;
      scores[i] = v.scores ? v.scores[i]! : 0;
      attrs[i] = v.tokenTypes ? typeToAttr(v.tokenTypes[i]!) : TokenAttr.NORMAL;
    }
    this.tokens = tokens;
    this.tokenToId = tokenToId;
    this.scores = scores;
    this.attrs = attrs;

    // special ids: defaults out of range are disabled, explicit out-of-range ids keep the default
    const fix = (def: number | undefined, given: number | undefined): number | undefined => {
      let id = def !== undefined && def >= n ? undefined : def;
      if (given !== undefined && given >= 0 && given < n) id = given;
      return id;
    };
    this.bosId = fix(bos, v.bosId);
    this.eosId = fix(eos, v.eosId);
    this.unkId = fix(unk, v.unkId);
    this.padId = fix(pad, v.padId);
    if (v.addBos !== undefined) addBos = v.addBos;
    if (v.addEos !== undefined) addEos = v.addEos;
    if (addBos && this.bosId === undefined) throw new Error("tokenizer: add_bos_token is true, but bos_token_id is not set");
    if (addEos && this.eosId === undefined) throw new Error("tokenizer: add_eos_token is true, but eos_token_id is not set");
    this.addBos = addBos;
    this.addEos = addEos;
    this.addSpacePrefix = addSpacePrefix;
    this.cleanSpaces = cleanSpaces;
    this.ignoreMerges = ignoreMerges;

    // text-based detection of EOT / EOM / FIM tokens (forces the CONTROL bit)
    const findText = (texts: Iterable<string>): number | undefined => {
      for (const t of texts) {
        const id = tokenToId.get(t);
        if (id !== undefined) return id;
      }
      return undefined;
    };
    const markControl = (id: number | undefined) => {
      if (id !== undefined) attrs[id] = attrs[id]! | TokenAttr.CONTROL;
    };
    const eot = findText(EOT_TEXTS);
    const eom = findText(EOM_TEXTS);
    markControl(eot);
    markControl(eom);
    for (const group of FIM_TEXTS) markControl(findText(group));
    const fimPad = findText(FIM_PAD_TEXTS);
    const fimRep = findText(FIM_REP_TEXTS);
    const fimSep = findText(FIM_SEP_TEXTS);
    markControl(fimPad);
    markControl(fimRep);
    markControl(fimSep);
    this.eotId = eot;
    this.eomId = eom;

    // control tokens whose text contains "unused" are also UNUSED
    for (let i = 0; i < n; i++) {
      if ((attrs[i]! & TokenAttr.CONTROL) !== 0 && tokens[i]!.includes("unused")) {
        attrs[i] = attrs[i]! | TokenAttr.UNUSED;
      }
    }

    // end-of-generation set
    const eog = new Set<number>();
    for (const id of [fimPad, fimRep, fimSep]) if (id !== undefined) eog.add(id);
    for (const t of EOG_TEXTS) {
      const id = tokenToId.get(t);
      if (id !== undefined) {
        eog.add(id);
        attrs[id] = attrs[id]! | TokenAttr.CONTROL;
      }
    }
    for (const t of ALWAYS_USER_DEFINED) {
      const id = tokenToId.get(t);
      if (id !== undefined) attrs[id] = TokenAttr.USER_DEFINED;
    }
    for (const id of [this.eosId, eot, eom]) if (id !== undefined) eog.add(id);
    {
      // o200k_harmony / solar-open: "<|end|>" is not EOG when "<|return|>"+"<|call|>" (or "<|calls|>"+"<|flush|>") exist
      let hasReturn = false, hasCall = false, hasFlush = false;
      let endId: number | undefined;
      for (const id of eog) {
        const t = tokens[id];
        if (t === "<|return|>") hasReturn = true;
        else if (t === "<|call|>" || t === "<|calls|>") hasCall = true;
        else if (t === "<|flush|>") hasFlush = true;
        else if (t === "<|end|>") endId = id;
      }
      if (endId !== undefined && ((hasReturn && hasCall) || (hasCall && hasFlush))) {
        eog.delete(endId);
        attrs[endId] = TokenAttr.USER_DEFINED;
      }
      // gemma4 / paddleocr: "</s>" is not EOG when "<|tool_response>" exists
      let hasToolResponse = false;
      let sId: number | undefined;
      for (const id of eog) {
        if (tokens[id] === "<|tool_response>") hasToolResponse = true;
        else if (tokens[id] === "</s>") sId = id;
      }
      if (hasToolResponse && sId !== undefined) {
        eog.delete(sId);
        attrs[sId] = TokenAttr.NORMAL;
      }
    }
    this.eogIds = eog;

    // special tokens cache, longest first (llama.cpp uses an unstable sort; ties broken by id here)
    const special: number[] = [];
    const mask = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN;
    for (let i = 0; i < n; i++) if ((attrs[i]! & mask) !== 0) special.push(i);
    const byteLen = (s: string) => Buffer.byteLength(s, "utf8");
    const lens = new Map<number, number>();
    for (const id of special) lens.set(id, byteLen(tokens[id]!));
    special.sort((a, b) => lens.get(b)! - lens.get(a)! || a - b);
    this.specialTokens = special;
  }
}
