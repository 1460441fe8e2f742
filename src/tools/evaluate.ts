// Held-out evaluation: perplexity over fixed windows, and the FFN activation sparsity the
// dense decoder itself observes (the fraction of neurons whose gated activation is exactly zero).
import { native } from "../native.js";
import type { Model } from "../api/model.js";

export interface PerplexityResult {
  perplexity: number;
  /** Mean negative log-likelihood per predicted token, nats. */
  nll: number;
  tokens: number; // predicted tokens
  windows: number;
}

/**
 * Perplexity of `tokens` in consecutive windows of `window` inputs, each window a fresh
 * context: window k reads tokens[k·w, k·w + w) and predicts the token after each of them, the
 * one past the window included — so every token but the first is predicted exactly once
 * (the usual non-overlapping protocol, and the trainer's).
 */
export function perplexity(model: Model, tokens: readonly number[], window: number, onProgress?: (done: number, total: number) => void): PerplexityResult {
  const V = model.config.nVocab;
  // a sparse model reserved its batch size in its memory plan
  const s = model.createSession({ contextSize: window, batchSize: Math.min(window, model.sparse?.plan.options.batchSize ?? 256) });
  let nll = 0;
  let count = 0;
  let windows = 0;
  try {
    for (let w0 = 0; w0 + 1 < tokens.length; w0 += window) {
      const inputs = tokens.slice(w0, Math.min(w0 + window, tokens.length - 1));
      s.reset();
      // a pack: every token through the sparse FFN, as decode computes it (a prompt batch would go dense)
      const logits = s.evaluate(inputs, true, { batchFfn: "sparse" });
      for (let t = 0; t < inputs.length; t++) {
        const row = logits.subarray(t * V, (t + 1) * V);
        let max = -Infinity;
        for (let i = 0; i < V; i++) if (row[i]! > max) max = row[i]!;
        let z = 0;
        for (let i = 0; i < V; i++) z += Math.exp(row[i]! - max);
        nll += Math.log(z) + max - row[tokens[w0 + t + 1]!]!;
        count++;
      }
      windows++;
      onProgress?.(Math.min(w0 + window, tokens.length), tokens.length);
    }
  } finally {
    s.dispose();
  }
  return { perplexity: Math.exp(nll / count), nll: nll / count, tokens: count, windows };
}

export interface SparsityResult {
  /** Per layer: mean fraction of FFN neurons whose gated activation is exactly 0, per token. */
  perLayer: number[];
  mean: number;
  tokens: number;
}

/** FFN activation sparsity as the dense decoder computes it, over `tokens` in windows of `window`. */
export function activationSparsity(model: Model, tokens: readonly number[], window: number): SparsityResult {
  const { nLayer, nFF } = model.config;
  const zeros = new Float64Array(nLayer);
  let seen = 0;
  // a sparse model reserved its batch size in its memory plan
  const s = model.createSession({ contextSize: window, batchSize: Math.min(window, model.sparse?.plan.options.batchSize ?? 256) });
  const n = native();
  try {
    for (let w0 = 0; w0 < tokens.length; w0 += window) {
      const win = tokens.slice(w0, w0 + window);
      s.reset();
      s.evaluate(win, false, {
        onFfnActivations: (layer, rs, nTok) => {
          const hb = n.viewF32(rs.buf, rs.hb, nTok * nFF);
          let z = 0;
          for (let i = 0; i < hb.length; i++) if (hb[i] === 0) z++;
          zeros[layer]! += z / nFF;
        },
      });
      seen += win.length;
    }
  } finally {
    s.dispose();
  }
  const perLayer = Array.from(zeros, (z) => z / seen);
  return { perLayer, mean: perLayer.reduce((a, b) => a + b, 0) / nLayer, tokens: seen };
}
