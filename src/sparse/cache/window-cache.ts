// The LLMFlash baseline's neuron cache (Alizadeh et al., "LLM in a flash", §3.3 "sliding
// window"): it keeps the neurons used by the last `window` tokens; every missing predicted
// neuron is loaded whole (gate row, up row and down column: one bundle) before the layer is
// computed. It uses the same arena, slot layout, staging buffer and read batcher as NeuronCache,
// so `blocking` mode differs from `pipeline` mode only in policy, not in parts.
//
//   slots are per neuron, LRU order; a neuron unused for `window` tokens is dropped at the
//   start of a token; when a layer needs more slots than are free, the least recently used
//   neuron not needed by the current chunk is evicted.
import { emptyCacheStats, type CacheBatch, type LayerCacheStats } from "./neuron-cache.js";
import type { ReadBatcher } from "./read-batcher.js";
import type { MemoryPlan } from "../memory-plan.js";
import type { Pack } from "../pack/format.js";
import { SlotLru } from "./slot-lru.js";

export class WindowCache {
  readonly stats: LayerCacheStats[];
  private readonly nFF: number;
  private readonly S: number;
  private readonly slotOf: Int32Array; // (nLayer*nFF) slot or -1
  private readonly owner: Int32Array; // (slots) neuron or -1
  private readonly lastToken: Int32Array; // (slots) token index of last use
  private readonly lastChunk: Int32Array; // (slots) chunk tick of last use
  private readonly lru: SlotLru; // all slots, most recent at head
  private token = 0;
  private chunk = 0;
  private layer = 0;

  constructor(
    readonly pack: Pack,
    readonly plan: MemoryPlan,
    readonly reads: ReadBatcher,
    readonly slotBytes: number,
    /** Bytes a read starting with a bundle takes (NeuronCache.bundleRead: its rows, not its padding). */
    readonly bundleRead: number,
    readonly window = 5,
  ) {
    const { nLayer, nFF } = pack.config;
    this.nFF = nFF;
    this.S = plan.slots;
    this.slotOf = new Int32Array(nLayer * nFF).fill(-1);
    this.owner = new Int32Array(this.S).fill(-1);
    this.lastToken = new Int32Array(this.S).fill(-1);
    this.lastChunk = new Int32Array(this.S).fill(-1);
    this.lru = new SlotLru(new Int32Array(this.S), new Int32Array(this.S));
    for (let s = 0; s < this.S; s++) this.lru.pushTail(s);
    this.stats = Array.from({ length: nLayer }, emptyCacheStats);
  }

  /** A new token: drop neurons not used by the last `window` tokens. */
  beginToken(): void {
    this.token++;
    const keepFrom = this.token - this.window;
    for (let s = 0; s < this.S; s++) {
      if (this.owner[s]! >= 0 && this.lastToken[s]! < keepFrom) {
        this.slotOf[this.owner[s]!] = -1;
        this.owner[s] = -1;
        this.lru.demote(s);
      }
    }
  }

  /**
   * Make the whole bundles of positions[start..end) of `layer` resident (reads as batches), write
   * their slots to slotsOut[0..]; returns the end of what fits (the caller computes, then goes on).
   */
  load(layer: number, positions: Int32Array, start: number, end: number, slotsOut: Int32Array): number {
    const chunk = ++this.chunk;
    const base = layer * this.nFF;
    const st = this.stats[layer]!;
    const B = this.pack.bundleBytes;
    this.layer = layer;
    let runStart = -1; // a run of consecutive missing positions becomes one read
    let runSlots: number[] = [];
    const endRun = () => {
      if (runStart < 0) return;
      const copies: [number, number, number][] = [];
      runSlots.forEach((s, i) => copies.push(...this.bundleCopies(s, i * B)));
      this.queueRead(this.pack.layers[layer]!.bundlesOffset + runStart * B, (runSlots.length - 1) * B + this.bundleRead, copies);
      runStart = -1;
      runSlots = [];
    };
    let i = start;
    for (; i < end; i++) {
      const p = positions[i]!;
      const g = base + p;
      let s = this.slotOf[g]!;
      st.gateAccesses++;
      if (s >= 0) {
        st.gateHits++;
        endRun();
      } else {
        s = this.lru.tail;
        if (this.lastChunk[s] === chunk) break; // every slot is needed by this chunk
        if (this.owner[s]! >= 0) this.slotOf[this.owner[s]!] = -1;
        this.owner[s] = g;
        this.slotOf[g] = s;
        if (runStart >= 0 && runStart + runSlots.length !== p) endRun();
        if (runStart < 0) runStart = p;
        runSlots.push(s);
        if ((runSlots.length + 1) * B > this.reads.batchLimit) endRun();
      }
      this.lastToken[s] = this.token;
      this.lastChunk[s] = chunk;
      this.lru.touch(s);
      slotsOut[i - start] = s;
    }
    endRun();
    this.reads.flush();
    return i;
  }

  takeBatches(): CacheBatch[] {
    return this.reads.take();
  }

  /** The last batch writing each slot (0 for none). */
  get slotBatch(): Int32Array {
    return this.reads.slotBatch;
  }

  /** Forget neurons whose reads did not complete (an I/O error): they are read again next time. */
  forget(failed: (batch: number) => boolean): void {
    for (let s = 0; s < this.S; s++) {
      if (this.owner[s]! >= 0 && this.slotBatch[s]! > 0 && failed(this.slotBatch[s]!)) {
        this.slotOf[this.owner[s]!] = -1;
        this.owner[s] = -1;
      }
    }
  }

  resetStats(): void {
    for (const s of this.stats) Object.assign(s, emptyCacheStats());
  }

  private bundleCopies(slot: number, at: number): [number, number, number][] {
    const { gateBytes, gateBlock, upBytes, downBytes } = this.pack;
    return [
      [slot * this.slotBytes, at, gateBytes],
      [slot * this.slotBytes + gateBytes, at + gateBlock, upBytes + downBytes],
    ];
  }

  private queueRead(fileOff: number, len: number, copies: [number, number, number][]) {
    this.reads.phase = "gate";
    this.reads.layer = this.layer;
    this.reads.queue(fileOff, len, copies);
    const st = this.stats[this.layer]!;
    st.bytesRead += len;
    st.reads++;
    st.upDownAccesses += copies.length / 2;
  }
}
