// Planted ReLU statistics in synthetic models, as the profiler measures them.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { loadModel } from "../../src/index.js";
import { main } from "../../src/cli/main.js";
import { profileActivations } from "../../src/tools/profile.js";
import { trainPredictors } from "../../src/tools/train-predictor.js";
import { cofireGroups, cofireSeed, neuronFrequencies, normalQuantile } from "../../src/tools/synth/plant-sparsity.js";
import { collectActivations, popcount8 } from "../../src/tools/collect-activations.js";
import { native } from "../../src/native.js";
import { quietly } from "../helpers/quiet.js";

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

it("cofireGroups: a seeded partition into groups of the asked size, its members scattered over the layer", () => {
  const g = cofireGroups(1000, 8, 5);
  const sizes = new Map<number, number>();
  for (const x of g) sizes.set(x, (sizes.get(x) ?? 0) + 1);
  expect(sizes.size).toBe(125);
  expect([...sizes.values()].every((n) => n === 8)).toBe(true);
  expect(Array.from(cofireGroups(1000, 8, 5))).toEqual(Array.from(g));
  expect(Array.from(cofireGroups(1000, 8, 6))).not.toEqual(Array.from(g));
  // neighbours share a group by chance only: 7 of 999 other neurons, ~0.7%
  let adjacent = 0;
  for (let i = 1; i < 1000; i++) adjacent += g[i] === g[i - 1] ? 1 : 0;
  expect(adjacent).toBeLessThan(30);
  expect(() => cofireGroups(10, 0, 1)).toThrow(/group size/);
});

it("--cofire-group plants neurons that fire on the same tokens; the same partition of a model without groups shows none", async () => {
  const text = readFileSync(join(import.meta.dirname, "..", "..", "models", "heldout.txt"), "utf8").slice(0, 20000);
  const nFF = 1024;
  const groups = cofireGroups(nFF, 8, cofireSeed(1, 0));
  const lift: Record<string, { within: number; across: number; active: number }> = {};
  for (const cofire of ["0", "8"]) {
    const path = join(dir, `cofire${cofire}.gguf`);
    const code = await quietly(() => main(["synth", "--out", path, "--embd", "256", "--ff", String(nFF), "--layers", "1", "--heads", "8", "--type", "f16", "--activation", "reglu", "--active-fraction", "0.1", "--gate-rank", "32", "--cofire-group", cofire, "--seed", "1"]));
    expect(code).toBe(0);
    const model = await loadModel(path);
    const tokens = model.tokenizer.encode(text).slice(0, 1024);
    const c = collectActivations(model, tokens, { window: 256 });
    const bits = native().viewU8(c.y[0]!, 0, tokens.length * (nFF / 8));
    // each neuron's firing as a bitset over the tokens, then the Jaccard index of pairs of neurons
    const bytes = Math.ceil(tokens.length / 8);
    const fires = new Uint8Array(nFF * bytes);
    for (let t = 0; t < tokens.length; t++) for (let i = 0; i < nFF; i++) if ((bits[t * (nFF / 8) + (i >> 3)]! >> (i & 7)) & 1) fires[i * bytes + (t >> 3)]! |= 1 << (t & 7);
    const active = c.activeMean[0]! / nFF;
    c.dispose();
    model.dispose();
    const jaccard = (i: number, j: number) => {
      let both = 0;
      let either = 0;
      for (let b = 0; b < bytes; b++) {
        both += popcount8(fires[i * bytes + b]! & fires[j * bytes + b]!);
        either += popcount8(fires[i * bytes + b]! | fires[j * bytes + b]!);
      }
      return either ? both / either : 0;
    };
    const sum = { within: 0, nWithin: 0, across: 0, nAcross: 0 };
    for (let i = 0; i < nFF; i++)
      for (let j = i + 1; j < nFF; j++) {
        if (groups[i] === groups[j]) (sum.within += jaccard(i, j)), sum.nWithin++;
        else if ((i * 31 + j) % 16 === 0) (sum.across += jaccard(i, j)), sum.nAcross++; // a sixteenth of the other pairs
      }
    lift[cofire] = { within: sum.within / sum.nWithin, across: sum.across / sum.nAcross, active };
  }
  // measured on seed 1 (1,024 tokens of held-out text), mean Jaccard of two neurons' firing tokens:
  // groups of 8 planted, 0.153 within a group vs 0.019 across; none planted, 0.021 vs 0.022
  for (const l of Object.values(lift)) {
    expect(l.active).toBeGreaterThan(0.08); // the planted frequencies are kept
    expect(l.active).toBeLessThan(0.12);
  }
  expect(lift["8"]!.within).toBeGreaterThan(3 * lift["8"]!.across);
  expect(lift["0"]!.within).toBeLessThan(1.3 * lift["0"]!.across);
  expect(lift["0"]!.within).toBeGreaterThan(0.7 * lift["0"]!.across);
}, 120_000);
