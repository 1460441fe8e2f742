// The activation profiler (PowerInfer never released one): dense inference over a corpus,
// recording per layer and neuron how often the neuron fires, the per-token active count,
// how much consecutive tokens' active sets overlap, and how skewed the firing is (the share
// of all activations the hottest neurons account for). A neuron "fires" for a token when its
// gated activation act(gate)·up is non-zero — for ReGLU/dReLU exactly relu(gate) > 0 (and up ≠ 0).
import { readFileSync } from "node:fs";
import { readGGUF } from "../gguf/reader.js";
import { GGUFWriter } from "../gguf/writer.js";
import { ValueType } from "../gguf/types.js";
import type { Model } from "../model/model.js";
import { native } from "../native.js";

export interface LayerProfile {
  /** (nFF) tokens for which each neuron fired. */
  counts: Uint32Array;
  /** Active neurons per token: mean and quantiles. */
  activeMean: number;
  activeP50: number;
  activeP99: number;
  activeMax: number;
  /** Mean Jaccard overlap of the active sets of consecutive tokens (within a window). */
  overlap: number;
  /** Fewest neurons that account for 80% of all activations (hot-set size). */
  hot80: number;
}

export interface ActivationProfile {
  modelName: string;
  nLayer: number;
  nFF: number;
  tokens: number;
  window: number;
  corpus: string;
  layers: LayerProfile[];
  /** modelFingerprint() of the profiled model file (fingerprint.ts), when known. */
  modelFingerprint?: string;
}

/** Quantile of a histogram h[k] = number of tokens with k active neurons. */
function histQuantile(h: Uint32Array, total: number, q: number): number {
  let acc = 0;
  for (let k = 0; k < h.length; k++) {
    acc += h[k]!;
    if (acc >= q * total) return k;
  }
  return h.length - 1;
}

/** Smallest number of neurons whose counts sum to ≥ share of all counts. */
export function hotSetSize(counts: Uint32Array, share: number): number {
  const sorted = Array.from(counts).sort((a, b) => b - a);
  const total = sorted.reduce((a, b) => a + b, 0);
  let acc = 0;
  for (let i = 0; i < sorted.length; i++) {
    acc += sorted[i]!;
    if (acc >= share * total) return i + 1;
  }
  return sorted.length;
}

/**
 * Profile the model's FFN activations over `tokens`, in windows of `window` tokens (each a
 * fresh context). Progress is reported per window.
 */
export function profileActivations(
  model: Model,
  tokens: readonly number[],
  window: number,
  opts: { corpus?: string; onProgress?: (done: number, total: number) => void; signal?: AbortSignal } = {},
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
  const s = model.createSession({ contextSize: window, batchSize: Math.min(window, 256) });
  try {
    for (let w0 = 0; w0 < tokens.length; w0 += window) {
      opts.signal?.throwIfAborted();
      const win = tokens.slice(w0, w0 + window);
      s.reset();
      havePrev = false;
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
            for (let i = 0; i < nFF; i++) {
              const on = hb[row + i] !== 0 ? 1 : 0;
              if (on) {
                c[i]!++;
                active++;
                if (p[i]) both++;
              }
              p[i] = on;
            }
            hist[layer]![active]!++;
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
    return {
      counts: c,
      activeMean: sum / total,
      activeP50: histQuantile(h, total, 0.5),
      activeP99: histQuantile(h, total, 0.99),
      activeMax: max,
      overlap: overlapPairs > 0 ? overlapSum[l]! / overlapPairs : 0,
      hot80: hotSetSize(c, 0.8),
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
  };
}

// ---- file format (docs/formats.md, "Activation profile") ------------------------------

const KIND = "neuronpipe.activation_profile";

export async function writeProfile(path: string, p: ActivationProfile): Promise<number> {
  const w = new GGUFWriter();
  w.setString("general.architecture", KIND);
  w.setString("profile.model_name", p.modelName);
  w.setU32("profile.n_layer", p.nLayer);
  w.setU32("profile.n_ff", p.nFF);
  w.set("profile.tokens", ValueType.UINT64, BigInt(p.tokens));
  w.setU32("profile.window", p.window);
  w.setString("profile.corpus", p.corpus);
  w.setString("profile.rule", "a neuron fires for a token when act(gate)*up != 0");
  if (p.modelFingerprint) w.setString("profile.model_fingerprint", p.modelFingerprint);
  const arr = (k: string, f: (l: LayerProfile) => number) => w.setArray(`profile.${k}`, ValueType.FLOAT32, Float32Array.from(p.layers, f));
  arr("active_mean", (l) => l.activeMean);
  arr("active_p50", (l) => l.activeP50);
  arr("active_p99", (l) => l.activeP99);
  arr("active_max", (l) => l.activeMax);
  arr("overlap", (l) => l.overlap);
  arr("hot80", (l) => l.hot80);
  p.layers.forEach((l, i) =>
    w.addTensor({ name: `blk.${i}.act_count`, ne: [p.nFF], type: 26 /* I32 */, data: () => new Uint8Array(Int32Array.from(l.counts).buffer) }),
  );
  return w.write(path);
}

export function readProfile(path: string): ActivationProfile {
  const f = readGGUF(path);
  if (f.metadata.get("general.architecture")?.value !== KIND) throw new Error(`${path}: not an activation profile (general.architecture ≠ ${KIND})`);
  const num = (k: string) => Number(f.metadata.get(`profile.${k}`)?.value);
  const arr = (k: string) => f.metadata.get(`profile.${k}`)?.value as Float32Array;
  const nLayer = num("n_layer");
  const nFF = num("n_ff");
  const fileBuf = readFileSync(path);
  const layers: LayerProfile[] = [];
  for (let i = 0; i < nLayer; i++) {
    const t = f.tensorsByName.get(`blk.${i}.act_count`);
    if (!t || t.type !== 26 || t.ne[0] !== nFF) throw new Error(`${path}: tensor blk.${i}.act_count missing or not I32 [${nFF}]`);
    const counts = new Uint32Array(nFF);
    for (let j = 0; j < nFF; j++) counts[j] = fileBuf.readInt32LE(t.offset + 4 * j);
    layers.push({
      counts,
      activeMean: arr("active_mean")[i]!,
      activeP50: arr("active_p50")[i]!,
      activeP99: arr("active_p99")[i]!,
      activeMax: arr("active_max")[i]!,
      overlap: arr("overlap")[i]!,
      hot80: arr("hot80")[i]!,
    });
  }
  return {
    modelName: String(f.metadata.get("profile.model_name")?.value),
    nLayer,
    nFF,
    tokens: num("tokens"),
    window: num("window"),
    corpus: String(f.metadata.get("profile.corpus")?.value),
    layers,
    ...(f.metadata.has("profile.model_fingerprint") ? { modelFingerprint: String(f.metadata.get("profile.model_fingerprint")!.value) } : {}),
  };
}
