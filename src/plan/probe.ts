// neuronpipe probe: everything the offline planner needs to know about this machine, measured
// once and cached with the bounds (machine.ts): memory read bandwidth on 1..N threads; direct-I/O
// reads by kind, block size and queue depth on the model's file system; each kernel's throughput
// per weight type (matvec, the sparse gather and axpy, the prefill matmul); and how long a message
// takes from one thread to another and back (postMessage, and Atomics wait/notify).
import { statSync } from "node:fs";
import { Worker } from "node:worker_threads";
import { GGMLType, native } from "../native.js";
import { lcg } from "../util/lcg.js";
import { median } from "../util/median.js";
import { keepMachine, machineCachePath, measureBounds, readsPerCall, steadyBatch, type KernelRate, type MachineBounds, type MessageRates, type ReadRate, type ShapeRate, type WorkingSetRate } from "./machine.js";

const MiB = 2 ** 20;

export interface ProbeOptions {
  /** A file on the storage to measure (a model or pack you run); no storage figures without it. */
  diskFile?: string;
  cachePath?: string;
  /** Seconds per measured point (default 0.15). */
  seconds?: number;
  onProgress?: (done: number, total: number, what: string) => void;
}

/** Repeat `fn` for about `seconds` (after one call not counted); calls per second. */
export function rate(fn: () => void, seconds: number): number {
  fn();
  let n = 0;
  const t0 = performance.now();
  let el = 0;
  while (el < seconds * 1000) {
    fn();
    n++;
    el = performance.now() - t0;
  }
  return n / (el / 1000);
}

/** A point of the read table: what kind of read, how large, how many in flight. */
export type ReadPoint = Pick<ReadRate, "kind" | "blockBytes" | "queueDepth" | "batch">;

/**
 * The probe's read table: sequential 128 KiB–4 MiB at depth 4; random 4–64 KiB at depths 1–128;
 * and random 4, 8 and 64 KiB batches of 1–256 reads at depths 8, 32 and 128, as a decoder submits
 * them (a batch of 48 at depth 32 refills 16 as the first complete: measured 892 µs, against 700
 * at depth 128, where the rates of full queues differ by 3%).
 */
const READ_POINTS: readonly ReadPoint[] = [
  ...[128 * 1024, MiB, 4 * MiB].map((blockBytes) => ({ kind: "sequential" as const, blockBytes, queueDepth: 4 })),
  ...[4096, 8192, 16384, 65536].flatMap((blockBytes) => [1, 8, 32, 128].map((queueDepth) => ({ kind: "random" as const, blockBytes, queueDepth }))),
  ...[4096, 8192, 65536].flatMap((blockBytes) =>
    [8, 32, 128].flatMap((queueDepth) =>
      [1, 4, 16, 32, 64, 128, 256].filter((batch) => batch < steadyBatch(queueDepth)).map((batch) => ({ kind: "random" as const, blockBytes, queueDepth, batch })),
    ),
  ),
];

/** Reads of `path` at `points` (the probe's table by default): a loader per point; random offsets from a fixed LCG within the first 2 GiB. */
export function measureReadRates(path: string, seconds = 0.15, points: readonly ReadPoint[] = READ_POINTS): ReadRate[] {
  const n = native();
  const size = statSync(path).size;
  const out: ReadRate[] = [];
  const buf = n.alloc(16 * MiB);
  try {
    for (const p of points) {
      if (size < p.blockBytes * 8) continue;
      const id = n.openLoader(path, { backend: "auto", queueDepth: p.queueDepth, directIO: true });
      try {
        const slots = Math.floor((16 * MiB) / p.blockBytes);
        const batch = readsPerCall(p);
        const blocks = Math.floor(Math.min(size, 2048 * MiB) / p.blockBytes);
        const random = lcg();
        let next = 0;
        const req = new Float64Array(batch * 4);
        const fill = () => {
          for (let i = 0; i < batch; i++) {
            let b: number;
            if (p.kind === "sequential") b = next++ % blocks;
            else b = random() % blocks;
            req.set([b * p.blockBytes, p.blockBytes, buf, (i % slots) * p.blockBytes], i * 4);
          }
        };
        const perSecond = rate(() => {
          fill();
          n.readBatch(id, req);
        }, seconds) * batch;
        out.push({ ...p, readsPerSecond: perSecond, GBps: (perSecond * p.blockBytes) / 1e9 });
      } finally {
        n.closeLoader(id);
      }
    }
  } finally {
    n.free(buf);
  }
  return out;
}

/**
 * Each kernel on each weight type, all pool threads, weights far larger than the caches (≥ 128 MiB,
 * n_embd 4096 rows): matvec (dense rows), gather (matvecRows over a scattered 10% of the rows, in
 * order), axpy (axpyRows over such rows) — weight bytes per second — and matmul (64 tokens over
 * 4096 rows) — FLOP per second. Successive gather/axpy calls take the 10 disjoint tenths in turn,
 * so a call's rows were last touched 128 MiB ago (out of the last-level cache).
 *
 * A pass measures every point once; `rates()` is each point's median over the passes. This
 * machine's memory bandwidth comes in phases (the same matvec read 59 GB/s, then 43 a few seconds
 * later): one pass is a snapshot of a phase, passes spread over the probe give its usual rate,
 * which is what a decode of many seconds gets.
 */
/** The sample with the median value by `by` (the lower middle of an even count). */
function lowerMedian<T>(samples: readonly T[], by: (x: T) => number): T {
  return [...samples].sort((a, b) => by(a) - by(b))[(samples.length - 1) >> 1]!;
}

/**
 * The working sets (in 4096×4096 Q4_0 matrices of 9 MiB, each matvec'd in turn, as a decode does
 * its layers) the Q4_0 matvec is measured over: from within the last-level cache to a 7B's
 * attention. On this machine 9 MiB read at ~70 GB/s, 126 MiB at ~49, 1.4 GiB at ~41.
 */
const WORKING_SET_MATRICES = [1, 3, 8, 14, 56, 160] as const;

/**
 * The matrix shapes (rows × cols) the Q4_0 matvec is measured on, each cycling through 128 MiB
 * of its matrices (the working-set buffer, read as matrices of that shape): a small model's
 * attention (1024²), short and long rows of the same bytes, the 7B's (4096²), a classifier.
 */
const SHAPES = [
  [1024, 1024],
  [4096, 1024],
  [1024, 4096],
  [2048, 2048],
  [4096, 4096],
  [32000, 1024],
] as const;

export class KernelSampler {
  private readonly n = native();
  private readonly cols = 4096;
  private readonly buffers: { name: KernelRate["type"]; t: number; rows: number; rb: number; picked: number; w: number; y: number; idx: number }[] = [];
  private readonly x: number;
  private disposed = false;
  /** Per point (type, kernel), what each pass measured. */
  readonly samples = new Map<string, KernelRate[]>();
  /** Per working set (bytes), the Q4_0 matvec rates each pass measured. */
  readonly workingSetSamples = new Map<number, number[]>();
  /** Per shape ("rows×cols"), the Q4_0 matvec rates each pass measured. */
  readonly shapeSamples = new Map<string, number[]>();
  /** Q4_0 4096×4096 matrices, WORKING_SET_MATRICES.at(-1) of them one after another (0: not measured), and the bytes of one. */
  private matrices = 0;
  private readonly matrixBytes: number;

  /** `types`: the weight types to measure (all four by default). */
  constructor(
    readonly seconds = 0.15,
    types: readonly KernelRate["type"][] = ["Q4_0", "Q8_0", "F16", "F32"],
    workingSets = true,
  ) {
    const { n, cols } = this;
    this.matrixBytes = n.rowBytes(GGMLType.Q4_0, cols) * cols;
    const src = n.alloc(cols * 4 * 64);
    this.x = n.alloc(64 * cols * 4);
    try {
      n.fillUniform(src, 0, cols * 64, 1n, 1);
      n.fillUniform(this.x, 0, cols * 64, 2n, 1);
      for (const name of types) {
        const t = GGMLType[name];
        const rb = n.rowBytes(t, cols);
        const rows = Math.ceil((128 * MiB) / rb / 64) * 64;
        const picked = Math.floor(rows / 10);
        const b = { name, t, rows, rb, picked, w: n.alloc(rows * rb), y: n.alloc(Math.max(rows, 64 * cols) * 4), idx: n.alloc(10 * picked * 4) };
        this.buffers.push(b);
        for (let r = 0; r < rows; r += 64) n.quantize(t, src, 0, b.w, r * rb, 64, cols);
        // tenth s: row i·10 + (i·7 + s) mod 10 of each group of 10 (ascending, scattered)
        const iv = n.viewI32(b.idx, 0, 10 * picked);
        for (let s = 0; s < 10; s++) for (let i = 0; i < picked; i++) iv[s * picked + i] = i * 10 + ((i * 7 + s) % 10);
      }
      if (workingSets) {
        // one 4096×4096 Q4_0 matrix, quantised once and copied: the rates do not depend on the values
        const t = GGMLType.Q4_0;
        const bytes = this.matrixBytes;
        const count = WORKING_SET_MATRICES.at(-1)!;
        this.matrices = n.alloc(count * bytes);
        for (let r = 0; r < cols; r += 64) n.quantize(t, src, 0, this.matrices, r * n.rowBytes(t, cols), 64, cols);
        for (let i = 1; i < count; i++) n.copy(this.matrices, i * bytes, this.matrices, 0, bytes);
      }
    } catch (e) {
      this.dispose();
      throw e;
    } finally {
      n.free(src);
    }
  }

  /** Measure every point once (`points` of `seconds` each). */
  pass(onPoint?: () => void): void {
    const { n, cols, x, seconds } = this;
    const threads = n.getThreads();
    const keep = (r: KernelRate) => {
      const key = `${r.type} ${r.kernel}`;
      this.samples.set(key, [...(this.samples.get(key) ?? []), r]);
      onPoint?.();
    };
    for (const { name, t, rows, rb, picked, w, y, idx } of this.buffers) {
      const coef = x; // any finite values
      const mv = rate(() => n.matvec(t, w, 0, rows, cols, x, 0, y, 0), seconds);
      keep({ type: name, kernel: "matvec", threads, GBps: (mv * rows * rb) / 1e9 });
      let call = 0;
      const g = rate(() => n.matvecRows(t, w, 0, rows, cols, idx, (call++ % 10) * picked * 4, picked, x, 0, y, 0), seconds);
      keep({ type: name, kernel: "gather", threads, GBps: (g * picked * rb) / 1e9 });
      const a = rate(() => n.axpyRows(t, w, 0, rows, cols, idx, (call++ % 10) * picked * 4, picked, coef, 0, y, 0), seconds);
      keep({ type: name, kernel: "axpy", threads, GBps: (a * picked * rb) / 1e9 });
      const mm = rate(() => n.matmul(t, w, 0, 4096, cols, x, 0, 64, y, 0), seconds);
      keep({ type: name, kernel: "matmul", threads, GFLOPs: (mm * 2 * 4096 * cols * 64) / 1e9 });
    }
    if (this.matrices) {
      const t = GGMLType.Q4_0;
      const bytes = this.matrixBytes;
      for (const count of WORKING_SET_MATRICES) {
        const r = rate(() => {
          for (let i = 0; i < count; i++) n.matvec(t, this.matrices, i * bytes, cols, cols, x, 0, this.buffers[0]!.y, 0);
        }, seconds);
        const key = count * bytes;
        this.workingSetSamples.set(key, [...(this.workingSetSamples.get(key) ?? []), (r * count * bytes) / 1e9]);
        onPoint?.();
      }
      // the same buffer read as matrices of each shape (Q4_0 blocks are self-contained: any
      // reinterpretation is valid data), as many as 128 MiB holds, one after another
      for (const [rows, cols] of SHAPES) {
        const one = rows * n.rowBytes(t, cols);
        const count = Math.max(1, Math.floor((128 * MiB) / one));
        let i = 0;
        const r = rate(() => n.matvec(t, this.matrices, (i++ % count) * one, rows, cols, x, 0, this.buffers[0]!.y, 0), seconds);
        const key = `${rows}×${cols}`;
        this.shapeSamples.set(key, [...(this.shapeSamples.get(key) ?? []), (r * one) / 1e9]);
        onPoint?.();
      }
    }
  }

  /** Points a pass measures. */
  get points(): number {
    return this.buffers.length * 4 + (this.matrices ? WORKING_SET_MATRICES.length + SHAPES.length : 0);
  }

  /** The Q4_0 matvec by working set, each the median of its passes. */
  workingSetRates(): WorkingSetRate[] {
    return [...this.workingSetSamples].map(([bytes, v]) => ({ bytes, GBps: lowerMedian(v, (x) => x) }));
  }

  /** The Q4_0 matvec by matrix shape, each the median of its passes. */
  shapeRates(): ShapeRate[] {
    return SHAPES.filter(([rows, cols]) => this.shapeSamples.has(`${rows}×${cols}`)).map(([rows, cols]) => ({ rows, cols, GBps: lowerMedian(this.shapeSamples.get(`${rows}×${cols}`)!, (x) => x) }));
  }

  /** Each point's median over the passes (the lower middle of an even count). */
  rates(): KernelRate[] {
    return [...this.samples.values()].map((s) => lowerMedian(s, (r) => r.GBps ?? r.GFLOPs ?? 0));
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const b of this.buffers.splice(0)) for (const p of [b.w, b.y, b.idx]) this.n.free(p);
    if (this.matrices) this.n.free(this.matrices);
    this.n.free(this.x);
  }
}

/** Every kernel on every weight type, one pass (KernelSampler). */
export function measureKernels(seconds = 0.15, onPoint?: () => void): KernelRate[] {
  const s = new KernelSampler(seconds, undefined, false);
  try {
    s.pass(onPoint);
    return s.rates();
  } finally {
    s.dispose();
  }
}

/** Each point's median over passes of measureReadRates (the same points in the same order). */
export function medianReadRates(passes: readonly ReadRate[][]): ReadRate[] {
  return passes[0]!.map((_, i) => lowerMedian(passes.map((p) => p[i]!), (r) => r.readsPerSecond));
}

/** A message to a worker thread and back: postMessage, and Atomics wait/notify on shared memory (median of `count`, µs). */
export async function measureMessages(count = 2000): Promise<MessageRates> {
  const echo = new Worker(`const { parentPort } = require("node:worker_threads"); parentPort.on("message", (m) => parentPort.postMessage(m));`, { eval: true });
  const post: number[] = [];
  try {
    await new Promise<void>((resolve, reject) => {
      let t = 0;
      let i = 0;
      echo.on("error", reject);
      echo.on("message", () => {
        if (i > 0) post.push(performance.now() - t);
        if (i++ === count) return resolve();
        t = performance.now();
        echo.postMessage(i);
      });
      echo.postMessage(0);
    });
  } finally {
    await echo.terminate();
  }
  const sab = new SharedArrayBuffer(8);
  const flag = new Int32Array(sab);
  const waiter = new Worker(
    `const { workerData } = require("node:worker_threads"); const a = new Int32Array(workerData);
     for (;;) { Atomics.wait(a, 0, 0); if (a[0] === 2) break; Atomics.store(a, 0, 0); Atomics.notify(a, 0); }`,
    { eval: true, workerData: sab },
  );
  const atomics: number[] = [];
  try {
    await new Promise((r) => setTimeout(r, 20)); // the worker reaches its wait
    for (let i = 0; i <= count; i++) {
      const t = performance.now();
      Atomics.store(flag, 0, 1);
      Atomics.notify(flag, 0);
      Atomics.wait(flag, 0, 1, 1000);
      if (i > 0) atomics.push(performance.now() - t);
    }
  } finally {
    Atomics.store(flag, 0, 2);
    Atomics.notify(flag, 0);
    await waiter.terminate();
  }
  return { postMessageUs: median(post) * 1000, atomicsUs: median(atomics) * 1000 };
}

/**
 * Measure everything, cache it with the bounds, return it. The kernels are measured in passes
 * between the other steps (first, after the reads, after the messages) and kept as each point's
 * median; a caller that measures on (the decoders' calibration) passes its own `sampler` and
 * adds passes to it.
 */
export async function probeMachine(o: ProbeOptions & { sampler?: KernelSampler } = {}): Promise<MachineBounds> {
  const seconds = o.seconds ?? 0.15;
  const passes = 3;
  const sampler = o.sampler ?? new KernelSampler(seconds);
  const total = 1 + (o.diskFile ? passes : 0) + passes * sampler.points + 1;
  let done = 0;
  const step = (what: string) => o.onProgress?.(++done, total, what);
  try {
    const kernels = () => sampler.pass(() => step("kernels"));
    // reads, like the kernels, in passes spread through the probe: a virtual disk's random reads
    // moved by ~30% between two probes of this VM an hour apart (8 KiB at depth 32: 55K and 40K
    // reads/s), and one pass of 0.15 s per point is a snapshot
    const readPasses: ReadRate[][] = [];
    kernels();
    const b = measureBounds(o.diskFile);
    step("memory and storage");
    const reads = () => {
      if (!b.disk) return;
      readPasses.push(measureReadRates(b.disk.path, seconds));
      step("reads by block size and depth");
    };
    reads();
    kernels();
    b.messages = await measureMessages();
    step("messages");
    reads();
    kernels();
    reads();
    if (b.disk) b.disk.rates = medianReadRates(readPasses);
    b.kernels = sampler.rates();
    b.workingSets = sampler.workingSetRates();
    b.shapes = sampler.shapeRates();
    keepMachine(b, o.cachePath ?? machineCachePath());
    return b;
  } finally {
    if (!o.sampler) sampler.dispose();
  }
}
