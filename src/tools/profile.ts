// The activation profiler (PowerInfer never released one): dense inference over a corpus,
// recording per layer and neuron how often the neuron fires, the per-token active count,
// how much consecutive tokens' active sets overlap, and how skewed the firing is (the share
// of all activations the hottest neurons account for), and how soon a neuron fires again
// (sparse/reuse.ts, for the planner's cache model). A neuron "fires" for a token when its
// gated activation act(gate)·up is non-zero — for ReGLU/dReLU exactly relu(gate) > 0 (and up ≠ 0).
import type { Model } from "../api/model.js";
import { native } from "../native.js";
import { hotSetSize, type ActivationProfile } from "../sparse/profile-file.js";
import { ReuseCounter } from "../sparse/reuse.js";
import { learnLayerOrder } from "../sparse/coactivation.js";
import { hotFirstOrder } from "../sparse/pack/format.js";

/** Tokens whose fired sets the co-activation order is learned from (the first ones profiled): enough for a 7B's cold neurons, bounded in time and memory. */
export const COACTIVATION_TOKENS = 8192;
/** Most cold neurons a layer's chain orders: its co-firing counts take 4·m² bytes (1 GiB at this m). */
const MAX_CHAIN = 16384;

/** Quantile of a histogram h[k] = number of tokens with k active neurons. */
function histQuantile(h: Uint32Array, total: number, q: number): number {
  let acc = 0;
  for (let k = 0; k < h.length; k++) {
    acc += h[k]!;
    if (acc >= q * total) return k;
  }
  return h.length - 1;
}

/**
 * Profile the model's FFN activations over `tokens`, in windows of `window` tokens (each a
 * fresh context). Progress is reported per window.
 */
export function profileActivations(
  model: Model,
  tokens: readonly number[],
  window: number,
  opts: {
    corpus?: string;
    onProgress?: (done: number, total: number) => void;
    signal?: AbortSignal;
    /** Learn the pack order by co-activation from the first N tokens (coactivation.ts); 0: hot-first only. Default COACTIVATION_TOKENS. */
    coactivationTokens?: number;
  } = {},
): ActivationProfile {
  const { nLayer, nFF } = model.config;
  const n = native();
  const counts = Array.from({ length: nLayer }, () => new Uint32Array(nFF));
  const hist = Array.from({ length: nLayer }, () => new Uint32Array(nFF + 1));
  const overlapSum = new Float64Array(nLayer);
  let overlapPairs = 0;
  // previous token's active flags per layer, and whether there is a previous token in this window
  const prev = Array.from({ length: nLayer }, () => new Uint8Array(nFF));
  const prevCount = new Uint32Array(nLayer);
  let havePrev = false;
  const reuse = new ReuseCounter(nLayer, nFF, window);
  // fired flags of the first tokens, per layer: (coTokens, nFF/8 rounded up) bits
  const coTokens = Math.min(opts.coactivationTokens ?? COACTIVATION_TOKENS, tokens.length);
  const rowBytes = (nFF + 7) >> 3;
  const firedBits = Array.from({ length: coTokens > 1 ? nLayer : 0 }, () => new Uint8Array(coTokens * rowBytes));
  const seen = new Uint32Array(nLayer); // tokens of each layer seen so far
  const s = model.createSession({ contextSize: window, batchSize: Math.min(window, 256) });
  try {
    for (let w0 = 0; w0 < tokens.length; w0 += window) {
      opts.signal?.throwIfAborted();
      const win = tokens.slice(w0, w0 + window);
      s.reset();
      havePrev = false;
      reuse.startWindow();
      s.evaluate(win, false, {
        onFfnActivations: (layer, rs, nTok) => {
          const hb = n.viewF32(rs.buf, rs.hb, nTok * nFF);
          const c = counts[layer]!;
          const p = prev[layer]!;
          let hp = havePrev;
          for (let t = 0; t < nTok; t++) {
            let active = 0;
            let both = 0;
            const row = t * nFF;
            // the first coTokens tokens' fired flags, for the co-activation order
            const bits = seen[layer]! < coTokens ? firedBits[layer] : undefined;
            const at = seen[layer]!++ * rowBytes;
            for (let i = 0; i < nFF; i++) {
              const on = hb[row + i] !== 0 ? 1 : 0;
              if (on) {
                c[i]!++;
                active++;
                if (p[i]) both++;
                if (bits) bits[at + (i >> 3)]! |= 1 << (i & 7);
              }
              p[i] = on;
            }
            hist[layer]![active]!++;
            reuse.addToken(layer, (i) => hb[row + i] !== 0);
            if (hp) {
              const union = active + prevCount[layer]! - both;
              overlapSum[layer]! += union > 0 ? both / union : 1;
            }
            prevCount[layer] = active;
            hp = true;
          }
          if (layer === nLayer - 1) havePrev = true; // later batches of this window continue the sequence
        },
      });
      overlapPairs += win.length - 1;
      opts.onProgress?.(Math.min(w0 + window, tokens.length), tokens.length);
    }
  } finally {
    s.dispose();
  }
  const total = tokens.length;
  const layers = counts.map((c, l) => {
    const h = hist[l]!;
    let sum = 0;
    let max = 0;
    for (let k = 0; k < h.length; k++) {
      sum += k * h[k]!;
      if (h[k]) max = k;
    }
    const hot80 = hotSetSize(c, 0.8);
    return {
      counts: c,
      activeMean: sum / total,
      activeP50: histQuantile(h, total, 0.5),
      activeP99: histQuantile(h, total, 0.99),
      activeMax: max,
      overlap: overlapPairs > 0 ? overlapSum[l]! / overlapPairs : 0,
      hot80,
      // past the hot set by co-activation, unless its (m, m) co-firing counts would not fit
      ...(firedBits.length > 0 && nFF - hot80 <= MAX_CHAIN && learnLayerOrder(hotFirstOrder(c), hot80, { bits: firedBits[l]!, rowBytes, tokens: coTokens })),
    };
  });
  return {
    modelName: String(model.file.metadata.get("general.name")?.value ?? model.path),
    nLayer,
    nFF,
    tokens: total,
    window,
    corpus: opts.corpus ?? "",
    layers,
    reuse: reuse.finish(counts, total),
    ...(firedBits.length > 0 && { coactivationTokens: coTokens }),
  };
}
