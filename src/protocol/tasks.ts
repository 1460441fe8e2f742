// Messages between the pipeline's scheduler (main thread) and its worker-thread actors. They
// carry descriptors only — buffer ids, offsets, layer/cluster ranges, counts — never tensors:
// weights, cache slots, activations and partial sums live in native memory every thread
// addresses by buffer id (native/src/registry.h).
import type { ModelConfig } from "../model/config.js";
import type { KVCache, RunState } from "../model/forward.js";
import type { Weights } from "../model/weights.js";
import type { FfnLayout } from "../sparse/ffn/layout.js";

/** Where the streamed dense prefill reads bundles from. */
export interface PrefillLayout {
  loader: number; // native loader id (process-wide)
  layerOffsets: number[]; // file offset of each layer's bundle 0
  staging: number; // staging buffer id and its size: bundles are streamed through it
  stagingBytes: number;
  bundleScratch: number; // buffer for createBundleScratch, and its bytes
  bundleScratchBytes: number;
  /** Use the cache's resident neurons in place (not in the blocking decoder, whose window owns the slots). */
  inPlace: boolean;
}

/** Everything a compute worker needs to run a session's forward steps. */
export interface ComputeInit {
  op: "init";
  key: string; // the session's key: a worker re-initialises when it changes
  cfg: ModelConfig;
  weights: Omit<Weights, "buffers">;
  rs: RunState;
  kv: KVCache;
  ffn: FfnLayout;
  prefill: PrefillLayout;
  threads: number; // native kernel threads
  cores?: number[]; // pin this worker's thread to these cores
  role: "big" | "little";
  /** The cache's slot flags (src/sparse/cache/slot-flags.ts): a task waits until the slots it reads are ready. */
  slotFlags: { want: SharedArrayBuffer; ready: SharedArrayBuffer };
  /** The worker's end of the direct channel every later task of the session comes through (worker-channel.ts). */
  port?: import("node:worker_threads").MessagePort;
}

/**
 * The start of a layer, one task: x += o of the layer before (`residual`; layer 0 embeds
 * `tokens` instead), attention, xb = ffn_norm(x), o = 0, P = the predicted neurons — and with
 * `gates` (pinned gate rows, the layer's FFN in one cluster) the gate rows of all of P too
 * (row = layer·nFF + p), answering nA and nSilent.
 */
export interface FrontTask {
  op: "front";
  key: string;
  layer: number;
  pos0: number;
  nTok: number;
  tokens?: number[];
  residual: boolean;
  oracle: boolean;
  gates: boolean;
  /**
   * With `gates`: after answering, compute up+down of the fired neurons resident at gate time,
   * in pack order up to the first one that is not (pack order is hot-first: most of them),
   * while the scheduler plans the reads. Only when no read can be in flight for a resident slot
   * (no prefetch), so "resident" means "landed".
   */
  prefix: boolean;
}

export type ComputeTask =
  | ComputeInit
  | FrontTask
  /** Wait until the gate rows' slots are ready (gate rows cached), then the gate rows of P[start, start+count) from slots[start…]: fired ones compacted to aSlots/aPos/gA[start…], silent positions to slots[start…]. */
  | { op: "gate"; key: string; layer: number; start: number; count: number }
  /**
   * Wait until the up+down slots of the nA fired neurons at aSlots[start…] are ready, then up,
   * act and down (down in pack order: backs are posted in cluster order). `prefixed`: the front
   * computed a resident prefix after its answer; continue from there. With `next`, that front
   * runs right after, in the same task (its answer in `front`).
   */
  | { op: "back"; key: string; layer: number; start: number; nA: number; prefixed: boolean; next?: FrontTask }
  /**
   * Wait for the slots, then gate, select, up, act and down of P[start, start+count) at once (a
   * resident cluster; the blocking decoder's chunks); `next` as for back. With `lookup` (the whole
   * FFN resident, nothing planned) the gate rows' slots are read from the cache's slot table first.
   */
  | { op: "ffn"; key: string; layer: number; start: number; count: number; lookup?: boolean; next?: FrontTask }
  /** x += o of the last layer (the residual step); logits of the last token. */
  | { op: "logits"; key: string }
  /** dense batched forward of a prompt batch, FFN streamed from the pack; logits of the last token. */
  | { op: "prefill"; key: string; tokens: number[]; pos0: number };

export type ComputeOp = ComputeTask["op"];

/** Every task answers with its interval on the process-wide clock (µs) and the worker's thread id. */
export interface ComputeResult {
  t0: number;
  t1: number;
  tid: number;
  nP?: number; // front: neurons predicted
  nA?: number; // gate, ffn, front with gates: neurons that fired
  nSilent?: number; // gate, ffn, front with gates: predicted neurons that did not fire
  logits?: number; // logits, prefill: offset of the logits in rs
  reads?: number; // prefill: bytes streamed
  chunks?: number[]; // prefill: each chunk's GEMMs as [t0, t1, layer, neurons]… (µs)
  readSpans?: number[]; // prefill: each read as [t0, t1, layer, bytes]… (µs; most ran in the background)
  cuts?: number[]; // a multi-step task's steps as [start, end] pairs (µs), one per span recorded
  front?: ComputeResult; // back or ffn with next: the next layer's front
}

/** One I/O batch for the loader worker: reads into a staging chunk, then copies into the arena. */
export interface IoTask {
  op: "read";
  loader: number;
  reqs: Float64Array; // [fileOffset, length, stagingBuffer, stagingOffset]… (absolute staging offsets)
  arena: number;
  staging: number;
  copies: Float64Array; // [arenaOffset, stagingOffset, length]…
  batch: number; // batch id: the slots its copies fill are marked ready with it (or failed)
  slotBytes: number; // arena slot size: copies' destinations name their slots
}

/** The I/O worker's init: pin to the little cores, then take batches over the direct channel. */
export interface IoInit {
  op: "init";
  cores?: number[];
  ready: SharedArrayBuffer; // slot flags' `ready` (slot-flags.ts), set after each batch's copies
  port: import("node:worker_threads").MessagePort;
}

export interface IoResult {
  t0: number;
  t1: number;
  tid: number;
  bytes: number;
}
