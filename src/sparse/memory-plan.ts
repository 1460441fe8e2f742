// The memory plan of a sparse model under a hard budget (`--memory`): what the fixed region
// costs, what is left for FFN neurons, and how that is split into the hot region (clusters of
// the most active neurons, per-cluster LRU) and the cold region (single neurons, per-neuron LRU).
// Every byte the process holds for the model is in one of these lines, and all of it lives in
// native buffers so that residency can be measured (native().residentBytes).
import type { ModelConfig } from "../model/config.js";
import { runStateBytes, kvCacheBytes } from "../model/forward.js";
import type { TensorInfo } from "../gguf/reader.js";
import type { Pack } from "./pack/format.js";
import { ffnScratchBytes } from "./ffn/layout.js";
import { formatBytes, parseBytes } from "../util/bytes.js";

export { formatBytes, parseBytes };

export interface PlanOptions {
  /** Context length of the one session the plan holds (KV cache). */
  contextSize: number;
  /** Tokens per forward batch (run-state scratch). */
  batchSize: number;
  /** Neurons per hot cluster (one sequential read). */
  clusterSize: number;
  /** Largest share of the neuron cache given to hot clusters; the rest is the cold region. */
  hotShare: number;
  /**
   * A non-resident hot cluster is read whole when at least this share of it is predicted; else its
   * neurons go the cold path. Absent (the default): the hot region holds the clusters the load put
   * there and no others, as the planner models it.
   */
  clusterAdmit?: number;
  /** Neurons handled per I/O batch in the cold path (staging buffer size). */
  stagingNeurons: number;
  /** Predictors held in memory (false: the oracle computes every gate and needs none). */
  predictor: boolean;
  /**
   * Keep the gate row of every neuron resident and cache only up+down rows ("auto": when the
   * gate rows take at most `pinGatesShare` of the neuron cache). A predicted neuron then costs
   * no read unless it fires: with a predictor that flags ~4× the neurons that fire, most reads
   * were gate rows of neurons that stayed silent (7B, 50% offloaded: 1,165 of 1,225 reads per
   * layer and token).
   */
  pinGates: boolean | "auto";
  pinGatesShare: number;
  /**
   * Neurons the read-ahead staging holds (the inline decoder reads the next layers' likely-firing
   * neurons in the background while this layer computes: up+down blocks with pinned gate rows,
   * whole bundles with readAheadBundles); default
   * min(1024, n_ff/8), 0: no reads ahead (the other decoders). Its staging is part of the fixed
   * region's I/O staging line.
   */
  readAheadNeurons: number;
  /** Reads ahead only when their staging is at most this share of the neuron cache (on a small model the staging costs more hits than reading ahead saves). */
  readAheadMaxShare: number;
  /** Without pinned gate rows, read whole bundles ahead (readAheadNeurons of them) when the plan or the user asks for reads ahead; default false. */
  readAheadBundles: boolean;
  /**
   * Share of the cold region that keeps the most-used cold neurons (by the profile, NeuronCache.coldUse) for good,
   * loaded at start; the rest is the LRU list that misses go through. 0 (the default): all of it
   * LRU. An LRU keeps what was used lately, and a token brings thousands of neurons it may not
   * use again soon: on the 7B, keeping 92% cut the misses of cached gate rows by a fifth.
   */
  coldKeep: number;
}

/** Neurons per batch of reads ahead when none is given: min(1024, n_ff/8). */
export const defaultReadAheadNeurons = (cfg: ModelConfig) => Math.min(1024, Math.ceil(cfg.nFF / 8));

/** Reads ahead by default only when their staging is at most this share of the neuron cache. */
export const READ_AHEAD_MAX_SHARE = 0.05;

/** Plan options with loadSparseModel's defaults for what is not given. */
export function planOptions(cfg: ModelConfig, o: Partial<PlanOptions> = {}): PlanOptions {
  return {
    contextSize: o.contextSize ?? Math.min(cfg.nCtxTrain, 2048),
    batchSize: o.batchSize ?? 32,
    clusterSize: o.clusterSize ?? 32,
    hotShare: o.hotShare ?? 0.75,
    ...(o.clusterAdmit !== undefined && { clusterAdmit: o.clusterAdmit }),
    stagingNeurons: o.stagingNeurons ?? 256,
    predictor: o.predictor ?? true,
    pinGates: o.pinGates ?? "auto",
    pinGatesShare: o.pinGatesShare ?? 0.75,
    readAheadNeurons: o.readAheadNeurons ?? defaultReadAheadNeurons(cfg),
    readAheadMaxShare: o.readAheadMaxShare ?? READ_AHEAD_MAX_SHARE,
    readAheadBundles: o.readAheadBundles ?? false,
    coldKeep: o.coldKeep ?? 0,
  };
}

export interface MemoryPlan {
  budget: number;
  /** Fixed region, by part (bytes, page-rounded as allocated). */
  fixed: { weights: number; predictors: number; kvCache: number; runState: number; staging: number; scratch: number; cacheTables: number };
  fixedTotal: number;
  /** Usable bytes of the I/O staging buffer: whole bundles, at least one hot cluster. */
  stagingBytes: number;
  /** Bytes of the read-ahead staging buffer (readAheadNeurons up+down blocks; 0: none). */
  readAheadBytes: number;
  /** Bytes of one cache slot, 64-byte rounded: gate row + up row + down column, or up + down with pinned gates. */
  slotBytes: number;
  /** Gate rows of all neurons resident (gateRegion bytes, rows of gateRowBytes); slots then hold up+down only. */
  gatesPinned: boolean;
  gateRowBytes: number;
  gateRegion: number;
  /** Neuron cache: slots, of which hotSlots (= hotFrames × clusterSize) in the hot region. */
  slots: number;
  hotSlots: number;
  hotFrames: number;
  coldSlots: number;
  /** Of the cold slots, those keeping the most-used cold neurons for good (options.coldKeep); the others are the LRU list. */
  coldKept: number;
  clusterSize: number;
  totalNeurons: number;
  /** Share of the FFN's bytes the cache holds (1 = everything resident, no I/O). */
  ffnResident: number;
  options: PlanOptions;
}

export const PAGE = 4096;
const LABELS = { weights: "weights", predictors: "predictors", kvCache: "KV cache", runState: "run state", staging: "I/O staging", scratch: "scratch", cacheTables: "cache tables" };
/** Bytes native().alloc(nbytes) takes: whole pages, with 64 bytes of slack. */
export const pageRound = (b: number) => Math.ceil((b + 64) / PAGE) * PAGE;

/**
 * Where the fixed-region tensors of a pack go in the one native buffer loadSparseModel reads
 * them into: back to back, each 64-byte aligned. The plan counts exactly this many bytes.
 */
export function fixedLayout(pack: Pack): { tensors: TensorInfo[]; offsets: Map<string, number>; bytes: number } {
  const tensors = pack.file.tensors.filter((t) => isFixedTensor(t.name));
  const offsets = new Map<string, number>();
  let bytes = 0;
  for (const t of tensors) {
    offsets.set(t.name, bytes);
    bytes += Math.ceil(t.nbytes / 64) * 64;
  }
  return { tensors, offsets, bytes };
}

/** Tensors the sparse model holds in memory from a pack: everything except bundles, order, counts and predictors. */
export function isFixedTensor(name: string): boolean {
  return !/^blk\.\d+\.(ffn_bundles|ffn_order|act_count|fc1\.weight|fc2\.weight)$/.test(name);
}

/** Norm vectors not stored as F32 are converted into small native copies at load (weights.ts). */
function normCopyBytes(pack: Pack): number {
  let b = 0;
  for (const t of pack.file.tensors) {
    if (isFixedTensor(t.name) && /norm\.weight$/.test(t.name) && t.type !== 0) b += pageRound(t.ne[0]! * 4);
  }
  return b;
}

export function slotBytesOf(pack: Pack): number {
  return Math.ceil((pack.gateBytes + pack.upBytes + pack.downBytes) / 64) * 64;
}

/** A slot holding up row + down column only (gates pinned). */
export function upDownSlotBytesOf(pack: Pack): number {
  return Math.ceil((pack.upBytes + pack.downBytes) / 64) * 64;
}

export function predictorBytes(pack: Pack): number {
  if (!pack.predictor) return 0;
  let b = 0;
  for (const l of pack.predictor) b += l.fc1Bytes + l.fc2Bytes + (l.thresholdsOffset >= 0 ? pack.config.nFF * 4 : 0);
  return b;
}

/** Per-token sparse-FFN scratch (ffn/layout.ts createFfnScratch). */
function scratchBytes(cfg: ModelConfig, batchSize: number): number {
  return pageRound(ffnScratchBytes(cfg.nFF, cfg.nEmbd, batchSize));
}

function tableBytes(pack: Pack, slots: number, hotFrames: number, clusterSize: number): number {
  const { nLayer, nFF } = pack.config;
  const clusters = nLayer * Math.ceil(nFF / clusterSize);
  // slotOf + state per neuron, owner + LRU links per slot, frameOf per cluster, owner + lastUse per frame
  return pageRound(nLayer * nFF * 5 + slots * 12 + clusters * 4 + hotFrames * 8);
}

/**
 * Split `budget` bytes. Throws, with the numbers, when the budget cannot hold the fixed region
 * plus a minimal neuron cache (one hot cluster and one staging batch of cold neurons).
 */
export function planMemory(pack: Pack, budget: number, opts: PlanOptions): MemoryPlan {
  const cfg = pack.config;
  const totalNeurons = cfg.nLayer * cfg.nFF;
  const C = clusterSizeFor(cfg.nFF, opts.clusterSize);
  const stagingBytes = Math.max(opts.stagingNeurons, C) * pack.bundleBytes;
  const fixed = {
    weights: pageRound(Math.max(1, fixedLayout(pack).bytes)) + normCopyBytes(pack),
    predictors: opts.predictor ? pageRound(predictorBytes(pack)) : 0,
    kvCache: pageRound(kvCacheBytes(cfg, opts.contextSize)),
    runState: pageRound(runStateBytes(cfg, opts.batchSize)),
    staging: pageRound(stagingBytes),
    scratch: scratchBytes(cfg, opts.batchSize),
    cacheTables: 0,
  };
  let fixedNoTables = Object.values(fixed).reduce((a, b) => a + b, 0);
  const minSlots = C + opts.stagingNeurons;
  // gate rows pinned or not: decided on the bytes left for the neuron cache
  const fullSlot = slotBytesOf(pack);
  const gateRowBytes = Math.ceil(pack.gateBytes / 64) * 64;
  const gateAll = pageRound(totalNeurons * gateRowBytes);
  let cacheBytes = budget - fixedNoTables - tableBytes(pack, 0, 0, C) - PAGE * 2;
  const udSlot = upDownSlotBytesOf(pack);
  // `extra` bytes (and pinned gate rows) leave room for the smallest cache of that layout
  const cacheFits = (extra: number, pinned: boolean) => cacheBytes - extra - (pinned ? gateAll : 0) >= minSlots * (pinned ? udSlot : fullSlot) + tableBytes(pack, minSlots, 1, C);
  const pinFits = cacheFits(0, true);
  const wholeFits = fixedNoTables + tableBytes(pack, totalNeurons, totalNeurons / C, C) + pageRound(totalNeurons * fullSlot) <= budget;
  if (opts.pinGates === true && !pinFits) {
    throw new RangeError(
      `memory budget ${formatBytes(budget)}: pinned gate rows (${totalNeurons} × ${gateRowBytes} B = ${formatBytes(gateAll)}) plus the smallest up+down cache (${minSlots} × ${udSlot} B) do not fit the ${formatBytes(Math.max(0, cacheBytes))} left for the neuron cache; raise the budget or let the plan decide (pinGates "auto")`,
    );
  }
  const gatesPinned = opts.pinGates === true || (opts.pinGates === "auto" && pinFits && !wholeFits && gateAll <= opts.pinGatesShare * cacheBytes);
  // reads ahead: up+down blocks with gate rows pinned, whole bundles when asked for (and the
  // whole FFN does not fit); their staging is taken from the cache, and is worth it only when it
  // is a small share of the neuron cache and the smallest cache still fits beside it
  const aheadBlock = gatesPinned ? pack.upDownBlock : opts.readAheadBundles && !wholeFits ? pack.bundleBytes : 0;
  const ahead = pageRound(opts.readAheadNeurons * aheadBlock);
  const aheadShare = opts.readAheadMaxShare * (cacheBytes - (gatesPinned ? gateAll : 0));
  const readAheadBytes = opts.readAheadNeurons > 0 && aheadBlock > 0 && cacheFits(ahead, gatesPinned) && ahead <= aheadShare ? ahead : 0;
  fixed.staging += readAheadBytes;
  fixedNoTables += readAheadBytes;
  cacheBytes -= readAheadBytes;
  const gateRegion = gatesPinned ? gateAll : 0;
  const slotBytes = gatesPinned ? udSlot : fullSlot;
  const minCache = minSlots * slotBytes + gateRegion;
  // the arena is one allocation: page-rounded
  const arenaFor = (slots: number) => pageRound(slots * slotBytes);
  let slots = Math.min(totalNeurons, Math.floor((cacheBytes - gateRegion) / slotBytes));
  const refuse = () => {
    const parts = Object.entries(fixed)
      .filter(([, v]) => v > 0)
      .map(([k, v]) => `${LABELS[k as keyof typeof LABELS]} ${formatBytes(v)}`)
      .join(" + ");
    const need = fixedNoTables + tableBytes(pack, minSlots, 1, C) + arenaFor(minSlots) + gateRegion;
    return new RangeError(
      `memory budget ${formatBytes(budget)} (${budget} bytes) cannot hold this model: the fixed region needs ${parts} = ${formatBytes(fixedNoTables)}, ` +
        `and the neuron cache at least ${minSlots} neurons × ${slotBytes} B${gatesPinned ? ` + pinned gate rows ${formatBytes(gateRegion)}` : ""} = ${formatBytes(minCache)}; ` +
        `the smallest workable budget is ${formatBytes(need)} (${need} bytes). The whole FFN is ${formatBytes(totalNeurons * fullSlot)}.`,
    );
  };
  if (slots < minSlots && slots < totalNeurons) throw refuse();
  // shrink until gate rows + arena + tables fit exactly
  for (;;) {
    const used = fixedNoTables + tableBytes(pack, slots, Math.floor(slots / C), C) + arenaFor(slots) + gateRegion;
    if (used <= budget) break;
    slots -= Math.max(1, Math.ceil((used - budget) / slotBytes));
    if (slots < minSlots && slots < totalNeurons) throw refuse();
  }
  let hotFrames: number;
  if (slots >= totalNeurons) {
    // everything resident: every cluster of every layer in the hot region, never evicted
    hotFrames = totalNeurons / C;
  } else {
    const hotWanted = pack.layers.reduce((a, l) => a + Math.ceil(l.hotCount / C), 0);
    hotFrames = Math.min(hotWanted, Math.floor((slots * opts.hotShare) / C));
    // the cold region must hold at least one staging batch
    while (hotFrames > 0 && slots - hotFrames * C < opts.stagingNeurons) hotFrames--;
  }
  const hotSlots = hotFrames * C;
  // the LRU keeps room for a staging batch and the reads ahead (which hold at most half of it)
  const lruMin = opts.stagingNeurons + 2 * (readAheadBytes > 0 ? opts.readAheadNeurons : 0);
  const coldKept = Math.max(0, Math.min(Math.floor((slots - hotSlots) * opts.coldKeep), slots - hotSlots - lruMin));
  fixed.cacheTables = tableBytes(pack, slots, hotFrames, C);
  const fixedTotal = Object.values(fixed).reduce((a, b) => a + b, 0);
  const bundle = pack.gateBytes + pack.upBytes + pack.downBytes;
  const resident = gatesPinned
    ? (totalNeurons * pack.gateBytes + slots * (pack.upBytes + pack.downBytes)) / (totalNeurons * bundle)
    : slots / totalNeurons;
  return {
    budget,
    fixed,
    fixedTotal,
    stagingBytes,
    readAheadBytes,
    slotBytes,
    gatesPinned,
    gateRowBytes,
    gateRegion,
    slots,
    hotSlots,
    hotFrames,
    coldSlots: slots - hotSlots,
    coldKept,
    clusterSize: C,
    totalNeurons,
    ffnResident: resident,
    options: opts,
  };
}

/** The largest divisor of nFF not above the requested cluster size, so every cluster is whole. */
export function clusterSizeFor(nFF: number, requested: number): number {
  for (let c = Math.max(1, Math.min(requested, nFF)); c > 1; c--) if (nFF % c === 0) return c;
  return 1;
}

/** The budget at which the cache holds `fraction` of all FFN neurons (tests, benchmarks, `--ffn-resident`). */
export function budgetForFfnFraction(pack: Pack, fraction: number, opts: PlanOptions): number {
  const cfg = pack.config;
  const total = cfg.nLayer * cfg.nFF;
  const C = clusterSizeFor(cfg.nFF, opts.clusterSize);
  const slots = Math.min(total, Math.ceil(fraction * total));
  const probe = planMemory(pack, Number.MAX_SAFE_INTEGER, opts);
  const fixedNoTables = probe.fixedTotal - probe.fixed.cacheTables;
  return fixedNoTables + tableBytes(pack, slots, Math.floor(slots / C), C) + pageRound(slots * slotBytesOf(pack)) + 2 * PAGE;
}

export function describePlan(p: MemoryPlan): string {
  const f = p.fixed;
  return [
    `${p.budget >= 2 ** 52 ? "no memory budget (--memory not given: the whole FFN resident)" : `memory budget ${formatBytes(p.budget)}`}: fixed region ${formatBytes(p.fixedTotal)} (weights ${formatBytes(f.weights)}, predictors ${formatBytes(f.predictors)}, KV cache ${formatBytes(f.kvCache)}, run state ${formatBytes(f.runState)}, I/O staging ${formatBytes(f.staging)}${p.readAheadBytes ? ` of which read-ahead ${formatBytes(p.readAheadBytes)}` : ""}, scratch ${formatBytes(f.scratch)}, cache tables ${formatBytes(f.cacheTables)})`,
    p.gatesPinned
      ? `neuron cache ${formatBytes(p.gateRegion + p.slots * p.slotBytes)}: gate rows of all ${p.totalNeurons} neurons pinned (${formatBytes(p.gateRegion)}), up+down rows of ${p.slots} (${(100 * p.ffnResident).toFixed(1)}% of the FFN's bytes), hot region ${p.hotFrames} clusters × ${p.clusterSize} neurons, cold region ${p.coldSlots} neurons; ${p.slotBytes} B per up+down slot`
      : `neuron cache ${formatBytes(p.slots * p.slotBytes)}: ${p.slots} of ${p.totalNeurons} neurons (${(100 * p.ffnResident).toFixed(1)}% of the FFN), hot region ${p.hotFrames} clusters × ${p.clusterSize} neurons, cold region ${p.coldSlots} neurons; ${p.slotBytes} B per neuron`,
  ].join("\n");
}
