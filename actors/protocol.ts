// Messages between the pipeline's scheduler (main thread) and its worker-thread actors. They
// carry descriptors only — buffer ids, offsets, layer/cluster ranges, counts — never tensors:
// weights, cache slots, activations and partial sums live in native memory every thread
// addresses by buffer id (native/src/registry.h).
import type { ModelConfig } from "../src/model/config.js";
import type { KVCache, RunState } from "../src/model/forward.js";
import type { Weights } from "../src/model/weights.js";
import type { BundleLayout } from "../src/sparse/ffn/dense-bundles.js";

/** Where the sparse FFN's data is: the engine scratch (P, slots, gate values …) and the cache arena. */
export interface FfnLayout extends BundleLayout {
  arena: number; // cache arena buffer: slot s = [gate | up | down] (or [up | down], gates pinned) at s·slotBytes
  slotBytes: number;
  slots: number; // slots in the arena
  upOffset: number; // the up row's offset within a slot; the down column's is downOffset
  downOffset: number;
  gateRows: { buf: number; rows: number; stride: number }; // where gate rows are (pinned rows, or the arena's slots)
  pinned: boolean; // gate rows pinned: slots[k] index gateRows, fired neurons' slots come from slotOf
  slotOf: { buf: number; off: number }; // (nLayer·nFF) i32: slot of (layer, pack position) or -1
  scratch: number; // engine scratch buffer (src/sparse/sparse-ffn.ts)
  off: { scores: number; P: number; slots: number; gate: number; aSlots: number; aPos: number; gA: number; uA: number; hA: number };
  pred?: { buf: number; fc1: number[]; fc2: number[]; hidden: number[]; threshold: number[] };
}

/** Where the streamed dense prefill reads bundles from. */
export interface PrefillLayout {
  loader: number; // native loader id (process-wide)
  layerOffsets: number[]; // file offset of each layer's bundle 0
  staging: number; // staging buffer id and its size: bundles are streamed through it
  stagingBytes: number;
  bundleScratch: number; // buffer for createBundleScratch (bundleScratchBytes(nFF))
}

/** Everything a compute worker needs to run a session's forward steps. */
export interface ComputeInit {
  op: "init";
  key: string; // the session's key: a worker re-initialises when it changes
  cfg: ModelConfig;
  weights: Omit<Weights, "sparseFfn" | "buffers">;
  rs: RunState;
  kv: KVCache;
  ffn: FfnLayout;
  prefill: PrefillLayout;
  threads: number; // native kernel threads
  cores?: number[]; // pin this worker's thread to these cores
  role: "big" | "little";
  /** Read-batch completion flags the I/O worker sets (io-flags.ts): the "back" task waits on them. */
  ioDone: SharedArrayBuffer;
  /** The worker's end of the direct channel every later task of the session comes through (worker-channel.ts). */
  port?: import("node:worker_threads").MessagePort;
}

export interface FrontTask {
  op: "front";
  key: string;
  layer: number;
  pos0: number;
  nTok: number;
  tokens?: number[];
  oracle: boolean;
  /**
   * After answering, compute up+down of the fired neurons resident at gate time, in pack order
   * up to the first one that is not (pack order is hot-first: most of them), while the
   * scheduler plans the reads. Only when no read can be in flight for a resident slot (no
   * prefetch), so "resident" means "landed".
   */
  prefix: boolean;
}

export type ComputeTask =
  | ComputeInit
  /** layer > 0: x += o of layer-1 first; layer 0 with tokens: embed them first. Then attention of `layer` and xb = ffn_norm(x). */
  | { op: "attention"; key: string; layer: number; pos0: number; nTok: number; tokens?: number[] }
  /** o = 0; P = predicted neurons of `layer` (all with the oracle). */
  | { op: "predict"; key: string; layer: number; oracle: boolean }
  /** gate rows of P[start, start+count) from slots[start…]: fired ones compacted to aSlots/aPos/gA[start…], silent positions to slots[start…]. */
  | { op: "gate"; key: string; layer: number; start: number; count: number }
  /** up rows + activation of the nA fired neurons at aSlots[start…] → hA[start…]. */
  | { op: "up"; key: string; layer: number; start: number; nA: number }
  /** o += Σ hA[k] · down(aSlots[k]) for k in [start, start+nA) — issued in cluster order. */
  | { op: "down"; key: string; layer: number; start: number; nA: number }
  /** gate, select, up, act, down of P[start, start+count) from slots[start…] at once (blocking mode; resident clusters). */
  | { op: "ffn"; key: string; layer: number; start: number; count: number }
  /**
   * Pinned gate rows: the front of a layer in one task — attention (as "attention"), predictor
   * (as "predict"), then the gate rows of all of P (row = layer·nFF + p). Answers nP, nA, nSilent
   * and cuts for its three steps.
   */
  | FrontTask
  /**
   * Pinned gate rows: the back of a layer — the fired neurons after the resident prefix the
   * worker computed right after answering the front (see FrontTask.prefix): wait until the read
   * batches have landed (ioDone flags), then up, act and down of the rest, in pack order. With `next`, the next layer's front
   * runs right after, in the same task (its answer in `front`).
   */
  | { op: "back"; key: string; layer: number; nA: number; batches: number[]; next?: FrontTask }
  /** x += o of the last layer; logits of the last token. */
  | { op: "logits"; key: string }
  /** dense batched forward of a prompt batch, FFN streamed from the pack; logits of the last token. */
  | { op: "prefill"; key: string; tokens: number[]; pos0: number };

/** Every task answers with its interval on the process-wide clock (µs) and the worker's thread id. */
export interface ComputeResult {
  t0: number;
  t1: number;
  tid: number;
  nP?: number; // predict
  nA?: number; // gate, ffn: neurons that fired
  nSilent?: number; // gate: predicted neurons that did not fire
  logits?: number; // logits, prefill: offset of the logits in rs
  reads?: number; // prefill: bytes streamed
  cuts?: number[]; // a multi-step task's steps as [start, end] pairs (µs), one per span the scheduler records
  front?: ComputeResult; // back with next: the next layer's front
}

/** One I/O batch for the loader worker: reads into a staging chunk, then copies into the arena. */
export interface IoTask {
  op: "read";
  loader: number;
  reqs: Float64Array; // [fileOffset, length, stagingBuffer, stagingOffset]… (absolute staging offsets)
  arena: number;
  staging: number;
  copies: Float64Array; // [arenaOffset, stagingOffset, length]…
  batch: number; // batch id: its ioDone flag is set when the copies are done (or failed)
}

/** The I/O worker's init: pin to the little cores, then take batches over the direct channel. */
export interface IoInit {
  op: "init";
  cores?: number[];
  ioDone: SharedArrayBuffer; // completion flags (io-flags.ts), set after each batch's copies
  port: import("node:worker_threads").MessagePort;
}

export interface IoResult {
  t0: number;
  t1: number;
  tid: number;
  bytes: number;
}
