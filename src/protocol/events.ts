// The events that cross between the pipeline's actors (actors/) and the actors and actions at
// its edge (src/links/): requests and answers of the compute worker, the I/O loader, the neuron
// cache and the prefill role, and the system ids everything is addressed by. Types only (and
// the ids): the machines and the links both import them, neither imports the other.
import type { ReadBatch } from "../sparse/cache/read-batcher.js";
import type { ComputeInit, ComputeOp, ComputeResult, ComputeTask } from "./tasks.js";

/** System ids of the pipeline decoder's actors (what an inspector shows, what replay addresses). */
export const PIPELINE_IDS = { self: "pipeline", compute: "compute:big", io: "io-loader", prefill: "prefill", cache: "neuron-cache", token: "token" } as const;

// ---- the compute worker (actors/compute-machine.ts) ------------------------------------

/** Where a span of a task's answer goes in the trace (the channel records them). */
export interface SpanHint {
  lane: "compute" | "predictor" | "prefill";
  token: number;
  layer?: number;
  cluster?: number;
}

/** What the compute actor is asked. `replyTo` is the asker's system id. */
export type ComputeRequest =
  | { type: "compute.run"; id: number; task: Exclude<ComputeTask, ComputeInit>; hint: SpanHint; replyTo: string }
  | { type: "compute.init"; init: Omit<ComputeInit, "port">; replyTo: string };

/** What the asker hears (compute.done/failed come from the channel, the rest from this actor). */
export type ComputeReply =
  | { type: "compute.done"; id: number; op: ComputeOp; result: ComputeResult }
  | { type: "compute.failed"; id: number; op: ComputeOp; error: string }
  | { type: "compute.ready"; key: string }
  | { type: "compute.initFailed"; error: string };

/** What the worker's channel tells this actor (sent by the injected actions). */
export type ChannelEvent =
  | { type: "channel.drained"; answered: number }
  | { type: "channel.exited"; error: string }
  | { type: "channel.ready"; key: string }
  | { type: "channel.initFailed"; error: string };

/** What the injected postToWorker is given; it answers compute.done / compute.failed to `replyTo`. */
export interface PostParams {
  id: number;
  task: Exclude<ComputeTask, ComputeInit>;
  hint: SpanHint;
  replyTo: string;
}

// ---- the I/O loader (actors/io-loader-machine.ts) -------------------------------------

/** What the I/O loader is asked. */
export type IoRequest =
  | { type: "io.submit"; batches: ReadBatch[] }
  /** Answer io.drained to `replyTo` (a system id) once nothing is queued or in flight. */
  | { type: "io.drain"; replyTo: string }
  /** After a failure has been handled (the cache forgot the failed batches): accept work again. */
  | { type: "io.recover" };

export type IoReply = { type: "io.drained"; error?: string; failed: number[] };

/** What the worker's channel tells it (sent to this actor by the injected actions). */
export type IoChannelEvent =
  | { type: "channel.read"; batch: number; chunk: number; bytes: number }
  | { type: "channel.failed"; batch: number; chunk: number; error: string };

// ---- the neuron cache (src/links/cache-actor.ts), asked by the token machine ------------

/** How a layer's FFN is scheduled (actors/token-machine.ts). */
export type TokenPath = "fused" | "clusters" | "blocking" | "resident";

/** A cluster of P the cache planned: its range, and whether every neuron of it is resident and landed. */
export interface PlannedCluster {
  start: number;
  count: number;
  resident: boolean;
}

/** What the token machine asks the cache actor. */
export type CacheRequest =
  | { type: "cache.plan"; layer: number; nP: number; nA: number; from: number; path: TokenPath; replyTo: string }
  | { type: "cache.updown"; layer: number; cluster: number; start: number; nA: number; nSilent: number }
  /** A whole-cluster ffn answered: what fired (with nP: the resident path, which planned nothing, counts the layer too). */
  | { type: "cache.fired"; layer: number; start: number; nA: number; nSilent: number; nP?: number }
  | { type: "cache.lease" }
  | { type: "cache.prefetch"; layer: number }
  | { type: "cache.forget"; failed: number[] };

/** What the cache actor answers. */
export type CacheReply =
  | { type: "cache.planned"; layer: number; clusters: PlannedCluster[]; next: number }
  | { type: "cache.error"; error: string };

// ---- the prefill role (actors/prefill-machine.ts) --------------------------------------

export type PrefillRequest = { type: "prefill.run"; tokens: number[]; pos0: number; step: number; replyTo: string };
export type PrefillReply = { type: "prefill.done"; logits: number } | { type: "prefill.failed"; error: string };

