// The shipped default model (a one-expert `smallthinker` GGUF, i.e. a dense ReGLU FFN) runs in
// llama.cpp too: same tokens for the fixture prompts, same greedy continuations as neuronpipe.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { loadModel, type Model } from "../../src/index.js";
import type { Peer } from "../../bench/peer/llama-peer.mjs";
import { argmax, openRequiredPeer } from "./peer.js";

const root = join(import.meta.dirname, "..", "..");
const modelPath = join(root, "models", "neuronpipe-default.gguf");
const index = JSON.parse(readFileSync(join(root, "tools", "train", "out", "reference", "index.json"), "utf8")) as {
  prompts: { text: string; tokens: number[] }[];
  greedy: { prompt_tokens: number[] }[];
};

let peer: Peer;
let model: Model;
beforeAll(async () => {
  peer = await openRequiredPeer(modelPath, { threads: 2, contextSize: 256 });
  model = await loadModel(modelPath);
});
afterAll(async () => {
  await peer?.dispose();
  model?.dispose();
});

it("llama.cpp tokenises the fixture prompts as we do", () => {
  for (const p of index.prompts) {
    expect(peer.tokenize(p.text, { addBos: true })).toEqual(model.tokenizer.encode(p.text));
  }
});

it("llama.cpp's greedy continuations equal neuronpipe's for 64 tokens", async () => {
  for (const g of index.greedy) {
    const theirs = await peer.greedy(g.prompt_tokens, 64);
    const s = model.createSession({ contextSize: 256 });
    let logits = s.evaluate(g.prompt_tokens);
    const ours: number[] = [];
    for (let i = 0; i < 64; i++) {
      ours.push(argmax(logits));
      logits = s.evaluate([ours[i]!]);
    }
    s.dispose();
    expect(theirs).toEqual(ours);
  }
});
