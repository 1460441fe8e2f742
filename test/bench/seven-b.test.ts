// The 7B benchmark model's file names (bench/lib/seven-b.mjs), shared by bench/sparse.js (which
// writes them) and the scripts that read them: checked against the names docs/benchmarks.md
// records for the runs (hand-written, not derived from the helper).
import { describe, expect, it } from "vitest";
import { coldShareOf, cofireOf, cofireSynthArgs, sevenBFiles, targetRecallOf, TRAINER_RECALL } from "../../bench/lib/seven-b.mjs";
import { DEFAULT_TARGET_RECALL } from "../../src/tools/predictor-fit.js";

describe("the 7B bench model's files", () => {
  it("default: co-firing groups of 8 at share 0.7, predictors with cold share 0.5 at recall 0.995", () => {
    const c = cofireOf({});
    expect(c).toEqual({ group: 8, share: "0.7" });
    expect(cofireSynthArgs(c)).toEqual(["--cofire-group", "8", "--cofire-share", "0.7"]);
    expect(coldShareOf({})).toBe("0.5");
    expect(targetRecallOf({})).toBe("0.995");
    const f = sevenBFiles("/m", c, coldShareOf({}), targetRecallOf({}));
    expect(f.pack).toBe("/m/llama2-7b-sparse-q4_0-seed1-cofire8-share0.7-linear-cold0.5-recall0.995.pack.gguf");
    expect(f.model).toBe("/m/llama2-7b-sparse-q4_0-seed1-cofire8-share0.7.gguf");
    expect(f.predictor).toBe("/m/llama2-7b-sparse-q4_0-seed1-cofire8-share0.7.gguf.predictor-linear-cold0.5-recall0.995.gguf");
    expect(f.corpus).toBe("/m/random-tokens-llama2-seed1-16k.txt");
    expect(f.predictorArgs).toEqual(["--cold-share", "0.5", "--target-recall", "0.995"]);
    // the trainer's recall: the files of the runs of 2026-11-29 (morning, later); the bench's copy
    // of the trainer's default is the trainer's own (else it would name files trained at another)
    expect(TRAINER_RECALL).toBe(String(DEFAULT_TARGET_RECALL));
    const r998 = sevenBFiles("/m", c, "0.5", targetRecallOf({ "target-recall": "0.998" }));
    expect(r998.pack).toBe("/m/llama2-7b-sparse-q4_0-seed1-cofire8-share0.7-linear-cold0.5.pack.gguf");
    expect(r998.predictorArgs).toEqual(["--cold-share", "0.5"]);
    // cold share 0: one margin, the files of the runs before 2026-11-29 (morning)
    const one = sevenBFiles("/m", c, coldShareOf({ "cold-share": "0" }), "0.998");
    expect(one.pack).toBe("/m/llama2-7b-sparse-q4_0-seed1-cofire8-share0.7-linear.pack.gguf");
    expect(one.predictor).toBe("/m/llama2-7b-sparse-q4_0-seed1-cofire8-share0.7.gguf.predictor-linear.gguf");
    expect(one.predictorArgs).toEqual([]);
  });

  it("--cofire-group 8 alone takes synth's share; 0 is the model without groups", () => {
    expect(sevenBFiles("/m", cofireOf({ "cofire-group": "8" }), "0", "0.998").pack).toBe("/m/llama2-7b-sparse-q4_0-seed1-cofire8-linear.pack.gguf");
    expect(sevenBFiles("/m", cofireOf({ "cofire-group": "8" }), "0").predictor).toBe("/m/llama2-7b-sparse-q4_0-seed1-cofire8.gguf.predictor-linear-recall0.995.gguf");
    const plain = cofireOf({ "cofire-group": "0" });
    expect(cofireSynthArgs(plain)).toEqual([]);
    expect(sevenBFiles("/m", plain).model).toBe("/m/llama2-7b-sparse-q4_0-seed1.gguf");
    expect(sevenBFiles("/m", plain).profile).toBe("/m/llama2-7b-sparse-q4_0-seed1.gguf.profile.gguf");
  });

  it("refuses a share without groups, and a group count that is not a whole number", () => {
    expect(() => cofireOf({ "cofire-group": "0", "cofire-share": "0.7" })).toThrow("--cofire-share needs --cofire-group");
    expect(() => cofireOf({ "cofire-group": "x" })).toThrow("--cofire-group must be a whole number ≥ 0, got x");
    expect(() => coldShareOf({ "cold-share": "1" })).toThrow("--cold-share must be in [0, 1), got 1");
    expect(() => coldShareOf({ "cold-share": "x" })).toThrow("--cold-share must be in [0, 1), got x");
    expect(() => targetRecallOf({ "target-recall": "1" })).toThrow("--target-recall must be in (0, 1), got 1");
  });
});
