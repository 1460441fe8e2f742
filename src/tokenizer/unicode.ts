// Unicode helpers mirroring llama.cpp's src/unicode.cpp.
//
// llama.cpp classifies code points with tables generated from Python's `regex`
// module (\p{L}, \p{N}, \p{P}, \p{M}, \p{S}, \s).  We use the equivalent JS
// Unicode property escapes.  Whitespace is the Unicode White_Space property
// (what Python's `regex` `\s` matches): it includes U+0085 and excludes U+FEFF,
// unlike JS `\s`, so JS `\s` must never be used for pre-tokenisation.

export const CPT_LETTER = 1;
export const CPT_NUMBER = 2;
export const CPT_WHITESPACE = 4;
export const CPT_PUNCTUATION = 8;
export const CPT_MARK = 16;
export const CPT_SYMBOL = 32;
const CPT_COMPUTED = 128;

const reL = /^\p{L}$/u;
const reN = /^\p{N}$/u;
const reWS = /^\p{White_Space}$/u;
const reP = /^\p{P}$/u;
const reM = /^\p{M}$/u;
const reS = /^\p{S}$/u;

// Lazily filled flag cache for the BMP (most text); astral planes use a Map.
const bmpFlags = new Uint8Array(0x10000);
const astralFlags = new Map<number, number>();

function computeFlags(cp: number): number {
  const ch = String.fromCodePoint(cp);
  let f = 0;
  if (reL.test(ch)) f |= CPT_LETTER;
  else if (reN.test(ch)) f |= CPT_NUMBER;
  else if (reP.test(ch)) f |= CPT_PUNCTUATION;
  else if (reM.test(ch)) f |= CPT_MARK;
  else if (reS.test(ch)) f |= CPT_SYMBOL;
  if (reWS.test(ch)) f |= CPT_WHITESPACE;
  return f;
}

/** Category flags of a code point (CPT_* bits). */
export function cptFlags(cp: number): number {
  if (cp < 0x10000) {
    const f = bmpFlags[cp]!;
    if (f !== 0) return f & ~CPT_COMPUTED;
    const nf = computeFlags(cp);
    bmpFlags[cp] = nf | CPT_COMPUTED;
    return nf;
  }
  let f = astralFlags.get(cp);
  if (f === undefined) {
    f = computeFlags(cp);
    astralFlags.set(cp, f);
  }
  return f;
}

/** Code points of a (well-formed) string. */
export function codePoints(s: string): number[] {
  const out: number[] = [];
  for (let i = 0; i < s.length; ) {
    const cp = s.codePointAt(i)!;
    out.push(cp);
    i += cp > 0xffff ? 2 : 1;
  }
  return out;
}

/** Number of UTF-8 bytes used by a code point. */
export function utf8Len(cp: number): number {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

const encoder = new TextEncoder();
export function utf8Encode(s: string): Uint8Array {
  return encoder.encode(s);
}

/** JS strings may hold lone surrogates; N-API / llama.cpp would see U+FFFD there. */
export function wellFormed(s: string): string {
  const f = (s as { toWellFormed?: () => string }).toWellFormed;
  if (typeof f === "function") return f.call(s);
  return s.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, "\uFFFD");
}

// ---------------------------------------------------------------------------
// GPT-2 byte <-> unicode mapping (bytes_to_unicode)

function buildByteMaps(): { b2u: string[]; u2b: Map<number, number> } {
  const b2u: string[] = new Array<string>(256);
  const u2b = new Map<number, number>();
  const direct = (ch: number) =>
    (ch >= 0x21 && ch <= 0x7e) || (ch >= 0xa1 && ch <= 0xac) || (ch >= 0xae && ch <= 0xff);
  let n = 0;
  for (let ch = 0; ch < 256; ch++) {
    const cp = direct(ch) ? ch : 256 + n++;
    b2u[ch] = String.fromCodePoint(cp);
    u2b.set(cp, ch);
  }
  return { b2u, u2b };
}

const byteMaps = buildByteMaps();

/** byte -> single-code-point string (GPT-2 byte-level alphabet). */
export const BYTE_TO_UNICODE: readonly string[] = byteMaps.b2u;
/** code point of the byte-level alphabet -> byte; undefined if not in the alphabet. */
export function unicodeToByte(cp: number): number | undefined {
  return byteMaps.u2b.get(cp);
}

/** UTF-8 encode `s` then map every byte through the GPT-2 byte alphabet. */
export function byteEncode(s: string): string {
  // fast path for ASCII words made only of directly mapped characters
  const bytes = utf8Encode(s);
  let out = "";
  for (let i = 0; i < bytes.length; i++) out += BYTE_TO_UNICODE[bytes[i]!];
  return out;
}
