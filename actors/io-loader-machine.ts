// The I/O loader of one storage device as an actor: a priority queue of read batches (up+down
// of fired neurons first — a computation is waiting on them — then gates and bundles, then
// prefetch), each placed in a free chunk of the staging buffer and handed to the loader's
// worker thread (the injected `channel`: workers/io-worker.ts) with at most `maxInFlight`
// outstanding, so the worker always has the next batch while the kernel completes the current
// one. A batch's completion is flagged in shared memory by the worker (io-flags.ts): computations
// wait on the flags, not on this actor. A failed read fails every queued batch with the same
// cause until io.recover.
//
//   idle ──io.submit──▶ reading ──nothing queued or in flight──▶ idle
//   reading ──channel.failed──▶ failed ──io.recover──▶ idle
import { assign, enqueueActions, fromCallback, setup, type AnyActorRef } from "xstate";
import type { ReadBatch, ReadPhase } from "../src/sparse/cache/read-batcher.js";

const PRIORITY: Record<ReadPhase, number> = { updown: 0, bundle: 1, gate: 1, prefetch: 2 };

/** What the I/O loader is asked. */
export type IoRequest =
  | { type: "io.submit"; batches: ReadBatch[] }
  /** Answer io.drained to `replyTo` (a system id) once nothing is queued or in flight. */
  | { type: "io.drain"; replyTo: string }
  /** After a failure has been handled (the cache forgot the failed batches): accept work again. */
  | { type: "io.recover" };

export type IoReply = { type: "io.drained"; error?: string; failed: number[] };

/** What the channel (the I/O worker) tells it. */
export type IoChannelEvent =
  | { type: "channel.read"; batch: number; chunk: number; bytes: number }
  | { type: "channel.failed"; batch: number; chunk: number; error: string };

/** What it tells the channel. */
export type IoChannelCommand =
  | { type: "read"; batch: ReadBatch; chunk: number }
  /** Mark these batches failed (their flags), so computations waiting on them stop. */
  | { type: "fail"; batches: number[] }
  | { type: "reopen" };

export interface IoLoaderContext {
  device: string;
  maxInFlight: number;
  /** Batches waiting for a staging chunk, by priority. */
  queues: [ReadBatch[], ReadBatch[], ReadBatch[]];
  /** Batches waiting (all priorities): the queue depth. */
  queued: number;
  inFlight: number;
  freeChunks: number[];
  /** Ids of batches queued or in flight. */
  pending: ReadonlySet<number>;
  /** Ids of batches that did not complete (the cache must forget what they were to bring). */
  failed: ReadonlySet<number>;
  error?: string;
  drainWaiters: string[];
  /** Bytes read since start. */
  bytes: number;
}

const inertChannel = fromCallback<IoChannelCommand, unknown, IoChannelEvent>(() => {});

function without(set: ReadonlySet<number>, id: number): ReadonlySet<number> {
  const s = new Set(set);
  s.delete(id);
  return s;
}

export const ioLoaderMachine = setup({
  types: {
    input: {} as { device: string; chunks: number; maxInFlight: number },
    context: {} as IoLoaderContext,
    events: {} as IoRequest | IoChannelEvent,
  },
  actors: { channel: inertChannel },
  actions: {
    enqueue: assign(({ context, event }) => {
      if (event.type !== "io.submit") return {};
      const queues = context.queues.map((q) => [...q]) as IoLoaderContext["queues"];
      const pending = new Set(context.pending);
      const failed = new Set(context.failed);
      for (const b of event.batches) {
        pending.add(b.id);
        queues[PRIORITY[b.phase]]!.push(b);
      }
      return { queues, pending, failed, queued: context.queued + event.batches.length };
    }),
    /** Start as many queued batches as chunks and the in-flight limit allow. */
    dispatch: enqueueActions(({ enqueue, context }) => {
      const queues = context.queues.map((q) => [...q]) as IoLoaderContext["queues"];
      const free = [...context.freeChunks];
      let { inFlight, queued } = context;
      while (inFlight < context.maxInFlight && free.length > 0) {
        const q = queues.find((x) => x.length > 0);
        if (!q) break;
        const batch = q.shift()!;
        enqueue.sendTo("channel", { type: "read", batch, chunk: free.pop()! } satisfies IoChannelCommand);
        inFlight++;
        queued--;
      }
      enqueue.assign({ queues, freeChunks: free, inFlight, queued });
    }),
    landed: assign(({ context, event }) => {
      if (event.type !== "channel.read") return {};
      return { inFlight: context.inFlight - 1, freeChunks: [...context.freeChunks, event.chunk], pending: without(context.pending, event.batch), bytes: context.bytes + event.bytes };
    }),
    /** A read failed: it and everything queued fail with the same cause. */
    fail: enqueueActions(({ enqueue, context, event }) => {
      if (event.type !== "channel.failed") return;
      const error = context.error ?? (event.error.startsWith(`I/O loader (${context.device})`) ? event.error : `I/O loader (${context.device}): ${event.error}`);
      const queuedIds = context.queues.flat().map((b) => b.id);
      const failed = new Set([...context.failed, event.batch, ...queuedIds]);
      const pending = new Set(context.pending);
      for (const id of [event.batch, ...queuedIds]) pending.delete(id);
      if (queuedIds.length) enqueue.sendTo("channel", { type: "fail", batches: queuedIds } satisfies IoChannelCommand);
      enqueue.assign({ error, failed, pending, queues: [[], [], []], queued: 0, inFlight: context.inFlight - 1, freeChunks: [...context.freeChunks, event.chunk] });
    }),
    /** Batches submitted while failed fail at once. */
    refuse: enqueueActions(({ enqueue, context, event }) => {
      if (event.type !== "io.submit") return;
      const ids = event.batches.map((b) => b.id);
      enqueue.sendTo("channel", { type: "fail", batches: ids } satisfies IoChannelCommand);
      enqueue.assign({ failed: new Set([...context.failed, ...ids]) });
    }),
    addWaiter: assign(({ context, event }) => (event.type === "io.drain" ? { drainWaiters: [...context.drainWaiters, event.replyTo] } : {})),
    /** Answer drain requests once nothing is queued or in flight. */
    answerDrains: enqueueActions(({ enqueue, context, system }) => {
      if (context.inFlight > 0 || context.queued > 0 || context.drainWaiters.length === 0) return;
      for (const w of context.drainWaiters) {
        const target = system.get(w) as AnyActorRef | undefined;
        if (target) enqueue.sendTo(target, { type: "io.drained", error: context.error, failed: [...context.failed] } satisfies IoReply);
      }
      enqueue.assign({ drainWaiters: [] });
    }),
    recover: enqueueActions(({ enqueue }) => {
      enqueue.sendTo("channel", { type: "reopen" } satisfies IoChannelCommand);
      enqueue.assign({ error: undefined, failed: new Set<number>() });
    }),
  },
  guards: {
    idle: ({ context }) => context.inFlight === 0 && context.queued === 0,
  },
}).createMachine({
  id: "io-loader",
  context: ({ input }) => ({
    device: input.device,
    maxInFlight: input.maxInFlight,
    queues: [[], [], []],
    queued: 0,
    inFlight: 0,
    freeChunks: Array.from({ length: input.chunks }, (_, i) => i),
    pending: new Set<number>(),
    failed: new Set<number>(),
    drainWaiters: [],
    bytes: 0,
  }),
  invoke: { id: "channel", src: "channel" },
  initial: "idle",
  on: {
    "io.drain": { actions: ["addWaiter", "answerDrains"] },
  },
  states: {
    idle: {
      on: { "io.submit": { target: "reading", actions: ["enqueue", "dispatch"] } },
    },
    reading: {
      on: {
        "io.submit": { actions: ["enqueue", "dispatch"] },
        "channel.read": { target: "settling", actions: ["landed", "dispatch"] },
        "channel.failed": { target: "failed", actions: ["fail", "answerDrains"] },
      },
    },
    settling: {
      always: [{ guard: "idle", target: "idle", actions: "answerDrains" }, { target: "reading" }],
    },
    failed: {
      on: {
        "io.submit": { actions: "refuse" },
        "channel.read": { actions: ["landed", "answerDrains"] },
        "channel.failed": { actions: ["fail", "answerDrains"] },
        "io.recover": { target: "idle", actions: "recover" },
      },
    },
  },
});

export type IoLoaderMachine = typeof ioLoaderMachine;
