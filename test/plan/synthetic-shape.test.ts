// The planner's cache model on a model of another shape than the default one (4 layers × 2048
// neurons, width 512: the default model is 6 × 1024): a synthetic planted-ReGLU Q4_0 model built
// here as the benches build theirs (synth --gate-rank, profile and train-predictor on text of
// random tokens — what a random-weight model writes —, pack), decoded at 25/50/75% of its FFN
// with each cache kind. The reads and bytes a token reads are what the time model turns into
// seconds; they are counted by the cache while it decodes (the reference) and predicted by the
// planner from the profile alone. The tok/s the same plans reach is a speed, so it is measured
// in the bench (bench/planner.js --parts synthetic), not here.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { main } from "../../src/cli/main.js";
import { createTokenizer, openPack, readGGUF } from "../../src/index.js";
import { vocabFromGGUF } from "../../src/model/vocab.js";
import { budgetForFfnFraction, planOptions } from "../../src/sparse/memory-plan.js";
import { countedReads } from "../helpers/counted-reads.js";
import { quietly } from "../helpers/quiet.js";

const dir = mkdtempSync(join(tmpdir(), "np-plan-shape-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const model = join(dir, "shape.gguf");
const packPath = join(dir, "shape.pack.gguf");
const ctx = 256;

/** Text of n uniformly random ordinary tokens (no control or byte tokens), seeded: bench/sparse.js's corpus. */
function randomTokenText(n: number): string {
  const tok = createTokenizer(vocabFromGGUF(readGGUF(model)));
  let s = 1;
  const ids: number[] = [];
  while (ids.length < n) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    ids.push(259 + (s % (tok.vocabSize - 259)));
  }
  return tok.decode(ids);
}

beforeAll(async () => {
  await quietly(async () => {
    const run = async (argv: string[]) => expect(await main(argv), argv.join(" ")).toBe(0);
    await run(["synth", "--out", model, "--embd", "512", "--ff", "2048", "--layers", "4", "--heads", "8", "--kv-heads", "8", "--type", "q4_0", "--activation", "reglu", "--active-fraction", "0.1", "--gate-rank", "32", "--seed", "3"]);
    const corpus = join(dir, "random-tokens.txt");
    writeFileSync(corpus, randomTokenText(6000));
    await run(["profile", "--model", model, "--corpus", corpus, "--max-tokens", "1024", "--ctx", String(ctx)]);
    await run(["train-predictor", "--model", model, "--corpus", corpus, "--max-tokens", "5000"]);
    await run(["pack", "--model", model, "--out", packPath]);
  });
}, 300_000);

/**
 * Reads a token the forecast may miss by where a token reads few: 4 reads of 4 KiB are 30–50 µs
 * at 85–150K reads/s. The model built here depends on the CPU: F32 batches go through
 * OpenBLAS, which picks its sgemm kernel by CPU, so the profile's and the predictor's last bits
 * move. On a Zen 4 VM every point came within 10%; on a Zen 5 pinned gate rows at 75% read 21.9
 * a token where 25.6 were forecast (+17%; 24.3 with NEURONPIPE_NO_BLAS=1), every other point
 * within 10%. Since the profile orders cold neurons by co-activation and the cache reads runs of
 * adjacent misses as one request (2026-11-28, the same Zen 5), the unpinned cache at 75% counts
 * 28.1 requests where 32.8 are forecast (+17%, 4.7 reads; the same model packed hot-first: 29.6
 * against 33.1, +12%): the forecast's misses there are ~13% high either way, and the runs add a
 * few points; so 5 reads.
 */
const SMALL_COUNT_SLACK = 5;
/**
 * Bytes: since reads stop at a bundle's rows instead of its 4 KiB blocks (2026-12-06, on a disk
 * with 512-byte sectors), a request's bytes are its first neuron's rows plus a whole bundle for
 * each neuron its run goes on to, and the runs' length is where the cache model errs: measured
 * there (AVX2 machine, seed-3 model) blocking −16% / −4% / −4% at 25 / 50 / 75%, unpinned inline
 * −39% / −22% / −3%, pinned +27% (75%, 14 reads) and −11%. With the padding read, the same
 * errors were within 15% (the padding, counted alike on both sides, hid them). The reads
 * themselves stay within 15%.
 */
const BYTES_SLACK = 0.45;

describe("cache model on a synthetic shape of another size", () => {
  // measured on the seed-3 model: every point within 10% (blocking at 25% −9/−10%) but, on a Zen 5, the one above
  it("predicted reads per token within 15% (or 4 reads) of a decode's counts, bytes within 45%, at 25/50/75% of the FFN, for LLMFlash's window, whole bundles and pinned gate rows", async () => {
    const pack = openPack(packPath);
    expect([pack.config.nLayer, pack.config.nFF, pack.config.nEmbd]).toEqual([4, 2048, 512]);
    const configs = [
      { decoder: "blocking" as const },
      { decoder: "inline" as const, pinGates: false, hotShare: 0.75, readAhead: 0 },
      { decoder: "inline" as const, pinGates: true, hotShare: 0.5, readAhead: 0 },
    ];
    let checked = 0;
    for (const f of [0.25, 0.5, 0.75]) {
      const budget = budgetForFfnFraction(pack, f, planOptions(pack.config, { contextSize: ctx }));
      for (const c of configs) {
        // pinned gate rows do not fit a quarter of this FFN (the loader refuses it, as it says)
        if (c.pinGates && f === 0.25) continue;
        const r = await countedReads(packPath, { memory: budget, contextSize: ctx, ...c });
        const what = `${JSON.stringify(c)} at ${100 * f}%: ${r.predictedReads.toFixed(1)} reads predicted, ${r.reads.toFixed(1)} counted; ${r.predictedBytes.toFixed(0)} bytes predicted, ${r.bytes.toFixed(0)} counted`;
        expect(r.reads, what).toBeGreaterThan(10);
        // within 15%, or within SMALL_COUNT_SLACK reads (and their bytes) where a token reads few
        const slack = SMALL_COUNT_SLACK / r.reads;
        expect(Math.abs(r.predictedReads / r.reads - 1), what).toBeLessThan(Math.max(0.15, slack));
        expect(Math.abs(r.predictedBytes / r.bytes - 1), what).toBeLessThan(Math.max(BYTES_SLACK, slack));
        checked++;
      }
    }
    expect(checked).toBe(8);
  }, 240_000);
});
