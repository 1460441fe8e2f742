// What this machine's measurements (`neuronpipe probe`, machine.ts) say a step costs: a kernel's
// rate per weight type at a thread count and a working set, what its calls and rows cost beyond
// their bytes by matrix shape, and random reads per second by block size and queue depth. The
// time model (time-model.ts) adds these up for a token.
import { computeTypes, tensorBytes } from "../gguf/types.js";
import { GGMLType } from "../native.js";
import { nonNegativeLeastSquares } from "./least-squares.js";
import { readsPerCall, type KernelRate, type MachineBounds, type ReadRate, type ShapeRate } from "./machine.js";

const { Q4_0 } = GGMLType;

/** The probe's name of each weight type it measures, by GGML type id. */
const TYPE_NAMES: Record<number, KernelRate["type"]> = Object.fromEntries(Object.entries(GGMLType).map(([name, id]) => [id, name as KernelRate["type"]]));

/** The bytes of weights the probe's kernel table cycles through (probe.ts: ≥ 128 MiB per type). */
export const KERNEL_TABLE_BYTES = 128 * 2 ** 20;

/** One call of the kernel table's matvec, as its shape is compared: a 4096×4096 Q4_0 matrix (the table's rows are 4096 wide, its rates per byte as a 7B's). */
export const MATVEC_TABLE_CALL: CallShape = { bytes: tensorBytes(Q4_0, [4096, 4096]), rows: 4096, calls: 1 };

/** One call of the kernel table's gather or axpy on `type`: a tenth of its rows, 4096 wide, KERNEL_TABLE_BYTES in all (probe.ts; a type it does not measure: F32's). */
export function gatherTableCall(type: number): CallShape {
  const rowBytes = tensorBytes(computeTypes.has(type) ? type : 0, [4096]);
  const rows = Math.floor((Math.ceil(KERNEL_TABLE_BYTES / rowBytes / 64) * 64) / 10);
  return { bytes: rows * rowBytes, rows, calls: 1 };
}

/**
 * GB/s of a kernel on a weight type at `threads`, for a token that touches `workingSet` bytes: the
 * probe measured at its pool's threads over KERNEL_TABLE_BYTES; other thread counts scale with
 * memory bandwidth, other working sets with the probe's Q4_0 matvec by working set.
 */
export function kernelRate(m: MachineBounds, type: number, kernel: KernelRate["kernel"], threads: number, workingSet = KERNEL_TABLE_BYTES): number {
  const name = TYPE_NAMES[type] ?? "F32";
  const k = m.kernels?.find((r) => r.type === name && r.kernel === kernel) ?? m.kernels?.find((r) => r.type === "F32" && r.kernel === kernel);
  const mem = (t: number) => m.memory.find((x) => x.threads === t)?.readGBps ?? Math.max(...m.memory.map((x) => x.readGBps));
  if (!k?.GBps) return mem(threads) * 0.8;
  return ((k.GBps * mem(threads)) / mem(k.threads)) * workingSetFactor(m, workingSet);
}

/** How much faster (> 1) or slower kernels run over `bytes` than over the kernel table's working set (1 without the probe's curve). */
export function workingSetFactor(m: MachineBounds, bytes: number): number {
  const ws = m.workingSets;
  if (!ws || ws.length < 2) return 1;
  const pts = [...ws].sort((a, b) => a.bytes - b.bytes).map((w) => [w.bytes, w.GBps] as const);
  return interp(pts, Math.max(1, bytes)) / interp(pts, KERNEL_TABLE_BYTES);
}

/** What a matvec call costs beyond its bytes: ns per byte streamed, per row, per call (least squares over the probe's shapes). */
export interface CallCosts {
  byteNs: number;
  rowNs: number;
  callNs: number;
}

/**
 * Fit t = bytes·byteNs + rows·rowNs + callNs to the probe's Q4_0 matvec by shape (a call of
 * rows × cols), every cost ≥ 0 (a row or call cost is noise on a machine where it is small):
 * undefined without at least three shapes.
 */
export function callCosts(shapes: readonly ShapeRate[] | undefined): CallCosts | undefined {
  if (!shapes || shapes.length < 3) return undefined;
  const pts = shapes.map((r) => {
    const bytes = tensorBytes(Q4_0, [r.cols, r.rows]);
    return { bytes, rows: r.rows, ns: bytes / r.GBps };
  });
  const { w } = nonNegativeLeastSquares(
    pts.map((p) => [p.bytes, p.rows, 1]),
    pts.map((p) => p.ns),
  );
  const [byteNs, rowNs, callNs] = w as [number, number, number];
  return byteNs > 0 ? { byteNs, rowNs, callNs } : undefined;
}

/** A call shape: bytes, rows and calls of a step (all layers). */
export interface CallShape {
  bytes: number;
  rows: number;
  calls: number;
}

/** How much longer (> 1) a step of `shape` takes than its bytes at the kernel table's rate, measured on calls of `reference`'s shape (1 without the probe's shapes). */
export function shapeFactor(c: CallCosts | undefined, shape: CallShape, reference: CallShape): number {
  if (!c || shape.bytes <= 0) return 1;
  const perByte = (x: CallShape) => (x.bytes * c.byteNs + x.rows * c.rowNs + x.calls * c.callNs) / x.bytes;
  return perByte(shape) / perByte(reference);
}

/** Reads per second of `blockBytes` random reads at `depth`, interpolated (log-log) from the probe's table; the 4 KiB figure of the bounds when the table is missing. */
export function readRate(m: MachineBounds, blockBytes: number, depth: number): number {
  const rates = (m.disk?.rates ?? []).filter((r): r is ReadRate => r.kind === "random" && r.batch === undefined);
  if (rates.length === 0) return m.disk ? (m.disk.random4kIops * 4096) / Math.max(4096, blockBytes) : 50_000;
  const blocks = [...new Set(rates.map((r) => r.blockBytes))].sort((a, b) => a - b);
  const at = (b: number, d: number) => {
    const row = rates.filter((r) => r.blockBytes === b).sort((x, y) => x.queueDepth - y.queueDepth);
    return interp(row.map((r) => [r.queueDepth, r.readsPerSecond] as const), d);
  };
  const byBlock = blocks.map((b) => [b, at(b, depth)] as const);
  return interp(byBlock, Math.max(4096, blockBytes));
}

/** The probe's batch rows as points (reads, µs) by block size and depth: what batchReadUs interpolates. */
interface BatchTable {
  blocks: number[];
  /** block size → its measured depths, ascending */
  depths: Map<number, number[]>;
  /** `${block}/${depth}` → (reads per call, µs), ascending */
  points: Map<string, (readonly [number, number])[]>;
}

/** Built once per read table (the planner asks for thousands of batches); null: no batch rows. */
const batchTables = new WeakMap<readonly ReadRate[], BatchTable | null>();

function batchTable(rates: readonly ReadRate[]): BatchTable | null {
  const known = batchTables.get(rates);
  if (known !== undefined) return known;
  const random = rates.filter((r) => r.kind === "random");
  const batched = random.filter((r) => random.some((b) => b.batch !== undefined && b.blockBytes === r.blockBytes && b.queueDepth === r.queueDepth));
  let table: BatchTable | null = null;
  if (batched.length > 0) {
    const us = (r: ReadRate) => (readsPerCall(r) / r.readsPerSecond) * 1e6;
    const blocks = [...new Set(batched.map((r) => r.blockBytes))].sort((a, b) => a - b);
    const depths = new Map<number, number[]>();
    const points = new Map<string, (readonly [number, number])[]>();
    for (const block of blocks) {
      const ofBlock = batched.filter((r) => r.blockBytes === block);
      const ds = [...new Set(ofBlock.map((r) => r.queueDepth))].sort((x, y) => x - y);
      depths.set(block, ds);
      const sizes = [...new Set(ofBlock.map(readsPerCall))];
      // a batch no deeper than the queue is submitted whole at any depth, so those are the mean
      // over every depth that holds them (one measurement of one thing, not a difference between
      // depths); deeper batches and the full queue at d
      for (const d of ds) {
        const pts = sizes
          .map((n) => {
            const same = ofBlock.filter((r) => readsPerCall(r) === n && (n <= d ? n <= r.queueDepth : r.queueDepth === d));
            return [n, same.reduce((a, r) => a + us(r), 0) / same.length] as const;
          })
          .filter(([, u]) => Number.isFinite(u))
          .sort((a, b) => a[0] - b[0]);
        points.set(`${block}/${d}`, pts);
      }
    }
    table = { blocks, depths, points };
  }
  batchTables.set(rates, table);
  return table;
}

/**
 * µs one batch of k random reads of `blockBytes` takes at queue depth `depth` (submitted together,
 * waited for): from the probe's batch rows, piecewise linear in k (below one read, k × one read's
 * time; beyond the largest batch, its time + the rest at the full queue's rate), linear in log
 * depth and log block size between the measured ones, held beyond them. A batch no deeper than
 * the queue takes the same time at every depth. Probes without batch rows:
 * k ÷ the read rate at depth min(k, depth).
 */
export function batchReadUs(m: MachineBounds, blockBytes: number, depth: number, k: number): number {
  if (k <= 0) return 0;
  const table = m.disk?.rates ? batchTable(m.disk.rates) : null;
  if (!table) return (k / readRate(m, blockBytes, Math.max(1, Math.min(k, depth)))) * 1e6;
  /** µs at one measured block size and depth, piecewise linear in k */
  const at = (block: number, d: number) => {
    const pts = table.points.get(`${block}/${d}`)!;
    if (k <= pts[0]![0]) return (k / pts[0]![0]) * pts[0]![1];
    for (let i = 1; i < pts.length; i++) {
      const [k1, u1] = pts[i]!;
      if (k <= k1) {
        const [k0, u0] = pts[i - 1]!;
        return u0 + ((k - k0) / (k1 - k0)) * (u1 - u0);
      }
    }
    const [kn, un] = pts[pts.length - 1]!;
    return un + (k - kn) * (un / kn);
  };
  /** linear in log x between the sorted xs, held beyond them */
  const between = (xs: number[], x: number, f: (x: number) => number) => {
    if (x <= xs[0]!) return f(xs[0]!);
    for (let i = 1; i < xs.length; i++) {
      if (x <= xs[i]!) {
        const w = Math.log(x / xs[i - 1]!) / Math.log(xs[i]! / xs[i - 1]!);
        return f(xs[i - 1]!) * (1 - w) + f(xs[i]!) * w;
      }
    }
    return f(xs[xs.length - 1]!);
  };
  return between(table.blocks, Math.max(4096, blockBytes), (b) => between(table.depths.get(b)!, depth, (d) => at(b, d)));
}

/** Log-log interpolation in sorted points, flat beyond the ends. */
function interp(pts: readonly (readonly [number, number])[], x: number): number {
  if (x <= pts[0]![0]) return pts[0]![1];
  for (let i = 1; i < pts.length; i++) {
    const [x1, y1] = pts[i]!;
    if (x <= x1) {
      const [x0, y0] = pts[i - 1]!;
      const f = Math.log(x / x0) / Math.log(x1 / x0);
      return Math.exp(Math.log(y0) + f * (Math.log(y1) - Math.log(y0)));
    }
  }
  return pts[pts.length - 1]![1];
}
