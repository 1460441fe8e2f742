// A compute worker as an actor: the protocol between the machines that need compute (the token
// machine, the prefill role) and one worker thread (workers/compute-worker.ts). Requests are
// queued on the worker in arrival order. The thread is reached through two injected actions,
// postToWorker and initWorker (a direct MessagePort channel in the pipeline decoder, nothing in
// replay): each answer goes straight back to whoever asked (compute.done / compute.failed, by
// system id), and this actor hears when the worker has drained its queue — one message per
// busy period instead of one per task, since every message costs the scheduler's thread.
//
//   idle ──compute.run──▶ busy ──channel.drained──▶ idle
//   any ──compute.init──▶ initialising ──channel.ready──▶ idle | ──channel.initFailed──▶ failed
//   any ──channel.exited──▶ failed: every waiting request has failed with the cause, and so
//   does every later one until compute.init brings a new thread
import { assign, enqueueActions, setup, type AnyActorRef } from "xstate";
import type { ChannelEvent, ComputeReply, ComputeRequest, PostParams } from "../src/protocol/events.js";
import type { ComputeInit, ComputeOp } from "../src/protocol/tasks.js";

export interface ComputeContext {
  role: "big" | "little";
  /** Tasks posted in this busy period (the worker's queue depth when it began to drain). */
  queued: number;
  /** The task last posted. */
  last?: ComputeOp;
  /** Tasks answered since start. */
  done: number;
  /** The session the worker holds descriptors for. */
  key?: string;
  initReplyTo?: string;
  error?: string;
}

const POST = ["track", { type: "postToWorker", params: ({ event }: { event: ComputeRequest | ChannelEvent }) => event as Extract<ComputeRequest, { type: "compute.run" }> }] as const;

export const computeMachine = setup({
  types: {
    input: {} as { role: "big" | "little" },
    context: {} as ComputeContext,
    events: {} as ComputeRequest | ChannelEvent,
  },
  actions: {
    // Implementations injected by the decoder (default: nothing happens, as in replay).
    postToWorker: (_, _p: PostParams) => {},
    initWorker: (_, _p: { init: Omit<ComputeInit, "port"> }) => {},
    track: assign(({ context, event }) => (event.type === "compute.run" ? { queued: context.queued + 1, last: event.task.op } : {})),
    drained: assign(({ context, event }) => (event.type === "channel.drained" ? { queued: 0, done: context.done + event.answered } : {})),
    exited: assign(({ event }) => (event.type === "channel.exited" ? { error: event.error, queued: 0, key: undefined } : {})),
    init: assign(({ event }) => (event.type === "compute.init" ? { initReplyTo: event.replyTo, key: undefined, error: undefined } : {})),
    ready: enqueueActions(({ enqueue, context, event, system }) => {
      if (event.type !== "channel.ready" && event.type !== "channel.initFailed") return;
      const target = context.initReplyTo ? (system.get(context.initReplyTo) as AnyActorRef | undefined) : undefined;
      if (event.type === "channel.ready") {
        if (target) enqueue.sendTo(target, { type: "compute.ready", key: event.key } satisfies ComputeReply);
        enqueue.assign({ key: event.key, initReplyTo: undefined });
      } else {
        if (target) enqueue.sendTo(target, { type: "compute.initFailed", error: event.error } satisfies ComputeReply);
        enqueue.assign({ error: event.error, initReplyTo: undefined });
      }
    }),
  },
}).createMachine({
  id: "compute",
  context: ({ input }) => ({ role: input.role, queued: 0, done: 0 }),
  initial: "idle",
  on: {
    "compute.init": {
      target: ".initialising",
      actions: ["init", { type: "initWorker", params: ({ event }) => ({ init: event.init }) }],
    },
    "channel.exited": { target: ".failed", actions: "exited" },
  },
  states: {
    idle: {
      on: { "compute.run": { target: "busy", actions: POST } },
    },
    busy: {
      on: {
        "compute.run": { actions: POST },
        "channel.drained": { target: "idle", actions: "drained" },
      },
    },
    initialising: {
      on: {
        "channel.ready": { target: "idle", actions: "ready" },
        "channel.initFailed": { target: "failed", actions: "ready" },
      },
    },
    failed: {
      on: {
        "compute.run": { actions: POST }, // answered at once with the cause
        "channel.drained": { actions: "drained" },
      },
    },
  },
});

export type ComputeMachine = typeof computeMachine;
