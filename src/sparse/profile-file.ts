// The activation profile file (docs/formats.md, "Activation profile"): per layer and neuron,
// how often it fired over a corpus, and the statistics `neuronpipe profile` printed. Written by
// tools/profile.ts, read by the pack writer.
import { readFileSync } from "node:fs";
import { readGGUF } from "../gguf/reader.js";
import { GGUFWriter } from "../gguf/writer.js";
import { ValueType } from "../gguf/types.js";
import { REUSE_RATE_CLASSES, type FiringReuse } from "./reuse.js";
import { permutationFault } from "../util/permutation.js";

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
  /**
   * (nFF) neuron ids in the order a pack lays them out: hot-first by counts, the neurons past the
   * hot set re-ordered by co-activation (coactivation.ts). Absent: hot-first by counts.
   */
  order?: Int32Array;
  /**
   * Read requests per fired neuron past the hot set when adjacent ones share a request, on the
   * second half of the co-activation tokens with the order learned on the first: in hot-first
   * order, and in the co-activation order. Present with `order`.
   */
  coldRequests?: { hotFirst: number; coactivation: number };
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
  /** How soon neurons fire again (reuse.ts); absent in profiles written before it was measured. */
  reuse?: FiringReuse;
  /** Tokens the co-activation orders were learned on (the first ones profiled); with LayerProfile.order. */
  coactivationTokens?: number;
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

const KIND = "neuronpipe.activation_profile";
const ORDER_RULE = "blk.N.ffn_order: hot-first by act_count up to hot80, then a greedy co-activation chain (neurons that fired together side by side)";

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
  if (p.reuse) {
    w.setArray("profile.reuse_spans", ValueType.UINT32, Uint32Array.from(p.reuse.spans));
    w.setArray("profile.reuse_recent", ValueType.FLOAT32, p.reuse.recent);
    w.setArray("profile.reuse_fired_recent", ValueType.FLOAT32, p.reuse.firedRecent);
  }
  p.layers.forEach((l, i) =>
    w.addTensor({ name: `blk.${i}.act_count`, ne: [p.nFF], type: 26 /* I32 */, data: () => new Uint8Array(Int32Array.from(l.counts).buffer) }),
  );
  if (p.layers.every((l) => l.order && l.coldRequests)) {
    w.setString("profile.order_rule", ORDER_RULE);
    w.set("profile.coactivation_tokens", ValueType.UINT64, BigInt(p.coactivationTokens ?? 0));
    arr("cold_requests_hot_first", (l) => l.coldRequests!.hotFirst);
    arr("cold_requests", (l) => l.coldRequests!.coactivation);
    p.layers.forEach((l, i) => w.addTensor({ name: `blk.${i}.ffn_order`, ne: [p.nFF], type: 26 /* I32 */, data: () => new Uint8Array(l.order!.buffer, l.order!.byteOffset, l.order!.byteLength) }));
  }
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
  const ordered = f.metadata.has("profile.order_rule");
  if (ordered) {
    for (const k of ["cold_requests_hot_first", "cold_requests"]) {
      const a = arr(k);
      if (!(a instanceof Float32Array) || a.length !== nLayer) throw new Error(`${path}: profile.${k} is not an f32 array of n_layer ${nLayer} (the file has profile.order_rule)`);
    }
  }
  const i32 = (name: string): Int32Array => {
    const t = f.tensorsByName.get(name);
    if (!t || t.type !== 26 || t.ne[0] !== nFF || t.offset + 4 * nFF > fileBuf.length) throw new Error(`${path}: tensor ${name} missing or not I32 [${nFF}]`);
    const a = new Int32Array(nFF);
    for (let j = 0; j < nFF; j++) a[j] = fileBuf.readInt32LE(t.offset + 4 * j);
    return a;
  };
  for (let i = 0; i < nLayer; i++) {
    const counts = new Uint32Array(i32(`blk.${i}.act_count`));
    const order = ordered ? checkedOrder(path, `blk.${i}.ffn_order`, i32(`blk.${i}.ffn_order`)) : undefined;
    layers.push({
      ...(order && { order, coldRequests: { hotFirst: arr("cold_requests_hot_first")[i]!, coactivation: arr("cold_requests")[i]! } }),
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
    ...(f.metadata.has("profile.reuse_spans") && { reuse: readReuse(path, (k) => f.metadata.get(`profile.${k}`)?.value, nLayer) }),
    ...(ordered && { coactivationTokens: num("coactivation_tokens") }),
    ...(f.metadata.has("profile.model_fingerprint") ? { modelFingerprint: String(f.metadata.get("profile.model_fingerprint")!.value) } : {}),
  };
}

/** `order` if it is a permutation of 0..n-1, else an error naming the tensor and the first bad entry. */
function checkedOrder(path: string, name: string, order: Int32Array): Int32Array {
  const bad = permutationFault(order);
  if (bad) throw new Error(`${path}: ${name}[${bad.position}] = ${bad.id} is ${bad.repeated ? "a repeated" : "not a"} neuron id of 0..${order.length - 1}; the order must be a permutation`);
  return order;
}

/**
 * FiringReuse from metadata keys `reuse_spans`, `reuse_recent`, `reuse_fired_recent` (a profile's
 * or a pack's), checked: spans ascending positive integers, arrays of nLayer·classes·spans
 * probabilities, each in [0, 1] or NaN (no measurement).
 */
export function readReuse(path: string, get: (key: string) => unknown, nLayer: number, prefix = "profile."): FiringReuse {
  const spans = get("reuse_spans");
  if (!(spans instanceof Uint32Array) || spans.length === 0 || spans.some((s, k) => s < 1 || (k > 0 && s <= spans[k - 1]!))) {
    throw new Error(`${path}: ${prefix}reuse_spans is not an ascending u32 array of spans ≥ 1`);
  }
  const want = nLayer * REUSE_RATE_CLASSES * spans.length;
  const probabilities = (key: string) => {
    const v = get(key);
    if (!(v instanceof Float32Array) || v.length !== want) throw new Error(`${path}: ${prefix}${key} is not an f32 array of ${want} (n_layer ${nLayer} × ${REUSE_RATE_CLASSES} rate classes × ${spans.length} spans)`);
    const bad = v.findIndex((x) => !Number.isNaN(x) && !(x >= 0 && x <= 1));
    if (bad >= 0) throw new Error(`${path}: ${prefix}${key}[${bad}] is ${v[bad]}, not a probability in [0, 1] (or NaN)`);
    return v;
  };
  return { spans: Array.from(spans), recent: probabilities("reuse_recent"), firedRecent: probabilities("reuse_fired_recent") };
}
