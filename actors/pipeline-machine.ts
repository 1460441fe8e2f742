// The root of a pipeline (or blocking) decoder's actor system, alive as long as the model: it
// owns the actors every token uses and runs one request at a time.
//
//   pipeline
//   ├── compute:big    the compute worker (compute-machine.ts)          idle | busy | initialising | failed
//   ├── io-loader      the pack's reader (io-loader-machine.ts)          idle | reading | failed
//   ├── prefill        the prefill role (prefill-machine.ts)             idle | busy
//   ├── neuron-cache   plans reads (an injected actor over the cache's tables)
//   └── token          one token through the layers (token-machine.ts), while decoding
//
//   idle ──attach──▶ attaching ──compute.ready──▶ idle         (a session's descriptors to the worker)
//   idle ──decode──▶ decoding ──token done──▶ idle | recovering (failed or cancelled)
//   idle ──prefill─▶ prefilling ──prefill.done──▶ idle | recovering
//   recovering: wait for the reads in flight; the cache forgets what failed reads were to
//   bring; the loader accepts work again; after a failure the worker is attached again
//
// Every request carries a number; its outcome is `result` in the context (the decoder waits for it).
import { assign, enqueueActions, fromCallback, setup, type AnyActorRef } from "xstate";
import { PIPELINE_IDS, type CacheRequest, type ComputeReply, type ComputeRequest, type IoReply, type IoRequest, type PrefillReply, type PrefillRequest, type TokenPath } from "../src/protocol/events.js";
import type { ComputeInit } from "../src/protocol/tasks.js";
import { computeMachine } from "./compute-machine.js";
import { ioLoaderMachine } from "./io-loader-machine.js";
import { prefillMachine } from "./prefill-machine.js";
import { tokenMachine, type TokenInput, type TokenOutput } from "./token-machine.js";

export interface PipelineInput {
  mode: "pipeline" | "blocking";
  nLayer: number;
  path: TokenPath;
  oracle: boolean;
  prefix: boolean;
  prefetch: boolean;
  device: string;
  stagingChunks: number;
  ioInFlight: number;
}

/** The outcome of request `req`. */
export interface PipelineResult {
  req: number;
  logits?: number;
  error?: string;
  cancelled?: boolean;
  reason?: string;
}

export type PipelineRequest =
  | { type: "attach"; req: number; init: Omit<ComputeInit, "port"> }
  | { type: "decode"; req: number; step: number; token: number; pos: number }
  | { type: "prefill"; req: number; tokens: number[]; pos0: number }
  | { type: "abort"; reason?: string };

export interface PipelineContext extends PipelineInput {
  /** The session whose descriptors the compute worker holds. */
  attached?: string;
  req: number;
  result?: PipelineResult;
  /** The token being decoded (decode step), for a reader of the snapshot. */
  token: number;
  aborted: boolean;
}

const inertCache = fromCallback<CacheRequest>(() => {});

export const pipelineMachine = setup({
  types: {
    input: {} as PipelineInput,
    context: {} as PipelineContext,
    events: {} as PipelineRequest | ComputeReply | PrefillReply | IoReply,
  },
  actors: { compute: computeMachine, io: ioLoaderMachine, prefill: prefillMachine, cache: inertCache, token: tokenMachine },
  actions: {
    request: assign(({ event }) => ("req" in event ? { req: event.req, result: undefined, aborted: false } : {})),
    attach: enqueueActions(({ enqueue, event, system }) => {
      if (event.type !== "attach") return;
      enqueue.sendTo(system.get(PIPELINE_IDS.compute) as AnyActorRef, { type: "compute.init", init: event.init, replyTo: PIPELINE_IDS.self } satisfies ComputeRequest);
    }),
    attached: assign(({ context, event }) => {
      if (event.type === "compute.ready") return { attached: event.key, result: { req: context.req } };
      if (event.type === "compute.initFailed") return { attached: undefined, result: { req: context.req, error: event.error } };
      return {};
    }),
    prefill: enqueueActions(({ enqueue, context, event, system }) => {
      if (event.type !== "prefill") return;
      enqueue.sendTo(system.get(PIPELINE_IDS.prefill) as AnyActorRef, { type: "prefill.run", tokens: event.tokens, pos0: event.pos0, step: context.token, replyTo: PIPELINE_IDS.self } satisfies PrefillRequest);
    }),
    prefilled: assign(({ context, event }) => {
      if (event.type === "prefill.done") return { result: { req: context.req, logits: event.logits } };
      if (event.type === "prefill.failed") return { result: { req: context.req, error: event.error } };
      return {};
    }),
    decoded: assign(({ context, event }) => {
      const out = (event as { output?: TokenOutput }).output;
      if (!out) return { result: { req: context.req, error: String((event as { error?: unknown }).error ?? "token machine stopped") } };
      return { result: { req: context.req, logits: out.logits, error: out.error, cancelled: out.cancelled, reason: out.reason } };
    }),
    forwardAbort: enqueueActions(({ enqueue, event, system }) => {
      if (event.type !== "abort") return;
      const token = system.get(PIPELINE_IDS.token) as AnyActorRef | undefined;
      if (token) enqueue.sendTo(token, { type: "abort", reason: event.reason });
      enqueue.assign({ aborted: true });
    }),
    drain: enqueueActions(({ enqueue, system }) => {
      enqueue.sendTo(system.get(PIPELINE_IDS.io) as AnyActorRef, { type: "io.drain", replyTo: PIPELINE_IDS.self } satisfies IoRequest);
    }),
    /** Forget what failed reads were to bring, let the loader work again; after a failure (not a cancel) attach again. */
    recover: enqueueActions(({ enqueue, context, event, system }) => {
      if (event.type !== "io.drained") return;
      if (event.failed.length > 0) enqueue.sendTo(system.get(PIPELINE_IDS.cache) as AnyActorRef, { type: "cache.forget", failed: event.failed } satisfies CacheRequest);
      enqueue.sendTo(system.get(PIPELINE_IDS.io) as AnyActorRef, { type: "io.recover" } satisfies IoRequest);
      if (!context.result?.cancelled) enqueue.assign({ attached: undefined });
    }),
  },
  guards: {
    troubled: ({ context }) => context.result?.error !== undefined || context.result?.cancelled === true,
  },
}).createMachine({
  id: "pipeline",
  context: ({ input }) => ({ ...input, req: 0, token: -1, aborted: false }),
  invoke: [
    { id: PIPELINE_IDS.compute, systemId: PIPELINE_IDS.compute, src: "compute", input: { role: "big" as const } },
    { id: PIPELINE_IDS.io, systemId: PIPELINE_IDS.io, src: "io", input: ({ context }) => ({ device: context.device, chunks: context.stagingChunks, maxInFlight: context.ioInFlight }) },
    { id: PIPELINE_IDS.prefill, systemId: PIPELINE_IDS.prefill, src: "prefill", input: { compute: PIPELINE_IDS.compute, self: PIPELINE_IDS.prefill } },
    { id: PIPELINE_IDS.cache, systemId: PIPELINE_IDS.cache, src: "cache" },
  ],
  initial: "idle",
  states: {
    idle: {
      on: {
        attach: { target: "attaching", actions: ["request", "attach"] },
        decode: { target: "decoding", actions: ["request", assign({ token: ({ event }) => event.step })] },
        prefill: { target: "prefilling", actions: ["request", "prefill"] },
      },
    },
    attaching: {
      on: {
        "compute.ready": { target: "idle", actions: "attached" },
        "compute.initFailed": { target: "idle", actions: "attached" },
      },
    },
    decoding: {
      invoke: {
        id: PIPELINE_IDS.token,
        systemId: PIPELINE_IDS.token,
        src: "token",
        input: ({ context, event }): TokenInput => {
          const e = event as Extract<PipelineRequest, { type: "decode" }>;
          return {
            step: e.step,
            token: e.token,
            pos: e.pos,
            nLayer: context.nLayer,
            path: context.path,
            oracle: context.oracle,
            prefix: context.prefix,
            prefetch: context.prefetch,
            compute: PIPELINE_IDS.compute,
            cache: PIPELINE_IDS.cache,
            io: PIPELINE_IDS.io,
            self: PIPELINE_IDS.token,
          };
        },
        onDone: [
          { guard: ({ event }) => event.output.error !== undefined || event.output.cancelled, target: "recovering", actions: "decoded" },
          { target: "idle", actions: "decoded" },
        ],
        onError: { target: "recovering", actions: "decoded" },
      },
      on: { abort: { actions: "forwardAbort" } },
    },
    prefilling: {
      on: {
        "prefill.done": { target: "idle", actions: "prefilled" },
        "prefill.failed": { target: "recovering", actions: "prefilled" },
      },
    },
    recovering: {
      entry: "drain",
      on: { "io.drained": { target: "idle", actions: "recover" } },
    },
  },
});

export type PipelineMachine = typeof pipelineMachine;
