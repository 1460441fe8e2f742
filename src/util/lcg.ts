// The fixed pseudo-random sequence the probe and the planner draw from, so that every run reads
// the same offsets and picks the same slots: the C library's classic linear congruential generator
// (x ← 1103515245·x + 12345 mod 2³²). Not for sampling tokens (api/sampling.ts has xoshiro128**).

/** A generator of the LCG's next state, a uint32, from `seed` (12345 by default). */
export function lcg(seed = 12345): () => number {
  let x = seed >>> 0;
  return () => (x = (Math.imul(x, 1103515245) + 12345) >>> 0);
}
