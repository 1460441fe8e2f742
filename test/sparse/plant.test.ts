// Planted ReLU statistics in synthetic models, as the profiler measures them.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { loadModel } from "../../src/index.js";
import { main } from "../../src/cli/main.js";
import { profileActivations } from "../../src/tools/profile.js";
import { trainPredictors } from "../../src/tools/train-predictor.js";
import { neuronFrequencies, normalQuantile } from "../../src/tools/synth/plant-sparsity.js";

const dir = mkdtempSync(join(tmpdir(), "np-plant-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it("normalQuantile matches tabulated values", () => {
  expect(normalQuantile(0.5)).toBeCloseTo(0, 9);
  expect(normalQuantile(0.975)).toBeCloseTo(1.959964, 5);
  expect(normalQuantile(0.1)).toBeCloseTo(-1.281552, 5);
  expect(normalQuantile(0.001)).toBeCloseTo(-3.090232, 5);
});

it("planned frequencies have the requested mean and skew", () => {
  const f = Array.from(neuronFrequencies(4096, { activeFraction: 0.1, hotNeurons: 0.2, hotShare: 0.8 }, 7));
  expect(f.reduce((a, b) => a + b, 0) / f.length).toBeCloseTo(0.1, 3);
  const sorted = [...f].sort((a, b) => b - a);
  const top = sorted.slice(0, 4096 * 0.2).reduce((a, b) => a + b, 0) / sorted.reduce((a, b) => a + b, 0);
  expect(top).toBeCloseTo(0.8, 2);
});

it("synth --active-fraction 0.1 gives ~10% active neurons, ~20% of them giving 80% of activations, overlapping tokens", async () => {
  const path = join(dir, "planted.gguf");
  const quiet = process.stderr.write.bind(process.stderr);
  process.stderr.write = (() => true) as typeof process.stderr.write;
  const code = await main(["synth", "--out", path, "--embd", "256", "--ff", "1024", "--layers", "3", "--heads", "8", "--type", "q4_0", "--activation", "reglu", "--active-fraction", "0.1"]);
  process.stderr.write = quiet;
  expect(code).toBe(0);
  const model = await loadModel(path);
  const text = readFileSync(join(import.meta.dirname, "..", "..", "models", "heldout.txt"), "utf8").slice(0, 20000);
  const p = profileActivations(model, model.tokenizer.encode(text).slice(0, 1024), 256);
  model.dispose();
  for (const l of p.layers) {
    // measured on seed 1: 0.099–0.106 active, hot-80% sets of 17–19% of neurons, Jaccard overlap ≈ 0.33
    expect(l.activeMean / p.nFF).toBeGreaterThan(0.08);
    expect(l.activeMean / p.nFF).toBeLessThan(0.12);
    expect(l.hot80 / p.nFF).toBeGreaterThan(0.12);
    expect(l.hot80 / p.nFF).toBeLessThan(0.28);
    expect(l.overlap).toBeGreaterThan(0.15); // random active sets of 10% would overlap by ~0.05
  }
  // without planting, a random ReGLU model fires ~half its neurons
  const plain = join(dir, "plain.gguf");
  process.stderr.write = (() => true) as typeof process.stderr.write;
  await main(["synth", "--out", plain, "--embd", "256", "--ff", "1024", "--layers", "1", "--heads", "8", "--type", "q4_0", "--activation", "reglu"]);
  process.stderr.write = quiet;
  const m2 = await loadModel(plain);
  const p2 = profileActivations(m2, m2.tokenizer.encode(text).slice(0, 256), 256);
  m2.dispose();
  expect(p2.layers[0]!.activeMean / p2.nFF).toBeGreaterThan(0.35);
});

it("--gate-rank keeps the planted statistics and makes activations predictable from x (a trained predictor needs far fewer neurons)", async () => {
  const text = readFileSync(join(import.meta.dirname, "..", "..", "models", "heldout.txt"), "utf8").slice(0, 60000);
  const predictedShare: Record<string, number> = {};
  for (const rank of ["0", "32"]) {
    const path = join(dir, `rank${rank}.gguf`);
    const quiet = process.stderr.write.bind(process.stderr);
    process.stderr.write = (() => true) as typeof process.stderr.write;
    const code = await main(["synth", "--out", path, "--embd", "256", "--ff", "1024", "--layers", "1", "--heads", "8", "--type", "f16", "--activation", "reglu", "--active-fraction", "0.1", "--gate-rank", rank]);
    process.stderr.write = quiet;
    expect(code).toBe(0);
    const model = await loadModel(path);
    const tokens = model.tokenizer.encode(text).slice(0, 6000);
    const p = profileActivations(model, tokens.slice(0, 1024), 256);
    expect(p.layers[0]!.activeMean / p.nFF).toBeGreaterThan(0.08);
    expect(p.layers[0]!.activeMean / p.nFF).toBeLessThan(0.12);
    expect(p.layers[0]!.hot80 / p.nFF).toBeLessThan(0.28);
    const r = trainPredictors(model, tokens, { epochs: 8, targetRecall: 0.998 });
    model.dispose();
    expect(r.report[0]!.recall).toBeGreaterThan(0.97);
    predictedShare[rank] = r.report[0]!.predictedActiveFrac;
  }
  // measured: full-rank random gates 0.56 of neurons predicted, rank-32 gates 0.31, both at recall ≈ 0.995 (10% truly fire)
  expect(predictedShare["32"]!).toBeLessThan(0.6 * predictedShare["0"]!);
}, 120_000);
