// The fired-flag bit (src/sparse/fired-bits.ts) against rows built by hand.
import { describe, expect, it } from "vitest";
import { firedBit } from "../../src/sparse/fired-bits.js";

describe("firedBit", () => {
  it("reads bit i of row t, LSB first (hand-built rows of 2 bytes)", () => {
    // token 0 fired neurons 0, 2 and 15; token 1 fired neuron 8
    const bits = Uint8Array.from([0b0000_0101, 0b1000_0000, 0b0000_0000, 0b0000_0001]);
    const fired = (t: number) => Array.from({ length: 16 }, (_, i) => i).filter((i) => firedBit(bits, 2, t, i) === 1);
    expect(fired(0)).toEqual([0, 2, 15]);
    expect(fired(1)).toEqual([8]);
  });
});
