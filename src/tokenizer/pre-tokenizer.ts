// BPE pre-tokenisation ("regex split"), mirroring llama.cpp's unicode_regex_split().
//
// llama.cpp keeps, per `tokenizer.ggml.pre`, a list of regexes that are applied
// one after the other, each one further splitting the pieces produced by the
// previous one (text between matches is kept as pieces too).  Two regexes have
// hand-written implementations in llama.cpp (GPT-2 and Llama-3); we port those
// state machines.  All other regexes are run by llama.cpp with std::regex on a
// "collapsed" text in which every non-ASCII code point is replaced by one byte
// standing for its Unicode category (\p{L} -> 0xD2, ...), with the \p{..} in the
// regex replaced by the matching byte plus the ASCII members of the category.
// We reproduce that transformation exactly (so quirks such as "~" not being
// \p{S} carry over) and run the result with a JS RegExp, whose ECMAScript
// semantics match std::regex's ECMAScript grammar for these patterns.

import {
  CPT_LETTER, CPT_MARK, CPT_NUMBER, CPT_PUNCTUATION, CPT_SYMBOL, CPT_WHITESPACE, cptFlags,
} from "./unicode.js";

export interface PreTokenizerSpec {
  /** canonical llama.cpp pre-tokenizer type name */
  type: string;
  /** the regexes, verbatim as in llama.cpp (C++ string values) */
  regexes: string[];
  cleanSpaces?: boolean;
  ignoreMerges?: boolean;
  addBos?: boolean;
}

// --- regex strings (values of the C++ string literals in llama-vocab.cpp) ---

const RE_GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const RE_LLAMA3 =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const RE_LLAMA3_ORIG =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const RE_QWEN2 =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const RE_DEFAULT = [
  "[\\p{P}\\$\\+<=>\\^~\\|]+",
  RE_GPT2,
  "\\p{N}+",
  "[0-9][0-9][0-9]",
];
const RE_DEEPSEEK_LLM = [
  "[\r\n]",
  "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+",
  "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+",
  "\\s+$",
  "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+",
  "\\p{N}+",
];
const RE_DEEPSEEK_CODER = [
  "[\r\n]",
  "\\s?\\p{L}+",
  "\\s?\\p{P}+",
  "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+",
  "\\p{N}",
];
const RE_FALCON = [
  "[\\p{P}\\$\\+<=>\\^~\\|`]+",
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
  "[0-9][0-9][0-9]",
];
const RE_STARCODER = ["\\p{N}", RE_GPT2];
const RE_PORO = [" ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+"];
const RE_VIKING = [" ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+", "\\p{N}"];

interface Group {
  names: string[];
  type: string;
  regexes: string[];
  cleanSpaces?: boolean;
  ignoreMerges?: boolean;
  addBos?: boolean;
}

// name lists and flags follow llama_vocab::impl::load()
const GROUPS: Group[] = [
  { names: ["default"], type: "default", regexes: RE_DEFAULT },
  { names: ["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"],
    type: "llama3", regexes: [RE_LLAMA3], ignoreMerges: true, addBos: true },
  { names: ["dbrx"], type: "dbrx", regexes: [RE_LLAMA3] },
  { names: ["smaug-bpe"], type: "smaug", regexes: [RE_LLAMA3] },
  { names: ["deepseek-llm"], type: "deepseek-llm", regexes: RE_DEEPSEEK_LLM, cleanSpaces: false },
  { names: ["deepseek-coder"], type: "deepseek-coder", regexes: RE_DEEPSEEK_CODER, cleanSpaces: false },
  { names: ["falcon"], type: "falcon", regexes: RE_FALCON },
  { names: ["mpt"], type: "mpt", regexes: [RE_GPT2] },
  { names: ["starcoder"], type: "starcoder", regexes: RE_STARCODER },
  { names: ["refact"], type: "refact", regexes: RE_STARCODER },
  { names: ["command-r"], type: "command-r", regexes: RE_STARCODER, cleanSpaces: false },
  { names: ["smollm"], type: "smollm", regexes: RE_STARCODER, cleanSpaces: false },
  { names: ["codeshell"], type: "codeshell", regexes: RE_STARCODER },
  { names: ["exaone"], type: "exaone", regexes: RE_STARCODER },
  { names: ["minerva-7b"], type: "minerva", regexes: RE_STARCODER },
  { names: ["mellum2"], type: "mellum2", regexes: RE_STARCODER },
  // NOTE: llama.cpp spells GPT-2 "gpt-2"; "gpt2" is accepted here as an alias only (llama.cpp rejects it)
  { names: ["gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
    "mellum", "modern-bert", "exaone4"], type: "gpt2", regexes: [RE_GPT2] },
  { names: ["olmo"], type: "olmo", regexes: [RE_GPT2] },
  { names: ["jais"], type: "jais", regexes: [RE_GPT2] },
  { names: ["trillion"], type: "trillion", regexes: [RE_GPT2], cleanSpaces: false },
  { names: ["granite-docling"], type: "granite-docling", regexes: [RE_GPT2], cleanSpaces: false },
  { names: ["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2"], type: "qwen2", regexes: [RE_QWEN2], cleanSpaces: false },
  { names: ["megrez"], type: "qwen2", regexes: [RE_QWEN2] },
  { names: ["stablelm2"], type: "stablelm2", regexes: [RE_QWEN2] },
  { names: ["hunyuan"], type: "hunyuan", regexes: [RE_QWEN2], cleanSpaces: false },
  { names: ["solar-open"], type: "solar-open", regexes: [RE_QWEN2], cleanSpaces: false },
  { names: ["poro-chat"], type: "poro", regexes: RE_PORO, cleanSpaces: false },
  { names: ["bloom"], type: "bloom", regexes: RE_PORO },
  { names: ["gpt3-finnish"], type: "gpt3-finnish", regexes: RE_PORO },
  { names: ["viking"], type: "viking", regexes: RE_VIKING, cleanSpaces: false },
];

export const SUPPORTED_PRE_TOKENIZERS: readonly string[] = GROUPS.flatMap((g) => g.names);

/** Pre-tokenizer settings for a `tokenizer.ggml.pre` value (missing/empty -> "default", as llama.cpp). */
export function resolvePreTokenizer(pre: string | undefined): PreTokenizerSpec {
  const name = pre === undefined || pre === "" ? "default" : pre;
  for (const g of GROUPS) {
    if (g.names.includes(name)) {
      const spec: PreTokenizerSpec = { type: g.type, regexes: g.regexes };
      if (g.cleanSpaces !== undefined) spec.cleanSpaces = g.cleanSpaces;
      if (g.ignoreMerges) spec.ignoreMerges = true;
      if (g.addBos) spec.addBos = true;
      return spec;
    }
  }
  throw new Error(
    `tokenizer: unknown or unsupported pre-tokenizer type '${name}' (tokenizer.ggml.pre); supported: ${SUPPORTED_PRE_TOKENIZERS.join(", ")}`,
  );
}

// ---------------------------------------------------------------------------
// custom splitters (ports of unicode_regex_split_custom_gpt2 / _llama3)

const OUT = -1;

type Ranges = number[]; // flattened piece lengths (in code points)

function splitGpt2(cps: number[], offsets: Ranges): Ranges {
  const out: Ranges = [];
  let start = 0;
  for (const offset of offsets) {
    const ini = start;
    const end = start + offset;
    start = end;
    const cpt = (p: number) => (p >= ini && p < end ? cps[p]! : OUT);
    // flags: 0 for out of range ("no flags"), otherwise category bits | 0x100 (any defined code point)
    const fl = (p: number) => (p >= ini && p < end ? cptFlags(cps[p]!) | 0x100 : 0);
    let prevEnd = ini;
    const add = (e: number) => {
      const len = e - prevEnd;
      if (len > 0) out.push(len);
      prevEnd = e;
      return len;
    };
    for (let pos = ini; pos < end; ) {
      const c = cpt(pos);
      const f = fl(pos);
      if (c === 0x27 /* ' */ && pos + 1 < end) {
        const n1 = cpt(pos + 1);
        if (n1 === 0x73 || n1 === 0x74 || n1 === 0x6d || n1 === 0x64) { // s t m d
          pos += add(pos + 2);
          continue;
        }
        if (pos + 2 < end) {
          const n2 = cpt(pos + 2);
          if ((n1 === 0x72 && n2 === 0x65) || (n1 === 0x76 && n2 === 0x65) || (n1 === 0x6c && n2 === 0x6c)) { // re ve ll
            pos += add(pos + 3);
            continue;
          }
        }
      }
      let f2 = c === 0x20 ? fl(pos + 1) : f;
      if (f2 & CPT_LETTER) {
        pos += c === 0x20 ? 1 : 0;
        while (f2 & CPT_LETTER) f2 = fl(++pos);
        add(pos);
        continue;
      }
      if (f2 & CPT_NUMBER) {
        pos += c === 0x20 ? 1 : 0;
        while (f2 & CPT_NUMBER) f2 = fl(++pos);
        add(pos);
        continue;
      }
      if (!(f2 & (CPT_WHITESPACE | CPT_LETTER | CPT_NUMBER)) && f2 !== 0) {
        pos += c === 0x20 ? 1 : 0;
        while (!(f2 & (CPT_WHITESPACE | CPT_LETTER | CPT_NUMBER)) && f2 !== 0) f2 = fl(++pos);
        add(pos);
        continue;
      }
      let nws = 0;
      while (fl(pos + nws) & CPT_WHITESPACE) nws++;
      if (nws > 1 && cpt(pos + nws) !== OUT) {
        pos += nws - 1;
        add(pos);
        continue;
      }
      if (nws > 0) {
        pos += nws;
        add(pos);
        continue;
      }
      add(++pos);
    }
  }
  return out;
}

function splitLlama3(cps: number[], offsets: Ranges): Ranges {
  const out: Ranges = [];
  let start = 0;
  const lower = (c: number) => (c >= 0x41 && c <= 0x5a ? c + 32 : c);
  for (const offset of offsets) {
    const ini = start;
    const end = start + offset;
    start = end;
    const cpt = (p: number) => (p >= ini && p < end ? cps[p]! : OUT);
    const fl = (p: number) => (p >= ini && p < end ? cptFlags(cps[p]!) | 0x100 : 0);
    let prevEnd = ini;
    const add = (e: number) => {
      const len = e - prevEnd;
      if (len > 0) out.push(len);
      prevEnd = e;
      return len;
    };
    for (let pos = ini; pos < end; ) {
      const c = cpt(pos);
      const f = fl(pos);
      // (?i:'s|'t|'re|'ve|'m|'ll|'d)
      if (c === 0x27 && pos + 1 < end) {
        const n1 = lower(cpt(pos + 1));
        if (n1 === 0x73 || n1 === 0x74 || n1 === 0x6d || n1 === 0x64) {
          pos += add(pos + 2);
          continue;
        }
        if (pos + 2 < end) {
          const n2 = lower(cpt(pos + 2));
          if ((n1 === 0x72 && n2 === 0x65) || (n1 === 0x76 && n2 === 0x65) || (n1 === 0x6c && n2 === 0x6c)) {
            pos += add(pos + 3);
            continue;
          }
        }
      }
      // [^\r\n\p{L}\p{N}]?\p{L}+
      if (!(c === 0x0d || c === 0x0a || f & CPT_NUMBER)) {
        if (f & CPT_LETTER || fl(pos + 1) & CPT_LETTER) {
          pos++;
          while (fl(pos) & CPT_LETTER) pos++;
          add(pos);
          continue;
        }
      }
      // \p{N}{1,3}
      if (f & CPT_NUMBER) {
        let i0 = pos;
        while (fl(pos) & CPT_NUMBER) {
          if (++pos - i0 >= 3) {
            add(pos);
            i0 = pos;
          }
        }
        add(pos);
        continue;
      }
      // <space>?[^\s\p{L}\p{N}]+[\r\n]*
      let f2 = c === 0x20 ? fl(pos + 1) : f;
      if (!(f2 & (CPT_WHITESPACE | CPT_LETTER | CPT_NUMBER)) && f !== 0) {
        pos += c === 0x20 ? 1 : 0;
        while (!(f2 & (CPT_WHITESPACE | CPT_LETTER | CPT_NUMBER)) && f2 !== 0) f2 = fl(++pos);
        let c2 = cpt(pos);
        while (c2 === 0x0d || c2 === 0x0a) c2 = cpt(++pos);
        add(pos);
        continue;
      }
      let nws = 0;
      let lastRN = 0;
      while (fl(pos + nws) & CPT_WHITESPACE) {
        const c2 = cpt(pos + nws);
        if (c2 === 0x0d || c2 === 0x0a) lastRN = pos + nws + 1;
        nws++;
      }
      // \s*[\r\n]+
      if (lastRN > 0) {
        pos = lastRN;
        add(pos);
        continue;
      }
      // \s+(?!\S)
      if (nws > 1 && cpt(pos + nws) !== OUT) {
        pos += nws - 1;
        add(pos);
        continue;
      }
      // \s+
      if (nws > 0) {
        pos += nws;
        add(pos);
        continue;
      }
      add(++pos);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// generic regex path (std::regex on collapsed text / std::wregex), emulated

const UCAT: Record<string, number> = {
  "\\p{N}": CPT_NUMBER,
  "\\p{L}": CPT_LETTER,
  "\\p{P}": CPT_PUNCTUATION,
  "\\p{M}": CPT_MARK,
  "\\p{S}": CPT_SYMBOL,
  "\\p{Lu}": CPT_LETTER,
  "\\p{Ll}": CPT_LETTER,
  "\\p{Lt}": CPT_LETTER,
  "\\p{Lm}": CPT_LETTER,
  "\\p{Lo}": CPT_LETTER,
};
const UCAT_CPT: Record<number, string> = {
  [CPT_NUMBER]: "\u00D1",
  [CPT_LETTER]: "\u00D2",
  [CPT_PUNCTUATION]: "\u00D3",
  [CPT_MARK]: "\u00D4",
  [CPT_SYMBOL]: "\u00D5",
};
// ASCII members of each category as llama.cpp lists them (note: '~' is in neither P nor S)
const UCAT_MAP: Record<number, string> = {
  [CPT_NUMBER]: "0-9",
  [CPT_LETTER]: "A-Za-z",
  [CPT_PUNCTUATION]: "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}",
  [CPT_MARK]: "",
  [CPT_SYMBOL]: "\\$\\+<->^`\\|",
};

function usesUcat(re: string): boolean {
  for (const k of Object.keys(UCAT)) if (re.includes(k)) return true;
  return false;
}

// std::regex (C locale) \s is ASCII whitespace only; non-ASCII whitespace was mapped to \v beforehand.
function convertWhitespaceEscapes(re: string): string {
  let out = "";
  let inside = false;
  for (let i = 0; i < re.length; i++) {
    const ch = re[i]!;
    if (ch === "\\" && i + 1 < re.length) {
      const nx = re[i + 1]!;
      if (nx === "s") {
        out += inside ? "\\t\\n\\v\\f\\r " : "[\\t\\n\\v\\f\\r ]";
        i++;
        continue;
      }
      if (nx === "S") {
        if (inside) throw new Error("tokenizer: \\S inside a character class is not supported");
        out += "[^\\t\\n\\v\\f\\r ]";
        i++;
        continue;
      }
      out += ch + nx;
      i++;
      continue;
    }
    if (ch === "[") inside = true;
    else if (ch === "]" && inside) inside = false;
    out += ch;
  }
  return out;
}

function collapseRegex(re: string): string {
  let out = "";
  let inside = false;
  for (let i = 0; i < re.length; i++) {
    if (re[i] === "[" && (i === 0 || re[i - 1] !== "\\")) {
      out += "[";
      inside = true;
      continue;
    }
    if (inside && re[i] === "]" && re[i - 1] !== "\\") {
      out += "]";
      inside = false;
      continue;
    }
    if (re[i] === "\\" && i + 3 < re.length && re[i + 1] === "p" && re[i + 2] === "{") {
      const close = re.indexOf("}", i + 3);
      if (close !== -1 && close <= i + 10) {
        const pat = re.substring(i, close + 1);
        const cat = UCAT[pat];
        if (cat !== undefined) {
          if (!inside) out += "[";
          out += UCAT_CPT[cat]! + UCAT_MAP[cat]!;
          if (!inside) out += "]";
          i = close;
          continue;
        }
      }
    }
    out += re[i];
  }
  return out;
}

interface CompiledRegex {
  kind: "gpt2" | "llama3" | "collapsed" | "wide";
  re?: RegExp;
}

const compiledCache = new Map<string, CompiledRegex>();

function compile(re: string): CompiledRegex {
  let c = compiledCache.get(re);
  if (c) return c;
  if (re === RE_GPT2) c = { kind: "gpt2" };
  else if (re === RE_LLAMA3 || re === RE_LLAMA3_ORIG) c = { kind: "llama3" };
  else if (usesUcat(re)) {
    for (const ch of re) {
      if (ch.codePointAt(0)! >= 128) {
        throw new Error("tokenizer: regex includes both unicode categories and non-ASCII characters - not supported");
      }
    }
    c = { kind: "collapsed", re: new RegExp(convertWhitespaceEscapes(collapseRegex(re)), "g") };
  } else {
    c = { kind: "wide", re: new RegExp(convertWhitespaceEscapes(re), "gu") };
  }
  compiledCache.set(re, c);
  return c;
}

// Port of unicode_regex_split_stl: within every current piece, matches and the gaps between them become pieces.
// `unitToCp` maps a code-unit index of `text` to a code-point index (null when they coincide).
function splitStl(
  text: string,
  re: RegExp,
  offsets: Ranges,
  unitToCp: ((unit: number) => number) | null,
  pieceUnitStarts: number[] | null,
): Ranges {
  const out: Ranges = [];
  let start = 0; // in code points
  for (let k = 0; k < offsets.length; k++) {
    const offset = offsets[k]!;
    let piece: string;
    let us = 0;
    if (pieceUnitStarts) {
      us = pieceUnitStarts[start]!;
      piece = text.substring(us, pieceUnitStarts[start + offset]!);
    } else {
      piece = text.substring(start, start + offset);
    }
    let startIdx = 0; // code points within the piece
    re.lastIndex = 0;
    let m: RegExpExecArray | null;
    while ((m = re.exec(piece)) !== null) {
      if (m[0].length === 0) {
        // std::regex_iterator would advance; none of the supported patterns match empty
        re.lastIndex++;
        continue;
      }
      const mPos = unitToCp ? unitToCp(us + m.index) - start : m.index;
      const mLen = unitToCp ? unitToCp(us + m.index + m[0].length) - start - mPos : m[0].length;
      if (mPos > startIdx) out.push(mPos - startIdx);
      out.push(mLen);
      startIdx = mPos + mLen;
    }
    if (startIdx < offset) out.push(offset - startIdx);
    start += offset;
  }
  return out;
}

/**
 * Split `text` into pre-tokenizer words (plain strings, not yet byte-encoded),
 * applying the regexes one after the other like llama.cpp's unicode_regex_split.
 */
export function preTokenize(text: string, regexes: readonly string[]): string[] {
  const cps: number[] = [];
  for (let i = 0; i < text.length; ) {
    const cp = text.codePointAt(i)!;
    cps.push(cp);
    i += cp > 0xffff ? 2 : 1;
  }
  if (cps.length === 0) return [];
  let offsets: Ranges = [cps.length];

  let collapsed: string | undefined;
  let wide: string | undefined;
  let wideUnitStarts: number[] | undefined;
  let unitToCpIdx: Int32Array | undefined;

  for (const reStr of regexes) {
    const c = compile(reStr);
    if (c.kind === "gpt2") {
      offsets = splitGpt2(cps, offsets);
    } else if (c.kind === "llama3") {
      offsets = splitLlama3(cps, offsets);
    } else if (c.kind === "collapsed") {
      if (collapsed === undefined) {
        let s = "";
        for (const cp of cps) {
          if (cp < 128) {
            s += String.fromCharCode(cp);
            continue;
          }
          const f = cptFlags(cp);
          if (f & CPT_WHITESPACE) s += "\u000B";
          else {
            const cat = f & (CPT_LETTER | CPT_NUMBER | CPT_PUNCTUATION | CPT_MARK | CPT_SYMBOL);
            s += UCAT_CPT[cat] ?? "\u00D0";
          }
        }
        collapsed = s;
      }
      offsets = splitStl(collapsed, c.re!, offsets, null, null);
    } else {
      if (wide === undefined) {
        let s = "";
        const starts: number[] = [];
        for (const cp of cps) {
          starts.push(s.length);
          if (cp > 0x7f && cptFlags(cp) & CPT_WHITESPACE) s += "\u000B";
          else s += String.fromCodePoint(cp);
        }
        starts.push(s.length);
        wide = s;
        wideUnitStarts = starts;
        unitToCpIdx = new Int32Array(s.length + 1);
        for (let i = 0; i < starts.length; i++) unitToCpIdx[starts[i]!] = i;
      }
      const map = unitToCpIdx!;
      offsets = splitStl(wide, c.re!, offsets, (unit) => map[unit]!, wideUnitStarts!);
    }
  }

  const words: string[] = [];
  let p = 0;
  for (const len of offsets) {
    let w = "";
    for (let i = 0; i < len; i++) w += String.fromCodePoint(cps[p + i]!);
    p += len;
    words.push(w);
  }
  return words;
}
