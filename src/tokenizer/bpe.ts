// Byte-level BPE as implemented by llama.cpp (llm_tokenizer_bpe_session).
//
// 1. pre-tokenize the fragment with the regexes of `tokenizer.ggml.pre`
//    (see pre-tokenizer.ts), each word being UTF-8 encoded and mapped through
//    the GPT-2 byte->unicode alphabet;
// 2. with `ignore_merges` (llama3), a word that is itself a vocabulary entry is
//    emitted as is;
// 3. otherwise the word's characters are merged pairwise, always taking the
//    adjacent pair with the lowest merge rank (ties: leftmost), until no pair of
//    the merges list applies;
// 4. each resulting symbol is looked up; unknown symbols are emitted byte by
//    byte when a single-byte token exists and silently dropped otherwise (as in
//    llama.cpp).

import { Heap } from "./heap.js";
import { preTokenize, type PreTokenizerSpec } from "./pre-tokenizer.js";
import { byteEncode, utf8Encode } from "./unicode.js";
import type { LoadedVocab } from "./vocab.js";

export { preTokenize, resolvePreTokenizer, SUPPORTED_PRE_TOKENIZERS } from "./pre-tokenizer.js";
export type { PreTokenizerSpec } from "./pre-tokenizer.js";

interface Bigram {
  left: number;
  right: number;
  rank: number;
  size: number;
}

const bigramBefore = (a: Bigram, b: Bigram): boolean => a.rank < b.rank || (a.rank === b.rank && a.left < b.left);

const pairKey = (a: string, b: string): string => `${a.length}:${a}${b}`;

export class BpeTokenizer {
  private readonly ranks = new Map<string, number>();
  private readonly spec: PreTokenizerSpec;
  /** word -> token ids cache (pre-tokenized words repeat a lot) */
  private readonly cache = new Map<string, number[]>();

  constructor(private readonly v: LoadedVocab) {
    if (!v.pre) throw new Error("tokenizer: BPE tokenizer needs a pre-tokenizer spec");
    this.spec = v.pre;
    const merges = v.merges;
    for (let i = 0; i < merges.length; i++) {
      const word = merges[i]!;
      const pos = word.indexOf(" ", 1);
      let first = "";
      let second = "";
      if (pos !== -1) {
        first = word.substring(0, pos);
        second = word.substring(pos + 1);
      }
      const key = pairKey(first, second);
      // std::unordered_map::emplace keeps the first rank of a duplicated pair
      if (!this.ranks.has(key)) this.ranks.set(key, i);
    }
  }

  /** Merge rank of (left, right), or -1. */
  rank(left: string, right: string): number {
    const r = this.ranks.get(pairKey(left, right));
    return r === undefined ? -1 : r;
  }

  /** Tokenize one raw-text fragment (no special-token handling here). */
  tokenize(text: string, out: number[]): void {
    const words = preTokenize(text, this.spec.regexes);
    for (const w of words) {
      const encoded = byteEncode(w);
      let ids = this.cache.get(encoded);
      if (!ids) {
        ids = this.tokenizeWord(encoded);
        if (this.cache.size > 50000) this.cache.clear();
        this.cache.set(encoded, ids);
      }
      for (const id of ids) out.push(id);
    }
  }

  /** BPE of one byte-encoded word. */
  tokenizeWord(word: string): number[] {
    const v = this.v;
    const out: number[] = [];
    if (word.length === 0) return out;
    if (v.ignoreMerges) {
      const id = v.tokenToId.get(word);
      if (id !== undefined) return [id];
    }
    const n0 = word.length;
    const start = new Int32Array(n0);
    const len = new Int32Array(n0);
    const prev = new Int32Array(n0);
    const next = new Int32Array(n0);
    let n = 0;
    for (let offs = 0; offs < word.length; ) {
      const c = word.charCodeAt(offs);
      const l = c >= 0xd800 && c <= 0xdbff && offs + 1 < word.length ? 2 : 1;
      start[n] = offs;
      len[n] = l;
      offs += l;
      prev[n] = n - 1;
      next[n] = offs === word.length ? -1 : n + 1;
      n++;
    }
    const queue = new Heap<Bigram>(bigramBefore);
    const add = (left: number, right: number) => {
      if (left === -1 || right === -1) return;
      const r = this.rank(word.substr(start[left]!, len[left]!), word.substr(start[right]!, len[right]!));
      if (r < 0) return;
      queue.push({ left, right, rank: r, size: len[left]! + len[right]! });
    };
    for (let i = 1; i < n; i++) add(i - 1, i);
    while (queue.size > 0) {
      const b = queue.pop()!;
      const l = b.left;
      const r = b.right;
      if (len[l] === 0 || len[r] === 0) continue;
      if (len[l]! + len[r]! !== b.size) continue; // outdated
      len[l] = len[l]! + len[r]!;
      len[r] = 0;
      next[l] = next[r]!;
      if (next[r]! >= 0) prev[next[r]!] = l;
      add(prev[l]!, l);
      add(l, next[l]!);
    }
    for (let i = 0; i !== -1; i = next[i]!) {
      if (len[i] === 0) continue;
      const s = word.substr(start[i]!, len[i]!);
      const id = v.tokenToId.get(s);
      if (id !== undefined) {
        out.push(id);
        continue;
      }
      // llama.cpp looks every single *byte* of the (byte-encoded) symbol up as a token
      const bytes = utf8Encode(s);
      for (let j = 0; j < bytes.length; j++) {
        if (bytes[j]! >= 0x80) continue; // a lone byte >= 0x80 is never a valid token text
        const id2 = v.tokenToId.get(String.fromCharCode(bytes[j]!));
        if (id2 !== undefined) out.push(id2);
      }
    }
    return out;
  }
}
