// Hand-computed cases for the SPM (llama.cpp llm_tokenizer_spm) tokenizer.
import { describe, expect, it } from "vitest";
import { createTokenizer, TokenType, type GgufVocab } from "../../src/tokenizer/index.js";

const HEX = "0123456789ABCDEF";

/** ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then `normal` in order */
function spmVocab(normal: [string, number][], extra: Partial<GgufVocab> = {}): GgufVocab {
  const tokens = ["<unk>", "<s>", "</s>"];
  const scores = [0, 0, 0];
  const types: number[] = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${HEX[b >> 4]}${HEX[b & 15]}>`);
    scores.push(0);
    types.push(TokenType.BYTE);
  }
  for (const [t, s] of normal) {
    tokens.push(t);
    scores.push(s);
    types.push(TokenType.NORMAL);
  }
  return { model: "llama", tokens, scores: Float32Array.from(scores), tokenTypes: Int32Array.from(types), ...extra };
}

const byteId = (b: number) => 3 + b;

describe("SPM tokenizer (hand-computed)", () => {
  // ids 259.. : ▁=259 a=260 b=261 c=262 ab=263 bc=264 abc=265 ▁a=266 ▁ab=267
  const v = spmVocab([
    ["▁", -20], ["a", -21], ["b", -22], ["c", -23],
    ["ab", -1], ["bc", -2], ["abc", -3], ["▁a", -5], ["▁ab", -10],
  ]);
  const tok = createTokenizer(v);
  const id = (t: string) => tok.tokenId(t)!;

  it("merges the highest-scoring bigram first and skips invalidated candidates", () => {
    // "▁abc": candidates ▁a(-5) ab(-1) bc(-2) -> merge ab -> candidates ▁ab(-10) abc(-3)
    // -> bc is stale (b consumed) -> merge abc -> ▁abc is not a token -> [▁, abc]
    expect(tok.encode("abc", { addBos: false })).toEqual([id("▁"), id("abc")]);
  });

  it("adds BOS by default (llama vocab) and the space prefix", () => {
    expect(tok.addBos).toBe(true);
    expect(tok.encode("abc")).toEqual([1, id("▁"), id("abc")]);
    expect(tok.encode("")).toEqual([1]);
    expect(tok.encode("", { addBos: false })).toEqual([]);
  });

  it("escapes spaces to U+2581 and keeps leading spaces", () => {
    // " ab" -> "▁▁ab": candidates ▁▁(-) ▁a(-5) ab(-1) -> ab, then ▁ab(-10) -> [▁, ▁ab]
    expect(tok.encode(" ab", { addBos: false })).toEqual([id("▁"), id("▁ab")]);
    // "a b" -> "▁a▁b": ▁a(-5) at 0 and 2? only "▁a" at 0; "▁b" not a token -> [▁a, ▁, b]
    expect(tok.encode("a b", { addBos: false })).toEqual([id("▁a"), id("▁"), id("b")]);
  });

  it("respects add_space_prefix = false", () => {
    const t2 = createTokenizer(spmVocab([["a", -1], ["b", -1], ["ab", -1]], { addSpacePrefix: false }));
    expect(t2.encode("ab", { addBos: false })).toEqual([t2.tokenId("ab")]);
  });

  it("byte-falls back for characters missing from the vocabulary", () => {
    // "ä" = C3 A4, "😀" = F0 9F 98 80
    expect(tok.encode("ä", { addBos: false })).toEqual([id("▁"), byteId(0xc3), byteId(0xa4)]);
    expect(tok.encode("a😀", { addBos: false })).toEqual([
      id("▁a"), byteId(0xf0), byteId(0x9f), byteId(0x98), byteId(0x80),
    ]);
    // newline is not escaped: byte token <0x0A>
    expect(tok.encode("a\nb", { addBos: false })).toEqual([id("▁a"), byteId(0x0a), id("b")]);
  });

  it("breaks score ties by the leftmost position", () => {
    const t = createTokenizer(spmVocab([["a", -1], ["aa", -1], ["aaaa", -1]], { addSpacePrefix: false }));
    const a = t.tokenId("a")!, aa = t.tokenId("aa")!, aaaa = t.tokenId("aaaa")!;
    // a a a: (0,1) and (1,2) tie -> leftmost merges -> [aa, a]
    expect(t.encode("aaa", { addBos: false })).toEqual([aa, a]);
    // a a a a: aa at 0, then (1,2) stale, aa at 2, then aa+aa -> aaaa
    expect(t.encode("aaaa", { addBos: false })).toEqual([aaaa]);
    expect(t.encode("aaaaa", { addBos: false })).toEqual([aaaa, a]);
  });

  it("with all scores equal (convert_hf_to_gguf LlamaHfVocab: -1000) merges leftmost-first", () => {
    // vocab: x y z xy yz xyz ; "xyz": (x,y) and (y,z) tie -> xy first, then xy+z -> xyz
    const t = createTokenizer(
      spmVocab([["x", -1000], ["y", -1000], ["z", -1000], ["xy", -1000], ["yz", -1000], ["xyz", -1000], ["▁x", -1000]], {
        addSpacePrefix: false,
      }),
    );
    expect(t.encode("xyz", { addBos: false })).toEqual([t.tokenId("xyz")]);
    // "yzx" : (y,z) -> yz, (yz,x) not a token -> [yz, x]
    expect(t.encode("yzx", { addBos: false })).toEqual([t.tokenId("yz"), t.tokenId("x")]);
  });

  it("parses special tokens only with parseSpecial, and prefixes a space after them", () => {
    const lt = byteId(0x3c), gt = byteId(0x3e), s = byteId(0x73), slash = byteId(0x2f);
    expect(tok.encode("<s>ab</s>", { addBos: false, parseSpecial: true })).toEqual([1, id("▁ab"), 2]);
    expect(tok.encode("ab</s>c", { addBos: false, parseSpecial: true })).toEqual([id("▁ab"), 2, id("▁"), id("c")]);
    expect(tok.encode("<s>ab</s>", { addBos: false })).toEqual([
      id("▁"), lt, s, gt, id("ab"), lt, slash, s, gt,
    ]);
    // <unk> is an UNKNOWN-type token: parsed only with parseSpecial as well
    expect(tok.encode("<unk>", { addBos: false, parseSpecial: true })).toEqual([0]);
  });

  it("always splits user-defined tokens out of the text", () => {
    const v2 = spmVocab([["▁", -1], ["a", -1], ["b", -1], ["ab", -1]]);
    v2.tokens.push("[X]");
    v2.scores = Float32Array.from([...v2.scores!, 0]);
    v2.tokenTypes = Int32Array.from([...v2.tokenTypes!, TokenType.USER_DEFINED]);
    const t = createTokenizer(v2);
    const x = t.tokenId("[X]")!;
    // user-defined tokens are split out even without parseSpecial; the following fragment gets the space prefix
    expect(t.encode("ab[X]ab", { addBos: false })).toEqual([t.tokenId("▁")!, t.tokenId("ab")!, x, t.tokenId("▁")!, t.tokenId("ab")!]);
    expect(t.tokenToPiece(x, false)).toEqual(new TextEncoder().encode("[X]"));
  });

  it("renders pieces like llama_token_to_piece", () => {
    const enc = (s: string) => new TextEncoder().encode(s);
    expect(tok.tokenToPiece(id("▁ab"))).toEqual(enc(" ab"));
    expect(tok.tokenToPiece(byteId(0xc3))).toEqual(Uint8Array.of(0xc3));
    expect(tok.tokenToPiece(1, true)).toEqual(enc("<s>"));
    expect(tok.tokenToPiece(1, false)).toEqual(new Uint8Array(0));
    expect(tok.tokenToPiece(id("▁ab"), true, 1)).toEqual(enc("ab"));
  });

  it("detokenizes like llama_detokenize (leading space removal, BOS quirk)", () => {
    expect(tok.decode(tok.encode("ab abc", { addBos: false }))).toBe("ab abc");
    // llama.cpp only strips the prefix space from the *first* token: a leading BOS consumes that chance
    expect(tok.decode(tok.encode("ab"))).toBe(" ab");
    expect(tok.decode(tok.encode("ab"), { removeSpecial: true })).toBe(" ab");
    expect(tok.decode([1, id("▁ab"), 2], { unparseSpecial: true })).toBe("<s> ab</s>");
    expect(tok.decode(tok.encode("a😀ä", { addBos: false }))).toBe("a😀ä");
  });

  it("reports EOG tokens", () => {
    expect(tok.isEog(2)).toBe(true);
    expect(tok.isEog(1)).toBe(false);
    expect(tok.eosId).toBe(2);
    expect(tok.bosId).toBe(1);
    expect(tok.vocabSize).toBe(v.tokens.length);
  });
});
