// Realistic ReLU activation statistics planted in random weights (`neuronpipe synth --active-fraction`).
//
// Without biases, a random ReGLU neuron fires for about half of all tokens. We make residual
// dimension 0 a constant "bias channel": every token embedding has value BIAS_VALUE there and no
// layer writes to it (row 0 of attn_output and ffn_down is zero), so after ffn_norm it is a
// near-constant input x̂₀. Gate row i gets w_i0 = −z_i·σ / x̂₀, which shifts its pre-activation
// (otherwise ≈ N(0, σ²)) so that it is positive for a fraction f_i of tokens: z_i = Φ⁻¹(1 − f_i).
// The f_i are log-normal: their spread is chosen so that the hottest `hotNeurons` share of
// neurons gives `hotShare` of all activations (PowerInfer measured ~20–25% → 80% for ReGLU),
// their scale so the mean is `activeFraction`. Token-to-token overlap comes from the attention
// context the consecutive tokens share. With low-rank gates, neurons can also be planted in
// co-firing groups (`cofireGroup`): a group's members share most of their low-rank direction, so
// they fire on the same tokens, as neurons of trained models do (PowerInfer-2's neuron bundles).
// Members are scattered over the layer by a seeded permutation, never side by side by
// construction. `neuronpipe profile` measures what came out.
import { Rng } from "../../api/sampling.js";

export interface SparsityPlan {
  activeFraction: number; // mean share of neurons firing per token (default 0.1)
  hotNeurons: number; // share of neurons … (default 0.2)
  hotShare: number; // … giving this share of all activations (default 0.8)
  /**
   * 0: gate rows independent random (no predictor can see which neurons fire: 11008 random
   * directions do not fit a narrow bottleneck). R > 0: each gate row is a rank-R combination
   * plus GATE_NOISE of independent noise (same variance), so whether a neuron fires depends on
   * an R-dimensional projection of x — the structure trained predictors exploit in real models.
   */
  gateRank?: number;
  /**
   * Co-firing groups (needs gateRank > 0): neurons per group (0 or 1: none). A member's row of
   * the low-rank coefficients is √s·(its group's) + √(1−s)·(its own), s = cofireShare, so two
   * members' low-rank pre-activations correlate by s.
   */
  cofireGroup?: number;
  /** Share of a member's low-rank variance its group gives (default 0.9). */
  cofireShare?: number;
}

/** Share of a low-rank gate row's variance that is independent noise. */
export const GATE_NOISE = 0.01;

export const defaultSparsityPlan: SparsityPlan = { activeFraction: 0.1, hotNeurons: 0.2, hotShare: 0.8, gateRank: 0 };

/** Default share of a co-firing group member's low-rank variance that its group gives. */
export const COFIRE_SHARE = 0.9;

/**
 * The planted co-firing group of each of a layer's `nFF` neurons: a seeded shuffle of the neurons
 * cut into groups of `groupSize` (the last one shorter), so a group's members are scattered over
 * the layer. What `synth` plants and a test or bench compares with what is measured; never
 * written into a model.
 */
export function cofireGroups(nFF: number, groupSize: number, seed: number): Int32Array {
  if (!(Number.isInteger(groupSize) && groupSize >= 1)) throw new RangeError(`cofireGroups: group size must be a whole number ≥ 1, got ${groupSize}`);
  const rng = new Rng(seed);
  const perm = Int32Array.from({ length: nFF }, (_, i) => i);
  for (let i = nFF - 1; i > 0; i--) {
    const j = Math.floor(rng.next() * (i + 1));
    [perm[i], perm[j]] = [perm[j]!, perm[i]!];
  }
  const group = new Int32Array(nFF);
  perm.forEach((neuron, k) => (group[neuron] = Math.floor(k / groupSize)));
  return group;
}

/** The seed of layer `layer`'s co-firing groups in a model synthesised with `seed` (cofireGroups). */
export function cofireSeed(seed: bigint | number, layer: number): number {
  return Number((BigInt(seed) * 733n + BigInt(layer)) % 2147483647n);
}

/** Value of the constant residual channel (dimension 0) in every token embedding. */
export const BIAS_VALUE = 4;

/** Inverse standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9). */
export function normalQuantile(p: number): number {
  if (!(p > 0 && p < 1)) throw new RangeError(`normalQuantile: p must be in (0, 1), got ${p}`);
  const a = [-39.69683028665376, 220.9460984245205, -275.9285104469687, 138.357751867269, -30.66479806614716, 2.506628277459239];
  const b = [-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155211939];
  const c = [-0.007784894002430293, -0.3223964580411365, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
  const d = [0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416];
  const lo = 0.02425;
  if (p < lo) {
    const q = Math.sqrt(-2 * Math.log(p));
    return (((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) / ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1);
  }
  if (p > 1 - lo) return -normalQuantile(1 - p);
  const q = p - 0.5;
  const r = q * q;
  return ((((((a[0]! * r + a[1]!) * r + a[2]!) * r + a[3]!) * r + a[4]!) * r + a[5]!) * q) / (((((b[0]! * r + b[1]!) * r + b[2]!) * r + b[3]!) * r + b[4]!) * r + 1);
}

function shareOfTop(f: number[], top: number): number {
  const s = [...f].sort((x, y) => y - x);
  const k = Math.max(1, Math.round(top * s.length));
  const total = s.reduce((x, y) => x + y, 0);
  return s.slice(0, k).reduce((x, y) => x + y, 0) / total;
}

/** Per-neuron firing probabilities for one layer: log-normal, skew and mean as planned. */
export function neuronFrequencies(nFF: number, plan: SparsityPlan, seed: number): Float64Array {
  const rng = new Rng(seed);
  const g = Array.from({ length: nFF }, () => {
    // Box–Muller from the seeded generator
    const u = Math.max(rng.next(), 1e-12);
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rng.next());
  });
  const make = (spread: number) => {
    const raw = g.map((x) => Math.exp(spread * x));
    // scale to the mean, capping at 0.95 (a neuron firing for every token is not a ReLU neuron)
    let lo = 0;
    let hi = 1e6;
    for (let it = 0; it < 100; it++) {
      const mid = (lo + hi) / 2;
      const mean = raw.reduce((s, r) => s + Math.min(0.95, r * mid), 0) / nFF;
      if (mean < plan.activeFraction) lo = mid;
      else hi = mid;
    }
    return raw.map((r) => Math.max(1e-4, Math.min(0.95, r * lo)));
  };
  let lo = 0;
  let hi = 4;
  for (let it = 0; it < 50; it++) {
    const mid = (lo + hi) / 2;
    if (shareOfTop(make(mid), plan.hotNeurons) < plan.hotShare) lo = mid;
    else hi = mid;
  }
  return Float64Array.from(make((lo + hi) / 2));
}

/**
 * Gate weights on the bias channel for one layer: w_i0 = −Φ⁻¹(1 − f_i)·σ/x̂₀, with σ the std of
 * the rest of the pre-activation (≈ √embd · weight std) and x̂₀ the normed bias channel.
 */
export function biasChannelWeights(freqs: Float64Array, embd: number, gateStd: number): Float32Array {
  // rms of the residual: the bias channel plus (embd − 1) dimensions of unit variance
  const rms = Math.sqrt((BIAS_VALUE * BIAS_VALUE + (embd - 1)) / embd);
  const x0 = BIAS_VALUE / rms;
  const sigma = gateStd * Math.sqrt(embd - 1);
  return Float32Array.from(freqs, (f) => (-normalQuantile(1 - f) * sigma) / x0);
}
