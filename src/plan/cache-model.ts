// How many reads per token a neuron cache of a given shape will need, from the pack's profile.
//
// Each neuron i of layer l fires on a token with probability p_i (its profiled firing count ÷ the
// profile's tokens), and the firings of one neuron persist from token to token: after a token it
// fired on it fires again with probability p_i + ρ_l·(1 − p_i), after one it did not with
// p_i·(1 − ρ_l) (a two-state chain whose stationary rate is p_i). ρ_l comes from the profile's
// overlap of consecutive tokens' active sets (Jaccard J: Σp·(p + ρ(1 − p)) = 2J·Σp/(1 + J));
// ρ = 0 is independent tokens. The predictor flags every neuron that fires (recall ≈ 1) and,
// independently per token, some that do not (its false positives): on a token neuron i does not
// fire it is flagged with probability f_i, measured per neuron by the trainer on its held-out
// tokens (blk.N.fc2.false_flags). Predictors without it: i is flagged with probability
// q_i = min(1, r_l·p_i), r_l the layer's flagged/fired ratio stored with the predictors, so
// f_i = (q_i − p_i) ÷ (1 − p_i) (the oracle flags every neuron: f_i = 1). How false positives
// spread matters: spread evenly they cost the 7B's window cache 20.3K bundle reads per token,
// spread in proportion to p_i 12.5K (measured 19.8K), docs/benchmarks.md.
// A neuron is accessed per token when it fires (gate rows pinned: only a firing neuron needs its
// up+down) or when it is flagged (whole bundles: the gate row is needed for every flagged neuron).
//
//   hot region   the clusters with the most profiled firings, loaded at start and kept
//   kept         (coldKept) the most-used neurons outside the hot region, loaded at start and
//                kept: never a miss (NeuronCache.preloadCold; with whole bundles and measured
//                false-flag rates by p_i + (1 − p_i)·f_i, else by p_i)
//   cold region  one LRU list of single neurons (Che's approximation, Che, Tung & Wang 2002, for
//                tokens as the time unit): the list holds a neuron while it was used within the
//                last T tokens; T solves Σ_i P(used in the last T tokens) = cold slots, and an
//                access hits when the neuron was used within the T tokens before it
//   window       (blocking, LLMFlash) also drops a neuron unused for w tokens: T is at most w
//   runs         (window) WindowCache reads a run of consecutive missing pack positions as one
//                request: with neuron i missing with probability m_i, independently of its
//                neighbour, a layer's requests are Σ m_i·(1 − m_(i−1)) over its pack order.
//                (hot/cold) NeuronCache does too, per kind of block (gate blocks; up+down
//                blocks). A pack ordered by co-activation puts neurons that fire together side by
//                side, so neighbours fire together more often than independently, by κ_l (the
//                profiler's measurement, ProfileRates.adjacency): P(the one before misses | this
//                one misses) is taken as m_(i−1) + κ_l·P(miss | fire)_(i−1) for up+down blocks;
//                gate blocks (flags, most of them false on the default model) stay independent
//   demotion     (whole bundles, hot/cold cache) a flagged neuron that stays silent goes to the
//                LRU's tail (NeuronCache.demoteSilent) and is the next evicted: what stays is
//                what fired within T tokens, while every flagged access that finds its neuron
//                absent is a read of its gate block (and of its up+down if it then fires)
//
// With a chain, P(no firing in T tokens) = (1 − p)·(1 − b)^(T − 1), b = p·(1 − ρ); an access
// after T silent tokens happens with probability b (firing) or b + (1 − b)·f (flagged).
// A chain is one token deep, and text is not: the default model's neurons come back over tens of
// tokens. Where the profile measured it (sparse/reuse.ts) and firings alone decide residency
// (the hot/cold cache), both come from the measurement instead: a neuron holds a slot with
// P(fired within the last T tokens), a firing misses with 1 − P(fired within the T before |
// fires), and a flag without a firing misses with P(neither) = P(silent for T) − its firing
// misses. LLMFlash's window, where flags keep a neuron too, stays with the chain. Neurons
// are taken in buckets of similar p and f (log-spaced, per layer), so evaluating one cache shape
// costs a pass over the clusters and a bisection over the buckets, not over every neuron. Measured
// against WindowCache's own policy and the decoders on the 7B and the default model:
// docs/benchmarks.md, "why the 7B's predictions miss".
import { bundleUseRate, falseFlagRates, type Pack } from "../sparse/pack/format.js";
import { reuseCurve, type FiringReuse } from "../sparse/reuse.js";

export interface ProfileRates {
  nLayer: number;
  nFF: number;
  /** (nLayer·nFF) firing probability per token, pack order within a layer. */
  fire: Float32Array;
  /** (nLayer) flagged/fired ratio of the layer's predictor (≥ 1). */
  flagRatio: Float32Array;
  /** (nLayer·nFF) P(flagged | not firing) per neuron as the trainer measured it, pack order; absent: from flagRatio. */
  falseFlag?: Float32Array;
  /** (nLayer) persistence ρ_l of a neuron's firing from one token to the next (0: independent tokens); absent: 0. */
  persist?: Float32Array;
  /** How soon the profile's neurons fired again (measured spans); absent: the chain of `persist`. */
  reuse?: FiringReuse;
  /**
   * (nLayer) how much more often than independent neurons a cold neuron's neighbour in pack order
   * fires with it: c_ind − c, c the profiler's requests per fired cold neuron in pack order (the
   * pack's cold_requests, 1 − P(the one before fired | this one fired)) and c_ind what neurons
   * firing independently at the profiled rates would take, Σ p_i·(1 − p_(i−1)) ÷ Σ p_i over the
   * positions past the hot set; absent: 0.
   */
  adjacency?: Float32Array;
  /** Neurons fired per token, all layers (Σ p_i). */
  firedPerToken: number;
  /** Neurons flagged per token, all layers (Σ q_i; the oracle: every neuron). */
  flaggedPerToken: number;
  /** The oracle predictor: every gate row is needed every token. */
  oracle: boolean;
}

/** The firing rates of a pack's profile, its predictors' flagged shares and the persistence of firings (`oracle`: every neuron's gate is computed, none is skipped). */
export function profileRates(pack: Pack, oracle = false): ProfileRates {
  const { nLayer, nFF } = pack.config;
  const tokens = Math.max(1, pack.profileTokens);
  const fire = new Float32Array(nLayer * nFF);
  const flagRatio = new Float32Array(nLayer).fill(1);
  const persist = new Float32Array(nLayer);
  const active = pack.file.metadata.get("neuronpipe.predictor.predicted_active")?.value as ArrayLike<number> | undefined;
  // the trainer's per-neuron false-flag rates, when every layer has them
  const rates = oracle ? undefined : falseFlagRates(pack);
  const falseFlag = rates && new Float32Array(nLayer * nFF);
  if (falseFlag) rates!.forEach((f, l) => falseFlag.set(f, l * nFF));
  let fired = 0;
  let flagged = 0;
  for (let l = 0; l < nLayer; l++) {
    const c = pack.layers[l]!.counts;
    let f = 0;
    let f2 = 0;
    for (let p = 0; p < nFF; p++) {
      const x = (fire[l * nFF + p] = Math.min(1, c[p]! / tokens));
      f += x;
      f2 += x * x;
    }
    // the predictor's held-out flagged share ÷ the profile's fired share (no stored share: 1.5,
    // the trainer's typical ratio at recall 0.998)
    const share = active && active.length === nLayer ? Number(active[l]) : NaN;
    const ratio = Number.isFinite(share) && f > 0 ? Math.max(1, (share * nFF) / f) : 1.5;
    flagRatio[l] = ratio;
    // ρ from the overlap J of consecutive active sets: Σp·(p + ρ(1 − p)) = 2J·Σp/(1 + J)
    const J = pack.profileOverlap?.[l];
    if (J !== undefined && Number.isFinite(J) && f - f2 > 0) persist[l] = Math.min(0.95, Math.max(0, ((2 * J * f) / (1 + J) - f2) / (f - f2)));
    fired += f;
    if (oracle) flagged += nFF;
    else if (falseFlag) for (let i = l * nFF; i < (l + 1) * nFF; i++) flagged += fire[i]! + falseFlag[i]! * (1 - fire[i]!);
    else for (let p = 0; p < nFF; p++) flagged += Math.min(1, ratio * fire[l * nFF + p]!);
  }
  const adjacency = pack.layers.every((l) => l.coldRequests !== undefined)
    ? Float32Array.from(pack.layers, (L, l) => {
        let fired = 0;
        let apart = 0;
        for (let p = L.hotCount; p < nFF; p++) {
          const x = fire[l * nFF + p]!;
          fired += x;
          apart += x * (1 - (p > L.hotCount ? fire[l * nFF + p - 1]! : 0));
        }
        const independent = fired > 0 ? apart / fired : 1;
        return Math.max(0, independent - L.coldRequests!);
      })
    : undefined;
  return { nLayer, nFF, fire, flagRatio, ...(falseFlag && { falseFlag }), persist, ...(pack.profileReuse && { reuse: pack.profileReuse }), ...(adjacency && { adjacency }), firedPerToken: fired, flaggedPerToken: flagged, oracle };
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
  /** Of the cold slots, those keeping the most-used cold neurons for good (the rest are the LRU list); default 0. */
  coldKept?: number;
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
  /** (nLayer) read requests of whole bundles: LLMFlash's window cache reads each run of consecutive missing positions as one. */
  bundleRequests: Float64Array;
  /** (nLayer) read requests of gate blocks and of up+down blocks (hot/cold cache: a run of consecutive missing positions is one). */
  gateRequests: Float64Array;
  upDownRequests: Float64Array;
  /** Expected read requests per token, all layers (misses, with runs of bundles merged). */
  requestsPerToken: number;
  /** Expected accesses per token (neurons that need a slot). */
  accessesPerToken: number;
  hitRate: number;
}

const BUCKETS = 240;
const MIN_RATE = 1e-6;
const bucketOf = (a: number) => Math.min(BUCKETS - 1, Math.max(0, Math.floor((Math.log10(Math.max(a, MIN_RATE)) + 6) * (BUCKETS / 6))));
/** Bins of false-flag rates within a bucket of firing rates: 0, then 5 per decade from 1e-6 to 1. */
const FLAG_BINS = 31;
const flagBinOf = (f: number) => (f <= 0 ? 0 : 1 + Math.min(FLAG_BINS - 2, Math.max(0, Math.floor((Math.log10(Math.max(f, MIN_RATE)) + 6) * 5))));

const firingOrder = new WeakMap<ProfileRates, Int32Array>();
/** Every neuron (layer·nFF + position), most fired first; ties by layer, then position (computed once per rates). */
function byFiring(r: ProfileRates): Int32Array {
  let o = firingOrder.get(r);
  if (!o) {
    o = Int32Array.from({ length: r.fire.length }, (_, i) => i).sort((a, b) => r.fire[b]! - r.fire[a]! || a - b);
    firingOrder.set(r, o);
  }
  return o;
}

const useOrder = new WeakMap<ProfileRates, { use: Float64Array; order: Int32Array }>();
/** Every neuron's accesses per token with whole bundles, p + (1 − p)·f, and the neurons most used first; ties by layer, then position (computed once per rates). */
function byUse(r: ProfileRates, falseFlag: Float32Array): { use: Float64Array; order: Int32Array } {
  let o = useOrder.get(r);
  if (!o) {
    const use = Float64Array.from(r.fire, (p, i) => bundleUseRate(p, falseFlag[i]!));
    o = { use, order: Int32Array.from({ length: use.length }, (_, i) => i).sort((a, b) => use[b]! - use[a]! || a - b) };
    useOrder.set(r, o);
  }
  return o;
}

/** Expected misses per token of a cache shape (see the file's comment for the model). */
export function forecastCache(r: ProfileRates, shape: CacheShape): CacheForecast {
  const { nLayer, nFF } = r;
  const N = nLayer * nFF;
  const rhoOf = Float64Array.from({ length: nLayer }, (_, l) => r.persist?.[l] ?? 0);
  /** P(flagged | not firing) of neuron i of layer l (pinned gates: flags cost nothing, only firings are accesses). */
  const falseFlag = (l: number, i: number) => {
    if (shape.gatesPinned) return 0;
    if (r.oracle) return 1;
    if (r.falseFlag) return r.falseFlag[i]!;
    const p = r.fire[i]!;
    return p < 1 ? (Math.min(1, r.flagRatio[l]! * p) - p) / (1 - p) : 0;
  };
  const access = (p: number, f: number) => p + f * (1 - p);
  let accesses = 0;
  for (let l = 0; l < nLayer; l++) for (let i = l * nFF; i < (l + 1) * nFF; i++) accesses += access(r.fire[i]!, falseFlag(l, i));
  const gateMisses = new Float64Array(nLayer);
  const upDownMisses = new Float64Array(nLayer);
  const bundleMisses = new Float64Array(nLayer);
  const bundleRequests = new Float64Array(nLayer);
  const gateRequests = new Float64Array(nLayer);
  const upDownRequests = new Float64Array(nLayer);
  if (shape.slots >= N && shape.window === undefined) return { missesPerToken: 0, gateMisses, upDownMisses, bundleMisses, bundleRequests, gateRequests, upDownRequests, requestsPerToken: 0, accessesPerToken: accesses, hitRate: 1 };
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
  // kept: the most-used neurons outside the hot region (by their rate of accesses when the
  // false-flag rates are measured, else by firing rate; ties by layer and position), as the
  // preload picks them (NeuronCache.coldUse)
  const keptN = new Uint8Array(shape.coldKept && shape.window === undefined ? N : 0);
  if (keptN.length) {
    let left = shape.coldKept!;
    const { use, order } = r.falseFlag && !shape.gatesPinned ? byUse(r, r.falseFlag) : { use: r.fire, order: byFiring(r) };
    for (const i of order) {
      if (left === 0 || !(use[i]! > 0)) break;
      if (hot[Math.floor(i / nFF) * perLayer + Math.floor((i % nFF) / C)]) continue;
      keptN[i] = 1;
      left--;
    }
  }
  // cold candidates in buckets of similar firing and false-flag rates, per layer
  const bucketIndex = new Map<number, number>();
  const bucketOfNeuron = new Int32Array(N).fill(-1); // cold candidates' buckets (runs, below)
  const layerOf: number[] = [];
  const count: number[] = [];
  const fireSum: number[] = [];
  const flagSum: number[] = [];
  for (let l = 0; l < nLayer; l++) {
    for (let p = 0; p < nFF; p++) {
      if (hot[l * perLayer + Math.floor(p / C)]) continue;
      const i = l * nFF + p;
      if (keptN[i]) continue;
      const x = r.fire[i]!;
      const f = falseFlag(l, i);
      if (!(access(x, f) > 0)) continue;
      const key = (l * BUCKETS + bucketOf(x)) * FLAG_BINS + flagBinOf(f);
      let b = bucketIndex.get(key);
      if (b === undefined) {
        bucketIndex.set(key, (b = count.length));
        layerOf.push(l);
        count.push(0);
        fireSum.push(0);
        flagSum.push(0);
      }
      bucketOfNeuron[i] = b;
      count[b]! += 1;
      fireSum[b]! += x;
      flagSum[b]! += f;
    }
  }
  // what decides residency: a neuron's accesses (pinned gates: its firings; LLMFlash's window: its
  // flags), or with demotion its firings while its flags are what may miss
  const holdsFlags = !shape.gatesPinned && shape.window !== undefined;
  /** P(no access that keeps the neuron in T tokens), T ≥ 1: its firings (a chain) and, if flags keep it, its false positives f. */
  const chainSilent = (p: number, f: number, l: number, T: number) => {
    const b = p * (1 - rhoOf[l]!);
    return (1 - p) * Math.pow(1 - b, T - 1) * (holdsFlags ? Math.pow(1 - f, T) : 1);
  };
  // the profile's measured reuse, where firings alone decide residency (the window's flags do
  // not): per bucket, its layer's and rate class's curves, looked up once for every T asked
  const reuse = holdsFlags ? undefined : r.reuse;
  const curves = reuse
    ? layerOf.map((l, b) => ({ recent: reuseCurve(reuse, "recent", l, fireSum[b]! / count[b]!), fired: reuseCurve(reuse, "firedRecent", l, fireSum[b]! / count[b]!) }))
    : undefined;
  /** P(no access that keeps the neuron in T tokens): bucket b's measurement where there is one, else the chain. */
  const silent = (p: number, f: number, l: number, T: number, b?: number) => {
    const recent = b === undefined ? undefined : curves?.[b]!.recent;
    return recent ? 1 - recent(T) : chainSilent(p, f, l, T);
  };
  const occupancy = (p: number, f: number, l: number, T: number, b: number) => (T >= 1 ? 1 - silent(p, f, l, T, b) : T * (1 - silent(p, f, l, 1, b)));
  const cap = shape.window ?? Infinity;
  const held = (T: number) => {
    let s = 0;
    for (let b = 0; b < count.length; b++) s += count[b]! * occupancy(fireSum[b]! / count[b]!, flagSum[b]! / count[b]!, layerOf[b]!, Math.min(T, cap), b);
    return s;
  };
  let T = Infinity;
  const cold = Math.max(0, shape.slots - shape.hotSlots - (keptN.length ? shape.coldKept! : 0));
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
  const kept = Math.min(T, cap); // tokens of history the cache keeps
  /**
   * A neuron's misses per token, of its firings and of its accesses (firing or flagged): the ones
   * (at `next` after a silent token, `rate` in all) that come after `kept` tokens that did not keep
   * it; kept < 1 (the cache holds a share of a token's accesses): from every access missing at 0
   * to those after one silent token at 1.
   */
  const missesAt = (p: number, f: number, l: number, T: number, b?: number): [fire: number, access: number] => {
    const s = silent(p, f, l, T, b);
    const fired = b === undefined ? undefined : curves?.[b]!.fired;
    if (fired) {
      const hit = fired(T);
      // a firing misses when the neuron had not fired in the T tokens before; a flag without a
      // firing when it had not either
      const fire = p * (1 - hit);
      return [fire, fire + Math.max(0, s - fire) * f];
    }
    const fireNext = p * (1 - rhoOf[l]!); // P(fire | the token before was silent)
    return [s * fireNext, s * (fireNext + (1 - fireNext) * f)];
  };
  const missesOf = (p: number, f: number, l: number, b?: number): [fire: number, access: number] => {
    if (kept === Infinity) return [0, 0];
    if (kept >= 1) return missesAt(p, f, l, kept, b);
    const [fire1, access1] = missesAt(p, f, l, 1, b);
    const rate = access(p, f);
    return [p - kept * (p - fire1), rate - kept * (rate - access1)];
  };
  let accessMisses = 0;
  for (let b = 0; b < count.length; b++) {
    const l = layerOf[b]!;
    const [fire, flag] = missesOf(fireSum[b]! / count[b]!, flagSum[b]! / count[b]!, l, b);
    const fireMiss = count[b]! * fire;
    const flagMiss = count[b]! * flag;
    if (shape.window !== undefined) {
      bundleMisses[l]! += flagMiss;
      accessMisses += flagMiss;
    } else if (shape.gatesPinned) {
      upDownMisses[l]! += fireMiss;
      accessMisses += fireMiss;
    } else {
      gateMisses[l]! += flagMiss;
      upDownMisses[l]! += fireMiss;
      accessMisses += flagMiss;
    }
  }
  if (shape.window !== undefined && kept !== Infinity) {
    // runs of consecutive missing positions, neuron by neuron in pack order (its bucket's miss
    // probability, with its own rates)
    for (let l = 0; l < nLayer; l++) {
      let before = 0;
      let runs = 0;
      for (let i = l * nFF; i < (l + 1) * nFF; i++) {
        const m = Math.min(1, missesOf(r.fire[i]!, falseFlag(l, i), l)[1]);
        runs += m * (1 - before);
        before = m;
      }
      bundleRequests[l] = runs;
    }
  }
  if (shape.window === undefined && kept !== Infinity) {
    // the same runs for the hot/cold cache's gate blocks (a flagged neuron's access missing; none
    // with pinned gates) and up+down blocks (a firing missing)
    for (let l = 0; l < nLayer; l++) {
      const lift = r.adjacency?.[l] ?? 0; // κ: neighbours miss together as they fire together
      let gateBefore = 0;
      let upDownMissShare = 0;
      let upDownBefore = 0;
      let gateRuns = 0;
      let upDownRuns = 0;
      for (let i = l * nFF; i < (l + 1) * nFF; i++) {
        const b = bucketOfNeuron[i]!;
        const [fire, flag] = b < 0 ? [0, 0] : missesOf(r.fire[i]!, falseFlag(l, i), l, b);
        const g = shape.gatesPinned ? 0 : Math.min(1, flag);
        const u = Math.min(1, fire);
        // a firing misses after its neighbour's more often than independently: the neighbour
        // fires along with it (the excess κ) and then misses as its firings do (u/p). Gate
        // blocks stay independent: charging their firing share the same excess predicted the
        // default model at 30% of the FFN 11% under its counted requests, independent 4% under
        gateRuns += g * (1 - gateBefore);
        upDownRuns += u * (1 - Math.min(1, upDownBefore + lift * upDownMissShare));
        gateBefore = g;
        upDownBefore = u;
        upDownMissShare = r.fire[i]! > 0 ? Math.min(1, u / r.fire[i]!) : 0;
      }
      gateRequests[l] = gateRuns;
      upDownRequests[l] = upDownRuns;
    }
  }
  let misses = 0;
  let requests = 0;
  for (let l = 0; l < nLayer; l++) {
    misses += gateMisses[l]! + upDownMisses[l]! + bundleMisses[l]!;
    requests += gateRequests[l]! + upDownRequests[l]! + bundleRequests[l]!;
  }
  return { missesPerToken: misses, gateMisses, upDownMisses, bundleMisses, bundleRequests, gateRequests, upDownRequests, requestsPerToken: requests, accessesPerToken: accesses, hitRate: accesses > 0 ? 1 - accessMisses / accesses : 1 };
}
