// The neuron pack's format (docs/formats.md "Neuron pack"): what a pack holds and the names and
// constants its writer (write.ts) and reader (open.ts) share.
//
// The neuron pack (`neuronpipe pack`, docs/formats.md "Neuron pack"): a GGUF v3 file, aligned
// to 4096, holding a model's fixed region (embeddings, attention, norms, output) byte for byte
// and its FFN re-laid as neuron bundles in hot-first order, so that a neuron's gate row is one
// 4 KiB-aligned read and its up row + down column one more, the way PowerInfer-2 reads flash.
//
// Bundle p of layer N (pack position p, original neuron order[p]):
//   [gate row (gate_bytes) | zeros to gate_block][up row (up_bytes) | down column (down_bytes) | zeros to updown_block]
// The down column is the neuron's column of the down matrix, dequantised and re-quantised as a
// row of n_embd values in down_type (exact for F32/F16, a second rounding for Q8_0/Q4_0; the
// measured relative error is stored per layer).
import { safeMessage } from "../../util/message.js";
import type { GGUFFile, TensorInfo } from "../../gguf/reader.js";
import { computeTypes, tensorTypeName } from "../../gguf/types.js";
import type { ModelConfig } from "../../model/config.js";
import type { FiringReuse } from "../reuse.js";

export interface PackLayer {
  bundlesOffset: number; // absolute file offset of bundle 0 of this layer (4096-aligned)
  order: Int32Array; // order[p] = original neuron id at pack position p
  counts: Uint32Array; // profiled firing count per pack position
  hotCount: number; // leading pack positions holding 80% of firings
  /** Read requests per fired neuron past hotCount when adjacent ones share a request, measured by the profiler in this order (coactivation.ts); absent in packs without it. */
  coldRequests?: number;
}
export interface PackPredictorLayer {
  /** mlp: fc2·relu(fc1·x) > threshold (x before ffn_norm); linear: fc2·fc1·x̂ > thresholds[p] (x̂ the ffn_norm output) */
  form: "mlp" | "linear";
  hidden: number; // hidden width (mlp) or rank (linear)
  type: number; // GGML type of fc1 and fc2 (F32 for mlp)
  /** Dequantised on first use (a 7B pack holds hundreds of MB of predictors; loadSparseModel reads them straight into native memory instead). */
  readonly fc1: Float32Array; // (hidden, n_embd)
  readonly fc2: Float32Array; // (n_ff, hidden), rows in pack order
  /** File offsets and sizes of blk.N.fc1.weight and blk.N.fc2.weight (and blk.N.fc2.threshold, linear). */
  fc1Offset: number;
  fc2Offset: number;
  fc1Bytes: number;
  fc2Bytes: number;
  thresholdsOffset: number; // -1 for mlp
  threshold: number; // mlp: the layer's threshold; linear: NaN (see thresholds)
  readonly thresholds?: Float32Array; // linear: (n_ff) in pack order
  /** linear, optional: (n_ff) in pack order, the share of held-out tokens each neuron did not fire on that it was flagged on (blk.N.fc2.false_flags) */
  readonly falseFlags?: Float32Array;
}
export interface Pack {
  path: string;
  file: GGUFFile; // parsed header (readGGUF) — fixed-region tensors are in file.tensorsByName
  config: ModelConfig; // readConfig(file)
  gateType: number;
  upType: number;
  downType: number;
  gateBytes: number;
  upBytes: number;
  downBytes: number;
  gateBlock: number;
  upDownBlock: number;
  bundleBytes: number;
  layers: PackLayer[];
  predictor?: PackPredictorLayer[]; // undefined when the pack has none
  profileTokens: number;
  /** (nLayer) the profile's mean Jaccard overlap of consecutive tokens' active sets; absent in packs written before it was stored. */
  profileOverlap?: number[];
  /** How soon the profile's neurons fired again (sparse/reuse.ts); absent in packs written before it was stored, or from profiles without it. */
  profileReuse?: FiringReuse;
  downRelayoutError: number[];
  source: { name: string; size: number; fingerprint: string };
}

/**
 * Every layer's per-neuron false-flag rates of the pack's trained predictor (blk.N.fc2.false_flags,
 * pack order), or undefined when a layer lacks them: a neuron's rate of use is then counted by
 * firings alone, since the two measures are not on one scale. The neuron cache's kept cold
 * neurons and the planner's cache model rank by the same rates.
 */
export function falseFlagRates(pack: Pack): readonly Float32Array[] | undefined {
  const pred = pack.predictor;
  if (pred?.length !== pack.config.nLayer || !pred.every((l) => l.falseFlags !== undefined)) return undefined;
  return pred.map((l) => l.falseFlags!);
}

/**
 * A neuron's uses of its bundle per token when whole bundles are cached: each firing (rate p) and
 * each flag it stays silent on ((1 − p)·f). The neuron cache's kept cold neurons and the
 * planner's cache model rank by it, so both pick the same set.
 */
export function bundleUseRate(p: number, falseFlag: number): number {
  return p + (1 - p) * falseFlag;
}

/** A malformed or unusable pack (or pack input); the message starts with the file path. */
export class PackError extends Error {
  constructor(message: string) {
    super(safeMessage(message));
    this.name = "PackError";
  }
}

export const PACK_VERSION = 1;
export const PACK_ALIGNMENT = 4096;
/** Metadata key prefix of every pack key. */
export const P = "neuronpipe.pack.";

/** Is this GGUF a neuron pack (`neuronpipe pack`)? */
export function isPackFile(file: GGUFFile): boolean {
  return file.metadata.has(`${P}version`);
}

export const I8 = 24; // GGUF value types used by pack keys
export const I32 = 26;
export const F32 = 0;

export const roundUp = (n: number, a: number) => Math.ceil(n / a) * a;

/**
 * Bytes a read that starts with a neuron's gate block, up+down block or whole bundle takes when
 * reads need only be multiples of `align` (a loader's direct-I/O alignment; at least 512): its
 * rows rounded up, not the block's padding (Q4_0 7B at 512: 2,560, 4,608 and 8,704 bytes of
 * 4,096, 8,192 and 12,288). A read that goes on to the next bundle reads the padding between.
 */
export function blockReads(pack: Pick<Pack, "gateBytes" | "upBytes" | "downBytes" | "gateBlock" | "upDownBlock">, align: number): { gate: number; upDown: number; bundle: number } {
  const a = Math.max(512, align);
  const upDown = Math.min(pack.upDownBlock, roundUp(pack.upBytes + pack.downBytes, a));
  return { gate: Math.min(pack.gateBlock, roundUp(pack.gateBytes, a)), upDown, bundle: pack.gateBlock + upDown };
}

/** The FFN matrix of layer l (plain llama names, or smallthinker's one-expert `_exps` names). */
export function ffnTensorName(f: GGUFFile, l: number, m: "gate" | "up" | "down"): string {
  const plain = `blk.${l}.ffn_${m}.weight`;
  if (f.tensorsByName.has(plain)) return plain;
  const exps = `blk.${l}.ffn_${m}_exps.weight`;
  if (f.tensorsByName.has(exps)) return exps;
  throw new PackError(`${f.path}: missing tensor ${plain} (or ${exps})`);
}

/** Tensors that are not copied into the fixed region: FFN matrices, the smallthinker router, predictors. */
export function isFfnOrAux(name: string): boolean {
  return /^blk\.\d+\.(ffn_(gate|up|down)(_exps)?\.weight|ffn_gate_inp\.weight|fc[12]\.weight)$/.test(name);
}

export function checkMatrix(f: GGUFFile, t: TensorInfo, cols: number, rows: number) {
  const [c, r = 1, ...more] = t.ne;
  if (c !== cols || r !== rows || more.some((d) => d !== 1)) {
    throw new PackError(`${f.path}: tensor ${t.name} has shape [${t.ne.join(", ")}], expected [${cols}, ${rows}]`);
  }
  if (!computeTypes.has(t.type)) {
    throw new PackError(`${f.path}: tensor ${t.name} has type ${tensorTypeName(t.type)}; packs support F32, F16, Q8_0, Q4_0`);
  }
}

/** Pack positions: neurons by firing count descending, ties by ascending neuron id. */
export function hotFirstOrder(counts: Uint32Array): Int32Array {
  const ids = Array.from({ length: counts.length }, (_, i) => i);
  ids.sort((a, b) => counts[b]! - counts[a]! || a - b);
  return Int32Array.from(ids);
}
