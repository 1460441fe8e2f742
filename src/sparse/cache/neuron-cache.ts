// The neuron cache: FFN neurons of a pack held in one native arena under the memory plan.
//
//   arena  (slots, slotBytes): slot s = [gate row | up row | down column] of one neuron
//          slots [0, hotSlots)       hot region: frames of `clusterSize` neurons, a frame holds one
//                                    cluster (consecutive pack positions of one layer, hot-first),
//                                    loaded in one sequential read at load; with clusterAdmit,
//                                    also later, evicted per cluster (LRU)
//          slots [hotSlots, slots)   cold region: single neurons, per-neuron LRU, loaded in two
//                                    phases (gate block; up+down block only if the neuron fires)
//
// With pinned gates (plan.gatesPinned) the gate rows of all neurons live in their own buffer
// `gates` (row g = layer·nFF + p), read once at load, and slots hold [up row | down column]:
// a predicted neuron costs a read only when it fires and its up+down are not resident.
//
// Pack positions p ≥ hotLimit[layer] are cold. Which neurons are resident never changes what is
// computed — only where the bytes come from — so results are the same for any budget.
import { native, type NativeAddon } from "../../native.js";
import type { MemoryPlan } from "../memory-plan.js";
import { blockReads, bundleUseRate, falseFlagRates, type Pack } from "../pack/format.js";
import { ReadBatcher, type ReadBatch } from "./read-batcher.js";
import { SlotLru } from "./slot-lru.js";

export interface LayerCacheStats {
  /**
   * Gate rows needed (predicted neurons) and how many were already resident: there, or read ahead
   * before the layer's predictor ran. A layer's own misses read in the background (readAhead's
   * `now`) are misses, gate and up+down: they were read because the layer asked for them.
   */
  gateAccesses: number;
  gateHits: number;
  /** Up+down rows needed (neurons whose gate fired) and how many were already resident (as above). */
  upDownAccesses: number;
  upDownHits: number;
  /** Bytes and read requests issued to storage (reads ahead included). */
  bytesRead: number;
  reads: number;
  /** Of those, read ahead (readAhead) and, of the neurons read ahead, the ones that then fired. */
  aheadBytes: number;
  aheadReads: number;
  aheadUsed: number;
}

/** Counters at zero. */
export function emptyCacheStats(): LayerCacheStats {
  return { gateAccesses: 0, gateHits: 0, upDownAccesses: 0, upDownHits: 0, bytesRead: 0, reads: 0, aheadBytes: 0, aheadReads: 0, aheadUsed: 0 };
}

/** A batch of reads ahead that completed: bytes, and when the background thread ran it (nowUs clock). */
export interface AheadDone {
  layer: number;
  bytes: number;
  reads: number;
  t0: number;
  t1: number;
}

/** What settling returns when no batch was in flight (shared, empty). */
const NONE_DONE: readonly AheadDone[] = Object.freeze([]) as readonly AheadDone[];

const NONE = 0;
const GATE = 1;
const FULL = 2;
/** readBatchStart's lane without a thread: submitted now, completed by the wait on the calling thread. */
const CALLER_LANE = 2;
/** Unchosen bundles a run of the cold region's preload reads through rather than start another request (load time only). */
const PRELOAD_GAP = 8;
/** A neuron's state when its slot holds its whole bundle (state table, see stateTable). */
export const NEURON_FULL = FULL;

/** A batch of reads the cache hands to the I/O loader (deferred mode). */
export type CacheBatch = ReadBatch;

export interface Loader {
  id: number;
  backend: "uring" | "pread";
  directIO: boolean;
  /** What read offsets and lengths must be multiples of (the loaders' `align`, native.ts). */
  align: number;
  /** The loader of reads ahead (a queue deep enough for a whole batch), or -1. */
  aheadId: number;
  /** The loader of a layer's own misses read in the background (readAhead's `now`, lane 1), or -1: they go through aheadId. */
  nowId: number;
  /** Background batches submitted by the calling thread and completed at its wait (native lane 2), not on the background lanes' threads. */
  callerReads: boolean;
}

export class NeuronCache {
  readonly arena: number; // native buffer (slots × slotBytes)
  readonly gates: number; // native buffer (nLayer·nFF × gateRowBytes) with pinned gates, else -1
  /** Where gate rows are read from: the pinned rows (row = layer·nFF + p), or slot rows of the arena. */
  readonly gateRows: { buf: number; rows: number; stride: number };
  /** Offsets of the up row and the down column within a slot. */
  readonly upOffset: number;
  readonly downOffset: number;
  readonly pinned: boolean;
  /** The slotOf table's place in native memory (a worker maps fired neurons to up+down slots with it). */
  readonly slotTable: { buf: number; off: number };
  /** The state table's place in native memory: (nLayer*nFF) u8, NEURON_FULL when the slot holds gate, up and down (the streamed prefill uses those in place). */
  readonly stateTable: { buf: number; off: number };
  readonly staging: number; // native buffer: I/O lands here, then is copied into slots
  readonly aheadStaging: number; // native buffer for reads ahead (plan.readAheadBytes), else -1
  /** (nFF) 1 at the pack positions whose bundles a `now` batch of reads ahead is still bringing (readAhead): their slots are taken, their rows not there yet. */
  readonly landing: Uint8Array;
  readonly tables: number; // native buffer holding the views below
  readonly stats: LayerCacheStats[];
  /** Bytes read while filling the hot region at load time (not part of per-token stats). */
  preloadBytes = 0;
  readonly slotBytes: number;
  /**
   * Bytes read for a neuron's gate block, up+down block and whole bundle when a request starts
   * with it: the rows, rounded up to the loader's alignment, not the block's padding (with a
   * 512-byte alignment a Q4_0 7B bundle is read as 8.5 KiB of its 12). A request that goes on
   * to the next bundle reads the padding in between.
   */
  readonly gateRead: number;
  readonly upDownRead: number;
  readonly bundleRead: number;
  readonly hotLimit: Int32Array; // per layer: pack positions below are hot (cluster-loaded; without clusterAdmit, the clusters preload loaded)

  private readonly n: NativeAddon;
  private readonly nFF: number;
  private readonly C: number;
  private readonly stagingBytes: number;
  private readonly slotOf: Int32Array; // (nLayer*nFF) slot of (layer, pack position) or -1
  private readonly state: Uint8Array; // (nLayer*nFF) NONE | GATE | FULL
  private readonly owner: Int32Array; // (slots) neuron (layer*nFF + p) held, or -1
  private readonly lru: SlotLru; // cold slots but the kept ones, most recent at head (prev/next tables in native memory)
  private readonly kept: Uint8Array; // (slots) 1: a kept cold slot (plan.coldKept), never in the LRU
  /** Cold slots in the LRU list: the cold region but the kept slots. */
  private lruSlots: number;
  private readonly frameOf: Int32Array; // (nLayer*nFF/C) frame of a cluster or -1
  private readonly frameOwner: Int32Array; // (hotFrames) cluster held or -1
  private readonly frameUse: Int32Array; // (hotFrames) tick of last use
  private tick = 0;
  /** Predicted neurons of a non-resident hot cluster needed to load it whole (else: cold path). */
  private readonly admit: number;
  /** Reads into staging, then copies into slots; in deferred mode (the actor pipeline) batches for the I/O loader. */
  readonly reads: ReadBatcher;
  // a lease is the set of loads whose slots must stay put until their compute is done: one
  // loadGates call in synchronous mode, a layer's clusters in flight in deferred mode
  private leaseTick = 0;
  /** The run of bundles the last queued read covers (queueBundleRead), while it may still grow. */
  private run?: { layer: number; within: number; len: number; p0: number; p: number };
  private framesUsed = 0;
  private coldUsed = 0;
  private hotOrder?: Int32Array[]; // per layer: hot clusters by profiled firings, most first
  // batches of reads ahead in flight, oldest first (`now`: the misses of the layer being
  // computed), with their neurons (layer*nFF + p); the cold slots they hold
  private aheadReqs = new Float64Array(0); // readAhead's requests and copies, reused
  private aheadCopies = new Float64Array(0);
  private readonly copyScratch = new Float64Array(6);
  private readonly touchScratch: Int32Array; // (nFF) touchResident's slots, reused
  private ahead: { ticket: number; layer: number; neurons: Int32Array; reads: number; now: boolean }[] = [];
  private aheadPending = 0;
  private aheadSeq = 0;
  // the neurons of the last look-ahead batch that arrived per layer, marked in aheadMark (N)
  // until they fire (aheadUsed counts those). Marks, not sets: every fired neuron is looked up.
  private readonly aheadArrived: (Int32Array | undefined)[];
  private readonly aheadMark: Uint8Array;
  // the layer's own misses: the neurons its `now` batch reads (counted as misses), marked in
  // ownMark (nFF, by pack position); a lease of another layer ends it
  private ownMisses?: { layer: number; neurons: Int32Array };
  private touchedFor = -1; // readAhead(now) just touched this layer's resident neurons (for loadGates' next lease)
  private readonly ownMark: Uint8Array;

  constructor(
    readonly pack: Pack,
    readonly plan: MemoryPlan,
    readonly loader: Loader,
  ) {
    const n = (this.n = native());
    const { nLayer, nFF } = pack.config;
    this.nFF = nFF;
    this.C = plan.clusterSize;
    this.slotBytes = plan.slotBytes;
    this.admit = plan.options.clusterAdmit === undefined ? Infinity : Math.max(1, Math.ceil(plan.clusterSize * plan.options.clusterAdmit));
    const N = nLayer * nFF;
    const clusters = N / this.C;
    const S = plan.slots;
    const F = plan.hotFrames;
    this.stagingBytes = plan.stagingBytes;
    const allocated: number[] = [];
    this.pinned = plan.gatesPinned;
    ({ gate: this.gateRead, upDown: this.upDownRead, bundle: this.bundleRead } = blockReads(pack, loader.align));
    this.upOffset = this.pinned ? 0 : pack.gateBytes;
    this.downOffset = this.upOffset + pack.upBytes;
    try {
      this.arena = n.alloc(Math.max(1, S * this.slotBytes));
      allocated.push(this.arena);
      this.gates = this.pinned ? n.alloc(N * plan.gateRowBytes) : -1;
      if (this.pinned) allocated.push(this.gates);
      this.staging = n.alloc(plan.stagingBytes);
      allocated.push(this.staging);
      this.aheadStaging = plan.readAheadBytes > 0 ? n.alloc(plan.readAheadBytes) : -1;
      if (this.aheadStaging >= 0) allocated.push(this.aheadStaging);
      // int32 tables first, then the byte table
      const i32 = N + S * 3 + clusters + F * 2;
      this.tables = n.alloc(i32 * 4 + N);
      allocated.push(this.tables);
    } catch (e) {
      for (const b of allocated) n.free(b);
      throw e;
    }
    let o = 0;
    const take = (len: number) => {
      const v = n.viewI32(this.tables, o * 4, len);
      o += len;
      return v;
    };
    this.slotTable = { buf: this.tables, off: o * 4 };
    this.slotOf = take(N).fill(-1);
    this.owner = take(S).fill(-1);
    this.lru = new SlotLru(take(S), take(S));
    this.frameOf = take(clusters).fill(-1);
    this.frameOwner = take(F).fill(-1);
    this.frameUse = take(F);
    this.stateTable = { buf: this.tables, off: o * 4 };
    this.state = n.viewU8(this.tables, o * 4, N);
    this.reads = new ReadBatcher({ loader: loader.id, staging: this.staging, stagingBytes: plan.stagingBytes, arena: this.arena, slotBytes: this.slotBytes, slots: S });
    this.gateRows = this.pinned ? { buf: this.gates, rows: N, stride: plan.gateRowBytes } : { buf: this.arena, rows: S, stride: this.slotBytes };
    // cold LRU list: all cold slots, free
    for (let s = plan.hotSlots; s < S; s++) this.lru.pushHead(s);
    this.hotLimit = new Int32Array(nLayer);
    for (let l = 0; l < nLayer; l++) {
      this.hotLimit[l] = plan.ffnResident >= 1 ? nFF : F > 0 ? Math.min(nFF, Math.ceil(pack.layers[l]!.hotCount / this.C) * this.C) : 0;
    }
    this.stats = Array.from({ length: nLayer }, emptyCacheStats);
    this.kept = new Uint8Array(plan.coldKept > 0 ? S : 0);
    this.landing = new Uint8Array(nFF);
    this.ownMark = new Uint8Array(nFF);
    this.touchScratch = new Int32Array(nFF);
    this.aheadMark = new Uint8Array(N);
    this.aheadArrived = new Array<Int32Array | undefined>(nLayer).fill(undefined);
    this.lruSlots = plan.coldSlots;
  }

  /** Native buffers the cache holds (memory accounting). */
  get buffers(): number[] {
    const b = this.pinned ? [this.arena, this.gates, this.staging, this.tables] : [this.arena, this.staging, this.tables];
    return this.aheadStaging >= 0 ? [...b, this.aheadStaging] : b;
  }

  /**
   * Fill the hot region before decoding: the hot clusters with the most profiled firings, in
   * sequential reads. With a budget holding the whole FFN this loads every neuron.
   */
  preload(onProgress?: (done: number, total: number) => void): void {
    this.settle();
    const { nLayer } = this.pack.config;
    const F = this.plan.hotFrames;
    if (this.pinned) this.preloadGates();
    const cand: { l: number; q: number; w: number }[] = [];
    for (let l = 0; l < nLayer; l++) {
      for (let q = 0; q * this.C < this.hotLimit[l]!; q++) cand.push({ l, q, w: this.clusterFirings(l, q) });
    }
    cand.sort((a, b) => b.w - a.w || a.l - b.l || a.q - b.q);
    const take = cand.slice(0, F);
    if (this.admit === Infinity && this.plan.ffnResident < 1) {
      // no cluster is admitted later: the hot region is what is loaded now, and each layer's hot
      // positions the clusters it gets (a prefix: a layer's clusters are in falling firings)
      const loaded = new Int32Array(nLayer);
      for (const c of take) loaded[c.l]!++;
      for (const c of take) if (c.q >= loaded[c.l]!) throw new Error(`neuron cache: hot cluster ${c.q} of layer ${c.l} is not in its layer's first ${loaded[c.l]} (internal error)`);
      for (let l = 0; l < nLayer; l++) this.hotLimit[l] = Math.min(this.nFF, loaded[l]! * this.C);
    }
    take.sort((a, b) => a.l - b.l || a.q - b.q); // file order: sequential reads
    let done = 0;
    for (const c of take) {
      this.loadCluster(c.l, c.q);
      if (++done % 64 === 0) onProgress?.(done, take.length);
    }
    this.flush();
    this.preloadCold();
    onProgress?.(take.length, take.length);
    // load-time reads are reported apart from per-token traffic
    this.preloadBytes += this.stats.reduce((a, s) => a + s.bytesRead, 0);
    this.resetStats();
  }

  /**
   * How often each neuron of a layer needs to be resident, by pack position: what the cold region
   * keeps the most of. Given false-flag rates (whole bundles cached and a trained predictor:
   * every flag needs the bundle, silent or not): p + (1 − p)·f, p the profiled firing rate and f
   * the false-flag rate (on the 7B half offloaded, 6% fewer reads a token than by firings,
   * docs/benchmarks.md). Otherwise the profiled firing counts: with pinned gate rows only a
   * firing neuron needs its slot, and the oracle flags every neuron alike.
   */
  private coldUse(layer: number, falseFlags: readonly Float32Array[] | undefined): ArrayLike<number> {
    const counts = this.pack.layers[layer]!.counts;
    if (!falseFlags) return counts;
    const T = this.pack.profileTokens;
    const f = falseFlags[layer]!;
    // the firing rate in single precision, as the planner's cache model holds it: the same order
    return Float64Array.from(counts, (c, p) => bundleUseRate(Math.fround(Math.min(1, c / T)), f[p]!));
  }

  /** Pinned gates: every gate row into `gates`, streaming each layer's bundles sequentially. */
  private preloadGates(): void {
    const { nLayer } = this.pack.config;
    const B = this.pack.bundleBytes;
    const per = Math.max(1, Math.floor(this.stagingBytes / B));
    const row = this.plan.gateRowBytes;
    for (let l = 0; l < nLayer; l++) {
      for (let a = 0; a < this.nFF; a += per) {
        const m = Math.min(per, this.nFF - a);
        this.n.readBatch(this.loader.id, Float64Array.of(this.bundleOffset(l, a), m * B, this.staging, 0));
        const copies = new Float64Array(m * 3);
        for (let i = 0; i < m; i++) copies.set([(l * this.nFF + a + i) * row, i * B, this.pack.gateBytes], i * 3);
        this.n.copyBatch(this.gates, this.staging, copies);
        this.stats[l]!.bytesRead += m * B;
        this.stats[l]!.reads++;
      }
    }
  }

  /**
   * Fill the cold region with the next most-used neurons (whole bundles), so that a large
   * budget starts warm instead of paying a first read for every neuron. Past the hot set a pack
   * may order neurons by co-activation rather than frequency, so the chosen ones are read in runs
   * of file order: a run goes on over at most PRELOAD_GAP unchosen bundles (read, not kept).
   */
  private preloadCold(): void {
    const { nLayer } = this.pack.config;
    const cand: { l: number; p: number; c: number }[] = [];
    // flags count only with a trained predictor, whole bundles cached and a profile to weigh them by
    const falseFlags = this.plan.options.predictor && !this.pinned && this.pack.profileTokens > 0 ? falseFlagRates(this.pack) : undefined;
    for (let l = 0; l < nLayer; l++) {
      const use = this.coldUse(l, falseFlags);
      for (let p = this.hotLimit[l]!; p < this.nFF; p++) if (use[p]! > 0) cand.push({ l, p, c: use[p]! });
    }
    cand.sort((a, b) => b.c - a.c || a.l - b.l || a.p - b.p);
    const chosen = cand.slice(0, this.plan.coldSlots).sort((a, b) => a.l - b.l || a.p - b.p); // file order
    const B = this.pack.bundleBytes;
    const per = Math.max(1, Math.floor(this.stagingBytes / B));
    let run: { l: number; p0: number; copies: [number, number, number][] } | undefined;
    let last = -1;
    const end = () => {
      if (run) this.queueRead(run.l, this.bundleOffset(run.l, run.p0), (last - run.p0 + 1) * B, run.copies);
      run = undefined;
    };
    for (const { l, p } of chosen) {
      if (run && (run.l !== l || p - last - 1 > PRELOAD_GAP || p - run.p0 + 1 > per)) end();
      run ??= { l, p0: p, copies: [] };
      const g = l * this.nFF + p;
      const slot = this.takeColdSlot(g);
      this.state[g] = FULL;
      run.copies.push(...this.bundleCopies(slot, (p - run.p0) * B));
      last = p;
    }
    end();
    this.flush();
    // the most fired of them stay for good: out of the LRU list
    for (const { l, p } of cand.slice(0, Math.min(this.plan.coldKept, chosen.length))) {
      const s = this.slotOf[l * this.nFF + p]!;
      this.kept[s] = 1;
      this.lru.unlink(s);
      this.lruSlots--;
    }
  }

  /**
   * Make the gate rows of positions[start..] of `layer` resident, as many as the cache can
   * hold at once, and write their slots to slotsOut[0..]. Returns the end index (exclusive)
   * of the positions handled; the caller computes them, then calls again from there.
   * Positions must be ascending.
   */
  loadGates(layer: number, positions: Int32Array, start: number, end: number, slotsOut: Int32Array): number {
    const st = this.stats[layer]!;
    const base = layer * this.nFF;
    const hotLimit = this.hotLimit[layer]!;
    const tick = ++this.tick;
    if (!this.reads.isDeferred) this.beginLease(tick);
    if (this.ownMisses && this.ownMisses.layer !== layer) this.endOwnMisses();
    const touched = start === 0 && this.touchedFor === layer; // by readAhead(now), just before
    this.touchedFor = -1;
    this.reads.phase = "gate";
    this.reads.layer = layer;
    const coldCap = this.lruSlots;
    const frameCap = this.plan.hotFrames;
    let i = start;
    if (this.pinned) {
      // every gate row is resident; a neuron without up+down may fire and need a cold slot in
      // this lease, so the chunk ends where the cold region could not hold them all
      // (locals: this loop runs for every predicted neuron of a layer, on the scheduler's critical path)
      const { slotOf, lru, frameUse, C, kept } = this;
      const hotSlots = this.plan.hotSlots;
      // slots held by reads ahead in flight are not this lease's; with none left, wait for them
      if (this.aheadPending > 0 && this.coldUsed >= coldCap - this.aheadPending) this.settle();
      const cap = coldCap - this.aheadPending;
      let used = this.coldUsed;
      for (; i < end; i++) {
        const g = base + positions[i]!;
        const s = slotOf[g]!;
        if ((s < 0 || s >= hotSlots) && !kept[s]) {
          // cold (resident or not) and not kept: its slot must not be evicted before this lease ends
          if (used >= cap) break;
          used++;
          if (s >= 0) lru.touch(s); // at the head: evictions in this lease take other slots
        } else if (s < hotSlots) frameUse[(s / C) | 0] = tick;
        slotsOut[i - start] = g;
      }
      this.coldUsed = used;
      st.gateAccesses += i - start;
      st.gateHits += i - start;
      return i;
    }
    // reads ahead of later layers stay in flight: their slots are not this lease's; so does this
    // layer's `now` batch (the caller settles it before computing the neurons it brings)
    this.settleLayer(layer, true);
    if (this.aheadPending > 0 && this.coldUsed >= coldCap - this.aheadPending) this.settle();
    const cap = coldCap - this.aheadPending;
    const own = this.ownMisses ? this.ownMark : undefined;
    // the layer's resident cold neurons first go to the head of the LRU, so that its misses take
    // other slots than theirs (and do not read them again later in the loop); a first lease right
    // after readAhead(now) finds that done
    if (!touched) this.touchResident(layer, positions, start, end, cap - this.coldUsed);
    for (; i < end; i++) {
      const p = positions[i]!;
      const g = base + p;
      const hit = this.slotOf[g]! >= 0 && own?.[p] !== 1; // resident before the layer asked: no read needed
      // a hot neuron goes through its cluster when the cluster is resident, or when enough of
      // the cluster is predicted to be worth one sequential read; otherwise the cold path
      const cl = (g / this.C) | 0;
      let f = p < hotLimit ? this.frameOf[cl]! : -1;
      const viaCluster = p < hotLimit && (f >= 0 || this.worthCluster(positions, i, end, (p / this.C) | 0));
      if (viaCluster) {
        if (f < 0 || this.frameUse[f]! < this.leaseTick) {
          if (this.framesUsed === frameCap) break;
          this.framesUsed++;
          if (f < 0) {
            this.settle(); // a cluster load gives cold slots back: none may still be landing
            f = this.loadCluster(layer, (p / this.C) | 0);
          }
          this.frameUse[f] = tick;
        }
      } else if (this.kept[this.slotOf[g]!] !== 1) {
        if (this.coldUsed >= cap) break;
        this.coldUsed++;
        let s = this.slotOf[g]!;
        if (s < 0) {
          s = this.takeColdSlot(g);
          this.state[g] = GATE;
          this.queueBundleRead(layer, p, 0, this.gateRead, [s * this.slotBytes, 0, this.pack.gateBytes]);
        } else this.lru.touch(s);
      }
      st.gateAccesses++;
      if (hit) st.gateHits++;
      slotsOut[i - start] = this.slotOf[g]!;
    }
    this.flush();
    return i;
  }

  /**
   * Make up+down resident for neurons (layer, positions[k]) whose gates fired, and write their
   * slots to slotsOut[k]. Without pinned gates they were made resident by the last loadGates
   * call, so they are still in their slots; with pinned gates a missing one takes a cold slot
   * that loadGates reserved in this lease.
   */
  loadUpDown(layer: number, positions: Int32Array, count: number, slotsOut: Int32Array): void {
    const st = this.stats[layer]!;
    const base = layer * this.nFF;
    const ud = this.pack.upBytes + this.pack.downBytes;
    this.settleLayer(layer); // batches for later layers stay in flight: their slots are not taken here
    const aheadMark = this.aheadMark;
    const own = this.ownMisses?.layer === layer ? this.ownMark : undefined;
    this.reads.phase = "updown";
    this.reads.layer = layer;
    for (let k = 0; k < count; k++) {
      const p = positions[k]!;
      const g = base + p;
      st.upDownAccesses++;
      let s = this.slotOf[g]!;
      if (this.state[g] === FULL) {
        if (own?.[p] !== 1) st.upDownHits++;
        if (aheadMark[g] === 1) {
          aheadMark[g] = 0;
          st.aheadUsed++;
        }
        if (this.pinned && s >= this.plan.hotSlots && !this.kept[s]) this.lru.touch(s);
        // a compute worker may be reading the resident ones' entries right now: write only what changes
        if (slotsOut[k] !== s) slotsOut[k] = s;
        continue;
      }
      if (s < 0) {
        if (!this.pinned) throw new Error(`neuron cache: layer ${layer} neuron at pack position ${p} lost its slot between the two load phases`);
        s = this.takeColdSlot(g);
      }
      this.state[g] = FULL;
      this.queueBundleRead(layer, p, this.pack.gateBlock, this.upDownRead, [s * this.slotBytes + this.upOffset, 0, ud]);
      slotsOut[k] = s;
    }
    this.flush();
  }

  /**
   * Neurons whose gate was read but did not fire go to the cold LRU's tail: they are evicted
   * first, so a layer's many predicted-but-silent neurons do not push out the ones that fire
   * (which also cost an up+down read to bring back). They stay readable until evicted.
   */
  demoteSilent(layer: number, positions: Int32Array, count: number): void {
    const base = layer * this.nFF;
    for (let k = 0; k < count; k++) {
      const g = base + positions[k]!;
      const s = this.slotOf[g]!;
      if (s >= this.plan.hotSlots && this.state[g] === GATE && !this.kept[s]) this.lru.demote(s);
    }
  }

  /**
   * Deferred mode (the actor pipeline): reads are not done by the cache but handed out as
   * batches (takeBatches) of at most `batchLimit` bytes, and loads stay in one lease until
   * beginLease, so the slots of every cluster in flight stay put.
   */
  setDeferred(batchLimit: number): void {
    this.settle();
    const minRead = Math.max(this.C * this.pack.bundleBytes, this.pack.gateBlock, this.pack.upDownBlock);
    if (batchLimit < minRead || batchLimit > this.stagingBytes) {
      throw new RangeError(`neuron cache: batch limit ${batchLimit} must hold the largest read (${minRead} bytes) and fit the staging buffer (${this.stagingBytes} bytes)`);
    }
    this.reads.setDeferred(batchLimit);
    this.beginLease(++this.tick);
  }

  /** Start a new lease: loads from here on may evict what earlier leases used. */
  beginLease(tick = ++this.tick): void {
    this.leaseTick = tick;
    this.framesUsed = 0;
    this.coldUsed = 0;
  }

  /** Batches produced since the last call (deferred mode), in the order they were made. */
  takeBatches(): CacheBatch[] {
    return this.reads.take();
  }

  /** The last batch writing each slot (deferred mode; 0 for none). */
  get slotBatch(): Int32Array {
    return this.reads.slotBatch;
  }

  /**
   * Load up to `maxClusters` hot clusters of `layer` that are not resident, the most fired
   * first (the pipeline prefetches layer L+1 while layer L's attention runs). Returns how many.
   */
  prefetchHot(layer: number, maxClusters: number): number {
    if (this.plan.hotFrames === 0 || maxClusters <= 0) return 0;
    this.settle();
    this.hotOrder ??= this.pack.layers.map((_, l) => {
      const w = Array.from({ length: Math.ceil(this.hotLimit[l]! / this.C) }, (_, q) => this.clusterFirings(l, q));
      return Int32Array.from(w.keys()).sort((a, b) => w[b]! - w[a]! || a - b);
    });
    const base = (layer * this.nFF) / this.C;
    this.reads.phase = "prefetch";
    this.reads.layer = layer;
    let done = 0;
    for (const q of this.hotOrder[layer]!) {
      if (done === maxClusters) break;
      if (this.frameOf[base + q]! >= 0) continue;
      // a prefetched cluster is in flight in this lease: it counts against the frames the lease may take
      if (this.framesUsed === this.plan.hotFrames) break;
      this.framesUsed++;
      const f = this.loadCluster(layer, q);
      this.frameUse[f] = ++this.tick;
      done++;
    }
    this.flush();
    return done;
  }

  /**
   * Forget what batches that did not complete (an I/O error, a crashed loader) were to bring:
   * those neurons become non-resident and are read again when next needed.
   */
  forget(failed: (batch: number) => boolean): void {
    const S = this.plan.slots;
    for (let s = 0; s < S; s++) {
      const b = this.slotBatch[s]!;
      if (b === 0 || !failed(b)) continue;
      if (s < this.plan.hotSlots) this.dropFrame(Math.floor(s / this.C));
      else {
        this.dropCold(s);
        if (this.kept[s]) this.unkeep(s);
      }
    }
  }

  /** Are gate, up and down of every neuron (layer, positions[start..end)) resident (reads may still be in flight)? */
  allFull(layer: number, positions: Int32Array, start: number, end: number): boolean {
    const base = layer * this.nFF;
    for (let i = start; i < end; i++) if (this.state[base + positions[i]!] !== FULL) return false;
    return true;
  }

  /** Count `n` gate accesses of `layer`, all hits (the whole FFN resident: nothing was planned). */
  countResidentGates(layer: number, n: number): void {
    const st = this.stats[layer]!;
    st.gateAccesses += n;
    st.gateHits += n;
  }

  /** The slot holding neuron g (= layer·nFF + pack position), or -1. */
  slotOfNeuron(g: number): number {
    return this.slotOf[g]!;
  }

  /** Whether the slot of neuron g (layer·nFF + pack position) holds its whole bundle (gate, up and down). */
  holdsWhole(g: number): boolean {
    return this.slotOf[g]! >= 0 && this.state[g] === FULL;
  }

  /** Neurons resident per layer right now (tests, stats). */
  residentNeurons(layer: number): number {
    let c = 0;
    for (let p = 0; p < this.nFF; p++) if (this.slotOf[layer * this.nFF + p]! >= 0) c++;
    return c;
  }

  resetStats(): void {
    for (const s of this.stats) Object.assign(s, emptyCacheStats());
  }

  dispose(): void {
    try {
      this.settle();
    } catch {
      // a failed read ahead does not matter any more; the batch released its buffers
    } finally {
      for (const b of this.buffers) this.n.free(b);
    }
  }

  /**
   * Start reading, in the background, the neurons (layer, positions[0..count)) that are not
   * resident: their up+down blocks with pinned gate rows, else their whole bundles (the inline
   * decoder calls it with a later layer's likely-firing neurons while this layer computes). Each
   * takes a cold slot and is resident (state FULL) from now on. Until its batch is settled the
   * slot is protected: leases may use only the cold slots no batch in flight holds, and every
   * operation that could reuse a slot otherwise (cluster loads, preload, the pipeline's modes)
   * settles every batch first. At most `batches` batches in flight, each at most
   * readAheadNeurons / batches neurons and its own share of the staging. Call between leases
   * (after the computation of what the last loads brought): it starts a new one. A run of
   * adjacent positions is one request. Returns the neurons it started reading.
   *
   * `now`: the layer is the one being computed (its predicted neurons that are missing, read while
   * the resident gates are computed). Its hot positions are left to loadGates (their clusters),
   * its neurons are marked in `landing` until the batch is settled, and loadGates does not wait
   * for it (settleLayer's keepNow): the caller settles before it computes a landing neuron.
   */
  readAhead(layer: number, positions: Int32Array, count: number, batches = 1, now = false): number {
    if (now) this.endOwnMisses();
    if (this.aheadStaging < 0 || this.loader.aheadId < 0 || this.reads.isDeferred) return 0;
    while (this.ahead.length >= batches) this.settleOne();
    this.beginLease();
    const base = layer * this.nFF;
    const pinned = this.pinned;
    const bundle = this.pack.bundleBytes;
    const within = pinned ? this.pack.gateBlock : 0; // where a neuron's read starts in its bundle
    const block = pinned ? this.pack.upDownBlock : bundle; // the staging a neuron is planned to take
    const B = pinned ? this.upDownRead : this.bundleRead; // what a request starting with it reads
    const cap = Math.floor(this.plan.readAheadBytes / batches / block);
    const at = (this.aheadSeq % batches) * cap * block; // this batch's share of the staging
    // reads ahead hold at most half the LRU list, so a lease always has room
    const limit = Math.floor(this.lruSlots / 2) - this.aheadPending;
    const m = Math.min(cap, count);
    // the binding copies requests and copies out at once: one pair of arrays serves every batch
    if (this.aheadReqs.length < 4 * m) this.aheadReqs = new Float64Array(4 * m);
    if (this.aheadCopies.length < 6 * m) this.aheadCopies = new Float64Array(6 * m);
    const reqs = this.aheadReqs;
    const copies = this.aheadCopies;
    const neurons = new Int32Array(Math.min(m, Math.max(0, limit)));
    const share = cap * block; // staging bytes of this batch
    let n = 0; // neurons
    let c = 0; // numbers in copies
    let r = 0; // requests: a run of adjacent positions is one (pinned: its gate blocks come along unused)
    let used = 0; // staging bytes the closed requests and the open one take
    let p0 = -2; // first and last position of the open request
    let pLast = -2;
    const hot = now ? this.hotLimit[layer]! : 0; // positions below are left to loadGates
    // the layer's own resident neurons first go to the head of the LRU, so the slots this batch
    // takes are not theirs (as many as a lease of loadGates could touch with this batch in it)
    if (now) {
      this.touchResident(layer, positions, 0, count, this.lruSlots - this.aheadPending - Math.min(m, limit));
      this.touchedFor = layer;
    }
    // at most m neurons: reads shorter than their blocks would let more fit the staging share
    for (let k = 0; k < count && n < neurons.length; k++) {
      const p = positions[k]!;
      const g = base + p;
      if (p < hot || (pinned ? this.state[g] === FULL : this.slotOf[g]! >= 0)) continue;
      const grows = r > 0 && p === pLast + 1 && used + bundle <= share;
      if (!grows && used + B > share) break;
      const s = this.takeColdSlot(g);
      this.state[g] = FULL;
      if (grows) {
        reqs[4 * (r - 1) + 1]! += bundle;
        used += bundle;
        pLast = p;
      } else {
        reqs[4 * r] = this.bundleOffset(layer, p) + within;
        reqs[4 * r + 1] = B;
        reqs[4 * r + 2] = this.aheadStaging;
        reqs[4 * r + 3] = at + used;
        r++;
        used += B;
        p0 = pLast = p;
      }
      // the neuron's bundle starts `within` bytes before its read would if it began a request
      c = this.putBundleCopies(copies, c, s, reqs[4 * (r - 1) + 3]! + (p - p0) * bundle - within);
      neurons[n] = g;
      if (now) this.landing[p] = 1;
      n++;
    }
    if (n === 0) return 0;
    // a layer's own misses on their own loader and lane: not behind a batch for a later layer
    const own = now && this.loader.nowId >= 0;
    const lane = this.loader.callerReads ? CALLER_LANE : own ? 1 : 0;
    const ticket = this.n.readBatchStart(own ? this.loader.nowId : this.loader.aheadId, reqs.subarray(0, 4 * r), this.arena, this.aheadStaging, copies.subarray(0, c), lane);
    this.aheadSeq++;
    const list = neurons.subarray(0, n);
    this.ahead.push({ ticket, layer, neurons: list, reads: r, now });
    if (now) {
      this.ownMisses = { layer, neurons: list };
      for (let k = 0; k < n; k++) this.ownMark[list[k]! - base] = 1;
    }
    this.aheadPending += n;
    const st = this.stats[layer]!;
    st.bytesRead += used;
    st.reads += r;
    st.aheadBytes += used;
    st.aheadReads += r;
    return n;
  }

  /** Wait for every batch of reads ahead in flight; returns what they were. Throws the first I/O error (after waiting for all). */
  settle(): readonly AheadDone[] {
    if (this.ahead.length === 0) return NONE_DONE; // the common case, on every load: nothing allocated
    const done: AheadDone[] = [];
    let err: unknown;
    while (this.ahead.length) {
      try {
        done.push(this.settleOne());
      } catch (e) {
        err ??= e;
      }
    }
    if (err !== undefined) throw err;
    return done;
  }

  /**
   * Wait for the batches in flight up to and including the last one for `layer`, in the order they
   * were issued (on two lanes they may complete in another); with keepNow, up to the last one that
   * is not the layer's `now` batch.
   */
  settleLayer(layer: number, keepNow = false): readonly AheadDone[] {
    if (this.ahead.length === 0) return NONE_DONE;
    const done: AheadDone[] = [];
    let i = this.ahead.length - 1;
    while (i >= 0 && !(this.ahead[i]!.layer === layer && !(keepNow && this.ahead[i]!.now))) i--;
    for (let k = 0; k <= i; k++) done.push(this.settleOne());
    return done;
  }

  /** Is a batch of reads ahead in flight (for `layer`, or any)? */
  readingAhead(layer?: number): boolean {
    return layer === undefined ? this.ahead.length > 0 : this.ahead.some((b) => b.layer === layer);
  }

  /** Wait for the oldest batch of reads ahead. */
  private settleOne(): AheadDone {
    const b = this.ahead.shift()!;
    this.aheadPending -= b.neurons.length;
    if (b.now) for (const g of b.neurons) this.landing[g % this.nFF] = 0;
    let r: { bytes: number; t0: number; t1: number };
    try {
      r = this.n.readBatchWait(b.ticket);
    } catch (e) {
      // what the batch was to bring is not there: those neurons are not resident after all
      for (const g of b.neurons) {
        const s = this.slotOf[g]!;
        if (s >= 0 && this.owner[s] === g) this.dropCold(s);
      }
      throw e;
    }
    if (!b.now) {
      // the layer's last look-ahead batch replaces the one before
      const old = this.aheadArrived[b.layer];
      if (old) for (const g of old) this.aheadMark[g] = 0;
      for (const g of b.neurons) this.aheadMark[g] = 1;
      this.aheadArrived[b.layer] = b.neurons;
    }
    return { layer: b.layer, bytes: r.bytes, reads: b.reads, t0: r.t0, t1: r.t1 };
  }

  // ---- internals ----------------------------------------------------------------------

  /** Forget the layer's own misses: they count as misses no more. */
  private endOwnMisses(): void {
    const o = this.ownMisses;
    if (!o) return;
    const base = o.layer * this.nFF;
    for (const g of o.neurons) this.ownMark[g - base] = 0;
    this.ownMisses = undefined;
  }

  /** Touch the LRU slots (cold, not kept) of (layer, positions[k]), k in [from, to), that are resident, at most `max`, the first ones most recent. */
  private touchResident(layer: number, positions: Int32Array, from: number, to: number, max: number): void {
    const base = layer * this.nFF;
    const hotSlots = this.plan.hotSlots;
    const slots = this.touchScratch;
    let n = 0;
    for (let k = from; k < to && n < max; k++) {
      const s = this.slotOf[base + positions[k]!]!;
      if (s >= hotSlots && this.kept[s] !== 1) slots[n++] = s;
    }
    for (let i = n - 1; i >= 0; i--) this.lru.touch(slots[i]!);
  }

  private bundleOffset(layer: number, p: number): number {
    return this.pack.layers[layer]!.bundlesOffset + p * this.pack.bundleBytes;
  }

  /** At least clusterAdmit·C of cluster q's neurons among positions[i..end) (ascending)? */
  private worthCluster(positions: Int32Array, i: number, end: number, q: number): boolean {
    const lim = (q + 1) * this.C;
    let c = 0;
    for (let j = i; j < end && positions[j]! < lim; j++) if (++c >= this.admit) return true;
    return false;
  }

  /** Copies [arenaOff, offsetInRead, len] moving one whole bundle read at offsetInRead into `slot`: gate, then up+down (contiguous in both). */
  private bundleCopies(slot: number, at: number): [number, number, number][] {
    const c = this.copyScratch;
    const k = this.putBundleCopies(c, 0, slot, at);
    return k === 3 ? [[c[0]!, c[1]!, c[2]!]] : [[c[0]!, c[1]!, c[2]!], [c[3]!, c[4]!, c[5]!]];
  }

  /** bundleCopies written into out from index c (no allocation: readAhead's loop); returns the index after them. */
  private putBundleCopies(out: Float64Array, c: number, slot: number, at: number): number {
    const { gateBytes, gateBlock, upBytes, downBytes } = this.pack;
    if (!this.pinned) {
      out[c++] = slot * this.slotBytes;
      out[c++] = at;
      out[c++] = gateBytes;
    }
    out[c++] = slot * this.slotBytes + (this.pinned ? 0 : gateBytes);
    out[c++] = at + gateBlock;
    out[c++] = upBytes + downBytes;
    return c;
  }

  /** Profiled firings of hot cluster q of a layer (preload and prefetch order). */
  private clusterFirings(layer: number, q: number): number {
    const counts = this.pack.layers[layer]!.counts;
    let w = 0;
    for (let i = q * this.C; i < Math.min((q + 1) * this.C, this.nFF); i++) w += counts[i]!;
    return w;
  }

  /** Empty hot frame f: its cluster's neurons are no longer resident. */
  private dropFrame(f: number): void {
    const cl = this.frameOwner[f]!;
    if (cl < 0) return;
    this.frameOf[cl] = -1;
    this.frameOwner[f] = -1;
    for (let i = 0; i < this.C; i++) {
      this.slotOf[cl * this.C + i] = -1;
      this.state[cl * this.C + i] = NONE;
    }
  }

  /** Kept cold slot s joins the LRU list at its tail (evicted first). */
  private unkeep(s: number): void {
    this.kept[s] = 0;
    this.lru.pushTail(s);
    this.lruSlots++;
  }

  /** Empty cold slot s (it stays where it is in the LRU order). */
  private dropCold(s: number): void {
    const old = this.owner[s]!;
    if (old < 0) return;
    this.slotOf[old] = -1;
    this.state[old] = NONE;
    this.owner[s] = -1;
  }

  /** Put a whole cluster (gate, up, down of C neurons) into a hot frame; returns the frame. */
  private loadCluster(layer: number, q: number): number {
    const cl = (layer * this.nFF) / this.C + q;
    // the least recently used frame not used in this tick
    let f = -1;
    let best = Infinity;
    for (let i = 0; i < this.frameOwner.length; i++) {
      if (this.frameOwner[i]! < 0) {
        f = i;
        break;
      }
      if (this.frameUse[i]! < best && this.frameUse[i]! < this.leaseTick) {
        best = this.frameUse[i]!;
        f = i;
      }
    }
    if (f < 0) throw new Error("neuron cache: no hot frame free (internal accounting error)");
    this.dropFrame(f);
    this.frameOwner[f] = cl;
    this.frameOf[cl] = f;
    // neurons of this cluster read earlier through the cold path give their cold slots back
    for (let i = 0; i < this.C; i++) {
      const s = this.slotOf[cl * this.C + i]!;
      if (s >= 0) {
        this.owner[s] = -1;
        if (this.kept[s]) this.unkeep(s);
        else this.lru.demote(s);
      }
    }
    const B = this.pack.bundleBytes;
    const copies: [number, number, number][] = [];
    for (let i = 0; i < this.C; i++) {
      const g = cl * this.C + i;
      const s = f * this.C + i;
      this.slotOf[g] = s;
      this.state[g] = FULL;
      this.owner[s] = g;
      copies.push(...this.bundleCopies(s, i * B));
    }
    this.queueRead(layer, this.bundleOffset(layer, q * this.C), this.C * B, copies);
    return f;
  }

  private takeColdSlot(g: number): number {
    const s = this.lru.tail;
    if (s < 0) throw new Error("neuron cache: cold region is empty (internal accounting error)");
    this.dropCold(s);
    this.owner[s] = g;
    this.slotOf[g] = s;
    this.lru.touch(s);
    return s;
  }

  /** Queue one read of `len` bytes at fileOff, then copies [arenaOff, offsetInRead, len]; counted in the layer's stats. */
  private queueRead(layer: number, fileOff: number, len: number, copies: [number, number, number][]) {
    this.run = undefined;
    this.reads.queue(fileOff, len, copies);
    const st = this.stats[layer]!;
    st.bytesRead += len;
    st.reads++;
  }

  /**
   * Queue the `len` bytes at offset `within` of bundle p (a gate block, or an up+down block) with
   * one copy [arenaOff, offsetInBlock, n]. When the last read queued is the same block of bundle
   * p−1, that read grows by one bundle instead (the blocks in between come along unused): a run
   * of adjacent misses is one request, and a pack ordered by co-activation makes runs.
   */
  private queueBundleRead(layer: number, p: number, within: number, len: number, copy: [number, number, number]) {
    const r = this.run;
    const B = this.pack.bundleBytes;
    if (r && r.layer === layer && r.within === within && r.len === len && r.p === p - 1 && this.reads.extendLast(B, [[copy[0], (p - r.p0) * B + copy[1], copy[2]]])) {
      r.p = p;
      this.stats[layer]!.bytesRead += B;
      return;
    }
    this.queueRead(layer, this.bundleOffset(layer, p) + within, len, [copy]);
    this.run = { layer, within, len, p0: p, p };
  }

  private flush() {
    this.run = undefined;
    this.reads.flush();
  }
}
