// Hand-computed cases for the byte-level BPE (llama.cpp llm_tokenizer_bpe) tokenizer
// and its pre-tokenizers.
import { describe, expect, it } from "vitest";
import {
  createTokenizer, preTokenize, resolvePreTokenizer, TokenType, type GgufVocab,
} from "../../src/tokenizer/index.js";
import { BYTE_TO_UNICODE } from "../../src/tokenizer/unicode.js";
import { TOKENIZER_TEXTS } from "./texts.js";

const MERGES = [
  "h e", // 0 -> he
  "l l", // 1 -> ll
  "he ll", // 2 -> hell
  "hell o", // 3 -> hello
  "Ġ w", // 4 -> Ġw
  "o r", // 5 -> or
  "Ġw or", // 6 -> Ġwor
  "l d", // 7 -> ld
  "Ġwor ld", // 8 -> Ġworld
];

/** ids 0..255: the byte-level alphabet in byte order; then one token per merge; then `extra` */
function bpeVocab(pre: string, extra: [string, number][] = [], more: Partial<GgufVocab> = {}): GgufVocab {
  const tokens = [...BYTE_TO_UNICODE];
  const types: number[] = tokens.map(() => TokenType.NORMAL);
  for (const m of MERGES) {
    tokens.push(m.replace(" ", ""));
    types.push(TokenType.NORMAL);
  }
  for (const [t, ty] of extra) {
    tokens.push(t);
    types.push(ty);
  }
  return { model: "gpt2", pre, tokens, tokenTypes: Int32Array.from(types), merges: MERGES, ...more };
}

describe("BPE tokenizer (hand-computed)", () => {
  const tok = createTokenizer(bpeVocab("gpt-2"));
  const id = (t: string) => tok.tokenId(t)!;

  it("applies merges by rank", () => {
    // "hello": he(0) -> ll(1) -> hell(2) -> hello(3); " world" -> Ġw(4) or(5) Ġwor(6) ld(7) Ġworld(8)
    expect(tok.encode("hello world")).toEqual([id("hello"), id("Ġworld")]);
    // "world": or(5), ld(7); "w or" is not a merge
    expect(tok.encode("world")).toEqual([0x77, id("or"), id("ld")]);
  });

  it("breaks rank ties by the leftmost pair", () => {
    expect(tok.encode("lll")).toEqual([id("ll"), 0x6c]);
  });

  it("maps bytes through the GPT-2 byte alphabet", () => {
    // é = C3 A9 ; 🦙 = F0 9F A6 99 ; "\n" = 0A
    expect(tok.encode("é")).toEqual([0xc3, 0xa9]);
    expect(tok.encode("🦙\n")).toEqual([0xf0, 0x9f, 0xa6, 0x99, 0x0a]);
    expect(tok.tokenText(0x20)).toBe("Ġ");
    expect(tok.tokenText(0x0a)).toBe("Ċ");
  });

  it("does not add BOS for gpt-2 and adds it for llama-bpe", () => {
    expect(tok.addBos).toBe(false);
    const t3 = createTokenizer(bpeVocab("llama-bpe", [["<|bos|>", TokenType.CONTROL]], { bosId: 256 + MERGES.length }));
    expect(t3.addBos).toBe(true);
    expect(t3.encode("hello")[0]).toBe(256 + MERGES.length);
  });

  it("uses whole-word vocabulary entries with ignore_merges (llama-bpe)", () => {
    const extra: [string, number][] = [["hellx", TokenType.NORMAL]];
    const t3 = createTokenizer(bpeVocab("llama-bpe", extra, { addBos: false }));
    const t2 = createTokenizer(bpeVocab("gpt-2", extra));
    expect(t3.encode("hellx")).toEqual([t3.tokenId("hellx")]);
    expect(t2.encode("hellx")).toEqual([t2.tokenId("hell"), 0x78]);
  });

  it("splits special tokens with parseSpecial only", () => {
    const t = createTokenizer(bpeVocab("gpt-2", [["<|eot|>", TokenType.CONTROL], ["[U]", TokenType.USER_DEFINED]]));
    const eot = t.tokenId("<|eot|>")!;
    const u = t.tokenId("[U]")!;
    expect(t.encode("hello<|eot|>", { parseSpecial: true })).toEqual([t.tokenId("hello"), eot]);
    expect(t.encode("hello<|eot|>")).not.toContain(eot);
    expect(t.encode("hello[U] world")).toEqual([t.tokenId("hello"), u, t.tokenId("Ġworld")]);
    expect(t.isEog(eot)).toBe(false);
  });

  it("decodes byte-level pieces and applies llama.cpp's clean_spaces", () => {
    expect(tok.decode(tok.encode("hello world"))).toBe("hello world");
    expect(tok.decode(tok.encode("é🦙\n"))).toBe("é🦙\n");
    // gpt-2 has clean_spaces: " ," " ." dropped, " ' " -> "'", " 's" -> "'s"
    expect(tok.decode(tok.encode("a , b . c ' d 's ?"))).toBe("a, b. c'd's?");
    // qwen2 does not clean
    const q = createTokenizer(bpeVocab("qwen2"));
    expect(q.decode(q.encode("a , b . c ' d 's ?"))).toBe("a , b . c ' d 's ?");
  });

  it("rejects unknown pre-tokenizers with their name", () => {
    expect(() => createTokenizer(bpeVocab("no-such-pre"))).toThrow(/no-such-pre/);
    // llama.cpp spells it "gpt-2"; "gpt2" is accepted as an alias
    expect(() => createTokenizer(bpeVocab("gpt2"))).not.toThrow();
    // missing pre -> "default", like llama.cpp
    expect(resolvePreTokenizer(undefined).type).toBe("default");
  });
});

describe("pre-tokenizers (hand-computed splits)", () => {
  const split = (pre: string, text: string) => preTokenize(text, resolvePreTokenizer(pre).regexes);

  it("llama3", () => {
    expect(split("llama-bpe", "Hello world's 12345  \n\n x")).toEqual([
      "Hello", " world", "'s", " ", "123", "45", "  \n\n", " x",
    ]);
    expect(split("llama-bpe", "DON'T you're")).toEqual(["DON", "'T", " you", "'re"]);
    expect(split("llama-bpe", "a!!\n\nb  ")).toEqual(["a", "!!\n\n", "b", "  "]);
    expect(split("llama-bpe", "\tfoo ½")).toEqual(["\tfoo", " ", "½"]);
    expect(split("llama-bpe", "日本語テキスト 😀😀")).toEqual(["日本語テキスト", " 😀😀"]);
    // U+0085 (NEL) is White_Space for llama.cpp (unlike JS \s)
    expect(split("llama-bpe", "a\u0085\u0085b")).toEqual(["a", "\u0085", "\u0085b"]);
  });

  it("gpt-2", () => {
    expect(split("gpt-2", "Hello world's 12345  \n\n x")).toEqual([
      "Hello", " world", "'s", " 12345", "  \n\n", " x",
    ]);
    // contractions are case-sensitive in the GPT-2 pattern
    expect(split("gpt-2", "DON'T don't")).toEqual(["DON", "'", "T", " don", "'t"]);
    expect(split("gpt-2", "trailing   ")).toEqual(["trailing", "   "]);
  });

  it("default (4 regexes applied in sequence)", () => {
    expect(split("default", "Hello, world! 12345")).toEqual(["Hello", ",", " world", "!", " ", "123", "45"]);
  });

  it("qwen2 (single digits)", () => {
    expect(split("qwen2", "abc 123 ü")).toEqual(["abc", " ", "1", "2", "3", " ü"]);
  });

  it("deepseek-llm", () => {
    expect(split("deepseek-llm", "Hi there\n中文 42!")).toEqual(["Hi", " there", "\n", "中文", " ", "42", "!"]);
  });
});

// Independent check of the ported splitters: the original patterns run as plain JS regexes
// (\s replaced by Unicode White_Space, which is what llama.cpp's tables use), applied with
// llama.cpp's split semantics (matches and the gaps between them become pieces).
describe("pre-tokenizers vs plain JS regexes on the text set", () => {
  const WS = "\\p{White_Space}";
  const js = (src: string) =>
    new RegExp(src.replaceAll("\\s", WS).replaceAll("\\S", "\\P{White_Space}"), "gu");
  const jsSplit = (text: string, regexes: RegExp[]): string[] => {
    let pieces = text.length ? [text] : [];
    for (const re of regexes) {
      const next: string[] = [];
      for (const p of pieces) {
        let last = 0;
        for (const m of p.matchAll(re)) {
          if (m.index > last) next.push(p.slice(last, m.index));
          next.push(m[0]);
          last = m.index + m[0].length;
        }
        if (last < p.length) next.push(p.slice(last));
      }
      pieces = next;
    }
    return pieces;
  };
  const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
  const LLAMA3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  const QWEN2 = LLAMA3.replace("\\p{N}{1,3}", "\\p{N}");
  const cases: [string, RegExp[]][] = [
    ["gpt-2", [js(GPT2)]],
    ["llama-bpe", [js(LLAMA3)]],
    ["qwen2", [js(QWEN2)]],
    ["default", [js("[\\p{P}\\$\\+<=>\\^~\\|]+"), js(GPT2), js("\\p{N}+"), js("[0-9][0-9][0-9]")]],
    ["starcoder", [js("\\p{N}"), js(GPT2)]],
  ];
  for (const [pre, regexes] of cases) {
    it(pre, () => {
      const spec = resolvePreTokenizer(pre);
      for (const { name, text } of TOKENIZER_TEXTS) {
        expect(preTokenize(text, spec.regexes), `${pre} ${name}`).toEqual(jsSplit(text, regexes));
      }
    });
  }
});
