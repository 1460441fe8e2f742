// A compute worker as an actor: the protocol between the machines that need compute (the token
// machine, the prefill role) and one worker thread (workers/compute-worker.ts). Requests are
// queued on the worker in arrival order; answers go back to whoever asked (by system id), in
// the same order. The thread itself is behind the `channel` actor (injected: a direct
// MessagePort channel in the pipeline decoder, a stub in replay).
//
//   idle ──compute.run──▶ busy ──last answer──▶ idle
//   any ──compute.init──▶ initialising ──channel.ready──▶ idle | ──channel.error──▶ failed
//   any ──channel.error (thread exited)──▶ failed: every waiting request fails with the cause,
//   and so does every later one until compute.init brings a new thread
import { enqueueActions, fromCallback, setup, type AnyActorRef } from "xstate";
import type { ComputeInit, ComputeOp, ComputeResult, ComputeTask } from "./protocol.js";

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

/** What it answers. */
export type ComputeReply =
  | { type: "compute.done"; id: number; op: ComputeOp; result: ComputeResult }
  | { type: "compute.failed"; id: number; op: ComputeOp; error: string }
  | { type: "compute.ready"; key: string }
  | { type: "compute.initFailed"; error: string };

/** What the channel (the worker thread) tells it. */
export type ChannelEvent =
  | { type: "channel.answer"; id: number; result: ComputeResult }
  | { type: "channel.error"; id: number; error: string; exited?: boolean }
  | { type: "channel.ready"; key: string }
  | { type: "channel.initFailed"; error: string };

/** What it tells the channel. */
export type ChannelCommand =
  | { type: "post"; id: number; task: Exclude<ComputeTask, ComputeInit>; hint: SpanHint }
  | { type: "init"; init: Omit<ComputeInit, "port"> };

interface Waiting {
  id: number;
  op: ComputeOp;
  replyTo: string;
}

export interface ComputeContext {
  role: "big" | "little";
  /** Tasks posted and not answered yet (the worker's queue depth). */
  queued: number;
  /** The task the worker is on (the oldest unanswered). */
  current?: ComputeOp;
  /** Tasks answered since start. */
  done: number;
  /** The session the worker holds descriptors for. */
  key?: string;
  initReplyTo?: string;
  error?: string;
  waiting: Waiting[];
}

const inertChannel = fromCallback<ChannelCommand, unknown, ChannelEvent>(() => {});

export const computeMachine = setup({
  types: {
    input: {} as { role: "big" | "little" },
    context: {} as ComputeContext,
    events: {} as ComputeRequest | ChannelEvent,
  },
  actors: { channel: inertChannel },
  actions: {
    post: enqueueActions(({ enqueue, context, event }) => {
      if (event.type !== "compute.run") return;
      enqueue.sendTo("channel", { type: "post", id: event.id, task: event.task, hint: event.hint } satisfies ChannelCommand);
      enqueue.assign({
        queued: context.queued + 1,
        current: context.waiting.length === 0 ? event.task.op : context.current,
        waiting: [...context.waiting, { id: event.id, op: event.task.op, replyTo: event.replyTo }],
      });
    }),
    answer: enqueueActions(({ enqueue, context, event, system }) => {
      if (event.type !== "channel.answer" && event.type !== "channel.error") return;
      const [w, ...rest] = context.waiting;
      if (!w || w.id !== event.id) return; // answers come in request order
      const target = system.get(w.replyTo) as AnyActorRef | undefined;
      if (target) {
        enqueue.sendTo(target, event.type === "channel.answer" ? { type: "compute.done", id: w.id, op: w.op, result: event.result } : { type: "compute.failed", id: w.id, op: w.op, error: event.error });
      }
      enqueue.assign({ queued: context.queued - 1, done: context.done + 1, waiting: rest, current: rest[0]?.op, error: event.type === "channel.error" ? event.error : context.error });
    }),
    init: enqueueActions(({ enqueue, event }) => {
      if (event.type !== "compute.init") return;
      enqueue.sendTo("channel", { type: "init", init: event.init } satisfies ChannelCommand);
      enqueue.assign({ initReplyTo: event.replyTo, key: undefined, error: undefined });
    }),
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
  guards: {
    drained: ({ context }) => context.queued === 0,
  },
}).createMachine({
  id: "compute",
  context: ({ input }) => ({ role: input.role, queued: 0, done: 0, waiting: [] }),
  invoke: { id: "channel", src: "channel" },
  initial: "idle",
  on: {
    "compute.init": { target: ".initialising", actions: "init" },
    "channel.answer": { actions: "answer", target: ".checking" },
    "channel.error": [
      { guard: ({ event }) => event.exited === true, actions: "answer", target: ".failed" },
      { actions: "answer", target: ".checking" },
    ],
  },
  states: {
    idle: {
      on: { "compute.run": { target: "busy", actions: "post" } },
    },
    busy: {
      on: { "compute.run": { actions: "post" } },
    },
    // after an answer: busy while anything is queued
    checking: {
      always: [{ guard: "drained", target: "idle" }, { target: "busy" }],
    },
    initialising: {
      on: {
        "channel.ready": { target: "idle", actions: "ready" },
        "channel.initFailed": { target: "failed", actions: "ready" },
      },
    },
    failed: {
      on: {
        "compute.run": { actions: "post" }, // answered at once with the cause
        "channel.answer": { actions: "answer" },
        "channel.error": { actions: "answer" },
      },
    },
  },
});

export type ComputeMachine = typeof computeMachine;
