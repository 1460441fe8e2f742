// Token sampling over logits: greedy, temperature, top-k, top-p, min-p, repetition penalty.
// The order follows llama.cpp's default chain (penalties → top-k → top-p → min-p → temperature
// → draw). A seeded PRNG makes every run reproducible; temperature 0 is greedy.

export interface SamplingOptions {
  /** 0 = greedy (default 0.8, as llama.cpp; the library and the CLI share these defaults). */
  temperature?: number;
  topK?: number; // 0 = off
  topP?: number; // 1 = off
  minP?: number; // 0 = off
  repeatPenalty?: number; // 1 = off
  repeatLastN?: number; // window of recent tokens the penalty looks at
  seed?: number;
}

/** The sampling defaults of the library and the CLI alike (llama.cpp's; a fixed seed, so the same call gives the same text). */
export const defaultSampling: Required<SamplingOptions> = {
  temperature: 0.8,
  topK: 40,
  topP: 0.95,
  minP: 0.05,
  repeatPenalty: 1,
  repeatLastN: 64,
  seed: 0,
};

/** xoshiro128** seeded by splitmix32: small, fast, reproducible across platforms. */
export class Rng {
  private s = new Uint32Array(4);
  constructor(seed: number) {
    let x = seed >>> 0;
    for (let i = 0; i < 4; i++) {
      x = (x + 0x9e3779b9) >>> 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      this.s[i] = (z ^ (z >>> 16)) >>> 0;
    }
  }
  /** A generator with an explicit state (tests against the reference implementation). */
  static fromState(state: [number, number, number, number]): Rng {
    const r = new Rng(0);
    r.s.set(state);
    return r;
  }
  nextU32(): number {
    const s = this.s;
    const r = Math.imul(rotl(Math.imul(s[1]!, 5) >>> 0, 7), 9) >>> 0;
    const t = (s[1]! << 9) >>> 0;
    s[2]! ^= s[0]!;
    s[3]! ^= s[1]!;
    s[1]! ^= s[2]!;
    s[0]! ^= s[3]!;
    s[2]! ^= t;
    s[3] = rotl(s[3]!, 11);
    return r;
  }
  /** Uniform in [0, 1). */
  next(): number {
    return this.nextU32() / 4294967296;
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

export function argmax(logits: ArrayLike<number>): number {
  let best = 0;
  let bv = -Infinity;
  for (let i = 0; i < logits.length; i++) {
    const v = logits[i]!;
    if (v > bv) {
      bv = v;
      best = i;
    }
  }
  return best;
}

export class Sampler {
  readonly opts: Required<SamplingOptions>;
  private rng: Rng;
  constructor(opts: SamplingOptions = {}) {
    this.opts = { ...defaultSampling, ...stripUndefined(opts) };
    validate(this.opts);
    this.rng = new Rng(this.opts.seed);
  }

  /** Pick the next token from `logits` (not modified) given the tokens so far. */
  sample(logits: Float32Array, history: readonly number[]): number {
    const o = this.opts;
    let work = logits;
    if (o.repeatPenalty !== 1 && history.length > 0) {
      work = Float32Array.from(logits);
      const seen = new Set(history.slice(-o.repeatLastN));
      for (const id of seen) {
        if (id < 0 || id >= work.length) continue;
        const v = work[id]!;
        work[id] = v > 0 ? v / o.repeatPenalty : v * o.repeatPenalty; // llama.cpp's rule
      }
    }
    if (o.temperature <= 0) return argmax(work);

    // candidates sorted by logit (descending), ties by id: deterministic order
    let k = o.topK > 0 ? Math.min(o.topK, work.length) : work.length;
    const ids = topIndices(work, k);
    // softmax over candidates
    const maxL = work[ids[0]!]!;
    let probs = ids.map((id) => Math.exp(work[id]! - maxL));
    let sum = probs.reduce((a, b) => a + b, 0);
    probs = probs.map((p) => p / sum);
    // top-p: smallest prefix with mass >= p
    if (o.topP < 1) {
      let acc = 0;
      let cut = probs.length;
      for (let i = 0; i < probs.length; i++) {
        acc += probs[i]!;
        if (acc >= o.topP) {
          cut = i + 1;
          break;
        }
      }
      k = cut;
    }
    // min-p: drop candidates below minP * p(best)
    if (o.minP > 0) {
      const floor = probs[0]! * o.minP;
      let cut = 0;
      while (cut < k && probs[cut]! >= floor) cut++;
      k = Math.max(1, cut);
    }
    // temperature over the survivors, then draw
    const kept = ids.slice(0, k);
    const scaled = kept.map((id) => Math.exp((work[id]! - maxL) / o.temperature));
    sum = scaled.reduce((a, b) => a + b, 0);
    let r = this.rng.next() * sum;
    for (let i = 0; i < kept.length; i++) {
      r -= scaled[i]!;
      if (r < 0) return kept[i]!;
    }
    return kept[kept.length - 1]!;
  }
}

/** Indices of the k largest values, descending, ties broken by lower index. */
export function topIndices(v: ArrayLike<number>, k: number): number[] {
  if (k >= v.length) {
    const all = Array.from({ length: v.length }, (_, i) => i);
    return all.sort((a, b) => v[b]! - v[a]! || a - b);
  }
  // partial selection with a small sorted buffer (k is usually ≤ 100)
  const out: number[] = [];
  for (let i = 0; i < v.length; i++) {
    const x = v[i]!;
    if (out.length === k && x <= v[out[k - 1]!]!) continue;
    let j = out.length < k ? out.length : k - 1;
    if (out.length < k) out.push(i);
    while (j > 0 && v[out[j - 1]!]! < x) {
      out[j] = out[j - 1]!;
      j--;
    }
    out[j] = i;
  }
  return out;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

function validate(o: Required<SamplingOptions>) {
  const bad = (what: string) => {
    throw new RangeError(`sampling: ${what}`);
  };
  if (!(o.temperature >= 0)) bad(`temperature must be ≥ 0, got ${o.temperature}`);
  if (!(Number.isInteger(o.topK) && o.topK >= 0)) bad(`topK must be a whole number ≥ 0, got ${o.topK}`);
  if (!(o.topP > 0 && o.topP <= 1)) bad(`topP must be in (0, 1], got ${o.topP}`);
  if (!(o.minP >= 0 && o.minP < 1)) bad(`minP must be in [0, 1), got ${o.minP}`);
  if (!(o.repeatPenalty > 0)) bad(`repeatPenalty must be > 0, got ${o.repeatPenalty}`);
  if (!(Number.isInteger(o.repeatLastN) && o.repeatLastN >= 0)) bad(`repeatLastN must be a whole number ≥ 0`);
  if (!Number.isFinite(o.seed)) bad(`seed must be a number`);
}
