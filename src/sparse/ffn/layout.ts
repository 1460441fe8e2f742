// Where a sparse FFN's data is, in native memory: the neuron bundles (pack layout), the cache
// arena's slots, the pinned gate rows, the predictor weights and the per-token scratch. Every
// decoder and the compute worker describe the same FFN with these plain structs; messages
// carry them as descriptors (buffer ids and offsets), never the bytes.
import { GateKind, native } from "../../native.js";
import type { Pack } from "../pack/format.js";

/** Neuron bundles as a pack lays them out: [gate row | pad][up row | down column | pad], `bundleBytes` apart. */
export interface BundleLayout {
  kind: number; // GateKind
  gateType: number;
  upType: number;
  downType: number;
  dim: number; // n_embd
  nFF: number;
  bundleBytes: number;
  gateBlock: number; // the up row starts here within a bundle
  upBytes: number; // the down column follows the up row
}

/** The bundle layout of a pack. */
export function bundleLayoutOf(pack: Pack): BundleLayout {
  const act = pack.config.activation;
  if (act !== "reglu" && act !== "drelu") {
    throw new Error(`${pack.path}: sparse decoding needs a ReLU-family FFN (ReGLU or dReLU); this model uses ${act}`);
  }
  return {
    kind: act === "reglu" ? GateKind.ReGLU : GateKind.dReLU,
    gateType: pack.gateType,
    upType: pack.upType,
    downType: pack.downType,
    dim: pack.config.nEmbd,
    nFF: pack.config.nFF,
    bundleBytes: pack.bundleBytes,
    gateBlock: pack.gateBlock,
    upBytes: pack.upBytes,
  };
}

/**
 * Per-layer predictors in one native buffer (predictor-file.ts for the two forms): mlp
 * fc2·relu(fc1·x) > threshold[layer] (F32, x before ffn_norm), or linear fc2·fc1·x̂ >
 * thresholds (per neuron, pack order; x̂ the ffn_norm output).
 */
export interface PredictorWeights {
  buf: number;
  form: "mlp" | "linear";
  type: number; // GGML type of fc1/fc2 (F32 for mlp)
  fc1: number[]; // offset of blk.N.fc1 (hidden, n_embd)
  fc2: number[]; // offset of blk.N.fc2 (n_ff, hidden), rows in pack order
  hidden: number[];
  threshold: number[]; // mlp
  thresholds: number[]; // linear: offset of blk.N.fc2.threshold (n_ff) f32
}

/**
 * The down GEMM (native matmulTAcc) requantises its rows 32 at a time and sums the groups in
 * order after what the output holds, so calls over consecutive multiples of DOWN_GROUP rows give
 * the bits of one call: callers split a layer at multiples of it (the streamed FFN's chunks) and
 * a prefill's logits do not depend on the staging, hence not on the budget.
 */
export const DOWN_GROUP = 32;
/**
 * Neurons a batch of tokens takes per GEMM call, at most. Each call quantises the batch's
 * activations again: on the 7B's gate rows (128 tokens) 256 per call ran at 0.70x the GFLOP/s of
 * 2048, 1024 at 0.98x. The scratch holds g, u, h of prefillRows(n_ff) per token of the plan's
 * batch (ffnScratchBytes): 1024 from n_ff 8192 up, 256 below 2048 (small models, small budgets).
 */
export const PREFILL_ROWS = 1024;
export function prefillRows(nFF: number): number {
  return Math.min(PREFILL_ROWS, Math.max(256, Math.floor(nFF / 8 / DOWN_GROUP) * DOWN_GROUP));
}
export function batchRows(cap: number, nTok: number): number {
  const r = Math.min(PREFILL_ROWS, Math.floor(cap / nTok));
  return r >= DOWN_GROUP ? r - (r % DOWN_GROUP) : Math.max(1, r);
}

/**
 * Bytes of bundle scratch (steps.ts BundleScratch): 4 i32 tables of n_ff, then g, u, h for one
 * token's n_ff neurons or a batch of up to `batchSize` tokens' prefillRows(n_ff), whichever is more.
 */
export function bundleScratchBytes(nFF: number, batchSize: number): number {
  return (4 * nFF + 3 * Math.max(nFF, prefillRows(nFF) * batchSize)) * 4;
}

/** Names of the per-token scratch vectors, each (max(n_ff, n_embd)) 4-byte values. */
export const FFN_SCRATCH = ["scores", "P", "slots", "gate", "aSlots", "aPos", "gA", "uA", "hA", "pHidden", "aheadX", "aheadXb"] as const;
export type FfnScratchOffsets = Record<(typeof FFN_SCRATCH)[number], number>;

/**
 * Bytes of the sparse-FFN scratch (the memory plan counts this): one token's vectors, or the
 * bundle scratch of a streamed prefill of `batchSize` tokens (bundleScratchBytes: tables
 * of n_ff, then g, u, h of prefillRows(n_ff) neurons per token), whichever is larger.
 */
export function ffnScratchBytes(nFF: number, dim: number, batchSize: number): number {
  return Math.max(FFN_SCRATCH.length * Math.max(nFF, dim) * 4, bundleScratchBytes(nFF, batchSize));
}

/**
 * One token's sparse-FFN scratch, one native buffer of (12, max(n_ff, n_embd)) 4-byte values:
 *   scores (f32) predictor scores     P (i32) predicted pack positions, ascending
 *   slots (i32)  gate row of each P   gate (f32) gate value of each P
 *   aSlots (i32) up+down slot of each fired neuron   aPos (i32) its pack position
 *   gA, uA, hA (f32) its gate, up and gated activation
 *   pHidden (f32) the linear predictor's fc1·x̂ (rank ≤ n_ff)
 *   aheadX, aheadXb (f32, n_embd) the next layer's FFN input as known now, and it normed (reads ahead)
 */
export function createFfnScratch(nFF: number, dim: number, batchSize: number): { buf: number; off: FfnScratchOffsets; bytes: number } {
  const F = Math.max(nFF, dim) * 4;
  const bytes = ffnScratchBytes(nFF, dim, batchSize);
  return { buf: native().alloc(bytes), bytes, off: Object.fromEntries(FFN_SCRATCH.map((k, i) => [k, i * F])) as FfnScratchOffsets };
}

/** Where the sparse FFN of a pack is, for the decoders and the compute worker. */
export interface FfnLayout extends BundleLayout {
  arena: number; // cache arena buffer: slot s = [gate | up | down] (or [up | down], gates pinned) at s·slotBytes
  slotBytes: number;
  slots: number; // slots in the arena
  upOffset: number; // the up row's offset within a slot; the down column's is downOffset
  downOffset: number;
  gateRows: { buf: number; rows: number; stride: number }; // where gate rows are (pinned rows, or the arena's slots)
  pinned: boolean; // gate rows pinned: slots[k] index gateRows, fired neurons' slots come from slotOf
  slotOf: { buf: number; off: number }; // (nLayer·nFF) i32: slot of (layer, pack position) or -1
  stateOf: { buf: number; off: number }; // (nLayer·nFF) u8: NEURON_FULL when that slot holds the whole bundle
  scratch: number; // scratch buffer (createFfnScratch)
  off: FfnScratchOffsets;
  pred?: PredictorWeights;
}
