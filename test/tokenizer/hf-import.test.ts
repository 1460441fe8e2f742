// vocabFromHfTokenizerJson mirrors convert_hf_to_gguf.py (LlamaHfVocab / get_vocab_base).
import { beforeAll, describe, expect, it } from "vitest";
import { createTokenizer, TokenType, vocabFromHfTokenizerJson, type GgufVocab } from "../../src/tokenizer/index.js";
import { readHfTokenizerConfig, readHfTokenizerJson } from "./load-hf.js";

let v2: GgufVocab;
let v3: GgufVocab;

beforeAll(() => {
  v2 = vocabFromHfTokenizerJson(readHfTokenizerJson("llama2"), "llama2");
  v3 = vocabFromHfTokenizerJson(readHfTokenizerJson("llama3"), "llama3");
});

describe("llama2 (LlamaHfVocab)", () => {
  it("writes model llama / pre default with -1000 scores", () => {
    expect(v2.model).toBe("llama");
    expect(v2.pre).toBe("default");
    expect(v2.tokens.length).toBe(32000);
    expect(v2.scores!.length).toBe(32000);
    expect(v2.scores!.every((s) => s === -1000)).toBe(true);
    expect(v2.merges).toBeUndefined();
  });

  it("types: special ids CONTROL, <0xNN> BYTE, rest NORMAL", () => {
    const t = v2.tokenTypes!;
    expect([t[0], t[1], t[2]]).toEqual([TokenType.CONTROL, TokenType.CONTROL, TokenType.CONTROL]);
    expect(v2.tokens.slice(0, 4)).toEqual(["<unk>", "<s>", "</s>", "<0x00>"]);
    for (let i = 3; i < 259; i++) expect(t[i]).toBe(TokenType.BYTE);
    for (let i = 259; i < 32000; i++) if (t[i] !== TokenType.NORMAL) throw new Error(`token ${i} type ${t[i]}`);
  });

  it("special ids and add flags from tokenizer_config (SpecialVocab)", () => {
    expect([v2.bosId, v2.eosId, v2.unkId, v2.padId]).toEqual([1, 2, 0, undefined]);
    expect(v2.addBos).toBe(true);
    expect(v2.addEos).toBe(false);
    const withCfg = vocabFromHfTokenizerJson(readHfTokenizerJson("llama2"), "llama2", {
      tokenizerConfig: readHfTokenizerConfig("llama2"),
    });
    expect([withCfg.bosId, withCfg.eosId, withCfg.unkId, withCfg.addBos, withCfg.addEos]).toEqual([1, 2, 0, true, false]);
  });

  it("merge-rank scores option", () => {
    const vm = vocabFromHfTokenizerJson(readHfTokenizerJson("llama2"), "llama2", { spmScores: "merges" });
    const id = (t: string) => vm.tokens.indexOf(t);
    // first merges of the tokenizer.json: "▁ t", "i n", "e r", ...
    expect(vm.scores![id("▁t")]).toBe(-0);
    expect(vm.scores![id("in")]).toBe(-1);
    expect(vm.scores![id("er")]).toBe(-2);
  });
});

describe("llama3 (get_vocab_base / _set_vocab_gpt2)", () => {
  it("writes model gpt2 / pre llama-bpe, 128256 tokens, merges, no scores", () => {
    expect(v3.model).toBe("gpt2");
    expect(v3.pre).toBe("llama-bpe");
    expect(v3.tokens.length).toBe(128256);
    expect(v3.scores).toBeUndefined();
    expect(v3.merges!.length).toBe(280147);
    expect(v3.merges![0]).toBe("Ġ Ġ");
  });

  it("types: base NORMAL, added special tokens CONTROL", () => {
    const t = v3.tokenTypes!;
    for (let i = 0; i < 128000; i++) if (t[i] !== TokenType.NORMAL) throw new Error(`token ${i} type ${t[i]}`);
    for (let i = 128000; i < 128256; i++) expect(t[i]).toBe(TokenType.CONTROL);
    expect(v3.tokens[128000]).toBe("<|begin_of_text|>");
    expect(v3.tokens[128009]).toBe("<|eot_id|>");
  });

  it("special ids, add_bos and EOG set", () => {
    expect([v3.bosId, v3.eosId]).toEqual([128000, 128001]);
    expect(v3.addBos).toBe(true);
    const tok = createTokenizer(v3);
    expect(tok.isEog(128001)).toBe(true); // eos <|end_of_text|>
    expect(tok.isEog(128009)).toBe(true); // <|eot_id|> detected by text, like llama.cpp
    expect(tok.isEog(128000)).toBe(false);
    expect(tok.eotId).toBe(128009);
  });

  it("pads missing ids up to vocab_size with [PAD<i>] UNUSED", () => {
    const v = vocabFromHfTokenizerJson(readHfTokenizerJson("llama3"), "llama3", { vocabSize: 128258 });
    expect(v.tokens.length).toBe(128258);
    expect(v.tokens[128257]).toBe("[PAD128257]");
    expect(v.tokenTypes![128257]).toBe(TokenType.UNUSED);
    const tok = createTokenizer(v);
    expect(tok.tokenToPiece(128257)).toEqual(new Uint8Array(0)); // unused tokens render as nothing
  });

  it("converts the pair merges format (transformers >= 4.45) like gguf.SpecialVocab", () => {
    const json = {
      model: {
        type: "BPE",
        vocab: { a: 0, b: 1, "a b": 2, ab: 3 },
        merges: [["a", "b"], ["a b", "c"]],
      },
      added_tokens: [{ id: 4, content: "<|x|>", special: false, normalized: false }, { id: 5, content: "[y▁z]", special: false }],
      decoder: { type: "ByteLevel" },
    };
    const v = vocabFromHfTokenizerJson(json, "llama3", { vocabSize: 7, tokenizerConfig: {} });
    expect(v.merges).toEqual(["a b", "aĠb c"]);
    expect(v.tokens).toEqual(["a", "b", "a b", "ab", "<|x|>", "[y z]", "[PAD6]"]);
    // "<|x|>" looks special -> CONTROL; "[y▁z]" -> USER_DEFINED with ▁ -> space
    expect(Array.from(v.tokenTypes!)).toEqual([1, 1, 1, 1, 3, 4, 5]);
  });

  it("rejects the wrong kind of tokenizer.json", () => {
    expect(() => vocabFromHfTokenizerJson(readHfTokenizerJson("llama2"), "llama3")).toThrow();
    expect(() => vocabFromHfTokenizerJson(readHfTokenizerJson("llama3"), "llama2")).toThrow();
  });
});
