// What this machine's measurements (`neuronpipe probe`, machine.ts) say a step costs: a kernel's
// rate per weight type at a thread count and a working set, what its calls and rows cost beyond
// their bytes by matrix shape, and random reads per second by block size and queue depth. The
// time model (time-model.ts) adds these up for a token.
import { computeTypes, tensorBytes } from "../gguf/types.js";
import { GGMLType } from "../native.js";
import { nonNegativeLeastSquares } from "./least-squares.js";
import type { KernelRate, MachineBounds, ReadRate, ShapeRate } from "./machine.js";

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
  const rates = (m.disk?.rates ?? []).filter((r): r is ReadRate => r.kind === "random");
  if (rates.length === 0) return m.disk ? (m.disk.random4kIops * 4096) / Math.max(4096, blockBytes) : 50_000;
  const blocks = [...new Set(rates.map((r) => r.blockBytes))].sort((a, b) => a - b);
  const at = (b: number, d: number) => {
    const row = rates.filter((r) => r.blockBytes === b).sort((x, y) => x.queueDepth - y.queueDepth);
    return interp(row.map((r) => [r.queueDepth, r.readsPerSecond] as const), d);
  };
  const byBlock = blocks.map((b) => [b, at(b, depth)] as const);
  return interp(byBlock, Math.max(4096, blockBytes));
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
