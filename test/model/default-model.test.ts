// The shipped default model (models/neuronpipe-default.gguf, converted from tools/train/out)
// against the trainer's own PyTorch model: logits on held-out prompts, greedy continuations,
// perplexity of the F32/Q8_0/Q4_0 exports, and activation sparsity as the engine measures it.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { requantize } from "../../src/tools/convert/requantize.js";
import { convertTrainerExport } from "../../src/tools/convert/from-trainer.js";
import { activationSparsity, perplexity } from "../../src/tools/evaluate.js";
import { loadModel, type Model } from "../../src/index.js";
import { GGMLType } from "../../src/native.js";
import { argmax } from "../../src/api/sampling.js";
import { f16ToF32 } from "../native/helpers.js";

const root = join(import.meta.dirname, "..", "..");
const modelPath = join(root, "models", "neuronpipe-default.gguf");
const refDir = join(root, "tools", "train", "out", "reference");
const metrics = JSON.parse(readFileSync(join(root, "tools", "train", "out", "metrics.json"), "utf8"));

interface RefPrompt {
  id: number;
  text: string;
  tokens: number[];
  logits_f16: { offset: number; shape: [number, number] };
  last_logits_f32: { offset: number; shape: [number] };
}
const index = JSON.parse(readFileSync(join(refDir, "index.json"), "utf8")) as {
  prompts: RefPrompt[];
  greedy: { prompt_id: number; prompt_tokens: number[]; continuation: number[] }[];
};
const logitsF16 = readFileSync(join(refDir, "logits.f16.bin"));
const lastF32 = readFileSync(join(refDir, "last_logits.f32.bin"));
// the held-out token stream (<s> document </s> …); the trainer's perplexity uses its first 20480 tokens
const heldout = (() => {
  const b = readFileSync(join(refDir, "heldout.u16"));
  return Array.from(new Uint16Array(b.buffer, b.byteOffset, b.length / 2)).slice(0, 20480);
})();

let model: Model;
const dir = mkdtempSync(join(tmpdir(), "np-default-"));
beforeAll(async () => {
  model = await loadModel(modelPath);
});
afterAll(() => {
  model?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

describe("default model vs its PyTorch reference", () => {
  it("is reproduced byte for byte by `neuronpipe convert` from the trainer's export", async () => {
    const p = join(dir, "reconverted.gguf");
    await convertTrainerExport(join(root, "tools", "train", "out")).write(p);
    expect(readFileSync(p).equals(readFileSync(modelPath))).toBe(true);
  });

  it("is the trained ReGLU model, tokenised as the trainer did", () => {
    expect(model.config).toMatchObject({ arch: "smallthinker", activation: "reglu", nLayer: 6, nEmbd: 256, nFF: 1024, nVocab: 4096 });
    for (const p of index.prompts) expect(model.tokenizer.encode(p.text)).toEqual(p.tokens);
  });

  it("logits match PyTorch at every position of every prompt", () => {
    const V = model.config.nVocab;
    let worstAll = 0;
    let worstLast = 0;
    for (const p of index.prompts) {
      const s = model.createSession({ contextSize: 256, kvType: "f32" });
      const got = s.evaluate(p.tokens, true);
      s.dispose();
      const n = p.tokens.length;
      for (let t = 0; t < n; t++) {
        for (let i = 0; i < V; i++) {
          const ref = f16ToF32(logitsF16.readUInt16LE(p.logits_f16.offset + 2 * (t * V + i)));
          // the fixture is stored in f16: its own rounding is up to 2^-11 relative
          worstAll = Math.max(worstAll, Math.abs(got[t * V + i]! - ref) - Math.abs(ref) * 2 ** -11);
        }
        if (t === n - 1) {
          for (let i = 0; i < V; i++) {
            worstLast = Math.max(worstLast, Math.abs(got[t * V + i]! - lastF32.readFloatLE(p.last_logits_f32.offset + 4 * i)));
          }
        }
      }
    }
    console.log(`[default model] logits vs PyTorch: worst |Δ| at last positions (f32 fixture) ${worstLast.toExponential(2)}, elsewhere beyond the f16 fixture's rounding ${worstAll.toExponential(2)}`);
    // f32 engine vs f32 PyTorch, logits of magnitude ~10–20: summation-order differences are ~1e-5
    expect(worstLast).toBeLessThan(2e-4); // measured 1.3e-5
    expect(worstAll).toBeLessThan(1e-4); // measured 4.3e-6
  });

  it("greedy continuations are identical to PyTorch's for 64 tokens", () => {
    expect(index.greedy.length).toBeGreaterThanOrEqual(5);
    for (const g of index.greedy) {
      const s = model.createSession({ contextSize: 256 }); // default f16 KV cache, as a user runs it
      let logits = s.evaluate(g.prompt_tokens);
      const ours: number[] = [];
      for (let i = 0; i < 64; i++) {
        const t = argmax(logits);
        ours.push(t);
        logits = s.evaluate([t]);
      }
      s.dispose();
      expect(ours).toEqual(g.continuation);
    }
  });

  it("held-out perplexity: F32 equals PyTorch's; Q8_0 within 2%, Q4_0 within 10%", async () => {
    const want = metrics.heldout_ppl as number; // same 20480 tokens, windows of 256
    const results: Record<string, number> = {};
    results.f32 = perplexity(model, heldout, 256).perplexity;
    for (const [name, type] of [
      ["q8_0", GGMLType.Q8_0],
      ["q4_0", GGMLType.Q4_0],
    ] as const) {
      const p = join(dir, `${name}.gguf`);
      await requantize(modelPath, p, type);
      const m = await loadModel(p);
      results[name] = perplexity(m, heldout, 256).perplexity;
      m.dispose();
    }
    console.log(`[default model] held-out perplexity: PyTorch f32 ${want.toFixed(3)}; neuronpipe ${Object.entries(results).map(([k, v]) => `${k} ${v.toFixed(3)}`).join(", ")}`);
    expect(Math.abs(results.f32! - want) / want).toBeLessThan(1e-3);
    expect(Math.abs(results.q8_0! - want) / want).toBeLessThan(0.02);
    expect(Math.abs(results.q4_0! - want) / want).toBeLessThan(0.1);
  });

  it("FFN activation sparsity on held-out text is ≥ 85% on average, as the trainer measured", () => {
    const sp = activationSparsity(model, heldout, 256);
    console.log(`[default model] sparsity per layer: ${sp.perLayer.map((x) => (100 * x).toFixed(1) + "%").join(" ")}; mean ${(100 * sp.mean).toFixed(2)}%`);
    expect(sp.mean).toBeGreaterThanOrEqual(0.85);
    // the trainer's per-layer figures (all held-out tokens) agree with ours (first 20480) within a few points
    metrics.layers.forEach((l: { sparsity_relu_gate_zero: number }, i: number) => {
      expect(Math.abs(sp.perLayer[i]! - l.sparsity_relu_gate_zero)).toBeLessThan(0.03);
    });
  });
});
