// Reads a cache wants done, gathered into batches that fit a staging buffer: each read lands at
// the next free offset of the batch's staging area, then copies move its pieces into cache
// slots. Shared by the neuron cache (neuron-cache.ts) and the LLMFlash window cache
// (window-cache.ts).
//
// Synchronous mode: a full batch (or flush()) is read and copied at once on the calling thread.
// Deferred mode (the actor pipeline): a full batch becomes a ReadBatch handed to the I/O loader
// actor (take()); slotBatch[s] names the last batch that writes slot s, in shared memory
// (slot-flags.ts), so a computation on a worker waits for exactly the reads its slots need.
import { native } from "../../native.js";
import { createSlotFlags } from "./slot-flags.js";

/** What a batch loads (the I/O loader's priority: up+down first, then gates and bundles, then prefetch). */
export type ReadPhase = "gate" | "updown" | "prefetch" | "bundle";

/**
 * One batch of reads for the I/O loader: requests [fileOffset, length, stagingBuffer,
 * stagingOffset]… with staging offsets relative to the batch's own staging chunk, and copies
 * [arenaOffset, offsetInChunk, length]…; the loader places the batch in a staging chunk, reads,
 * then copies into the slots.
 */
export interface ReadBatch {
  id: number;
  layer: number;
  reqs: number[];
  copies: number[];
  bytes: number;
  reads: number;
  phase: ReadPhase;
}

export interface ReadBatcherOptions {
  /** Native loader id (synchronous reads). */
  loader: number;
  /** Where reads land (synchronous mode) and its size: no single read may be larger. */
  staging: number;
  stagingBytes: number;
  /** The slots' buffer copies go into (synchronous mode), its slot size and slot count (slotBatch). */
  arena: number;
  slotBytes: number;
  slots: number;
}

export class ReadBatcher {
  /** Shared slot flags (slot-flags.ts): `want` is slotBatch's memory; the I/O worker sets `ready`. */
  readonly flags: { want: SharedArrayBuffer; ready: SharedArrayBuffer };
  /** (slots) the last batch writing each slot, 0 for none (deferred mode). */
  readonly slotBatch: Int32Array;
  private reqs: number[] = [];
  private copies: number[] = [];
  private used = 0;
  private limit: number;
  private deferred = false;
  private seq = 0;
  private batches: ReadBatch[] = [];
  /** What the batch being filled loads, and for which layer (set by the cache before it queues reads). */
  phase: ReadPhase = "gate";
  layer = 0;

  constructor(private readonly o: ReadBatcherOptions) {
    this.limit = o.stagingBytes;
    this.flags = createSlotFlags(o.slots);
    this.slotBatch = new Int32Array(this.flags.want);
  }

  /** Hand batches of at most `limit` bytes to take() instead of reading them. */
  setDeferred(limit: number): void {
    this.flush();
    this.deferred = true;
    this.limit = limit;
  }

  /** Largest batch, in bytes. */
  get batchLimit(): number {
    return this.limit;
  }

  get isDeferred(): boolean {
    return this.deferred;
  }

  /** Queue one read of `len` bytes at `fileOff`, then copies [arenaOffset, offsetInRead, length]. */
  queue(fileOff: number, len: number, copies: readonly (readonly [number, number, number])[]): void {
    if (len > this.o.stagingBytes) throw new Error(`neuron cache: a read of ${len} bytes exceeds the staging buffer (${this.o.stagingBytes} bytes)`);
    if (this.used + len > this.limit) this.flush();
    this.reqs.push(fileOff, len, this.o.staging, this.used);
    for (const [dst, src, n] of copies) {
      this.copies.push(dst, this.used + src, n);
      if (this.deferred) Atomics.store(this.slotBatch, Math.floor(dst / this.o.slotBytes), this.seq + 1); // the batch being filled
    }
    this.used += len;
  }

  /** Bytes queued in the batch being filled. */
  get pendingBytes(): number {
    return this.used;
  }

  /** Close the batch being filled: read it now (synchronous mode) or hand it out (deferred). */
  flush(): void {
    if (this.reqs.length === 0) return;
    if (this.deferred) {
      this.batches.push({ id: ++this.seq, layer: this.layer, reqs: this.reqs, copies: this.copies, bytes: this.used, reads: this.reqs.length / 4, phase: this.phase });
    } else {
      const n = native();
      n.readBatch(this.o.loader, Float64Array.from(this.reqs));
      n.copyBatch(this.o.arena, this.o.staging, Float64Array.from(this.copies));
    }
    this.reqs = [];
    this.copies = [];
    this.used = 0;
  }

  /** Batches closed since the last call (deferred mode), in the order they were made. */
  take(): ReadBatch[] {
    const b = this.batches;
    this.batches = [];
    return b;
  }
}
