// Mutations of a well-formed GGUF file (a model or a neuron pack), each reproducible from its
// number: bit flips in the header, a field set to a boundary value (by its kind: counts, lengths,
// types, offsets, numbers), the header cut or shifted, the file truncated, tensor data overwritten
// with NaN/Inf/garbage. Mutant k of a seed is always the same bytes.
import type { Field, GGUFLayout } from "./fields.js";

/** mulberry32: a small seeded PRNG. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface Mutant {
  bytes: Buffer;
  /** What was done, for the report: "field value (llama.rope.freq_base) = NaN at 1234". */
  what: string;
}

const U32_EDGES = [0, 1, 2, 3, 7, 13, 31, 32, 33, 63, 64, 255, 256, 4095, 4096, 65535, 65536, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff];
const U64_EDGES = [0n, 1n, 2n, 8n, 63n, 64n, 255n, 4096n, 65536n, 1n << 31n, 1n << 32n, (1n << 53n) + 1n, 1n << 62n, (1n << 63n) - 1n, 1n << 63n, (1n << 64n) - 1n];
const F32_EDGES = [NaN, Infinity, -Infinity, 0, -0, -1, 1e-45, 1e-38, 1e30, 3.4e38, 1.5, -1e5];

export function mutate(seed: Buffer, layout: GGUFLayout, k: number): Mutant {
  const r = rng(k * 2654435761 + 17);
  const pick = <T>(a: readonly T[]): T => a[Math.floor(r() * a.length)]!;
  const b = Buffer.from(seed);
  const headerEnd = layout.dataOffset;
  const strategy = r();
  if (strategy < 0.3) {
    // flip 1–8 bits in the header
    const flips = 1 + Math.floor(r() * 8);
    const at: number[] = [];
    for (let i = 0; i < flips; i++) {
      const o = Math.floor(r() * headerEnd);
      b[o]! ^= 1 << Math.floor(r() * 8);
      at.push(o);
    }
    return { bytes: b, what: `bit flips at ${at.join(",")}` };
  }
  if (strategy < 0.7) {
    // one field set to a boundary value
    const f: Field = pick(layout.fields);
    const name = `${f.kind}${f.key ? ` (${f.key.slice(0, 60)})` : ""}`;
    if (f.size === 8) {
      const v = pick(U64_EDGES);
      b.writeBigUInt64LE(v, f.offset);
      return { bytes: b, what: `${name} = ${v} at ${f.offset}` };
    }
    if (f.size === 4 && f.kind === "value" && f.valueType === 6) {
      const v = pick(F32_EDGES);
      b.writeFloatLE(v, f.offset);
      return { bytes: b, what: `${name} = ${v} at ${f.offset}` };
    }
    if (f.size === 4) {
      const v = pick(U32_EDGES);
      b.writeUInt32LE(v, f.offset);
      return { bytes: b, what: `${name} = ${v} at ${f.offset}` };
    }
    if (f.size === 2 || f.size === 1) {
      const v = Math.floor(r() * 256 ** f.size);
      b.writeUIntLE(v, f.offset, f.size);
      return { bytes: b, what: `${name} = ${v} at ${f.offset}` };
    }
    // a string or name: control characters, invalid UTF-8, or another name's bytes
    const o = f.offset + Math.floor(r() * Math.max(1, f.size));
    const v = pick([0x00, 0x01, 0x1b, 0x7f, 0x80, 0xc3, 0xff, 0x2e, 0x30]);
    if (o < headerEnd) b[o] = v;
    return { bytes: b, what: `${name} byte ${v} at ${o}` };
  }
  if (strategy < 0.8) {
    // cut: the file truncated (in the header or in the data)
    const len = r() < 0.5 ? Math.floor(r() * headerEnd) : headerEnd + Math.floor(r() * (b.length - headerEnd));
    return { bytes: b.subarray(0, len), what: `truncated to ${len} bytes` };
  }
  if (strategy < 0.88) {
    // bytes inserted into or removed from the header: every later field shifts
    const o = Math.floor(r() * headerEnd);
    const n = 1 + Math.floor(r() * 16);
    if (r() < 0.5) return { bytes: Buffer.concat([b.subarray(0, o), Buffer.alloc(n, pick([0, 0xff, 0x41])), b.subarray(o)]), what: `${n} bytes inserted at ${o}` };
    return { bytes: Buffer.concat([b.subarray(0, o), b.subarray(Math.min(b.length, o + n))]), what: `${n} bytes removed at ${o}` };
  }
  // tensor data overwritten: NaN/Inf in the type's own encoding, or garbage
  const t = pick(layout.tensors);
  const len = Math.min(t.nbytes, 4 + Math.floor(r() * 256));
  const o = t.offset + Math.floor(r() * Math.max(1, t.nbytes - len));
  const fill = pick(["nan", "inf", "garbage", "max"] as const);
  for (let i = 0; i < len && o + i < b.length; i++) {
    if (fill === "garbage") b[o + i] = Math.floor(r() * 256);
    else if (fill === "max") b[o + i] = 0x7f;
    else {
      // f32: 0x7fc00000 / 0x7f800000; f16 (and the f16 scales of q8_0/q4_0 blocks): 0x7e01 / 0x7c00
      const j = o + i - t.offset;
      b[o + i] = t.type === 0 ? (fill === "nan" ? [0x00, 0x00, 0xc0, 0x7f] : [0x00, 0x00, 0x80, 0x7f])[j & 3]! : (fill === "nan" ? [0x01, 0x7e] : [0x00, 0x7c])[j & 1]!;
    }
  }
  return { bytes: b, what: `${fill} over ${len} bytes of ${t.name} at ${o}` };
}
