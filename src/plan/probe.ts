// neuronpipe probe: everything the offline planner needs to know about this machine, measured
// once and cached with the bounds (machine.ts): memory read bandwidth on 1..N threads; direct-I/O
// reads by kind, block size and queue depth on the model's file system; each kernel's throughput
// per weight type (matvec, the sparse gather and axpy, the prefill matmul); and how long a message
// takes from one thread to another and back (postMessage, and Atomics wait/notify).
import { statSync } from "node:fs";
import { Worker } from "node:worker_threads";
import { GGMLType, native } from "../native.js";
import { keepMachine, machineCachePath, measureBounds, type KernelRate, type MachineBounds, type MessageRates, type ReadRate } from "./machine.js";

const MiB = 2 ** 20;

export interface ProbeOptions {
  /** A file on the storage to measure (a model or pack you run); no storage figures without it. */
  diskFile?: string;
  cachePath?: string;
  /** Seconds per measured point (default 0.15). */
  seconds?: number;
  onProgress?: (done: number, total: number, what: string) => void;
}

/** Repeat `fn` for about `seconds`; calls per second. */
function rate(fn: () => void, seconds: number): number {
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

/** Reads of `path` by kind, block size and queue depth (a loader per depth; random offsets from a fixed LCG within the first 2 GiB). */
export function measureReadRates(path: string, seconds = 0.15): ReadRate[] {
  const n = native();
  const size = statSync(path).size;
  const out: ReadRate[] = [];
  const buf = n.alloc(16 * MiB);
  try {
    const points: { kind: ReadRate["kind"]; blockBytes: number; queueDepth: number }[] = [
      ...[128 * 1024, MiB, 4 * MiB].map((blockBytes) => ({ kind: "sequential" as const, blockBytes, queueDepth: 4 })),
      ...[4096, 8192, 16384, 65536].flatMap((blockBytes) => [1, 8, 32, 128].map((queueDepth) => ({ kind: "random" as const, blockBytes, queueDepth }))),
    ];
    for (const p of points) {
      if (size < p.blockBytes * 8) continue;
      const id = n.openLoader(path, { backend: "auto", queueDepth: p.queueDepth, directIO: true });
      try {
        const slots = Math.floor((16 * MiB) / p.blockBytes);
        const batch = Math.max(p.queueDepth * 4, 16);
        const blocks = Math.floor(Math.min(size, 2048 * MiB) / p.blockBytes);
        let x = 12345, next = 0;
        const req = new Float64Array(batch * 4);
        const fill = () => {
          for (let i = 0; i < batch; i++) {
            let b: number;
            if (p.kind === "sequential") b = next++ % blocks;
            else {
              x = (Math.imul(x, 1103515245) + 12345) >>> 0;
              b = x % blocks;
            }
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
 */
export function measureKernels(seconds = 0.15, onPoint?: () => void): KernelRate[] {
  const n = native();
  const cols = 4096;
  const threads = n.getThreads();
  const out: KernelRate[] = [];
  const types = [["Q4_0", GGMLType.Q4_0], ["Q8_0", GGMLType.Q8_0], ["F16", GGMLType.F16], ["F32", GGMLType.F32]] as const;
  const src = n.alloc(cols * 4 * 64);
  const x = n.alloc(64 * cols * 4);
  n.fillUniform(src, 0, cols * 64, 1n, 1);
  n.fillUniform(x, 0, cols * 64, 2n, 1);
  try {
    for (const [name, t] of types) {
      const rb = n.rowBytes(t, cols);
      const rows = Math.ceil((128 * MiB) / rb / 64) * 64;
      const w = n.alloc(rows * rb);
      const y = n.alloc(Math.max(rows, 64 * cols) * 4);
      const picked = Math.floor(rows / 10);
      const idx = n.alloc(10 * picked * 4);
      try {
        for (let r = 0; r < rows; r += 64) n.quantize(t, src, 0, w, r * rb, 64, cols);
        // tenth s: row i·10 + (i·7 + s) mod 10 of each group of 10 (ascending, scattered)
        const iv = n.viewI32(idx, 0, 10 * picked);
        for (let s = 0; s < 10; s++) for (let i = 0; i < picked; i++) iv[s * picked + i] = i * 10 + ((i * 7 + s) % 10);
        const coef = x; // any finite values
        const mv = rate(() => n.matvec(t, w, 0, rows, cols, x, 0, y, 0), seconds);
        out.push({ type: name, kernel: "matvec", threads, GBps: (mv * rows * rb) / 1e9 });
        onPoint?.();
        let call = 0;
        const g = rate(() => n.matvecRows(t, w, 0, rows, cols, idx, (call++ % 10) * picked * 4, picked, x, 0, y, 0), seconds);
        out.push({ type: name, kernel: "gather", threads, GBps: (g * picked * rb) / 1e9 });
        onPoint?.();
        const a = rate(() => n.axpyRows(t, w, 0, rows, cols, idx, (call++ % 10) * picked * 4, picked, coef, 0, y, 0), seconds);
        out.push({ type: name, kernel: "axpy", threads, GBps: (a * picked * rb) / 1e9 });
        onPoint?.();
        const mm = rate(() => n.matmul(t, w, 0, 4096, cols, x, 0, 64, y, 0), seconds);
        out.push({ type: name, kernel: "matmul", threads, GFLOPs: (mm * 2 * 4096 * cols * 64) / 1e9 });
        onPoint?.();
      } finally {
        n.free(idx);
        n.free(y);
        n.free(w);
      }
    }
  } finally {
    n.free(x);
    n.free(src);
  }
  return out;
}

/** A message to a worker thread and back: postMessage, and Atomics wait/notify on shared memory (median of `count`, µs). */
export async function measureMessages(count = 2000): Promise<MessageRates> {
  const median = (a: number[]) => [...a].sort((p, q) => p - q)[a.length >> 1]!;
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

/** Measure everything, cache it with the bounds, return it. */
export async function probeMachine(o: ProbeOptions = {}): Promise<MachineBounds> {
  const seconds = o.seconds ?? 0.15;
  const kernelPoints = 16;
  const total = 1 + (o.diskFile ? 1 : 0) + kernelPoints + 1;
  let done = 0;
  const step = (what: string) => o.onProgress?.(++done, total, what);
  const b = measureBounds(o.diskFile);
  step("memory and storage");
  if (b.disk) {
    b.disk.rates = measureReadRates(b.disk.path, seconds);
    step("reads by block size and depth");
  }
  b.kernels = measureKernels(seconds, () => step("kernels"));
  b.messages = await measureMessages();
  step("messages");
  keepMachine(b, o.cachePath ?? machineCachePath());
  return b;
}
