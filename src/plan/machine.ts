// What this machine can move per second: memory read bandwidth on 1..N pool threads, and a
// file's direct-I/O throughput (large sequential reads) and 4 KiB random-read rate at depth 32.
// These are the bounds of the per-token time budget (`trace stats`): a step that touched B bytes
// cannot take less than B / bandwidth. `neuronpipe probe` adds what a planner needs: reads by
// block size and queue depth, each kernel's throughput per weight type, and message round trips
// between threads. Measured once, cached per host (docs/formats.md, "machine.json").
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import { dirname, join, resolve } from "node:path";
import { native } from "../native.js";
import { lcg } from "../util/lcg.js";

export interface MemoryBound {
  threads: number;
  /** Best of the repetitions, GB/s (10⁹ bytes). */
  readGBps: number;
}

export interface DiskBound {
  path: string;
  backend: "uring" | "pread";
  directIO: boolean;
  /** 4 MiB reads (a quarter of a smaller file), 4 in flight, GB/s. */
  sequentialGBps: number;
  /** 4 KiB reads at random 4 KiB-aligned offsets in the file's first 2 GiB, 32 in flight, per second. */
  random4kIops: number;
  queueDepth: number;
  /** `probe`: reads by kind, block size and queue depth (direct I/O). */
  rates?: ReadRate[];
}

/** Reads per call of a read-rate point without `batch`: 4 × its depth (at least 16), so that most reads are refills of a full queue. */
export const steadyBatch = (queueDepth: number) => Math.max(queueDepth * 4, 16);

/** Reads per call of a read-rate row or probe point: its batch, else a full queue's refills. */
export const readsPerCall = (r: { batch?: number; queueDepth: number }) => r.batch ?? steadyBatch(r.queueDepth);

export interface ReadRate {
  kind: "sequential" | "random";
  blockBytes: number;
  queueDepth: number;
  /** Reads per call (one batch submitted together and waited for): absent, 4 × the depth (at least 16), what the read rate at that depth means; set, a decoder's batch of that size. */
  batch?: number;
  readsPerSecond: number;
  GBps: number;
}

/** `probe`: a kernel's throughput on one weight type, on all pool threads: weight bytes per second (matvec, gather, axpy) or FLOP per second (matmul). */
export interface KernelRate {
  type: "F32" | "F16" | "Q8_0" | "Q4_0";
  kernel: "matvec" | "gather" | "axpy" | "matmul";
  threads: number;
  GBps?: number;
  GFLOPs?: number;
}

/**
 * `probe`: the Q4_0 matvec over a working set of `bytes` (4096×4096 matrices one after another):
 * weight bytes per second. What a kernel reads per second depends on how much it cycles through,
 * far beyond the last-level cache too (this VM: 126 MiB at ~49 GB/s, 1.4 GiB at ~41); the time
 * model scales the kernel table (measured over 128 MiB) by this curve at the bytes a token touches.
 */
export interface WorkingSetRate {
  bytes: number;
  GBps: number;
}

/**
 * `probe`: the Q4_0 matvec on matrices of one shape (rows × cols), cycling through ≥ 128 MiB of
 * them, weight bytes per second. Beyond its bytes a call costs per row (each row's reduction
 * and store) and per call (waking the kernel threads, ramping the hardware prefetch): on this VM
 * a 1024×1024 matrix read at ~14 GB/s where 4096×4096 read at ~26. The time model fits both
 * costs from these (rates.ts `callCosts`).
 */
export interface ShapeRate {
  rows: number;
  cols: number;
  GBps: number;
}

/**
 * A model's dense steps timed on this machine (dense-steps.ts): µs per token of attention's
 * matvecs (every layer) and of the classifier, for one set of matrix shapes and types (`key`) on
 * `threads` pool threads, at the probe's speed (measured µs × the phase then: what they take
 * when the machine runs as it did when probed).
 */
export interface DenseStepRate {
  key: string;
  threads: number;
  attentionUs: number;
  /** Attention's scores and sums over the KV cache, all layers: µs per token at position 0, and µs more per position of the context (absent: older probes). */
  scoresUs?: number;
  positionUs?: number;
  outputUs: number;
  /** A pack's trained predictor, all layers (when the key names one). */
  predictorUs?: number;
  /** A pack's sparse FFN at the key's rates, all layers: gate rows gathered; up rows gathered, activations and down rows accumulated (when the key names one). */
  gateUs?: number;
  upDownUs?: number;
  measuredAt: string;
}

/** The µs figures of a DenseStepRate (a phase scales each; the calibration takes each one's median over its rounds). */
export const DENSE_STEP_TIMES = ["attentionUs", "scoresUs", "positionUs", "outputUs", "predictorUs", "gateUs", "upDownUs"] as const satisfies readonly (keyof DenseStepRate)[];

/** A phase check (phase.ts): how fast the machine runs now against its probe, now ÷ probed (> 1: faster). */
export interface MachinePhase {
  /** The Q4_0 matvec at the probe's working set `workingSet` (bytes). */
  memory: number;
  workingSet: number;
  /** 4 KiB random reads at depth 32 on the probe's file (1 when the probe has no such point or the file is gone). */
  reads: number;
  measuredAt: string;
}

/** `probe`: a message from one thread to another and back, median µs. */
export interface MessageRates {
  postMessageUs: number;
  atomicsUs: number;
}

/**
 * `probe`: a decoder's own cost per token on this machine, beside its kernels and reads: µs per
 * layer, ns per flagged neuron (cache lookups, chunking, task messages), µs per read batch and per
 * read request beyond the probe's read rates. Fitted on the shipped model's pack from runs with
 * the whole FFN resident (trained predictor, oracle) and with a quarter and a half of it, and more
 * for inline (tools/calibrate.ts): what the kernels and reads of the planner's time model do not explain.
 */
export interface DecoderCalibration {
  layerUs: number;
  neuronNs: number;
  /** µs each read batch (a layer's reads of one kind, submitted together and waited for) costs the decoder beyond the probe's rates: handing it to the loader, waking for its completion. Absent (older probes): 0. */
  batchUs?: number;
  /** µs each read request costs the decoder beyond the probe's rates (choosing its slot, submitting, completing, placing it). */
  requestUs: number;
  /** Inline decoder with reads ahead: ns per flagged neuron of the layer looked ahead (choosing which of them to read; the extra predictor pass and gate rows are modelled from bytes). */
  aheadNeuronNs?: number;
  /**
   * Inline decoder with gate rows pinned: µs per layer beyond the unpinned layer's (the gate rows
   * gathered from their own region, apart from the up+down slots). Resident on the shipped model,
   * pinned runs took 392–460 µs a token where unpinned took 325–387 in four of five probes, and
   * a fit without it put the unpinned token 6–16% slow; with it (and relative errors), within 2%.
   * Absent (older probes): 0.
   */
  pinnedLayerUs?: number;
  /** The runs it was fitted on: flagged neurons per token, measured µs per token, modelled µs per token with none of these costs, and how many µs one unit of each cost adds to that run's token (the fit's columns). */
  runs?: CalibrationRun[];
}

/** The costs a decoder's calibration fits. */
export const DECODER_COSTS = ["layerUs", "neuronNs", "batchUs", "requestUs", "aheadNeuronNs", "pinnedLayerUs"] as const;
export type DecoderCost = (typeof DECODER_COSTS)[number];

/** The costs fitted for a decoder: reads ahead and pinned gate rows are inline's alone (the pipeline's five runs would determine a sixth cost exactly, not fit it). */
export const decoderCosts = (decoder: string): DecoderCost[] => DECODER_COSTS.filter((k) => decoder === "inline" || (k !== "aheadNeuronNs" && k !== "pinnedLayerUs"));

export interface CalibrationRun {
  flagged: number;
  measuredUs: number;
  modelledUs: number;
  /** Read requests per token: as the decoder counted them, and as the cache model forecast them (older probes: absent). */
  measuredReads?: number;
  forecastReads?: number;
  /** Older probes: absent. */
  perUnit?: Record<DecoderCost, number>;
}

export interface MachineBounds {
  version: 2;
  measuredAt: string;
  host: string;
  cpu: string;
  memory: MemoryBound[];
  disk?: DiskBound;
  kernels?: KernelRate[];
  /** `probe`: the Q4_0 matvec by working set (bytes ascending). */
  workingSets?: WorkingSetRate[];
  /** `probe`: the Q4_0 matvec by matrix shape, out of the last-level cache. */
  shapes?: ShapeRate[];
  messages?: MessageRates;
  decoders?: Partial<Record<"inline" | "pipeline" | "blocking", DecoderCalibration>>;
  /** `probe`: rounds of each calibration run the decoders' and attention's costs are medians of (`probe --rounds`). */
  calibrationRounds?: number;
  /** `probe`: attention's cost per query head and position beyond its KV bytes (tools/calibrate.ts). */
  attention?: AttentionCalibration;
  /** The dense steps of the models planned on this machine, timed once per shape set (dense-steps.ts). */
  denseSteps?: DenseStepRate[];
  /** Set by phase.ts `atPhase`: the rates above are the probe's scaled by this phase check. */
  phase?: MachinePhase;
}

/**
 * `probe`: what attention costs per query head per position of the context beyond reading the KV
 * cache (scoring, softmax, summing: small heads are compute, not bandwidth), fitted from the
 * shipped model's decode at two ranges of positions (the slope of µs per token over position).
 */
export interface AttentionCalibration {
  headPositionNs: number;
  /** The two ranges: mean position, measured µs per token, modelled µs per token before this calibration. */
  runs: { position: number; measuredUs: number; modelledUs: number }[];
}

const MiB = 2 ** 20;

/** Memory read bandwidth: sums a buffer far larger than the caches, best of `reps`, on 1 and `maxThreads` threads. */
export function measureMemory(opts: { bytes?: number; reps?: number; maxThreads?: number } = {}): MemoryBound[] {
  const n = native();
  const bytes = opts.bytes ?? 512 * MiB;
  const reps = opts.reps ?? 5;
  const maxThreads = opts.maxThreads ?? n.getThreads();
  const buf = n.alloc(bytes);
  try {
    n.viewU8(buf, 0, bytes).fill(1); // touch every page first
    const out: MemoryBound[] = [];
    for (let threads = 1; threads <= maxThreads; threads++) {
      let best = Infinity;
      n.readBandwidth(buf, bytes, threads); // warm
      for (let r = 0; r < reps; r++) {
        const t0 = performance.now();
        n.readBandwidth(buf, bytes, threads);
        best = Math.min(best, performance.now() - t0);
      }
      out.push({ threads, readGBps: bytes / (best / 1000) / 1e9 });
    }
    return out;
  } finally {
    n.free(buf);
  }
}

/** Direct-I/O reads of `path`: sequential 4 MiB reads over up to `seqBytes`, then `randomReads` 4 KiB reads at seeded random offsets. */
export function measureDisk(path: string, opts: { seqBytes?: number; randomReads?: number; queueDepth?: number } = {}): DiskBound {
  const n = native();
  const size = statSync(path).size;
  const page = 4096;
  if (size < 64 * page) throw new Error(`${path}: ${size} bytes is too small to measure reads on (need ≥ 256 KiB)`);
  const queueDepth = opts.queueDepth ?? 32;
  const id = n.openLoader(path, { backend: "auto", queueDepth, directIO: true });
  const chunk = 4 * MiB;
  const buf = n.alloc(4 * chunk + page);
  try {
    const info = n.loaderInfo(id);
    // sequential: 4 MiB requests (smaller for a small file), 4 per batch, from the start of the
    // file round again until seqBytes were read (direct I/O: each pass reads the device again)
    const seqBytes = opts.seqBytes ?? 512 * MiB;
    const len = Math.min(chunk, Math.floor(size / 4 / page) * page);
    const perPass = Math.floor(size / len);
    const reqs: number[] = [];
    for (let i = 0; i * len < seqBytes; i++) reqs.push((i % perPass) * len, len, buf, (i % 4) * chunk);
    let t0 = performance.now();
    let seqDone = 0;
    for (let i = 0; i < reqs.length; i += 16) seqDone += n.readBatch(id, Float64Array.from(reqs.slice(i, i + 16)));
    const seqS = (performance.now() - t0) / 1000;
    // random 4 KiB over the first 2 GiB (fio's usual file size; a decode's reads stay within a
    // few layers' bundles at a time, not a whole pack): a fixed LCG so runs read the same offsets
    const pages = Math.floor(Math.min(size, 2 * 1024 * MiB) / page);
    const count = opts.randomReads ?? 20_000;
    const slots = (4 * chunk) / page;
    const random = lcg();
    const rnd = new Float64Array(count * 4);
    for (let i = 0; i < count; i++) {
      rnd.set([(random() % pages) * page, page, buf, (i % slots) * page], i * 4);
    }
    t0 = performance.now();
    const per = 1024;
    for (let i = 0; i < count; i += per) n.readBatch(id, rnd.subarray(i * 4, Math.min(count, i + per) * 4));
    const rndS = (performance.now() - t0) / 1000;
    return { path: resolve(path), backend: info.backend, directIO: info.directIO, sequentialGBps: seqDone / seqS / 1e9, random4kIops: count / rndS, queueDepth };
  } finally {
    n.free(buf);
    n.closeLoader(id);
  }
}

/** Where measured bounds are kept: $NEURONPIPE_CACHE_DIR, else $XDG_CACHE_HOME/neuronpipe, else ~/.cache/neuronpipe. */
export function machineCachePath(): string {
  const dir = process.env.NEURONPIPE_CACHE_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(os.homedir(), ".cache"), "neuronpipe");
  return join(dir, "machine.json");
}

/** This host's name and CPU (a cache entry is this host's when both match). */
export function machineIdentity(): { host: string; cpu: string } {
  return { host: os.hostname(), cpu: `${os.cpus()[0]?.model ?? "unknown"} ×${os.cpus().length}` };
}

/** The cached bounds of this host (same host name and CPU), or undefined. */
export function cachedMachine(path = machineCachePath()): MachineBounds | undefined {
  if (!existsSync(path)) return undefined;
  try {
    const b = JSON.parse(readFileSync(path, "utf8")) as MachineBounds;
    const me = machineIdentity();
    return b.version === 2 && b.host === me.host && b.cpu === me.cpu && Array.isArray(b.memory) ? b : undefined;
  } catch {
    return undefined; // unreadable: measured again and rewritten
  }
}

/** Keep bounds in the cache (a read-only home: they are still returned, just not kept). */
export function keepMachine(b: MachineBounds, path: string): void {
  try {
    mkdirSync(dirname(path), { recursive: true });
    // written whole and renamed over: a load in another process (a plan timing its model's dense
    // steps) never reads half a file, which it would take for no probe and measure a brief one over
    const tmp = `${path}.${process.pid}.${Date.now()}.tmp`;
    try {
      writeFileSync(tmp, JSON.stringify(b, null, 2) + "\n");
      renameSync(tmp, path);
    } finally {
      rmSync(tmp, { force: true });
    }
  } catch {
    // not kept
  }
}

/** This host's memory (and the disk, on `diskFile`): the bounds, not kept. */
export function measureBounds(diskFile?: string): MachineBounds {
  const b: MachineBounds = { version: 2, measuredAt: new Date().toISOString(), ...machineIdentity(), memory: measureMemory() };
  if (diskFile) b.disk = measureDisk(diskFile);
  return b;
}

/** Measure memory (and the disk, on `diskFile`), cache the result, return it. */
export function measureMachine(opts: { diskFile?: string; cachePath?: string } = {}): MachineBounds {
  const b = measureBounds(opts.diskFile);
  keepMachine(b, opts.cachePath ?? machineCachePath());
  return b;
}

/** The best memory read bandwidth measured, on any thread count (the most a decode could reach), bytes/µs. */
export function memoryBytesPerUs(b: MachineBounds): number {
  return Math.max(...b.memory.map((m) => m.readGBps)) * 1e3;
}
