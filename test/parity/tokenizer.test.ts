// Tokenizer parity with llama.cpp: for the Llama 2 (SentencePiece) and Llama 3 (BPE)
// vocabularies, both engines read the SAME GGUF (a tiny synthetic model carrying the real
// vocabulary) and must produce identical token ids for every text, with and without BOS, and
// identical text back from detokenisation.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, synthModel, type Model } from "../../src/index.js";
import type { Peer } from "../../bench/peer/llama-peer.mjs";
import { loadTexts, openRequiredPeer, requirePeerInstalled, tempModelDir } from "./peer.js";

// Smallest model llama.cpp accepts; only the vocabulary matters here.
const vocabShape = { embd: 32, ff: 32, layers: 1, heads: 1, kvHeads: 1, ctx: 64 };

/** Show a text compactly in failure messages. */
const show = (t: string) => JSON.stringify(t.length > 80 ? `${t.slice(0, 77)}...` : t);

// Fails (never skips) when the peer is missing, with the command that installs it.
it("the llama.cpp peer is installed (bash bench/install.sh)", () => {
  requirePeerInstalled();
});

for (const kind of ["llama2", "llama3"] as const) {
  describe(`tokenizer parity with llama.cpp: ${kind} vocabulary`, () => {
    let tmp: ReturnType<typeof tempModelDir> | undefined;
    let ours: Model | undefined;
    let peer: Peer | undefined;
    let texts: string[] = [];

    beforeAll(async () => {
      requirePeerInstalled();
      tmp = tempModelDir(`tok-${kind}`);
      const path = `${tmp.dir}/${kind}-vocab.gguf`;
      await synthModel({ shape: vocabShape, type: "f16", seed: 1, tokenizer: kind, tiedOutput: true }).write(path);
      ours = await loadModel(path, { threads: 1 });
      peer = await openRequiredPeer(path, { threads: 1, contextSize: 64 });
      const t = await loadTexts();
      texts = t.texts;
      console.log(`[parity/tokenizer ${kind}] ${texts.length} texts from ${t.sources.join(" + ")}`);
    });

    afterAll(async () => {
      await peer?.dispose();
      ours?.dispose();
      tmp?.cleanup();
    });

    it("both engines agree on BOS/EOS ids", () => {
      expect(ours!.tokenizer.bosId).toBe(peer!.bosToken);
      expect(ours!.tokenizer.eosId).toBe(peer!.eosToken);
    });

    for (const addBos of [false, true]) {
      it(`identical token ids (${addBos ? "with" : "without"} BOS)`, () => {
        const mismatches: string[] = [];
        let tokens = 0;
        for (const text of texts) {
          const a = ours!.tokenizer.encode(text, { addBos, parseSpecial: false });
          const b = peer!.tokenize(text, { addBos, special: false });
          tokens += b.length;
          if (JSON.stringify(a) !== JSON.stringify(b)) {
            mismatches.push(`${show(text)}\n    ours:      ${JSON.stringify(a)}\n    llama.cpp: ${JSON.stringify(b)}`);
          }
        }
        expect(tokens).toBeGreaterThan(texts.length); // the set is not trivially empty
        expect(mismatches, `${mismatches.length}/${texts.length} texts differ:\n${mismatches.join("\n")}`).toEqual([]);
      });
    }

    it("identical token ids when special-token text is parsed", () => {
      const specials =
        kind === "llama2"
          ? ["<s>Hello</s>", "a <s> b </s> c", "<unk>", "x</s>"]
          : ["<|begin_of_text|>Hello<|eot_id|>", "a <|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>", "<|end_of_text|>"];
      const mismatches: string[] = [];
      for (const text of [...specials, ...texts]) {
        const a = ours!.tokenizer.encode(text, { addBos: false, parseSpecial: true });
        const b = peer!.tokenize(text, { addBos: false, special: true });
        if (JSON.stringify(a) !== JSON.stringify(b)) {
          mismatches.push(`${show(text)}\n    ours:      ${JSON.stringify(a)}\n    llama.cpp: ${JSON.stringify(b)}`);
        }
      }
      expect(mismatches, `${mismatches.length} texts differ:\n${mismatches.join("\n")}`).toEqual([]);
    });

    it("identical detokenisation (llama_detokenize, remove_special = false)", () => {
      const mismatches: string[] = [];
      for (const text of texts) {
        for (const addBos of [false, true]) {
          const ids = peer!.tokenize(text, { addBos });
          for (const special of [false, true]) {
            const a = ours!.tokenizer.decode(ids, { removeSpecial: false, unparseSpecial: special });
            const b = peer!.detokenize(ids, { special });
            if (a !== b) mismatches.push(`${show(text)} bos=${addBos} special=${special}: ours ${show(a)} llama.cpp ${show(b)}`);
          }
        }
      }
      expect(mismatches, `${mismatches.length} decodings differ:\n${mismatches.join("\n")}`).toEqual([]);
    });
  });
}
