// How many reads per token a neuron cache of a given shape will need, from the pack's profile.
//
// Each neuron i of each layer fires with probability p_i per token (its profiled firing count ÷
// the profile's tokens) and is flagged by the predictor with probability q_i = min(1, r_l·p_i),
// r_l the layer's flagged/fired ratio stored with the predictors (1 for the oracle, which computes
// every gate: q_i = 1). A neuron is accessed
// per token with probability a_i: q_i when slots hold whole bundles (the gate row is needed for
// every flagged neuron), p_i when gate rows are pinned (only a firing neuron needs its up+down).
//
//   hot region   the clusters with the most profiled firings, loaded at start and kept
//   cold region  one LRU list of single neurons: Che's approximation (Che, Tung & Wang 2002) —
//                the list holds a neuron while fewer than T distinct others were used since its
//                last use; T solves Σ_i (1 − e^(−a_i·T)) = cold slots, and neuron i hits with
//                probability 1 − e^(−a_i·T)
//   window       (blocking, LLMFlash) also drops a neuron unused for w tokens: hit ≤ 1 − (1 − a_i)^w
//   demotion     (whole bundles, hot/cold cache) a flagged neuron that stays silent goes to the
//                LRU's tail (NeuronCache.demoteSilent) and is the next evicted: what stays is
//                what fired, so residency follows p_i (T from Σ (1 − e^(−p_i·T)) = cold slots)
//                while every flagged access (q_i) that finds its neuron absent is a read
//
// Neurons are taken in buckets of similar a_i (log-spaced), so evaluating one cache shape costs
// a pass over the clusters and a bisection over ~200 buckets, not over every neuron.
import type { Pack } from "../sparse/pack/format.js";

export interface ProfileRates {
  nLayer: number;
  nFF: number;
  /** (nLayer·nFF) firing probability per token, pack order within a layer. */
  fire: Float32Array;
  /** (nLayer) flagged/fired ratio of the layer's predictor (≥ 1). */
  flagRatio: Float32Array;
  /** Neurons fired per token, all layers (Σ p_i). */
  firedPerToken: number;
  /** Neurons flagged per token, all layers (Σ q_i; the oracle: every neuron). */
  flaggedPerToken: number;
  /** The oracle predictor: every gate row is needed every token. */
  oracle: boolean;
}

/** The firing rates of a pack's profile and its predictors' flagged/fired ratios (`oracle`: every neuron's gate is computed, none is skipped). */
export function profileRates(pack: Pack, oracle = false): ProfileRates {
  const { nLayer, nFF } = pack.config;
  const tokens = Math.max(1, pack.profileTokens);
  const fire = new Float32Array(nLayer * nFF);
  const flagRatio = new Float32Array(nLayer).fill(1);
  const active = pack.file.metadata.get("neuronpipe.predictor.predicted_active")?.value as ArrayLike<number> | undefined;
  let fired = 0;
  let flagged = 0;
  for (let l = 0; l < nLayer; l++) {
    const c = pack.layers[l]!.counts;
    let f = 0;
    for (let p = 0; p < nFF; p++) f += fire[l * nFF + p] = Math.min(1, c[p]! / tokens);
    // the predictor's held-out flagged share ÷ the profile's fired share (no stored share: 1.5,
    // the trainer's typical ratio at recall 0.998)
    const share = active && active.length === nLayer ? Number(active[l]) : NaN;
    const ratio = Number.isFinite(share) && f > 0 ? Math.max(1, (share * nFF) / f) : 1.5;
    flagRatio[l] = ratio;
    fired += f;
    if (oracle) flagged += nFF;
    else for (let p = 0; p < nFF; p++) flagged += Math.min(1, ratio * fire[l * nFF + p]!);
  }
  return { nLayer, nFF, fire, flagRatio, firedPerToken: fired, flaggedPerToken: flagged, oracle };
}

export interface CacheShape {
  /** Slots of the neuron cache (whole bundles, or up+down with pinned gates). */
  slots: number;
  /** Slots of the hot region (whole clusters of `clusterSize`). */
  hotSlots: number;
  clusterSize: number;
  /** Slots hold up+down only and every gate row is resident: accesses are the fired neurons. */
  gatesPinned: boolean;
  /** LLMFlash's window (tokens), or undefined for the hot/cold cache. */
  window?: number;
}

export interface CacheForecast {
  /** Expected misses per token, all layers (one request each). */
  missesPerToken: number;
  /**
   * Per layer (nLayer): reads of gate blocks (whole bundles cached: a flagged neuron found absent),
   * up+down blocks (one that then fires, or with pinned gates any firing neuron found absent),
   * and whole bundles (LLMFlash's window cache loads a flagged neuron whole).
   */
  gateMisses: Float64Array;
  upDownMisses: Float64Array;
  bundleMisses: Float64Array;
  /** Expected accesses per token (neurons that need a slot). */
  accessesPerToken: number;
  hitRate: number;
}

const BUCKETS = 240;
const MIN_RATE = 1e-6;
const bucketOf = (a: number) => Math.min(BUCKETS - 1, Math.max(0, Math.floor((Math.log10(Math.max(a, MIN_RATE)) + 6) * (BUCKETS / 6))));

/** Expected misses per token of a cache shape (see the file's comment for the model). */
export function forecastCache(r: ProfileRates, shape: CacheShape): CacheForecast {
  const { nLayer, nFF } = r;
  const N = nLayer * nFF;
  const access = (l: number, i: number) => {
    const p = r.fire[i]!;
    return shape.gatesPinned ? p : r.oracle ? 1 : Math.min(1, r.flagRatio[l]! * p);
  };
  let accesses = 0;
  for (let l = 0; l < nLayer; l++) for (let i = l * nFF; i < (l + 1) * nFF; i++) accesses += access(l, i);
  const gateMisses = new Float64Array(nLayer);
  const upDownMisses = new Float64Array(nLayer);
  const bundleMisses = new Float64Array(nLayer);
  if (shape.slots >= N && shape.window === undefined) return { missesPerToken: 0, gateMisses, upDownMisses, bundleMisses, accessesPerToken: accesses, hitRate: 1 };
  // hot region: the clusters with the most firings (as NeuronCache.preload picks them)
  const C = shape.clusterSize;
  const perLayer = Math.ceil(nFF / C);
  const hot = new Uint8Array(nLayer * perLayer);
  if (shape.window === undefined && shape.hotSlots > 0) {
    const w: { k: number; f: number }[] = [];
    for (let l = 0; l < nLayer; l++) {
      for (let q = 0; q < perLayer; q++) {
        let f = 0;
        for (let i = l * nFF + q * C; i < Math.min((l + 1) * nFF, l * nFF + (q + 1) * C); i++) f += r.fire[i]!;
        w.push({ k: l * perLayer + q, f });
      }
    }
    w.sort((a, b) => b.f - a.f || a.k - b.k);
    for (const { k } of w.slice(0, Math.floor(shape.hotSlots / C))) hot[k] = 1;
  }
  // cold candidates in buckets of similar holding rate, per layer: the rate that keeps a neuron
  // in the LRU (its accesses; with demotion, its firings) and the rate of its accesses
  const demoted = !shape.gatesPinned && shape.window === undefined;
  const count = new Float64Array(nLayer * BUCKETS);
  const rate = new Float64Array(nLayer * BUCKETS);
  const accessRate = new Float64Array(nLayer * BUCKETS);
  const fireRate = new Float64Array(nLayer * BUCKETS);
  for (let l = 0; l < nLayer; l++) {
    for (let p = 0; p < nFF; p++) {
      if (hot[l * perLayer + Math.floor(p / C)]) continue;
      const a = access(l, l * nFF + p);
      if (!(a > 0)) continue;
      const h = demoted ? r.fire[l * nFF + p]! : a;
      const b = l * BUCKETS + bucketOf(h);
      count[b]! += 1;
      rate[b]! += h;
      accessRate[b]! += a;
      fireRate[b]! += r.fire[l * nFF + p]!;
    }
  }
  const cold = Math.max(0, shape.slots - shape.hotSlots);
  const held = (T: number) => {
    let s = 0;
    for (let b = 0; b < count.length; b++) if (count[b]) s += count[b]! * (1 - Math.exp((-rate[b]! / count[b]!) * T));
    return s;
  };
  let T = Infinity;
  const candidates = count.reduce((a, b) => a + b, 0);
  if (cold < candidates) {
    let lo = 0;
    let hi = 1;
    while (held(hi) < cold && hi < 1e12) hi *= 2;
    for (let k = 0; k < 60; k++) {
      const mid = (lo + hi) / 2;
      if (held(mid) < cold) lo = mid;
      else hi = mid;
    }
    T = lo;
  }
  let misses = 0;
  let accessMisses = 0;
  for (let b = 0; b < count.length; b++) {
    if (!count[b]) continue;
    const a = rate[b]! / count[b]!;
    let hit = T === Infinity ? 1 : 1 - Math.exp(-a * T);
    if (shape.window !== undefined) hit = Math.min(hit, 1 - Math.pow(1 - Math.min(1, a), shape.window));
    const l = Math.floor(b / BUCKETS);
    const m = accessRate[b]! * (1 - hit);
    accessMisses += m;
    if (shape.window !== undefined) bundleMisses[l]! += m;
    else if (shape.gatesPinned) upDownMisses[l]! += m;
    else {
      gateMisses[l]! += m;
      upDownMisses[l]! += fireRate[b]! * (1 - hit);
    }
  }
  for (let l = 0; l < nLayer; l++) misses += gateMisses[l]! + upDownMisses[l]! + bundleMisses[l]!;
  return { missesPerToken: misses, gateMisses, upDownMisses, bundleMisses, accessesPerToken: accesses, hitRate: accesses > 0 ? 1 - accessMisses / accesses : 1 };
}
