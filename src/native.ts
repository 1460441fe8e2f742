// The one typed boundary to the native addon (native/src/addon.cc).
//
// Memory model: every tensor lives in native memory that the addon owns — an aligned
// allocation (`alloc`) or a read-only file mapping (`mapFile`). JS refers to it by a
// buffer id and a byte offset; the addon bounds-checks every (id, offset, length) it is
// handed and throws a RangeError naming the argument when it does not fit. Typed-array
// views (`view*`) give JS direct access without copies; a buffer is only released once
// it has been freed *and* every view of it has been garbage-collected.
//
// Weight types are GGML type ids (GGUF `ggml_type`): F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8.
// A weight matrix with GGUF dims ne = [cols, rows] is `rows` rows of `cols` elements,
// rows stored one after another in the type's block layout.
//
// Threads: kernels run on a process-wide native pool (`setThreads`). Every reduction has a
// fixed order, so results are bit-identical whatever the thread count.
import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const GGMLType = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q8_0: 8,
} as const;
export type GGMLTypeId = (typeof GGMLType)[keyof typeof GGMLType];

/** Activation of a gated FFN: out = act(gate) * up (or relu on both for dReLU). */
export const GateKind = { SwiGLU: 0, ReGLU: 1, dReLU: 2 } as const;
export type GateKindId = (typeof GateKind)[keyof typeof GateKind];

export type SimdLevel = "scalar" | "avx2" | "avx512";

export interface CpuFeatures {
  avx2: boolean;
  fma: boolean;
  f16c: boolean;
  avx512f: boolean;
  avx512bw: boolean;
  avx512vl: boolean;
  avx512vnni: boolean;
}

export interface NativeAddon {
  // ---- runtime / pool -------------------------------------------------------------
  cpuFeatures(): CpuFeatures;
  /** Best level the CPU supports. */
  bestSimd(): SimdLevel;
  /** Force a SIMD path (tests); throws if the CPU lacks it. */
  setSimd(level: SimdLevel): void;
  getSimd(): SimdLevel;
  setThreads(n: number): void;
  getThreads(): number;
  /** Kernels called from this JS thread use at most n threads (0: the pool's size); results are the same for any count. */
  setCallerThreads(n: number): void;
  /** Compile-time options: which optional libraries the build found. */
  buildInfo(): { liburing: boolean; openblas: boolean; compiler: string };
  /**
   * Diagnostics (cumulative, process-wide): kernel jobs dispatched to the pool (small
   * problems and calls made while another JS thread uses the pool run inline and are not
   * counted) and how many work chunks pool workers / calling threads executed.
   */
  poolStats(): { jobs: number; workerChunks: number; callerChunks: number };
  /** Pin the calling thread to these cores (pthread_setaffinity_np). */
  setAffinity(cores: number[]): void;
  /** The calling thread's OS thread id, current core and allowed cores. */
  threadInfo(): { tid: number; cpu: number; affinity: number[] };

  // ---- memory ---------------------------------------------------------------------
  /** Allocate `nbytes` zeroed bytes, 4 KiB-aligned. Returns a buffer id. */
  alloc(nbytes: number): number;
  /** Map a file read-only (MAP_SHARED). Returns id and size. Throws naming the path. */
  mapFile(path: string): { id: number; size: number };
  /** Release a buffer (freed when its last view is collected). */
  free(id: number): void;
  /** free(), and a large buffer's pages go back to the system at once even while views of it live (they read zeros from then on): temporaries of long synchronous loops, whose views the collector cannot finalise before the loop ends. */
  discard(id: number): void;
  bufferSize(id: number): number;
  /** Zero-copy views. byteOffset must be aligned to the element size. */
  viewF32(id: number, byteOffset: number, count: number): Float32Array;
  viewI32(id: number, byteOffset: number, count: number): Int32Array;
  viewU8(id: number, byteOffset: number, count: number): Uint8Array;
  /** Copy bytes between buffers (both bounds-checked). */
  copy(dst: number, dstOff: number, src: number, srcOff: number, nbytes: number): void;
  /** Many copies in one call: requests are [dstOff, srcOff, nbytes] triples; all are bounds-checked first. */
  copyBatch(dst: number, src: number, requests: Float64Array): void;
  /** Bytes of the buffer's pages resident in RAM, as the kernel reports them (mincore). */
  residentBytes(id: number): number;
  /** Bytes a row of `cols` elements takes in a weight type (cols must fit its block size). */
  rowBytes(type: number, cols: number): number;

  // ---- conversion -----------------------------------------------------------------
  /** Quantise/convert `rows` rows of `cols` f32 values (src) into `type` (dst). */
  quantize(type: number, src: number, srcOff: number, dst: number, dstOff: number, rows: number, cols: number): void;
  /** Dequantise row `row` of a weight matrix into f32 (dst). */
  dequantizeRow(type: number, w: number, wOff: number, cols: number, row: number, dst: number, dstOff: number): void;
  /** Fill n f32 with deterministic uniform values in [-scale, scale) from a seed (xoshiro-like). */
  fillUniform(dst: number, dstOff: number, n: number, seed: bigint, scale: number): void;

  // ---- kernels (all f32 activations) ----------------------------------------------
  /** y[r] = W[r,:] · x, r < rows. Quantised types quantise x per block to Q8_0 first (as llama.cpp). */
  matvec(type: number, w: number, wOff: number, rows: number, cols: number, x: number, xOff: number, y: number, yOff: number): void;
  /**
   * y[k] = W[idx[k],:] · x for k < nIdx (idx: int32, each < rows). Compact output. Row r starts
   * at wOff + r·rowStride (default: packed rows; neuron-cache slots interleave gate/up/down rows).
   */
  matvecRows(type: number, w: number, wOff: number, rows: number, cols: number, idx: number, idxOff: number, nIdx: number, x: number, xOff: number, y: number, yOff: number, rowStride?: number): void;
  /** out[c] += Σ_k coef[k] · W[idx[k], c], k in ascending order (down projection stored one row per neuron). rowStride as matvecRows. */
  axpyRows(type: number, w: number, wOff: number, rows: number, cols: number, idx: number, idxOff: number, nIdx: number, coef: number, coefOff: number, out: number, outOff: number, rowStride?: number): void;
  /** y (nTok, rows) = x (nTok, cols) · W^T; rowStride: bytes between rows (default packed). */
  matmul(type: number, w: number, wOff: number, rows: number, cols: number, x: number, xOff: number, nTok: number, y: number, yOff: number, rowStride?: number): void;
  /**
   * out (nTok, cols) += h (nTok, ldh)[:, :rows] · W (rows, cols): the rows are the reduction (a
   * pack's neuron-major down columns). Each 32 rows are requantised per column to int8 and h to
   * Q8_0, int8 dot products (VNNI); sums run over the rows in groups of 32 in order after what out
   * holds, so calls over consecutive row ranges (multiples of 32) give the bits of one call, at
   * every SIMD level and thread count.
   */
  matmulTAcc(type: number, w: number, wOff: number, rows: number, cols: number, h: number, hOff: number, ldh: number, nTok: number, out: number, outOff: number, rowStride?: number): void;
  /**
   * matmul over n rows picked from two strided sources (a pack's resident neurons in the cache,
   * the others in staging): row k = sel[k] >= 0 ? row sel[k] of a : row -1-sel[k] of b.
   * y (nTok, n) = x (nTok, cols) · rows^T, the bits matmul gives for the same rows.
   */
  matmulSel(type: number, a: number, aOff: number, aStride: number, aRows: number, b: number, bOff: number, bStride: number, bRows: number, sel: number, selOff: number, n: number, cols: number, x: number, xOff: number, nTok: number, y: number, yOff: number): void;
  /** matmulTAcc over n rows picked as in matmulSel: out (nTok, cols) += h (nTok, ldh)[:, :n] · rows. */
  matmulTAccSel(type: number, a: number, aOff: number, aStride: number, aRows: number, b: number, bOff: number, bStride: number, bRows: number, sel: number, selOff: number, n: number, cols: number, h: number, hOff: number, ldh: number, nTok: number, out: number, outOff: number): void;
  /** out[t] = x[t] / rms(x[t]) * weight, for nTok rows of n (weight f32). */
  rmsnorm(x: number, xOff: number, weight: number, weightOff: number, n: number, nTok: number, eps: number, out: number, outOff: number): void;
  /** In-place rotary embedding of (nTok, nHeads, headDim) at positions pos0 + t; first ropeDim dims rotated. neox: pairs (i, i+ropeDim/2), else (2i, 2i+1). */
  rope(x: number, xOff: number, nTok: number, nHeads: number, headDim: number, ropeDim: number, pos0: number, freqBase: number, neox: boolean): void;
  /** In-place softmax over nRows rows of n. */
  softmax(x: number, xOff: number, n: number, nRows: number): void;
  /** out = gate-activation(gate) * up (or relu·relu), elementwise over n. */
  gatedAct(kind: number, gate: number, gateOff: number, up: number, upOff: number, out: number, outOff: number, n: number): void;
  /** out = a + b, elementwise over n (out may alias a). */
  add(a: number, aOff: number, b: number, bOff: number, out: number, outOff: number, n: number): void;
  /** The positions p < n with scores[p] > thresholds[p], ascending, as int32 into out; returns how many. */
  flagAbove(scores: number, scoresOff: number, thresholds: number, thresholdsOff: number, n: number, out: number, outOff: number): number;
  /**
   * Store K/V rows for positions pos0..pos0+nTok-1 into a cache (kvType F32 or F16) laid out
   * (ctx, nHeadKv*headDim); src is (nTok, nHeadKv*headDim) f32.
   */
  kvStore(kvType: number, cache: number, cacheOff: number, ctx: number, rowLen: number, pos0: number, nTok: number, src: number, srcOff: number): void;
  /**
   * Causal grouped-query attention. q: (nTok, nHead, headDim) f32 at positions pos0+t;
   * kCache, vCache: (ctx, nHeadKv, headDim) of kvType; out: (nTok, nHead, headDim).
   * Query t attends to cache positions 0..pos0+t. Scale 1/sqrt(headDim).
   */
  attention(kvType: number, q: number, qOff: number, kCache: number, kOff: number, vCache: number, vOff: number, ctx: number, nHead: number, nHeadKv: number, headDim: number, pos0: number, nTok: number, out: number, outOff: number): void;

  /** Memory read bandwidth probe: sums `bytes` (a multiple of 64) of buffer `buf` as u64 words on up to `threads` threads; returns the sum's low 48 bits. */
  readBandwidth(buf: number, bytes: number, threads: number): number;

  // ---- direct-I/O loader (native/src/io) ------------------------------------------
  /**
   * Open a file for batched reads. backend "uring" (io_uring, needs a liburing build and a
   * kernel that allows it; throws otherwise), "pread" (fixed pool of pread threads), or "auto"
   * (uring, else pread — `loaderInfo().note` says why). queueDepth (1–4096): reads in flight
   * at once. directIO: open with O_DIRECT (throws naming the path if the filesystem refuses).
   * threads (1–64, pread only, default min(queueDepth, 16), capped at queueDepth).
   * singleIssuer (io_uring): a ring only one thread reads through — the first that reads, in
   * practice readBatchStart's background thread — set up SINGLE_ISSUER | DEFER_TASKRUN, so a
   * batch's completions wake that thread once instead of one by one; a read from another
   * thread throws. Where the kernel refuses it the ring is a plain one (`note` says why).
   * Returns a loader id. Throws an Error naming the path if the file cannot be opened.
   */
  openLoader(path: string, opts: { backend: "uring" | "pread" | "auto"; queueDepth: number; directIO: boolean; threads?: number; singleIssuer?: boolean }): number;
  /**
   * Chosen backend and parameters; fileSize is the size at open time. align: what file offsets,
   * lengths and destination addresses must be multiples of — with directIO 512 when a
   * 512-aligned direct read of the file succeeded at open (its device's sector), else 4096; 1
   * without directIO.
   */
  loaderInfo(id: number): { backend: "uring" | "pread"; queueDepth: number; directIO: boolean; align: number; fileSize: number; threads: number; fixedBuffer: boolean; singleIssuer: boolean; path: string; note?: string };
  /**
   * io_uring: register buffer `bufferId` with the loader's ring (one per loader, replacing the
   * last; the loader keeps it alive); reads landing inside it are READ_FIXED. Returns "" or why
   * it was not registered (pread backend, RLIMIT_MEMLOCK, …): reads work the same either way.
   */
  loaderFixBuffer(loaderId: number, bufferId: number): string;
  /** Close a loader (a batch running on another thread finishes first). */
  closeLoader(id: number): void;
  /**
   * Read N requests, given as a Float64Array of 4 numbers each:
   * [fileOffset, length, dstBufferId, dstOffset]. Up to queueDepth reads are in flight;
   * returns (synchronously, blocking the calling thread — use from a worker) the total bytes
   * once every request is complete. Destinations are bounds-checked (RangeError naming the
   * request) and must not be mapFile buffers; with directIO, fileOffset, length and the
   * destination address must be multiples of the loader's `align` (RangeError naming the request
   * and what is misaligned). Short reads are retried; a read that hits end of file throws
   * "readBatch: FILE: short read at offset X: got Y of Z bytes", an I/O error
   * "readBatch: FILE: read failed at offset X (length Z): strerror". On error the
   * destination contents of the batch are unspecified.
   */
  readBatch(loaderId: number, requests: Float64Array): number;
  /**
   * readBatch in the background: the same requests (same checks), then `copies`
   * ([dstOffset, srcOffset, length]… from buffer copySrc into copyDst) once every read is
   * complete. Returns a ticket at once. Lanes 0 and 1: the reads and copies run FIFO on the
   * lane's background thread (one each per process), which sleeps in the kernel while the device
   * works, so the caller computes meanwhile; batches on different lanes do not wait for each
   * other. Lane 2 (io_uring loaders only): no thread; the requests are queued on the ring and
   * handed to the kernel by this thread during its next parallel kernel call (while the pool's
   * workers start on it), and readBatchWait, on this thread, reaps them and copies on the pool;
   * its batches may be waited for in any order. A single-issuer loader must always be read on
   * the same lane (lane 2: the same thread). Do not touch the destinations before
   * readBatchWait(ticket).
   */
  readBatchStart(loaderId: number, requests: Float64Array, copyDst: number, copySrc: number, copies: Float64Array, lane?: number): number;
  /**
   * Block until the ticket's batch is done; returns its bytes and when the background thread
   * ran it (lane 2: when it was started and when its reads were reaped) (t0, t1: µs on
   * process.hrtime's clock, as the trace's nowUs), or throws its error
   * ("readBatchWait: FILE: …"). Each ticket is waited for once.
   */
  readBatchWait(ticket: number): { bytes: number; t0: number; t1: number };

  // ---- activation predictor (native/src/predictor/) ----
  /**
   * Train a predictor fc2·relu(fc1·x) (no biases; single-threaded, deterministic for a given seed).
   * x: (nTok, nEmbd) f32; y: (nTok, nFF/8) label bytes, bit i (LSB first) of row t = neuron i active.
   * Weighted BCE on the logits (positives × posWeight), Adam, minibatches of `batch`, shuffled per epoch.
   * Writes fc1 (hidden, nEmbd) and fc2 (nFF, hidden) row-major f32. The threshold is the largest
   * value with training recall(score > threshold) ≥ targetRecall.
   */
  trainPredictor(x: number, xOff: number, y: number, yOff: number, nTok: number, nEmbd: number, nFF: number, hidden: number, epochs: number, batch: number, lr: number, posWeight: number, seed: number, targetRecall: number, fc1: number, fc1Off: number, fc2: number, fc2Off: number): { loss: number; threshold: number; trainRecall: number; trainActive: number };
  /** scores (nTok, nFF) = fc2 · relu(fc1 · x_t); fc1 (hidden, nEmbd), fc2 (nFF, hidden), f32. */
  predictorScores(fc1: number, fc1Off: number, fc2: number, fc2Off: number, nEmbd: number, hidden: number, nFF: number, x: number, xOff: number, nTok: number, out: number, outOff: number): void;
  /** Confusion counts of (score > threshold) against label bits y (nTok, nFF/8). */
  predictorEval(fc1: number, fc1Off: number, fc2: number, fc2Off: number, nEmbd: number, hidden: number, nFF: number, x: number, xOff: number, y: number, yOff: number, nTok: number, threshold: number): { tp: number; fp: number; fn: number; tn: number };
}

function findAddon(): string {
  // NEURONPIPE_ADDON selects another build (CI tests the build without optional libraries this way)
  const forced = process.env.NEURONPIPE_ADDON;
  if (forced) {
    if (!existsSync(forced)) throw new Error(`neuronpipe: NEURONPIPE_ADDON=${forced} does not exist`);
    return forced;
  }
  const here = dirname(fileURLToPath(import.meta.url));
  // src/ when run from sources (vitest), dist/src/ when built.
  for (const up of ["..", "../.."]) {
    const p = join(here, up, "native", "build", "Release", "neuronpipe.node");
    if (existsSync(p)) return p;
  }
  throw new Error(
    "neuronpipe: native addon not built (native/build/Release/neuronpipe.node missing). Run `npm run build:native`.",
  );
}

let cached: NativeAddon | undefined;

/** Load the addon once per thread (worker threads get their own handle onto the same process memory). */
export function native(): NativeAddon {
  if (!cached) {
    const require = createRequire(import.meta.url);
    cached = require(findAddon()) as NativeAddon;
  }
  return cached;
}
