// SwiGLU, ReGLU and dReLU forward passes of the native engine against the plain TypeScript
// reference (reference-forward.ts) on tiny F32 models.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadModel } from "../../src/api/model.js";
import { synthModel } from "../../src/tools/synth/synth.js";
import { referenceLogits } from "./reference-forward.js";
import { activationSparsity, perplexity } from "../../src/tools/evaluate.js";

const dir = mkdtempSync(join(tmpdir(), "np-act-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const shape = { embd: 64, ff: 160, layers: 2, heads: 4, kvHeads: 2, ctx: 64 };
const tokens = [1, 450, 4996, 17354, 1701, 432, 29871, 13, 1576, 3186, 338, 263];

describe.each(["swiglu", "reglu", "drelu"] as const)("%s forward", (activation) => {
  it("matches the TypeScript reference", async () => {
    const path = join(dir, `${activation}.gguf`);
    await synthModel({ shape, type: "f32", activation, seed: 11 }).write(path);
    const ref = referenceLogits(path, tokens, activation);
    const model = await loadModel(path);
    expect(model.config.activation).toBe(activation);
    const s = model.createSession({ contextSize: 64, kvType: "f32" });
    const got = s.evaluate(tokens, true);
    const V = model.config.nVocab;
    let maxErr = 0;
    let maxRef = 0;
    for (let t = 0; t < tokens.length; t++) {
      for (let i = 0; i < V; i++) {
        maxErr = Math.max(maxErr, Math.abs(got[t * V + i]! - ref[t]![i]!));
        maxRef = Math.max(maxRef, Math.abs(ref[t]![i]!));
      }
    }
    // f32 kernels vs f64 reference over a 2-layer model: errors are ~1e-6 relative; 1e-4 of the largest logit is ample
    expect(maxErr).toBeLessThan(1e-4 * maxRef);
    expect(maxRef).toBeGreaterThan(1); // the comparison is not vacuous
    s.dispose();
    model.dispose();
  });
});

it("the three activations give different logits on the same weights (the comparison can tell them apart)", async () => {
  const a = referenceLogits(join(dir, "swiglu.gguf"), tokens.slice(0, 3), "swiglu")[2]!;
  const b = referenceLogits(join(dir, "swiglu.gguf"), tokens.slice(0, 3), "reglu")[2]!;
  const c = referenceLogits(join(dir, "swiglu.gguf"), tokens.slice(0, 3), "drelu")[2]!;
  const diff = (x: Float64Array, y: Float64Array) => x.reduce((m, v, i) => Math.max(m, Math.abs(v - y[i]!)), 0);
  expect(diff(a, b)).toBeGreaterThan(1e-2);
  expect(diff(b, c)).toBeGreaterThan(1e-2);
});

it("perplexity() equals the reference model's perplexity; activationSparsity() counts exact zeros", async () => {
  const path = join(dir, "reglu.gguf");
  const model = await loadModel(path);
  // one window of 12 tokens: 11 predictions
  const ref = referenceLogits(path, tokens, "reglu");
  let nll = 0;
  for (let t = 0; t + 1 < tokens.length; t++) {
    const row = ref[t]!;
    const max = Math.max(...row);
    const z = row.reduce((a, v) => a + Math.exp(v - max), 0);
    nll += Math.log(z) + max - row[tokens[t + 1]!]!;
  }
  const want = Math.exp(nll / (tokens.length - 1));
  const got = perplexity(model, tokens, 64);
  expect(got.tokens).toBe(tokens.length - 1);
  expect(Math.abs(got.perplexity - want) / want).toBeLessThan(1e-4);
  // two windows of 6 inputs: each restarts the context; the last input of the first predicts the 7th token
  const two = perplexity(model, tokens, 6);
  expect([two.tokens, two.windows]).toEqual([11, 2]);
  expect(two.perplexity).not.toBeCloseTo(got.perplexity, 6);
  // ReGLU on random weights: relu(gate) is zero for about half the neurons
  const sp = activationSparsity(model, tokens, 64);
  expect(sp.perLayer).toHaveLength(2);
  for (const x of sp.perLayer) expect(x).toBeGreaterThan(0.35), expect(x).toBeLessThan(0.65);
  // SwiGLU never gives exact zeros
  const swi = await loadModel(join(dir, "swiglu.gguf"));
  expect(activationSparsity(swi, tokens, 64).mean).toBe(0);
  swi.dispose();
  model.dispose();
});
