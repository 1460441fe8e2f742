// The fuzzer's seed files: small models of every weight type and FFN activation (a 291-token
// vocabulary keeps each mutant's load to a few milliseconds), and a neuron pack with a profile and
// trained predictors, built by the code that builds real ones.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { loadModel } from "../../api/model.js";
import { planOptions, budgetForFfnFraction } from "../../sparse/memory-plan.js";
import { openPack } from "../../sparse/pack/open.js";
import { writePack } from "../../sparse/pack/write.js";
import { writePredictors } from "../../sparse/predictor-file.js";
import { writeProfile } from "../../sparse/profile-file.js";
import { profileActivations } from "../profile.js";
import { synthModel } from "../synth/synth.js";
import { trainPredictors } from "../train-predictor.js";
import type { FuzzSeed } from "./run.js";

const SHAPE = { embd: 64, ff: 256, layers: 2, heads: 2, kvHeads: 2, ctx: 64 };
const TEXT = "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, and nothing particular to interest me on shore, I thought I would sail about a little and see the watery part of the world. ";

export async function modelSeeds(dir: string): Promise<FuzzSeed[]> {
  const seeds: FuzzSeed[] = [];
  for (const [type, activation] of [["f32", "swiglu"], ["f16", "reglu"], ["q8_0", "drelu"], ["q4_0", "reglu"]] as const) {
    const path = join(dir, `seed-${type}-${activation}.gguf`);
    if (!existsSync(path)) await synthModel({ shape: SHAPE, type, activation, seed: 7, tokenizer: "bytes" }).write(path);
    seeds.push({ path, label: `${type} ${activation} model` });
  }
  return seeds;
}

/** A Q8_0 ReGLU model with planted sparsity, profiled, with trained predictors, packed; loaded at half its FFN. */
export async function packSeed(dir: string): Promise<FuzzSeed> {
  const model = join(dir, "seed-pack-model.gguf");
  const pack = join(dir, "seed.pack.gguf");
  if (!existsSync(pack)) {
    await synthModel({ shape: SHAPE, type: "q8_0", activation: "reglu", seed: 7, tokenizer: "bytes", sparsity: { activeFraction: 0.1, hotNeurons: 0.2, hotShare: 0.8, gateRank: 16 } }).write(model);
    const m = await loadModel(model);
    const tokens = m.tokenizer.encode(TEXT.repeat(8));
    await writeProfile(`${model}.profile.gguf`, profileActivations(m, tokens, 64));
    await writePredictors(`${model}.predictor.gguf`, trainPredictors(m, tokens, { window: 64 }));
    await m.close();
    await writePack(model, pack, { profile: `${model}.profile.gguf`, predictor: `${model}.predictor.gguf` });
  }
  const p = openPack(pack);
  const memory = budgetForFfnFraction(p, 0.5, planOptions(p.config, { contextSize: 32 }));
  return { path: pack, memory, label: "neuron pack (Q8_0 ReGLU, predictors), half the FFN resident" };
}
