// The activation profiler against the trainer's own per-neuron statistics (PyTorch, computed
// independently over the same held-out token windows), and its file round trip.
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { loadModel } from "../../src/index.js";
import { profileActivations } from "../../src/tools/profile.js";
import { hotSetSize, readProfile, writeProfile } from "../../src/sparse/profile-file.js";
import { readGGUF } from "../../src/gguf/reader.js";
import { permutationFault } from "../../src/util/permutation.js";

const root = join(import.meta.dirname, "..", "..");
const out = join(root, "tools", "train", "out");
const dir = mkdtempSync(join(tmpdir(), "np-profile-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it("per-neuron firing frequencies equal the trainer's on the held-out stream; the file round-trips", async () => {
  const stats = JSON.parse(readFileSync(join(out, "activation_stats.json"), "utf8")) as {
    n_tokens: number;
    layers: { activation_frequency: number[] }[];
  };
  const metrics = JSON.parse(readFileSync(join(out, "metrics.json"), "utf8"));
  const b = readFileSync(join(out, "reference", "heldout.u16"));
  // the trainer's windows: inputs t[256k, 256k+256) over the first n_tokens tokens
  const tokens = Array.from(new Uint16Array(b.buffer, b.byteOffset, b.length / 2)).slice(0, stats.n_tokens);
  const model = await loadModel(join(root, "models", "neuronpipe-default.gguf"));
  const p = profileActivations(model, tokens, 256, { corpus: "heldout.u16" });
  model.dispose();
  expect(p.tokens).toBe(113266);
  let worst = 0;
  let flips = 0; // Σ |Δ count| over neurons
  let fired = 0;
  p.layers.forEach((l, i) => {
    const ref = stats.layers[i]!.activation_frequency;
    for (let j = 0; j < p.nFF; j++) {
      const d = Math.abs(l.counts[j]! / p.tokens - ref[j]!);
      worst = Math.max(worst, d);
      flips += Math.max(0, d - 5e-7) * p.tokens; // the reference is rounded to 6 decimals
      fired += l.counts[j]!;
    }
    // hot-set size and mean active count as the trainer reports them
    expect(Math.abs(l.hot80 - metrics.layers[i].hot_neurons_for_80pct_of_activations)).toBeLessThanOrEqual(1);
    expect(l.activeMean).toBeCloseTo(metrics.layers[i].active_neurons_per_token_mean, 1);
  });
  // f32 here vs PyTorch there: the L1 penalty parks many gates just below 0, so gates within
  // rounding of 0 flip for some (token, neuron) pairs — measured 7e-5 of all firings, ≤ 7 tokens per neuron
  console.log(`[profile] worst frequency difference ${worst.toExponential(2)} (${Math.round(worst * p.tokens)} tokens); differing firings ${Math.round(flips)} of ${fired} (${((100 * flips) / fired).toFixed(3)}%)`);
  expect(worst).toBeLessThan(20 / p.tokens);
  expect(flips / fired).toBeLessThan(5e-4); // measured 7e-5

  const path = join(dir, "p.profile.gguf");
  await writeProfile(path, p);
  const q = readProfile(path);
  expect(q.tokens).toBe(p.tokens);
  q.layers.forEach((l, i) => {
    expect(Array.from(l.counts)).toEqual(Array.from(p.layers[i]!.counts));
    expect(l.hot80).toBe(p.layers[i]!.hot80);
    expect(l.overlap).toBeCloseTo(p.layers[i]!.overlap, 6);
  });
  expect(q.reuse).toEqual(p.reuse);
  // the reuse counted here is what the shipped profile holds (the planner reads it through the pack)
  expect(readProfile(join(root, "models", "neuronpipe-default.gguf.profile.gguf")).reuse?.spans).toEqual(p.reuse!.spans);
  expect(() => readProfile(join(root, "models", "neuronpipe-default.gguf"))).toThrow(/not an activation profile/);
});

it("hotSetSize on a hand-computed case", () => {
  // counts 50, 30, 10, 10: 80% of 100 needs the top two
  expect(hotSetSize(Uint32Array.from([10, 50, 10, 30]), 0.8)).toBe(2);
  expect(hotSetSize(Uint32Array.from([10, 50, 10, 30]), 0.81)).toBe(3);
});

it("permutationFault names the first entry out of range or repeated; a profile whose order is not a permutation is refused by tensor and position", () => {
  expect(permutationFault([2, 0, 1])).toBeUndefined();
  expect(permutationFault([0, 4, 1, 2])).toEqual({ position: 1, id: 4, repeated: false });
  expect(permutationFault([1, 0, 1, -1])).toEqual({ position: 2, id: 1, repeated: true });
  // the shipped profile holds orders: position 3 of layer 0's made a copy of position 2's
  const shipped = join(root, "models", "neuronpipe-default.gguf.profile.gguf");
  const bad = join(dir, "bad-order.profile.gguf");
  copyFileSync(shipped, bad);
  const t = readGGUF(bad).tensorsByName.get("blk.0.ffn_order")!;
  const b = readFileSync(bad);
  const id = b.readInt32LE(t.offset + 8);
  b.writeInt32LE(id, t.offset + 12);
  writeFileSync(bad, b);
  expect(() => readProfile(bad)).toThrow(`${bad}: blk.0.ffn_order[3] = ${id} is a repeated neuron id of 0..1023; the order must be a permutation`);
});
