// The 7B benchmark model's file names (bench/lib/seven-b.mjs), shared by bench/sparse.js (which
// writes them) and the scripts that read them: checked against the names docs/benchmarks.md
// records for the runs (hand-written, not derived from the helper).
import { describe, expect, it } from "vitest";
import { cofireOf, cofireSynthArgs, sevenBFiles } from "../../bench/lib/seven-b.mjs";

describe("the 7B bench model's files", () => {
  it("default: co-firing groups of 8 at share 0.7", () => {
    const c = cofireOf({});
    expect(c).toEqual({ group: 8, share: "0.7" });
    expect(cofireSynthArgs(c)).toEqual(["--cofire-group", "8", "--cofire-share", "0.7"]);
    const f = sevenBFiles("/m", c);
    expect(f.pack).toBe("/m/llama2-7b-sparse-q4_0-seed1-cofire8-share0.7-linear.pack.gguf");
    expect(f.model).toBe("/m/llama2-7b-sparse-q4_0-seed1-cofire8-share0.7.gguf");
    expect(f.predictor).toBe("/m/llama2-7b-sparse-q4_0-seed1-cofire8-share0.7.gguf.predictor-linear.gguf");
    expect(f.corpus).toBe("/m/random-tokens-llama2-seed1-16k.txt");
  });

  it("--cofire-group 8 alone takes synth's share; 0 is the model without groups", () => {
    expect(sevenBFiles("/m", cofireOf({ "cofire-group": "8" })).pack).toBe("/m/llama2-7b-sparse-q4_0-seed1-cofire8-linear.pack.gguf");
    const plain = cofireOf({ "cofire-group": "0" });
    expect(cofireSynthArgs(plain)).toEqual([]);
    expect(sevenBFiles("/m", plain).model).toBe("/m/llama2-7b-sparse-q4_0-seed1.gguf");
    expect(sevenBFiles("/m", plain).profile).toBe("/m/llama2-7b-sparse-q4_0-seed1.gguf.profile.gguf");
  });

  it("refuses a share without groups, and a group count that is not a whole number", () => {
    expect(() => cofireOf({ "cofire-group": "0", "cofire-share": "0.7" })).toThrow("--cofire-share needs --cofire-group");
    expect(() => cofireOf({ "cofire-group": "x" })).toThrow("--cofire-group must be a whole number ≥ 0, got x");
  });
});
