// GGUF vocabulary: value types, tensor types and their block layouts (ggml.h / gguf.h).

/** GGUF metadata value types. */
export const ValueType = {
  UINT8: 0,
  INT8: 1,
  UINT16: 2,
  INT16: 3,
  UINT32: 4,
  INT32: 5,
  FLOAT32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  UINT64: 10,
  INT64: 11,
  FLOAT64: 12,
} as const;
export type ValueTypeId = (typeof ValueType)[keyof typeof ValueType];

export const valueTypeName: Record<number, string> = Object.fromEntries(
  Object.entries(ValueType).map(([k, v]) => [v, k.toLowerCase()]),
);

export type ScalarValue = number | bigint | boolean | string;
export type ArrayValue =
  | string[]
  | boolean[]
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | BigUint64Array
  | BigInt64Array
  | Float64Array
  | MetaValue[][]; // nested arrays (rare)

/** One metadata entry as stored: its GGUF type, and for arrays the element type. */
export interface MetaValue {
  type: ValueTypeId;
  elemType?: ValueTypeId;
  value: ScalarValue | ArrayValue;
}

/** ggml tensor types: block size (elements) and bytes per block. */
export interface TensorTypeInfo {
  id: number;
  name: string;
  blockSize: number;
  blockBytes: number;
}

const T = (id: number, name: string, blockSize: number, blockBytes: number): TensorTypeInfo => ({
  id,
  name,
  blockSize,
  blockBytes,
});

/** Every ggml type we can size (so `inspect` can describe any file), whether or not we compute with it. */
export const tensorTypes: Record<number, TensorTypeInfo> = {
  0: T(0, "F32", 1, 4),
  1: T(1, "F16", 1, 2),
  2: T(2, "Q4_0", 32, 18),
  3: T(3, "Q4_1", 32, 20),
  6: T(6, "Q5_0", 32, 22),
  7: T(7, "Q5_1", 32, 24),
  8: T(8, "Q8_0", 32, 34),
  9: T(9, "Q8_1", 32, 36),
  10: T(10, "Q2_K", 256, 84),
  11: T(11, "Q3_K", 256, 110),
  12: T(12, "Q4_K", 256, 144),
  13: T(13, "Q5_K", 256, 176),
  14: T(14, "Q6_K", 256, 210),
  15: T(15, "Q8_K", 256, 292),
  16: T(16, "IQ2_XXS", 256, 66),
  17: T(17, "IQ2_XS", 256, 74),
  18: T(18, "IQ3_XXS", 256, 98),
  19: T(19, "IQ1_S", 256, 50),
  20: T(20, "IQ4_NL", 32, 18),
  21: T(21, "IQ3_S", 256, 110),
  22: T(22, "IQ2_S", 256, 82),
  23: T(23, "IQ4_XS", 256, 136),
  24: T(24, "I8", 1, 1),
  25: T(25, "I16", 1, 2),
  26: T(26, "I32", 1, 4),
  27: T(27, "I64", 1, 8),
  28: T(28, "F64", 1, 8),
  29: T(29, "IQ1_M", 256, 56),
  30: T(30, "BF16", 1, 2),
  34: T(34, "TQ1_0", 256, 54),
  35: T(35, "TQ2_0", 256, 66),
  39: T(39, "MXFP4", 32, 17),
};

export const tensorTypeByName: Record<string, TensorTypeInfo> = Object.fromEntries(
  Object.values(tensorTypes).map((t) => [t.name, t]),
);

/** Types the compute kernels support. */
export const computeTypes = new Set([0, 1, 2, 8]);

export function tensorTypeName(id: number): string {
  return tensorTypes[id]?.name ?? `unknown(${id})`;
}

/** Bytes of a tensor with dims ne (ne[0] innermost); throws if ne[0] does not fit the block size. */
export function tensorBytes(type: number, ne: readonly number[]): number {
  const info = tensorTypes[type];
  if (!info) throw new Error(`unknown tensor type ${type}`);
  const [ne0, ...rest] = ne;
  if (ne0 === undefined) return info.blockBytes; // 0-d: one element
  if (ne0 % info.blockSize !== 0) {
    throw new Error(`tensor type ${info.name} needs a first dimension divisible by ${info.blockSize}, got ${ne0}`);
  }
  let n = (ne0 / info.blockSize) * info.blockBytes;
  for (const d of rest) n *= d;
  return n;
}

export const GGUF_MAGIC = 0x46554747; // "GGUF" little-endian
export const PWRI_MAGIC = 0x49525750; // "PWRI": PowerInfer's GGUF variant
export const GGUF_DEFAULT_ALIGNMENT = 32;
