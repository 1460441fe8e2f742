// The I/O worker's thread, behind a direct channel: the actions the I/O loader actor
// (actors/io-loader-machine.ts) is given to reach it. Replay leaves them out.
import type { Piscina } from "piscina";
import { type AnyActorRef } from "xstate";
import type { IoChannelEvent, IoReply } from "../protocol/events.js";
import type { IoInit, IoResult, IoTask } from "../protocol/tasks.js";
import type { ReadBatch } from "../sparse/cache/read-batcher.js";
import { markSlots } from "../sparse/cache/slot-flags.js";
import { type TraceRecorder } from "../trace/recorder.js";
import { openChannel, type WorkerChannel } from "../util/worker-channel.js";


export interface IoWorkerOptions {
  pool: Piscina;
  loader: number; // native loader id
  staging: number; // staging buffer id
  chunkBytes: number; // one batch's staging chunk
  arena: number;
  slotBytes: number;
  device: string;
  /** The slot flags' `ready` (slot-flags.ts): the worker marks a batch's slots when its copies land. */
  ready: SharedArrayBuffer;
  cores?: number[];
  trace: () => TraceRecorder | undefined;
  token: () => number;
}

/**
 * The I/O worker's thread, behind a direct channel: the I/O loader's injected actions. A batch
 * is read into its staging chunk, then copied into the slots; the worker marks the slots ready.
 */
export function ioWorkerActions(o: IoWorkerOptions) {
  const what = `I/O loader (${o.device})`;
  const ready = new Int32Array(o.ready);
  let channel: Promise<WorkerChannel<IoTask, IoResult>>;
  let open_: WorkerChannel<IoTask, IoResult> | undefined; // the channel once open: reads are posted at once, not a microtask later
  const open = () => {
    open_ = undefined;
    channel = openChannel<IoTask, IoResult>(o.pool, what, (port): IoInit => ({ op: "init", cores: o.cores, port, ready: o.ready }));
    channel.then((ch) => (open_ = ch)).catch(() => {}); // a read on it reports the cause
  };
  open();
  type Self = { self: { send(ev: IoChannelEvent): void } };
  const read = (self: Self["self"], batch: ReadBatch, chunk: number) => {
    // the batch is handed out once: its offsets are moved into its staging chunk in place
    const base = chunk * o.chunkBytes;
    const { reqs, copies } = batch;
    for (let i = 0; i < reqs.length; i += 4) {
      reqs[i + 2] = o.staging;
      reqs[i + 3]! += base;
    }
    for (let i = 1; i < copies.length; i += 3) copies[i]! += base;
    const task: IoTask = { op: "read", loader: o.loader, reqs, arena: o.arena, staging: o.staging, copies, batch: batch.id, slotBytes: o.slotBytes };
    const token = o.token();
    (open_ && !open_.closed ? open_.request(task) : channel.then((ch) => ch.request(task))).then(
        (r) => {
          o.trace()?.span({ lane: "io", name: "read", t0: r.t0, t1: r.t1, token, layer: batch.layer, bytes: batch.bytes, reads: batch.reads, phase: batch.phase });
          self.send({ type: "channel.read", batch: batch.id, chunk, bytes: batch.bytes });
        },
        (e: unknown) => {
          markSlots(ready, batch.copies, o.slotBytes, batch.id, false); // the worker may not have: a computation waiting on it stops
          const msg = (e as Error)?.message ?? String(e);
          self.send({ type: "channel.failed", batch: batch.id, chunk, error: msg.startsWith(what) ? msg : `${what}: ${msg}` });
        },
      );
  };
  return {
    readBatches({ self }: Self, { starting }: { starting: { batch: ReadBatch; chunk: number }[] }): void {
      for (const { batch, chunk } of starting) read(self, batch, chunk);
    },
    failBatches(_: unknown, { batches }: { batches: ReadBatch[] }): void {
      for (const b of batches) markSlots(ready, b.copies, o.slotBytes, b.id, false);
    },
    answerDrained({ system }: { system: { get(id: string): unknown } }, { waiters, reply }: { waiters: string[]; reply: IoReply }): void {
      for (const w of waiters) (system.get(w) as AnyActorRef | undefined)?.send(reply);
    },
    reopen(): void {
      void channel.then(
        (ch) => ch.closed && open(),
        () => open(),
      );
    },
    close(): void {
      void channel.then((ch) => ch.close("I/O loader closed")).catch(() => {});
    },
  };
}

