// util/lcg: the probe's and the planner's fixed sequence, against the recurrence computed in
// BigInt (exact, no 32-bit tricks) and a hand-computed first step.
import { describe, expect, it } from "vitest";
import { lcg } from "../../src/util/lcg.js";

describe("lcg", () => {
  it("x ← 1103515245·x + 12345 mod 2³² from seed 12345: by hand, then 1,000 steps against BigInt", () => {
    const next = lcg();
    // 1103515245 · 12345 + 12345 = 13,622,895,711,870 = 3,171 · 2³² + 3,554,416,254
    expect(next()).toBe(3_554_416_254);
    let x = 3_554_416_254n;
    for (let i = 0; i < 1000; i++) {
      x = (1103515245n * x + 12345n) % 2n ** 32n;
      expect(next()).toBe(Number(x));
    }
  });
  it("another seed starts another sequence; the same seed, the same one", () => {
    const a = lcg(7);
    const b = lcg(7);
    const c = lcg();
    const sa = [a(), a(), a()];
    expect([b(), b(), b()]).toEqual(sa);
    expect([c(), c(), c()]).not.toEqual(sa);
    expect(sa[0]).toBe(Number((1103515245n * 7n + 12345n) % 2n ** 32n));
  });
});
