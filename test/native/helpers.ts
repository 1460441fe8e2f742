// Independent plain-TypeScript references for the native kernels (NOT the code under test).
import { native, GGMLType, type NativeAddon, type SimdLevel } from "../../src/native.js";

export const N: NativeAddon = native();
export { GGMLType };

export const fr = Math.fround;

/** Levels this CPU can run (scalar always). */
/** Run f with the kernels forced to a SIMD level, restoring the previous level afterwards. */
export function withLevel<T>(level: SimdLevel, f: () => T): T {
  const prev = N.getSimd();
  N.setSimd(level);
  try {
    return f();
  } finally {
    N.setSimd(prev);
  }
}

export function supportedLevels(): SimdLevel[] {
  const f = N.cpuFeatures();
  const out: SimdLevel[] = ["scalar"];
  if (f.avx2 && f.fma && f.f16c) out.push("avx2");
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni) out.push("avx512");
  return out;
}

// ---- buffers -----------------------------------------------------------------------------
const live: number[] = [];
export function bufF32(data: ArrayLike<number>): number {
  const id = N.alloc(Math.max(4, data.length * 4));
  N.viewF32(id, 0, data.length).set(data);
  live.push(id);
  return id;
}
export function bufI32(data: ArrayLike<number>): number {
  const id = N.alloc(Math.max(4, data.length * 4));
  N.viewI32(id, 0, data.length).set(data);
  live.push(id);
  return id;
}
export function bufBytes(n: number): number {
  const id = N.alloc(n);
  live.push(id);
  return id;
}
export function readF32(id: number, n: number, off = 0): Float32Array {
  return Float32Array.from(N.viewF32(id, off, n));
}
export function freeAll(): void {
  while (live.length) N.free(live.pop()!);
}

// ---- deterministic random (TS side, independent of fillUniform) ------------------------------
export function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    // mulberry32
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
export function randF32(n: number, seed: number, scale = 1): Float32Array {
  const r = rng(seed);
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = (r() * 2 - 1) * scale;
  return a;
}

// ---- fp16 -----------------------------------------------------------------------------------
const f32buf = new Float32Array(1);
const u32buf = new Uint32Array(f32buf.buffer);

export function f16ToF32(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** fp32 -> fp16 bits, round to nearest even (independent implementation). */
export function f32ToF16(f: number): number {
  f32buf[0] = f;
  const x = u32buf[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && (h & 1))) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1))) h++;
  return sign | h; // carry into exponent (even to inf) is correct
}

const roundAway = (v: number) => (v < 0 ? -Math.floor(-v + 0.5) : Math.floor(v + 0.5));

// ---- quantisation (mirrors ggml *_ref in f32 arithmetic via Math.fround) ------------------------
export function rowBytes(type: number, cols: number): number {
  switch (type) {
    case 0: return cols * 4;
    case 1: return cols * 2;
    case 2: return (cols / 32) * 18;
    case 8: return (cols / 32) * 34;
  }
  throw new Error("type");
}

export function quantizeRowTS(type: number, x: Float32Array): Uint8Array {
  const cols = x.length;
  const out = new Uint8Array(rowBytes(type, cols));
  const dv = new DataView(out.buffer);
  if (type === 0) {
    new Float32Array(out.buffer).set(x);
  } else if (type === 1) {
    for (let i = 0; i < cols; i++) dv.setUint16(2 * i, f32ToF16(x[i]!), true);
  } else if (type === 2) {
    for (let b = 0; b < cols / 32; b++) {
      let amax = 0, max = 0;
      for (let j = 0; j < 32; j++) {
        const v = x[b * 32 + j]!;
        if (amax < Math.abs(v)) { amax = Math.abs(v); max = v; }
      }
      const d = fr(max / -8);
      const id = d ? fr(1 / d) : 0;
      dv.setUint16(b * 18, f32ToF16(d), true);
      for (let j = 0; j < 16; j++) {
        const x0 = fr(x[b * 32 + j]! * id), x1 = fr(x[b * 32 + 16 + j]! * id);
        const q0 = Math.min(15, Math.trunc(fr(x0 + 8.5)));
        const q1 = Math.min(15, Math.trunc(fr(x1 + 8.5)));
        out[b * 18 + 2 + j] = q0 | (q1 << 4);
      }
    }
  } else if (type === 8) {
    for (let b = 0; b < cols / 32; b++) {
      const { q, dh } = quantizeQ8Block(x.subarray(b * 32, b * 32 + 32));
      dv.setUint16(b * 34, dh, true);
      for (let j = 0; j < 32; j++) dv.setInt8(b * 34 + 2 + j, q[j]!);
    }
  }
  return out;
}

export function quantizeQ8Block(x: Float32Array): { q: Int8Array; dh: number } {
  let amax = 0;
  for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[j]!));
  const d = fr(amax / 127);
  const id = d ? fr(1 / d) : 0;
  const q = new Int8Array(32);
  for (let j = 0; j < 32; j++) q[j] = roundAway(fr(x[j]! * id));
  return { q, dh: f32ToF16(d) };
}

/** Dequantise one row from raw bytes (f64 values of the stored weights). */
export function dequantRowTS(type: number, bytes: Uint8Array, cols: number): Float64Array {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float64Array(cols);
  if (type === 0) for (let i = 0; i < cols; i++) out[i] = dv.getFloat32(4 * i, true);
  else if (type === 1) for (let i = 0; i < cols; i++) out[i] = f16ToF32(dv.getUint16(2 * i, true));
  else if (type === 2) {
    for (let b = 0; b < cols / 32; b++) {
      const d = f16ToF32(dv.getUint16(b * 18, true));
      for (let j = 0; j < 16; j++) {
        const q = bytes[b * 18 + 2 + j]!;
        out[b * 32 + j] = ((q & 15) - 8) * d;
        out[b * 32 + 16 + j] = ((q >> 4) - 8) * d;
      }
    }
  } else if (type === 8) {
    for (let b = 0; b < cols / 32; b++) {
      const d = f16ToF32(dv.getUint16(b * 34, true));
      for (let j = 0; j < 32; j++) out[b * 32 + j] = dv.getInt8(b * 34 + 2 + j) * d;
    }
  }
  return out;
}

/** The activation as the kernel sees it: Q types -> Q8_0 blocks (dequantised), F16 -> rounded. */
export function effectiveX(type: number, x: Float32Array): Float64Array {
  const out = new Float64Array(x.length);
  if (type === 0) out.set(x);
  else if (type === 1) for (let i = 0; i < x.length; i++) out[i] = f16ToF32(f32ToF16(x[i]!));
  else {
    for (let b = 0; b < x.length / 32; b++) {
      const { q, dh } = quantizeQ8Block(x.subarray(b * 32, b * 32 + 32));
      const d = f16ToF32(dh);
      for (let j = 0; j < 32; j++) out[b * 32 + j] = q[j]! * d;
    }
  }
  return out;
}

/** f64 dot and Σ|terms| (for the tolerance). */
export function dot64(a: Float64Array, b: Float64Array): { v: number; mag: number } {
  let v = 0, mag = 0;
  for (let i = 0; i < a.length; i++) {
    const t = a[i]! * b[i]!;
    v += t;
    mag += Math.abs(t);
  }
  return { v, mag };
}

/** Max of |a-b| / (mag + floor) over elements. */
export function expectClose(
  got: ArrayLike<number>,
  want: ArrayLike<number>,
  mag: ArrayLike<number> | number,
  relTol: number,
  what: string,
  absFloor = 1e-30,
): void {
  if (got.length !== want.length) throw new Error(`${what}: length ${got.length} != ${want.length}`);
  for (let i = 0; i < got.length; i++) {
    const m = typeof mag === "number" ? mag : mag[i]!;
    const err = Math.abs(got[i]! - want[i]!);
    if (!(err <= relTol * m + absFloor)) {
      throw new Error(`${what}: element ${i}: got ${got[i]}, want ${want[i]} (|err| ${err} > ${relTol} * ${m})`);
    }
  }
}

export function bitsEqual(a: Float32Array, b: Float32Array, what: string): void {
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  if (ua.length !== ub.length) throw new Error(`${what}: length differs`);
  for (let i = 0; i < ua.length; i++)
    if (ua[i] !== ub[i]) throw new Error(`${what}: element ${i} differs: ${a[i]} vs ${b[i]}`);
}

/** Random weights quantised natively (bytes then read back raw via viewU8). */
export function makeWeights(type: number, rows: number, cols: number, seed: number): { id: number; bytes: Uint8Array } {
  const src = bufF32(randF32(rows * cols, seed));
  const rb = rowBytes(type, cols);
  const id = bufBytes(rows * rb + 64);
  N.quantize(type, src, 0, id, 0, rows, cols);
  return { id, bytes: Uint8Array.from(N.viewU8(id, 0, rows * rb)) };
}
