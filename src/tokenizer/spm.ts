// SentencePiece-style BPE as implemented by llama.cpp (llm_tokenizer_spm_session).
//
// The input (already whitespace-escaped: " " -> "▁", with the optional space
// prefix) is split into UTF-8 characters.  Every adjacent pair whose
// concatenation is a vocabulary entry is a candidate bigram, scored with that
// entry's score.  The best bigram is merged repeatedly: highest score first,
// ties broken by the leftmost position (llama.cpp's comparator
// `l.score < r.score || (l.score == r.score && l.left > r.left)`).  Candidates
// invalidated by an earlier merge are skipped.  Finally every symbol becomes its
// token, or — if the text is not in the vocabulary — one `<0xNN>` token per
// UTF-8 byte (byte fallback).

import { Heap } from "./heap.js";
import { utf8Encode } from "./unicode.js";
import type { LoadedVocab } from "./vocab.js";

interface Bigram {
  left: number;
  right: number;
  score: number;
  size: number;
}

const bigramBefore = (a: Bigram, b: Bigram): boolean =>
  a.score > b.score || (a.score === b.score && a.left < b.left);

const HEX = "0123456789ABCDEF";

/** llama_vocab::byte_to_token for SPM vocabularies. */
export function spmByteToToken(v: LoadedVocab, byte: number): number {
  const id = v.tokenToId.get(`<0x${HEX[byte >> 4]}${HEX[byte & 15]}>`);
  if (id !== undefined) return id;
  // llama.cpp falls back to the byte itself as a one-character token
  if (byte < 0x80) {
    const id2 = v.tokenToId.get(String.fromCharCode(byte));
    if (id2 !== undefined) return id2;
  }
  // llama.cpp throws std::out_of_range here; we degrade to <unk> when there is one
  if (v.unkId !== undefined) return v.unkId;
  throw new Error(`tokenizer: no byte-fallback token for byte 0x${HEX[byte >> 4]}${HEX[byte & 15]}`);
}

/**
 * Tokenize one raw-text fragment. `text` must already have spaces escaped to U+2581
 * and the space prefix applied, like llama.cpp does before calling the session.
 */
export function spmTokenize(v: LoadedVocab, text: string, out: number[]): void {
  if (text.length === 0) return;
  // symbols: [start, len) in UTF-16 code units; every boundary is a code point boundary
  const n0 = text.length;
  const start = new Int32Array(n0);
  const len = new Int32Array(n0);
  const prev = new Int32Array(n0);
  const next = new Int32Array(n0);
  let n = 0;
  for (let offs = 0; offs < text.length; ) {
    const c = text.charCodeAt(offs);
    const l = c >= 0xd800 && c <= 0xdbff && offs + 1 < text.length ? 2 : 1;
    start[n] = offs;
    len[n] = l;
    offs += l;
    prev[n] = n - 1;
    next[n] = offs === text.length ? -1 : n + 1;
    n++;
  }

  const queue = new Heap<Bigram>(bigramBefore);
  const tokenToId = v.tokenToId;
  const scores = v.scores;

  const tryAdd = (left: number, right: number) => {
    if (left === -1 || right === -1) return;
    const size = len[left]! + len[right]!;
    const s = text.substr(start[left]!, size);
    const id = tokenToId.get(s);
    if (id === undefined) return;
    queue.push({ left, right, score: scores[id]!, size });
  };

  for (let i = 1; i < n; i++) tryAdd(i - 1, i);

  while (queue.size > 0) {
    const b = queue.pop()!;
    const l = b.left;
    const r = b.right;
    if (len[l] === 0 || len[r] === 0 || len[l]! + len[r]! !== b.size) continue;
    len[l] = len[l]! + len[r]!;
    len[r] = 0;
    next[l] = next[r]!;
    if (next[r]! >= 0) prev[next[r]!] = l;
    tryAdd(prev[l]!, l);
    tryAdd(l, next[l]!);
  }

  for (let i = 0; i !== -1; i = next[i]!) {
    const s = text.substr(start[i]!, len[i]!);
    const id = tokenToId.get(s);
    if (id !== undefined) {
      out.push(id);
      continue;
    }
    // (llama.cpp's rev_merge re-segmentation can never trigger: merged symbols are always
    // vocabulary entries, so only unmerged single characters reach this point)
    const bytes = utf8Encode(s);
    for (let j = 0; j < bytes.length; j++) out.push(spmByteToToken(v, bytes[j]!));
  }
}
