// Sparse decoding from a neuron pack under a memory budget, against the dense engine:
// the oracle predictor reproduces dense greedy decoding token for token at budgets holding
// 100%, 50% and 25% of the FFN (default model, F32, and a synthetic planted-sparsity model,
// F16 — both re-lay the down projection exactly); for Q8_0/Q4_0, whose down columns are
// re-quantised in the pack, teacher-forced top-1 agreement with dense is checked; logits are bit-identical across budgets, I/O backends and thread counts; the trained
// predictor keeps held-out perplexity within 1% of dense; the kernel-measured resident memory
// stays within the budget; impossible budgets and missing predictors are refused by name.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../helpers/cli.js";
import { quietly } from "../helpers/quiet.js";
import { main } from "../../src/cli/main.js";
import { perplexity } from "../../src/tools/evaluate.js";
import { loadModel, type Model } from "../../src/index.js";
import { native } from "../../src/native.js";
import { budgetForFfnFraction, planOptions, type PlanOptions } from "../../src/sparse/memory-plan.js";
import { openPack } from "../../src/sparse/pack/open.js";
import { writePack } from "../../src/sparse/pack/write.js";
import type { Pack } from "../../src/sparse/pack/format.js";
import { profileActivations } from "../../src/tools/profile.js";
import { writeProfile } from "../../src/sparse/profile-file.js";
import { loadSparseModel, type LoadOptions } from "../../src/api/model.js";

const root = join(import.meta.dirname, "..", "..");
const defaultModel = join(root, "models", "neuronpipe-default.gguf");
const heldoutText = readFileSync(join(root, "models", "heldout.txt"), "utf8");
const dir = mkdtempSync(join(tmpdir(), "np-sparse-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const n = native();

const defaultPack = join(dir, "default.pack.gguf");
const ctx = 128;

/** loadSparseModel's plan options for these runs, for budgetForFfnFraction. */
const planOpts = (pack: Pack, predictor: boolean, contextSize = ctx): PlanOptions => planOptions(pack.config, { contextSize, predictor });

function argmax(a: Float32Array): number {
  let b = 0;
  for (let i = 1; i < a.length; i++) if (a[i]! > a[b]!) b = i;
  return b;
}

/** Greedy decoding by hand: returns the ids and the logits of every step. */
function greedy(m: Model, prompt: number[], steps: number): { ids: number[]; logits: Float32Array[] } {
  const s = m.createSession({ contextSize: ctx });
  try {
    let logits = s.evaluate(prompt);
    const ids: number[] = [];
    const all: Float32Array[] = [];
    for (let i = 0; i < steps; i++) {
      const t = argmax(logits);
      ids.push(t);
      all.push(logits);
      logits = s.evaluate([t]);
    }
    return { ids, logits: all };
  } finally {
    s.dispose();
  }
}

beforeAll(async () => {
  await writePack(defaultModel, defaultPack, {
    profile: `${defaultModel}.profile.gguf`,
    predictor: `${defaultModel}.predictor.gguf`,
  });
  // synthetic ReGLU models with planted sparsity (~10% active), profiled on held-out text
  for (const type of ["f16", "q8_0", "q4_0"]) await synthAndPack(type);
  // Q4_0 model, down columns re-laid as Q8_0 (pack --down-type q8_0)
  await writePack(synthPath("q4_0"), synthPackPath("q4_0-q8down"), { profile: `${synthPath("q4_0")}.profile.gguf`, downType: 8 });
}, 120_000);

const synthPath = (type: string) => join(dir, `synth-${type}.gguf`);
const synthPackPath = (type: string) => join(dir, `synth-${type}.pack.gguf`);
async function synthAndPack(type: string) {
  const path = synthPath(type);
  expect(
    await quietly(() =>
      main(["synth", "--out", path, "--embd", "256", "--ff", "1024", "--layers", "3", "--heads", "8", "--type", type, "--activation", "reglu", "--active-fraction", "0.1"]),
    ),
  ).toBe(0);
  const m = await loadModel(path);
  const p = profileActivations(m, m.tokenizer.encode(heldoutText.slice(0, 20000)).slice(0, 512), 256);
  m.dispose();
  await writeProfile(`${path}.profile.gguf`, p);
  await writePack(path, synthPackPath(type), { profile: `${path}.profile.gguf` });
}

describe.each([
  ["default model (F32)", () => defaultModel, () => defaultPack, "The whale"],
  ["synthetic planted-sparsity model (F16)", () => synthPath("f16"), () => synthPackPath("f16"), "It was the best of times"],
])("oracle predictor, %s", (_name, modelPath, packPath, text) => {
  it("decodes the same 64 tokens as the dense engine at budgets holding 100%, 50%, 40% and 25% of the FFN, gate rows pinned or cached", async () => {
    const dense = await loadModel(modelPath());
    const prompt = dense.tokenizer.encode(text, { addBos: true });
    const ref = greedy(dense, prompt, 64).ids;
    dense.dispose();
    const pack = openPack(packPath());
    // [share of the FFN's bytes in memory, pinGates, gate rows pinned?]: "auto" pins when the
    // gate rows (a third of the FFN) take ≤ 75% of the neuron cache — at 50%, not at 25%
    const runs: [number, boolean | "auto", boolean][] = [
      [1, "auto", false],
      [0.5, "auto", true],
      [0.5, false, false],
      [0.4, true, true],
      [0.25, "auto", false],
    ];
    for (const [f, pinGates, pinned] of runs) {
      const m = await loadSparseModel(packPath(), { memory: budgetForFfnFraction(pack, f, planOpts(pack, false)), predictor: "oracle", decoder: "inline", pinGates, contextSize: ctx });
      try {
        expect(m.sparse!.plan.gatesPinned).toBe(pinned);
        expect(m.sparse!.plan.ffnResident).toBeCloseTo(f, 2);
        const got = greedy(m, prompt, 64).ids;
        expect(got).toEqual(ref);
        // the oracle computes every gate: every neuron predicted, and at < 100% some were read from storage
        const rep = m.sparse!.report();
        expect(rep.every((r) => r.predicted === r.tokens * pack.config.nFF)).toBe(true);
        const bytes = rep.reduce((a, r) => a + r.bytesRead, 0);
        if (f === 1) expect(bytes).toBe(0);
        else expect(bytes).toBeGreaterThan(0);
      } finally {
        m.dispose();
      }
    }
  }, 120_000);
});

it.each([
  ["q8_0", "q8_0"],
  ["q4_0", "q4_0"],
  ["q4_0", "q4_0-q8down"],
])("oracle predictor, synthetic %s model (pack %s): teacher-forced top-1 agreement with dense of at least 0.95, cache holding a quarter of the FFN", async (type, packName) => {
  const dense = await loadModel(synthPath(type));
  const prompt = dense.tokenizer.encode("It was the best of times", { addBos: true });
  const seq = [...prompt, ...greedy(dense, prompt, 63).ids];
  const V = dense.config.nVocab;
  const top1 = (m: Model) => {
    const s = m.createSession({ contextSize: ctx });
    const l = s.evaluate(seq, true);
    s.dispose();
    return Array.from({ length: seq.length }, (_, t) => argmax(l.subarray(t * V, (t + 1) * V)));
  };
  const want = top1(dense);
  dense.dispose();
  const pack = openPack(synthPackPath(packName));
  const m = await loadSparseModel(synthPackPath(packName), { memory: budgetForFfnFraction(pack, 0.25, planOpts(pack, false)), predictor: "oracle", decoder: "inline", contextSize: ctx });
  const got = top1(m);
  m.dispose();
  const agree = got.filter((t, i) => t === want[i]).length / got.length;
  // measured over 70 positions: q8_0 100%, q4_0 97.1%, q4_0 with Q8_0 columns 98.6% (the re-quantised
  // down columns add 0.36% / 4.4% / 0.37% relative error; dense and oracle greedy part after 54 / 30
  // tokens on these random models)
  if (packName === "q4_0-q8down") {
    expect(pack.downType).toBe(8);
    for (const e of pack.downRelayoutError) expect(e).toBeLessThan(0.005);
  }
  expect(agree).toBeGreaterThanOrEqual(0.95);
}, 60_000);

describe("default model, trained predictor", () => {
  it("logits are bit-identical whatever the budget, the I/O backend and the thread count", async () => {
    const pack = openPack(defaultPack);
    const prompt = pack.file && (await loadModel(defaultModel)).tokenizer.encode("The state of the Union", { addBos: true });
    const uring = n.buildInfo().liburing;
    const runs: [number, LoadOptions["io"], number][] = [
      [1, { backend: "auto", queueDepth: 32 }, 2],
      [0.5, { backend: "pread", queueDepth: 8 }, 1],
      [0.25, { backend: uring ? "uring" : "pread", queueDepth: 1 }, 2],
      [0.25, { backend: "pread", queueDepth: 32, directIO: false }, 1],
    ];
    let ref: Float32Array[] | undefined;
    const before = n.getThreads();
    try {
      for (const [f, io, threads] of runs) {
        const m = await loadSparseModel(defaultPack, { memory: budgetForFfnFraction(pack, f, planOpts(pack, true)), io, threads, decoder: "inline", contextSize: ctx });
        try {
          const got = greedy(m, prompt, 24).logits;
          if (!ref) ref = got;
          else for (let i = 0; i < ref.length; i++) expect(Buffer.from(got[i]!.buffer).equals(Buffer.from(ref[i]!.buffer))).toBe(true);
        } finally {
          m.dispose();
        }
      }
    } finally {
      n.setThreads(before);
    }
  }, 120_000);

  it("held-out perplexity within 1% of dense (tokens the predictor was not trained on)", async () => {
    // train-predictor trains on the first 80% of the tokenised held-out text; evaluate after it
    const dense = await loadModel(defaultModel);
    const all = dense.tokenizer.encode(heldoutText);
    const evalTokens = all.slice(Math.floor(0.8 * all.length)).slice(0, 4096);
    const pd = perplexity(dense, evalTokens, 256).perplexity;
    dense.dispose();
    const pack = openPack(defaultPack);
    const m = await loadSparseModel(defaultPack, { memory: budgetForFfnFraction(pack, 0.5, planOpts(pack, true, 256)), decoder: "inline", contextSize: 256 });
    try {
      const ps = perplexity(m, evalTokens, 256).perplexity;
      // measured: dense 46.550, sparse 46.555 (+0.011%) on these 4096 tokens; on the whole
      // 22,657-token split 60.932 vs 60.938 (+0.009%), the same at every budget
      expect(Math.abs(ps / pd - 1)).toBeLessThan(0.01);
      // the predictor skips neurons: sparse ≠ dense, so this test can tell them apart
      expect(ps).not.toBe(pd);
      // and it is sparse: on average under half of a layer's neurons predicted per token
      const rep = m.sparse!.report();
      const predictedPerLayerToken = rep.reduce((a, r) => a + r.predicted, 0) / rep.reduce((a, r) => a + r.tokens, 0);
      expect(predictedPerLayerToken).toBeLessThan(0.5 * pack.config.nFF);
    } finally {
      m.dispose();
    }
  }, 180_000);

  it("the kernel-measured resident memory of the model stays within --memory at two budgets", async () => {
    const pack = openPack(defaultPack);
    for (const f of [0.5, 0.25]) {
      const budget = budgetForFfnFraction(pack, f, planOpts(pack, true));
      const m = await loadSparseModel(defaultPack, { memory: budget, decoder: "inline", contextSize: ctx });
      try {
        const prompt = m.tokenizer.encode("Call me Ishmael", { addBos: true });
        greedy(m, prompt, 64);
        const peak = m.sparse!.peakResidentBytes;
        expect(peak).toBeLessThanOrEqual(budget);
        // and the budget is used: the cache filled (not a vacuous bound)
        expect(peak).toBeGreaterThan(0.9 * budget);
        expect(m.sparse!.allocatedBytes()).toBeLessThanOrEqual(budget);
      } finally {
        m.dispose();
      }
    }
  }, 60_000);

  it("the peak read after a few tokens holds what they committed, though memory is sampled only every 16 tokens", async () => {
    // LLMFlash's window cache starts empty and its pages are committed as reads land
    const pack = openPack(defaultPack);
    const budget = budgetForFfnFraction(pack, 0.5, planOpts(pack, true));
    const m = await loadSparseModel(defaultPack, { memory: budget, decoder: "blocking", contextSize: ctx });
    try {
      const sp = m.sparse!;
      const s = m.createSession({ contextSize: ctx });
      const before = sp.residentBytes(); // mincore, independent of the peak's sampling
      for await (const _ of s.generate("Call me Ishmael", { maxTokens: 4, seed: 1 }));
      const held = sp.residentBytes();
      expect(held).toBeGreaterThan(before);
      expect(sp.peakResidentBytes).toBeGreaterThanOrEqual(held);
      s.dispose();
      expect(sp.peakResidentBytes).toBeGreaterThanOrEqual(held);
      expect(sp.peakResidentBytes).toBeLessThanOrEqual(budget);
    } finally {
      await m.dispose();
    }
  });

  it("a budget that cannot hold the fixed region is refused with the numbers", async () => {
    await expect(loadSparseModel(defaultPack, { memory: "8MiB", contextSize: ctx })).rejects.toThrow(
      /memory budget 8\.00 MiB \(8388608 bytes\) cannot hold this model: the fixed region needs weights .* KV cache .*; the smallest workable budget is/,
    );
    await expect(loadSparseModel(defaultPack, { memory: "lots", contextSize: ctx })).rejects.toThrow(/cannot read "lots" as a size/);
  });

  it("the CLI prints a budget's refusal alone (exit 2, no help after it)", async () => {
    const { code, err } = await runCli(["generate", "--model", defaultPack, "--memory", "8MiB", "--prompt", "x", "--ctx", String(ctx)]);
    expect(code).toBe(2);
    expect(err).toMatch(/^neuronpipe generate: --memory budget 8\.00 MiB .* the smallest workable budget is [\d.]+ MiB \(\d+ bytes\)/);
    expect(err).not.toMatch(/usage|--prompt/);
  });

  it("a pack without predictors is refused for trained-predictor decoding; a plain model is not a pack", async () => {
    await expect(loadSparseModel(synthPackPath("f16"), { memory: "1GiB", contextSize: ctx })).rejects.toThrow(/the pack has no predictors .*train-predictor.*oracle/);
    await expect(loadSparseModel(defaultModel, { memory: "1GiB", contextSize: ctx })).rejects.toThrow(/is not a neuron pack/);
  });

  it("neuronpipe generate --memory runs a pack and reports hit rate and bytes read per layer", async () => {
    const run = async (...memory: string[]) => {
      const r = await runCli(["generate", "--model", defaultPack, ...memory, "--prompt", "The whale", "--max-tokens", "16", "--temperature", "0", "--ctx", "128", "--sparse-stats"]);
      expect(r.code).toBe(0);
      return r;
    };
    const { out, err } = await run("--memory", "26MiB");
    expect(out.length).toBeGreaterThan("The whale".length);
    expect(err).toMatch(/neuron cache .* neurons/);
    expect(err).toMatch(/layer +hit rate/);
    // the peak against the budget given; without one, no "of" (the bytes held at the end leave out the finished session's KV cache)
    expect(err).toMatch(/peak resident [\d.]+ MiB of 26\.0 MiB\]/);
    expect((await run()).err).toMatch(/peak resident [\d.]+ MiB \(no memory budget\)\]/);
  }, 60_000);

  it("neuronpipe generate --pin-gates on|off picks the cache layout, and a bad value is refused by name", async () => {
    const run = (...extra: string[]) =>
      runCli(["generate", "--model", defaultPack, "--memory", "26MiB", "--mode", "sync", "--prompt", "The whale", "--max-tokens", "4", "--temperature", "0", "--ctx", "128", ...extra]);
    const on = await run("--pin-gates", "on");
    expect(on.code).toBe(0);
    expect(on.err).toMatch(/gate rows of all \d+ neurons pinned/);
    const off = await run("--pin-gates", "off");
    expect(off.code).toBe(0);
    expect(off.err).not.toMatch(/pinned/);
    const bad = await run("--pin-gates", "yes");
    expect(bad.code).not.toBe(0);
    expect(bad.err).toContain('--pin-gates must be auto, on or off, got "yes"');
  }, 60_000);

  it("neuronpipe generate --read-lane caller|background says where the reads ahead run; the same tokens either way; a bad value, or caller without io_uring, is refused by name", async () => {
    const run = (...extra: string[]) =>
      runCli(["generate", "--model", defaultPack, "--memory", "26MiB", "--mode", "sync", "--read-ahead", "64", "--pin-gates", "off", "--prompt", "The whale", "--max-tokens", "8", "--temperature", "0", "--ctx", "128", ...extra]);
    const caller = await run();
    const background = await run("--read-lane", "background");
    expect([caller.code, background.code]).toEqual([0, 0]);
    expect(caller.out).toBe(background.out);
    if (native().buildInfo().liburing) {
      expect(caller.err).toContain("reads ahead on a single-issuer ring, submitted and reaped by the decoding thread");
      expect(background.err).toContain("reads ahead on a single-issuer ring, on background threads");
    }
    const bad = await run("--read-lane", "main");
    expect(bad.code).not.toBe(0);
    expect(bad.err).toContain('--read-lane must be caller or background, got "main"');
    const pread = await run("--io", "pread", "--read-lane", "caller");
    expect(pread.code).not.toBe(0);
    expect(pread.err).toContain('--read-lane "caller" needs the io_uring backend; this loader reads through pread');
  }, 60_000);
});

it("neuronpipe generate --memory on a plain model says it needs a pack, naming the file and the command", async () => {
  const { code, err } = await runCli(["generate", "--model", defaultModel, "--memory", "1GiB", "--prompt", "x", "--max-tokens", "1"]);
  expect(code).not.toBe(0);
  expect(err).toContain(`--memory needs a neuron pack, and ${defaultModel} is a plain model`);
  expect(err).toContain("neuronpipe pack --model");
});
