// Corpus text for the commands that profile a model or train its predictors.
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { loadModel, type Model } from "../api/model.js";
import { num, type Values } from "./command.js";
import { bundledHeldout, defaultModelPath } from "./model-flags.js";

/** Token ids of a text file, or of every file in a directory (each a document with BOS). */
function corpusTokens(model: Model, path: string): number[] {
  if (!existsSync(path)) throw new Error(`corpus ${path}: no such file or directory`);
  const files = statSync(path).isDirectory()
    ? readdirSync(path)
        .sort()
        .map((f) => join(path, f))
        .filter((f) => statSync(f).isFile())
    : [path];
  if (files.length === 0) throw new Error(`${path}: no files to read`);
  return files.flatMap((f) => model.tokenizer.encode(readFileSync(f, "utf8")));
}

/** Load a ReLU-family model and the corpus tokens for the profile/predictor commands. */
export async function reluModelAndCorpus(v: Values, minTokens: number) {
  const maxTokens = num(v["max-tokens"], "max-tokens", { int: true, min: minTokens });
  const threads = num(v.threads, "threads", { int: true, min: 1 });
  const path = (v.model as string | undefined) ?? defaultModelPath();
  const corpus = (v.corpus as string | undefined) ?? bundledHeldout();
  const model = await loadModel(path, { threads });
  try {
    if (model.config.activation === "swiglu") throw new Error(`${path}: SwiGLU FFNs have no exact zeros (ReGLU/dReLU models only)`);
    let tokens = corpusTokens(model, corpus);
    if (maxTokens !== undefined) tokens = tokens.slice(0, maxTokens);
    return { model, path, corpus, tokens };
  } catch (e) {
    model.dispose();
    throw e;
  }
}
