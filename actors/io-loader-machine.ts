// The I/O loader of one storage device as an actor: a priority queue of read batches (up+down
// of fired neurons first — a computation is waiting on them — then gates and bundles, then
// prefetch), each placed in a free chunk of the staging buffer and handed to the loader's
// worker thread with at most `maxInFlight` outstanding, so the worker always has the next batch
// while the kernel completes the current one. The worker is reached through injected actions
// (readBatch, failBatches, reopen: a direct channel to workers/io-worker.ts in the pipeline
// decoder, nothing in replay) that answer with channel.* events. When a batch lands the worker
// marks its slots ready in shared memory (src/sparse/cache/slot-flags.ts): computations wait on
// those flags, not on this actor. A failed read fails every queued batch with the same cause
// until io.recover.
//
//   idle ──io.submit──▶ reading ──the last batch lands──▶ idle
//   reading ──channel.failed──▶ failed ──io.recover──▶ idle
import { assign, setup } from "xstate";
import type { IoChannelEvent, IoReply, IoRequest } from "../src/protocol/events.js";
import type { ReadBatch, ReadPhase } from "../src/sparse/cache/read-batcher.js";

const PRIORITY: Record<ReadPhase, number> = { updown: 0, bundle: 1, gate: 1, prefetch: 2 };

export interface IoLoaderContext {
  device: string;
  maxInFlight: number;
  /** Batches waiting for a staging chunk, by priority. */
  queues: [ReadBatch[], ReadBatch[], ReadBatch[]];
  /** Batches waiting (all priorities): the queue depth. */
  queued: number;
  inFlight: number;
  freeChunks: number[];
  /** Batches that did not complete since the last recovery (the cache must forget what they were to bring). */
  failed: number[];
  error?: string;
  drainWaiters: string[];
  /** Bytes and batches read since start. */
  bytes: number;
  batches: number;
  /** Waiters the last transition answers (answerDrained). */
  draining: string[];
  /** Batches the last transition handed to the worker (with their staging chunk), or failed: what the injected actions act on. */
  starting: { batch: ReadBatch; chunk: number }[];
  failing: ReadBatch[];
}

// The injected actions, with what the transition hands them (from the context it just assigned).
type C = { context: IoLoaderContext };
const READ = { type: "readBatches" as const, params: ({ context }: C) => ({ starting: context.starting }) };
const FAIL = { type: "failBatches" as const, params: ({ context }: C) => ({ batches: context.failing }) };
const DRAINED = { type: "answerDrained" as const, params: ({ context }: C) => ({ waiters: context.draining, reply: { type: "io.drained" as const, error: context.error, failed: context.failed } }) };

export const ioLoaderMachine = setup({
  types: {
    input: {} as { device: string; chunks: number; maxInFlight: number },
    context: {} as IoLoaderContext,
    events: {} as IoRequest | IoChannelEvent,
  },
  actions: {
    // Implementations injected by the decoder (default: nothing happens, as in replay).
    /** Hand these batches, each with its staging chunk, to the worker. */
    readBatches: (_, _p: { starting: { batch: ReadBatch; chunk: number }[] }) => {},
    /** Mark these batches' slots failed, so computations waiting on them stop. */
    failBatches: (_, _p: { batches: ReadBatch[] }) => {},
    reopen: () => {},
    /** Send io.drained to these waiters (system ids). */
    answerDrained: (_, _p: { waiters: string[]; reply: IoReply }) => {},
    /** Queue the submitted batches and start as many as chunks and the in-flight limit allow. */
    dispatch: assign(({ context, event }) => {
      const queues = context.queues.map((q) => [...q]) as IoLoaderContext["queues"];
      let { inFlight, queued } = context;
      if (event.type === "io.submit") {
        for (const b of event.batches) queues[PRIORITY[b.phase]]!.push(b);
        queued += event.batches.length;
      }
      const free = [...context.freeChunks];
      if (event.type === "channel.read") {
        free.push(event.chunk);
        inFlight--;
      }
      const starting: IoLoaderContext["starting"] = [];
      while (inFlight < context.maxInFlight && free.length > 0) {
        const q = queues.find((x) => x.length > 0);
        if (!q) break;
        starting.push({ batch: q.shift()!, chunk: free.pop()! });
        inFlight++;
        queued--;
      }
      const landed = event.type === "channel.read" ? { bytes: context.bytes + event.bytes, batches: context.batches + 1 } : {};
      return { queues, freeChunks: free, inFlight, queued, starting, ...landed };
    }),
    /** A read failed: it and everything queued fail with the same cause. */
    fail: assign(({ context, event }) => {
      if (event.type !== "channel.failed") return {};
      const error = context.error ?? (event.error.startsWith(`I/O loader (${context.device})`) ? event.error : `I/O loader (${context.device}): ${event.error}`);
      const queued = context.queues.flat();
      return { error, failing: queued, failed: [...context.failed, event.batch, ...queued.map((b) => b.id)], queues: [[], [], []] as IoLoaderContext["queues"], queued: 0, inFlight: context.inFlight - 1, freeChunks: [...context.freeChunks, event.chunk] };
    }),
    /** Batches submitted while failed fail at once. */
    refuse: assign(({ context, event }) => (event.type === "io.submit" ? { failing: event.batches, failed: [...context.failed, ...event.batches.map((b) => b.id)] } : {})),
    landedWhileFailed: assign(({ context, event }) => (event.type === "channel.read" ? { inFlight: context.inFlight - 1, freeChunks: [...context.freeChunks, event.chunk] } : {})),
    addWaiter: assign(({ context, event }) => (event.type === "io.drain" ? { drainWaiters: [...context.drainWaiters, event.replyTo] } : {})),
    /** Answer drain requests once nothing is queued or in flight: the waiters to answer go to `draining`, for answerDrained. */
    answerDrains: assign(({ context }) => (context.inFlight > 0 || context.queued > 0 || context.drainWaiters.length === 0 ? { draining: [] } : { draining: context.drainWaiters, drainWaiters: [] })),
    recovered: assign({ error: undefined, failed: [] }),
  },
  guards: {
    /** This landing leaves nothing queued or in flight. */
    lastLanding: ({ context }) => context.inFlight === 1 && context.queued === 0,
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
    failed: [],
    drainWaiters: [],
    bytes: 0,
    batches: 0,
    starting: [],
    failing: [],
    draining: [],
  }),
  initial: "idle",
  on: {
    "io.drain": { actions: ["addWaiter", "answerDrains", DRAINED] },
  },
  states: {
    idle: {
      on: { "io.submit": { target: "reading", actions: ["dispatch", READ] } },
    },
    reading: {
      on: {
        "io.submit": { actions: ["dispatch", READ] },
        "channel.read": [{ guard: "lastLanding", target: "idle", actions: ["dispatch", "answerDrains", DRAINED] }, { actions: ["dispatch", READ] }],
        "channel.failed": { target: "failed", actions: ["fail", FAIL, "answerDrains", DRAINED] },
      },
    },
    failed: {
      on: {
        "io.submit": { actions: ["refuse", FAIL] },
        "channel.read": { actions: ["landedWhileFailed", "answerDrains", DRAINED] },
        "channel.failed": { actions: ["fail", FAIL, "answerDrains", DRAINED] },
        "io.recover": { target: "idle", actions: ["recovered", "reopen"] },
      },
    },
  },
});

export type IoLoaderMachine = typeof ioLoaderMachine;
