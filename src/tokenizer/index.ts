// Tokenizers built from a GGUF vocabulary, behaving like llama.cpp's llama_vocab
// (tokenize / token_to_piece / detokenize).  See README.md in this folder.

import { BpeTokenizer } from "./bpe.js";
import { spmTokenize } from "./spm.js";
import { unicodeToByte, utf8Encode, wellFormed } from "./unicode.js";
import { LoadedVocab, TokenAttr, type GgufVocab } from "./vocab.js";

export { TokenAttr, TokenType, LoadedVocab } from "./vocab.js";
export type { GgufVocab } from "./vocab.js";
export { SUPPORTED_PRE_TOKENIZERS, resolvePreTokenizer, preTokenize } from "./pre-tokenizer.js";
export { vocabFromHfTokenizerJson } from "./hf-import.js";
export type { HfImportOptions } from "./hf-import.js";

export interface EncodeOptions {
  /** prepend BOS; default: the vocabulary's add_bos (llama.cpp rules, see README) */
  addBos?: boolean;
  /** append EOS; default: the vocabulary's add_eos */
  addEos?: boolean;
  /**
   * llama.cpp's `add_special` flag: when given, BOS/EOS are added exactly when
   * add_special && add_bos / add_eos (overrides the defaults above; addBos/addEos still win when set).
   */
  addSpecial?: boolean;
  /** parse control/unknown tokens written in the text (llama.cpp parse_special); user-defined tokens are always parsed */
  parseSpecial?: boolean;
}

export interface DecodeOptions {
  /** llama_detokenize remove_special: drop a leading BOS / trailing EOS when the vocab adds them */
  removeSpecial?: boolean;
  /** llama_detokenize unparse_special: render control/unknown tokens as their text */
  unparseSpecial?: boolean;
}

export interface DecoderStreamOptions {
  /** render control/unknown tokens as text (default false) */
  special?: boolean;
  /** strip one leading space from the first piece (what detokenize does for SPM vocabs); default false */
  stripLeadingSpace?: boolean;
}

export interface DecoderStream {
  /** feed one token; returns the newly completed text (possibly "") */
  push(id: number): string;
  /** end of stream: returns what is left (incomplete UTF-8 becomes U+FFFD) */
  flush(): string;
}

export interface Tokenizer {
  readonly type: "spm" | "bpe";
  readonly vocabSize: number;
  readonly bosId: number | undefined;
  readonly eosId: number | undefined;
  readonly eotId: number | undefined;
  readonly unkId: number | undefined;
  readonly padId: number | undefined;
  readonly addBos: boolean;
  readonly addEos: boolean;
  readonly addSpacePrefix: boolean;
  encode(text: string, opts?: EncodeOptions): number[];
  decode(ids: readonly number[], opts?: DecodeOptions): string;
  /** detokenize to raw bytes (llama_detokenize) */
  decodeBytes(ids: readonly number[], opts?: DecodeOptions): Uint8Array;
  /** raw bytes of a token (llama_token_to_piece); `special` renders control/unknown tokens (default true) */
  tokenToPiece(id: number, special?: boolean, lstrip?: number): Uint8Array;
  /** the token's vocabulary text */
  tokenText(id: number): string;
  /** llama_token_attr bits */
  tokenAttr(id: number): number;
  /** text -> id (exact vocabulary entry) */
  tokenId(text: string): number | undefined;
  isEog(id: number): boolean;
  isControl(id: number): boolean;
  createDecoderStream(opts?: DecoderStreamOptions): DecoderStream;
}

type Fragment = { token: number } | { start: number; end: number };

/** llama_vocab::impl::tokenizer_st_partition */
function partition(v: LoadedVocab, text: string, parseSpecial: boolean): Fragment[] {
  let frags: Fragment[] = [{ start: 0, end: text.length }];
  for (const id of v.specialTokens) {
    const attr = v.attrs[id]!;
    if (!parseSpecial && attr & (TokenAttr.CONTROL | TokenAttr.UNKNOWN)) continue;
    const tok = v.tokens[id]!;
    const next: Fragment[] = [];
    let changed = false;
    for (const f of frags) {
      if ("token" in f) {
        next.push(f);
        continue;
      }
      let base = f.start;
      const end = f.end;
      for (;;) {
        const m = text.indexOf(tok, base);
        if (m === -1 || m + tok.length > end) {
          if (base < end) next.push({ start: base, end });
          break;
        }
        changed = true;
        let leftEnd = m;
        if (attr & TokenAttr.LSTRIP) while (leftEnd > base && isCSpace(text.charCodeAt(leftEnd - 1))) leftEnd--;
        if (leftEnd > base) next.push({ start: base, end: leftEnd });
        next.push({ token: id });
        let rs = m + tok.length;
        if (attr & TokenAttr.RSTRIP) while (rs < end && isCSpace(text.charCodeAt(rs))) rs++;
        if (rs >= end) break;
        base = rs;
      }
    }
    if (changed) frags = next;
  }
  return frags;
}

function isCSpace(c: number): boolean {
  return c === 0x20 || (c >= 0x09 && c <= 0x0d);
}

function concatBytes(parts: Uint8Array[], total: number): Uint8Array {
  const out = new Uint8Array(total);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

const EMPTY = new Uint8Array(0);

class TokenizerImpl implements Tokenizer {
  readonly type: "spm" | "bpe";
  private readonly v: LoadedVocab;
  private readonly bpe: BpeTokenizer | undefined;
  private readonly pieceCache: Uint8Array[];

  constructor(vocab: GgufVocab) {
    this.v = new LoadedVocab(vocab);
    this.type = this.v.kind;
    this.bpe = this.v.kind === "bpe" ? new BpeTokenizer(this.v) : undefined;
    this.pieceCache = new Array<Uint8Array>(this.v.nTokens);
  }

  get vocabSize() { return this.v.nTokens; }
  get bosId() { return this.v.bosId; }
  get eosId() { return this.v.eosId; }
  get eotId() { return this.v.eotId; }
  get unkId() { return this.v.unkId; }
  get padId() { return this.v.padId; }
  get addBos() { return this.v.addBos; }
  get addEos() { return this.v.addEos; }
  get addSpacePrefix() { return this.v.addSpacePrefix; }

  encode(text: string, opts: EncodeOptions = {}): number[] {
    const v = this.v;
    text = wellFormed(text);
    const special = opts.addSpecial;
    const addBos = opts.addBos ?? (special === undefined ? v.addBos : special && v.addBos);
    const addEos = opts.addEos ?? (special === undefined ? v.addEos : special && v.addEos);
    const out: number[] = [];
    const frags = text.length > 0 ? partition(v, text, opts.parseSpecial ?? false) : [];
    if (addBos) {
      if (v.bosId === undefined) throw new Error("tokenizer: BOS requested but the vocabulary has no BOS token");
      out.push(v.bosId);
    }
    if (v.kind === "spm") {
      let isPrevSpecial = true; // prefix with a space if first token
      for (const f of frags) {
        if ("token" in f) {
          out.push(f.token);
          isPrevSpecial = true;
          continue;
        }
        let s = text.substring(f.start, f.end);
        if (v.addSpacePrefix && isPrevSpecial) s = " " + s;
        spmTokenize(v, s.replaceAll(" ", "\u2581"), out);
        isPrevSpecial = false;
      }
    } else {
      for (const f of frags) {
        if ("token" in f) out.push(f.token);
        else this.bpe!.tokenize(text.substring(f.start, f.end), out);
      }
    }
    if (addEos) {
      if (v.eosId === undefined) throw new Error("tokenizer: EOS requested but the vocabulary has no EOS token");
      out.push(v.eosId);
    }
    return out;
  }

  private checkId(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.v.nTokens) {
      throw new RangeError(`tokenizer: token id ${id} out of range [0, ${this.v.nTokens})`);
    }
  }

  /** token_to_piece with special=true (cached, like llama.cpp's cache_token_to_piece) */
  private piece(id: number): Uint8Array {
    let p = this.pieceCache[id];
    if (p) return p;
    const v = this.v;
    const attr = v.attrs[id]!;
    const text = v.tokens[id]!;
    const special = TokenAttr.UNKNOWN | TokenAttr.CONTROL;
    if (attr & (special | TokenAttr.USER_DEFINED)) {
      p = utf8Encode(text);
    } else if (attr & TokenAttr.NORMAL) {
      p = v.kind === "spm" ? utf8Encode(text.replaceAll("\u2581", " ")) : decodeByteLevel(text);
    } else if (attr & TokenAttr.BYTE) {
      p = new Uint8Array([parseInt(text.substring(3, 5), 16) & 0xff]);
    } else {
      p = EMPTY; // UNUSED / UNDEFINED render as nothing
    }
    this.pieceCache[id] = p;
    return p;
  }

  tokenToPiece(id: number, special = true, lstrip = 0): Uint8Array {
    this.checkId(id);
    const attr = this.v.attrs[id]!;
    if (!special && attr & (TokenAttr.UNKNOWN | TokenAttr.CONTROL)) return EMPTY;
    let p = this.piece(id);
    let k = 0;
    while (k < lstrip && k < p.length && p[k] === 0x20) k++;
    if (k > 0) p = p.subarray(k);
    return p;
  }

  decodeBytes(ids: readonly number[], opts: DecodeOptions = {}): Uint8Array {
    const v = this.v;
    let lo = 0;
    let hi = ids.length;
    let removeSpace = v.addSpacePrefix;
    if (opts.removeSpecial && v.addBos && hi > lo && ids[lo] === v.bosId) {
      removeSpace = false;
      lo++;
    }
    if (opts.removeSpecial && v.addEos && hi > lo && ids[hi - 1] === v.eosId) hi--;
    const parts: Uint8Array[] = [];
    let total = 0;
    for (let i = lo; i < hi; i++) {
      const p = this.tokenToPiece(ids[i]!, opts.unparseSpecial ?? false, removeSpace ? 1 : 0);
      removeSpace = false;
      parts.push(p);
      total += p.length;
    }
    let out = concatBytes(parts, total);
    if (v.cleanSpaces) out = cleanSpaces(out);
    return out;
  }

  decode(ids: readonly number[], opts?: DecodeOptions): string {
    return new TextDecoder("utf-8", { ignoreBOM: true }).decode(this.decodeBytes(ids, opts));
  }

  tokenText(id: number): string {
    this.checkId(id);
    return this.v.tokens[id]!;
  }

  tokenAttr(id: number): number {
    this.checkId(id);
    return this.v.attrs[id]!;
  }

  tokenId(text: string): number | undefined {
    return this.v.tokenToId.get(text);
  }

  isEog(id: number): boolean {
    return this.v.eogIds.has(id);
  }

  isControl(id: number): boolean {
    return id >= 0 && id < this.v.nTokens && (this.v.attrs[id]! & TokenAttr.CONTROL) !== 0;
  }

  createDecoderStream(opts: DecoderStreamOptions = {}): DecoderStream {
    const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
    let first = opts.stripLeadingSpace ?? false;
    const special = opts.special ?? false;
    return {
      push: (id: number): string => {
        const p = this.tokenToPiece(id, special, first ? 1 : 0);
        first = false;
        return p.length === 0 ? "" : decoder.decode(p, { stream: true });
      },
      flush: (): string => decoder.decode(),
    };
  }
}

/** llama_decode_text: byte-level alphabet -> bytes */
function decodeByteLevel(text: string): Uint8Array {
  const out: number[] = [];
  for (const ch of text) {
    const b = unicodeToByte(ch.codePointAt(0)!);
    if (b !== undefined) {
      out.push(b);
    } else {
      // llama.cpp emits "[UNK_BYTE_0x<hex of the char's UTF-8>" + <whole token text> + "]"
      const u = utf8Encode(ch);
      let hex = "";
      for (const x of u) hex += x.toString(16).padStart(2, "0");
      for (const x of utf8Encode(`[UNK_BYTE_0x${hex}${text}]`)) out.push(x);
    }
  }
  return Uint8Array.from(out);
}

/** the three clean-up passes of llama_vocab::impl::detokenize (clean_spaces) */
function cleanSpaces(t: Uint8Array): Uint8Array {
  const text = Array.from(t);
  const SP = 0x20, Q = 0x27;
  // pass 1: " ?", " !", " .", " ,"
  const total1 = text.length;
  let total = total1 ? 1 : 0;
  for (let i = 1; i < total1; i++) {
    const x = text[i]!;
    if (text[i - 1] === SP && (x === 0x3f || x === 0x21 || x === 0x2e || x === 0x2c)) total--;
    text[total++] = x;
  }
  // pass 2: " ' " -> "'"
  const total2 = total;
  total = total ? 1 : 0;
  for (let i = 1; i < total2; i++) {
    const x = text[i]!;
    if (x === Q && i + 1 < total2 && text[i - 1] === SP && text[i + 1] === SP) {
      total--;
      text[++i] = 0;
    }
    text[total++] = x;
  }
  // pass 3: " 's", " 'm", " 're", " 've"
  const total3 = total;
  total = total ? 1 : 0;
  for (let i = 1; i < total3; i++) {
    const x = text[i]!;
    if (text[i - 1] === SP && x === Q && i + 1 < total3) {
      const x1 = text[i + 1]!;
      if (x1 === 0x74 || x1 === 0x64) {
        // " 't", " 'd": kept
      } else if (x1 === 0x73 || x1 === 0x6d) {
        total--;
      } else if (i + 2 < total3) {
        const x2 = text[i + 2]!;
        if ((x1 === 0x72 && x2 === 0x65) || (x1 === 0x76 && x2 === 0x65)) total--;
      }
    }
    text[total++] = x;
  }
  return Uint8Array.from(text.slice(0, total));
}

/** Build a tokenizer that reproduces llama.cpp's behaviour for this GGUF vocabulary. */
export function createTokenizer(vocab: GgufVocab): Tokenizer {
  return new TokenizerImpl(vocab);
}
