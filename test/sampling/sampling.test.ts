// Sampling against hand-computed cases and the softmax it should draw from.
import { describe, expect, it } from "vitest";
import { Rng, Sampler, argmax, topIndices } from "../../src/api/sampling.js";

const L = (...v: number[]) => Float32Array.from(v);

describe("sampling", () => {
  it("greedy picks the largest logit; ties go to the lower id", () => {
    expect(new Sampler({ temperature: 0 }).sample(L(0.1, 3, -2, 3), [])).toBe(1);
    expect(argmax(L(-5, -4, -4.5))).toBe(1);
  });

  it("repetition penalty follows llama.cpp's rule (divide positive, multiply negative)", () => {
    // [2, -1, 1.9] with token 0 seen, penalty 2 → [1, -1, 1.9] → token 2
    expect(new Sampler({ temperature: 0, repeatPenalty: 2 }).sample(L(2, -1, 1.9), [0])).toBe(2);
    // a negative logit gets more negative: [-1, -1.5], seen 0, penalty 2 → [-2, -1.5] → token 1
    expect(new Sampler({ temperature: 0, repeatPenalty: 2 }).sample(L(-1, -1.5), [0])).toBe(1);
    // outside the window the penalty does not apply
    expect(new Sampler({ temperature: 0, repeatPenalty: 2, repeatLastN: 1 }).sample(L(2, -1, 1.9), [0, 1])).toBe(0);
  });

  it("draws in proportion to softmax(logits / T)", () => {
    const logits = L(Math.log(0.5), Math.log(0.3), Math.log(0.2));
    const s = new Sampler({ temperature: 1, topK: 0, topP: 1, minP: 0, seed: 42 });
    const counts = [0, 0, 0];
    const N = 20000;
    for (let i = 0; i < N; i++) counts[s.sample(logits, [])]!++;
    // binomial std at p=0.5, N=20000 is 0.0035: 0.015 is > 4 std
    expect(Math.abs(counts[0]! / N - 0.5)).toBeLessThan(0.015);
    expect(Math.abs(counts[1]! / N - 0.3)).toBeLessThan(0.015);
    expect(Math.abs(counts[2]! / N - 0.2)).toBeLessThan(0.015);
    // T = 0.5 squares the odds: p ∝ [0.25, 0.09, 0.04] / 0.38
    const s2 = new Sampler({ temperature: 0.5, topK: 0, topP: 1, minP: 0, seed: 7 });
    let c0 = 0;
    for (let i = 0; i < N; i++) if (s2.sample(logits, []) === 0) c0++;
    expect(Math.abs(c0 / N - 0.25 / 0.38)).toBeLessThan(0.015);
  });

  it("top-k, top-p and min-p cut the tail", () => {
    const logits = L(Math.log(0.5), Math.log(0.3), Math.log(0.15), Math.log(0.05));
    const draw = (o: object) => {
      const s = new Sampler({ temperature: 1, topK: 0, topP: 1, minP: 0, seed: 3, ...o });
      const seen = new Set<number>();
      for (let i = 0; i < 3000; i++) seen.add(s.sample(logits, []));
      return [...seen].sort();
    };
    expect(draw({ topK: 2 })).toEqual([0, 1]);
    expect(draw({ topP: 0.75 })).toEqual([0, 1]); // 0.5 + 0.3 ≥ 0.75
    expect(draw({ topP: 0.85 })).toEqual([0, 1, 2]);
    expect(draw({ minP: 0.2 })).toEqual([0, 1, 2]); // floor 0.1: drops 0.05
    expect(draw({ minP: 0.5 })).toEqual([0, 1]); // floor 0.25
    expect(draw({})).toEqual([0, 1, 2, 3]);
  });

  it("same seed, same draws; other seed, other draws", () => {
    const logits = Float32Array.from({ length: 100 }, (_, i) => Math.sin(i));
    const run = (seed: number) => {
      const s = new Sampler({ temperature: 1.5, topK: 0, topP: 1, minP: 0, seed });
      return Array.from({ length: 50 }, () => s.sample(logits, []));
    };
    expect(run(5)).toEqual(run(5));
    expect(run(5)).not.toEqual(run(6));
  });

  it("rejects bad options by name", () => {
    expect(() => new Sampler({ temperature: -1 })).toThrow(/temperature must be ≥ 0/);
    expect(() => new Sampler({ topP: 0 })).toThrow(/topP must be in/);
    expect(() => new Sampler({ topK: 1.5 })).toThrow(/topK must be a whole number/);
  });

  it("topIndices returns the k largest in order", () => {
    const v = [3, 9, 1, 9, 4];
    expect(topIndices(v, 3)).toEqual([1, 3, 4]);
    expect(topIndices(v, 10)).toEqual([1, 3, 4, 0, 2]);
  });

  it("the PRNG matches xoshiro128** reference outputs", () => {
    // first outputs of the reference C implementation (Blackman & Vigna) from state {1, 2, 3, 4}
    const ref = Rng.fromState([1, 2, 3, 4]);
    expect(Array.from({ length: 5 }, () => ref.nextU32())).toEqual([11520, 0, 5927040, 70819200, 2031721883]);
    const r = new Rng(123);
    const a = Array.from({ length: 1000 }, () => r.next());
    expect(Math.min(...a)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...a)).toBeLessThan(1);
    const mean = a.reduce((x, y) => x + y, 0) / a.length;
    expect(Math.abs(mean - 0.5)).toBeLessThan(0.05); // std of the mean ≈ 0.009
  });
});
