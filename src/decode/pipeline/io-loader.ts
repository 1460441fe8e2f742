// The I/O loader actor of one storage device, scheduler side: a priority queue of read batches
// (up+down of fired neurons first — a cluster is waiting on them — then gates, then prefetch),
// each placed in a free chunk of the staging buffer and handed to the loader's worker thread
// (workers/io-worker.ts) with at most `inFlight` batches outstanding, so the worker always has
// the next batch while the kernel completes the current one.
import type { Piscina } from "piscina";
import type { CacheBatch } from "../../sparse/cache/neuron-cache.js";
import type { IoInit, IoResult, IoTask } from "../../../actors/protocol.js";
import type { TraceRecorder } from "../../trace/recorder.js";
import { openChannel, type WorkerChannel } from "./worker-channel.js";
import { createIoFlags, markBatch } from "../../../actors/io-flags.js";

const PRIORITY: Record<CacheBatch["phase"], number> = { updown: 0, bundle: 1, gate: 1, prefetch: 2 };

interface Queued {
  batch: CacheBatch;
  arena: number;
  resolve: () => void;
  reject: (e: Error) => void;
}

export interface IoLoaderOptions {
  pool: Piscina;
  loader: number; // native loader id
  staging: number; // staging buffer id
  chunkBytes: number; // one batch's staging chunk
  chunks: number; // chunks in the staging buffer
  inFlight?: number; // batches handed to the worker at once (default 2)
  cores?: number[]; // the little core(s) the worker is pinned to
  device: string; // for messages and traces
}

export class IoLoader {
  private readonly queues: Queued[][] = [[], [], []];
  private readonly freeChunks: number[];
  private readonly pending = new Map<number, Promise<void>>(); // batch id → completion
  private running = 0;
  private failure?: Error;
  /** Batches that did not complete (the cache must forget what they were to bring). */
  readonly failed = new Set<number>();
  token = -1; // decode step, for trace records
  trace?: TraceRecorder;

  private channel?: WorkerChannel<IoTask, IoResult>;
  private ready!: Promise<WorkerChannel<IoTask, IoResult>>;
  /** Completion flags of read batches, shared with the compute worker (io-flags.ts). */
  readonly ioDone = createIoFlags();
  private readonly flags = new Int32Array(this.ioDone);

  constructor(private readonly o: IoLoaderOptions) {
    this.freeChunks = Array.from({ length: o.chunks }, (_, i) => i);
    this.open();
  }

  /** A channel to the worker (again, after its thread was replaced), delivered by piscina. */
  private open(): void {
    this.channel = undefined;
    this.ready = openChannel<IoTask, IoResult>(this.o.pool, `I/O loader (${this.o.device})`, (port): IoInit => ({ op: "init", cores: this.o.cores, port, ioDone: this.ioDone }));
    this.ready.then((ch) => (this.channel = ch)).catch(() => {});
  }

  /** Close the channel (the pool is destroyed by its owner). */
  close(): void {
    this.channel?.close("I/O loader closed");
    void this.ready.then((ch) => ch.close("I/O loader closed")).catch(() => {});
  }

  /** Queue a batch whose copies land in `arena`; resolves when its bytes are in the slots. */
  submit(batch: CacheBatch, arena: number): Promise<void> {
    if (this.failure) {
      this.failed.add(batch.id);
      markBatch(this.flags, batch.id, false);
      return Promise.reject(this.failure);
    }
    const p = new Promise<void>((resolve, reject) => this.queues[PRIORITY[batch.phase]]!.push({ batch, arena, resolve, reject }));
    p.catch(() => {}); // observed through wait(); unobserved rejections are not errors here
    this.pending.set(batch.id, p);
    void p.finally(() => this.pending.delete(batch.id)).catch(() => {});
    this.dispatch();
    return p;
  }

  /** Is batch `id` queued or in flight? */
  isPending(id: number): boolean {
    return this.pending.has(id);
  }

  /** Resolves when every listed batch still pending has completed. */
  async wait(ids: Iterable<number>): Promise<void> {
    const ps: Promise<void>[] = [];
    for (const id of ids) {
      const p = this.pending.get(id);
      if (p) ps.push(p);
      else if (this.failed.has(id)) throw this.failure ?? new Error(`read batch ${id} failed`);
    }
    if (ps.length) await Promise.all(ps);
  }

  /** Resolves (or rejects) when nothing is queued or in flight. */
  async drain(): Promise<void> {
    while (this.pending.size) await Promise.allSettled([...this.pending.values()]);
  }

  /** After a failure has been handled (the cache forgot the failed batches): accept work again. */
  recover(): void {
    this.failure = undefined;
    this.failed.clear();
    if (!this.channel || this.channel.closed) this.open();
  }

  private dispatch(): void {
    const max = this.o.inFlight ?? 2;
    while (this.running < max && this.freeChunks.length > 0) {
      const q = this.queues.find((x) => x.length > 0)?.shift();
      if (!q) return;
      this.start(q, this.freeChunks.pop()!);
    }
  }

  private start(q: Queued, chunk: number): void {
    const { batch } = q;
    const base = chunk * this.o.chunkBytes;
    const reqs = Float64Array.from(batch.reqs);
    for (let i = 0; i < reqs.length; i += 4) {
      reqs[i + 2] = this.o.staging;
      reqs[i + 3]! += base;
    }
    const copies = Float64Array.from(batch.copies);
    for (let i = 1; i < copies.length; i += 3) copies[i]! += base;
    const task: IoTask = { op: "read", loader: this.o.loader, reqs, arena: q.arena, staging: this.o.staging, copies, batch: batch.id };
    this.running++;
    this.ready.then((ch) => ch.request(task)).then(
      (r) => {
        this.running--;
        this.freeChunks.push(chunk);
        this.trace?.span({ lane: "io", name: "read", t0: r.t0, t1: r.t1, token: this.token, layer: batch.layer, bytes: batch.bytes, reads: batch.reads, phase: batch.phase });
        q.resolve();
        this.dispatch();
      },
      (e: unknown) => {
        this.running--;
        this.freeChunks.push(chunk);
        const what = `I/O loader (${this.o.device})`;
        const msg = (e as Error)?.message ?? String(e);
        const err = new Error(msg.startsWith(what) ? msg : `${what}: ${msg}`); // channel errors name the loader already
        this.fail(err);
        this.failed.add(batch.id);
        markBatch(this.flags, batch.id, false); // a compute task waiting on it stops
        q.reject(err);
      },
    );
  }

  /** A read failed: everything queued fails with the same cause. */
  private fail(err: Error): void {
    this.failure ??= err;
    for (const queue of this.queues) {
      for (const q of queue.splice(0)) {
        this.failed.add(q.batch.id);
        markBatch(this.flags, q.batch.id, false);
        q.reject(this.failure);
      }
    }
  }
}
