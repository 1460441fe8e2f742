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
  reqs: Float64Array;
  copies: Float64Array;
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

function grow(a: Float64Array<ArrayBuffer>): Float64Array<ArrayBuffer> {
  const b = new Float64Array(a.length * 2);
  b.set(a);
  return b;
}

export class ReadBatcher {
  /** Shared slot flags (slot-flags.ts): `want` is slotBatch's memory; the I/O worker sets `ready`. */
  readonly flags: { want: SharedArrayBuffer; ready: SharedArrayBuffer };
  /** (slots) the last batch writing each slot, 0 for none (deferred mode). */
  readonly slotBatch: Int32Array;
  // the batch being filled: [fileOffset, length, staging, stagingOffset]… and [arenaOffset, stagingOffset, length]…
  private reqs: Float64Array<ArrayBuffer> = new Float64Array(4 * 256);
  private nReqs = 0; // numbers in reqs
  private copies: Float64Array<ArrayBuffer> = new Float64Array(3 * 512);
  private nCopies = 0;
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
    if (this.nReqs + 4 > this.reqs.length) this.reqs = grow(this.reqs);
    const r = this.reqs;
    r[this.nReqs++] = fileOff;
    r[this.nReqs++] = len;
    r[this.nReqs++] = this.o.staging;
    r[this.nReqs++] = this.used;
    this.addCopies(this.used, copies);
    this.used += len;
  }

  /**
   * Grow the last queued read by the `len` file bytes right after it, with copies
   * [arenaOffset, offsetInRead, length] counted from the read's start: adjacent misses in one
   * request. False, and nothing queued, when the batch being filled has no read or no room.
   */
  extendLast(len: number, copies: readonly (readonly [number, number, number])[]): boolean {
    if (this.nReqs === 0 || this.used + len > this.limit) return false;
    const r = this.reqs;
    if (r[this.nReqs - 3]! + len > this.o.stagingBytes) return false;
    r[this.nReqs - 3]! += len;
    this.addCopies(r[this.nReqs - 1]!, copies);
    this.used += len;
    return true;
  }

  private addCopies(readAt: number, copies: readonly (readonly [number, number, number])[]): void {
    for (const [dst, src, n] of copies) {
      if (this.nCopies + 3 > this.copies.length) this.copies = grow(this.copies);
      const c = this.copies;
      c[this.nCopies++] = dst;
      c[this.nCopies++] = readAt + src;
      c[this.nCopies++] = n;
      if (this.deferred) Atomics.store(this.slotBatch, Math.floor(dst / this.o.slotBytes), this.seq + 1); // the batch being filled
    }
  }

  /** Bytes queued in the batch being filled. */
  get pendingBytes(): number {
    return this.used;
  }

  /** Close the batch being filled: read it now (synchronous mode) or hand it out (deferred). */
  flush(): void {
    if (this.nReqs === 0) return;
    const reqs = this.reqs.slice(0, this.nReqs);
    const copies = this.copies.slice(0, this.nCopies);
    if (this.deferred) {
      this.batches.push({ id: ++this.seq, layer: this.layer, reqs, copies, bytes: this.used, reads: this.nReqs / 4, phase: this.phase });
    } else {
      const n = native();
      n.readBatch(this.o.loader, reqs);
      n.copyBatch(this.o.arena, this.o.staging, copies);
    }
    this.nReqs = 0;
    this.nCopies = 0;
    this.used = 0;
  }

  /** Batches closed since the last call (deferred mode), in the order they were made. */
  take(): ReadBatch[] {
    const b = this.batches;
    this.batches = [];
    return b;
  }
}
