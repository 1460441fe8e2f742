// Messages between the pipeline's scheduler (main thread) and its worker-thread actors. They
// carry descriptors only — buffer ids, offsets, layer/cluster ranges, counts — never tensors:
// weights, cache slots, activations and partial sums live in native memory every thread
// addresses by buffer id (native/src/registry.h).
import type { ModelConfig } from "../model/config.js";
import type { KVCache, RunState } from "../model/forward.js";
import type { Weights } from "../model/weights.js";
import type { BundleLayout } from "./dense-bundles.js";

/** Where the sparse FFN's data is: the engine scratch (P, slots, gate values …) and the cache arena. */
export interface FfnLayout extends BundleLayout {
  arena: number; // cache arena buffer: slot s = [gate | up | down] at s·slotBytes
  slotBytes: number;
  slots: number; // slots in the arena
  gateBytes: number; // up row starts here within a slot; down column after it
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
  /** blocking mode: gate, select, up, act, down of P[start, start+count) from slots[start…] at once. */
  | { op: "ffn"; key: string; layer: number; start: number; count: number }
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
}

/** One I/O batch for the loader worker: reads into a staging chunk, then copies into the arena. */
export interface IoTask {
  op: "read";
  loader: number;
  reqs: Float64Array; // [fileOffset, length, stagingBuffer, stagingOffset]… (absolute staging offsets)
  arena: number;
  staging: number;
  copies: Float64Array; // [arenaOffset, stagingOffset, length]…
  cores?: number[];
}

export interface IoResult {
  t0: number;
  t1: number;
  tid: number;
  bytes: number;
}
