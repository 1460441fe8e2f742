// GGUF reader (v2, v3; PowerInfer's PWRI magic accepted). Reads the header, metadata and
// tensor directory with buffered pread; tensor data stays on disk (the model maps it).
// Every malformed input ends in a GGUFError naming the file, what was wrong and the offset.
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import {
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  PWRI_MAGIC,
  type MetaValue,
  type ValueTypeId,
  ValueType,
  tensorTypes,
  tensorTypeName,
} from "./types.js";
import { safeMessage } from "../util/message.js";

export class GGUFError extends Error {
  constructor(
    readonly file: string,
    message: string,
    readonly offset?: number,
  ) {
    // the file's own bytes (a key, a name) may be in the message: escaped and cut (util/message.ts)
    super(safeMessage(`${file}: ${message}${offset !== undefined ? ` (at byte ${offset})` : ""}`));
    this.name = "GGUFError";
  }
}

export interface TensorInfo {
  name: string;
  /** ggml dims, ne[0] innermost (a weight matrix is ne = [cols, rows]). */
  ne: number[];
  type: number;
  /** Offset relative to the data section. */
  relOffset: number;
  /** Absolute file offset of the data. */
  offset: number;
  nbytes: number;
}

export interface GGUFFile {
  path: string;
  magic: "GGUF" | "PWRI";
  version: number;
  alignment: number;
  metadata: Map<string, MetaValue>;
  tensors: TensorInfo[];
  tensorsByName: Map<string, TensorInfo>;
  dataOffset: number;
  fileSize: number;
}

const MAX_TENSORS = 1 << 20;
/** Longest metadata key (the GGUF spec: keys are at most 65535 bytes). */
const MAX_KEY = 65535;
/** Longest tensor name (ggml's GGML_MAX_NAME, terminator included). */
const MAX_NAME = 63;
const MAX_KV = 1 << 20;
const MAX_STRING = 1 << 26;
const MAX_DIMS = 4;
const MAX_ELEMENTS = 2 ** 48;
const CHUNK = 1 << 20;

/** Buffered little-endian reader over a file descriptor. */
class Cursor {
  private buf = Buffer.alloc(0);
  private bufStart = 0; // file offset of buf[0]
  pos = 0;
  constructor(
    private readonly fd: number,
    readonly size: number,
    private readonly path: string,
  ) {}

  fail(message: string, at = this.pos): never {
    throw new GGUFError(this.path, message, at);
  }

  private ensure(n: number, what: string): number {
    if (this.pos + n > this.size) this.fail(`truncated file: need ${n} bytes for ${what}, file ends at ${this.size}`);
    const rel = this.pos - this.bufStart;
    if (rel >= 0 && rel + n <= this.buf.length) return rel;
    const len = Math.min(Math.max(n, CHUNK), this.size - this.pos);
    const b = Buffer.allocUnsafe(len);
    let got = 0;
    while (got < len) {
      const r = readSync(this.fd, b, got, len - got, this.pos + got);
      if (r === 0) this.fail(`short read: file ended while reading ${what}`);
      got += r;
    }
    this.buf = b;
    this.bufStart = this.pos;
    return 0;
  }

  u8(what = "u8"): number {
    const o = this.ensure(1, what);
    this.pos += 1;
    return this.buf.readUInt8(o);
  }
  i8(): number {
    const o = this.ensure(1, "i8");
    this.pos += 1;
    return this.buf.readInt8(o);
  }
  u16(): number {
    const o = this.ensure(2, "u16");
    this.pos += 2;
    return this.buf.readUInt16LE(o);
  }
  i16(): number {
    const o = this.ensure(2, "i16");
    this.pos += 2;
    return this.buf.readInt16LE(o);
  }
  u32(what = "u32"): number {
    const o = this.ensure(4, what);
    this.pos += 4;
    return this.buf.readUInt32LE(o);
  }
  i32(): number {
    const o = this.ensure(4, "i32");
    this.pos += 4;
    return this.buf.readInt32LE(o);
  }
  f32(): number {
    const o = this.ensure(4, "f32");
    this.pos += 4;
    return this.buf.readFloatLE(o);
  }
  f64(): number {
    const o = this.ensure(8, "f64");
    this.pos += 8;
    return this.buf.readDoubleLE(o);
  }
  u64big(what = "u64"): bigint {
    const o = this.ensure(8, what);
    this.pos += 8;
    return this.buf.readBigUInt64LE(o);
  }
  i64big(): bigint {
    const o = this.ensure(8, "i64");
    this.pos += 8;
    return this.buf.readBigInt64LE(o);
  }
  /** u64 that must fit a JS number below `max`. */
  count(what: string, max: number): number {
    const at = this.pos;
    const v = this.u64big(what);
    if (v > BigInt(max)) this.fail(`${what} is ${v}, more than the limit ${max}`, at);
    return Number(v);
  }
  bytes(n: number, what: string): Buffer {
    const o = this.ensure(n, what);
    this.pos += n;
    return this.buf.subarray(o, o + n);
  }
  string(what: string, max = MAX_STRING): string {
    const at = this.pos;
    const n = this.count(`length of ${what}`, Math.min(max, this.size));
    if (this.pos + n > this.size) this.fail(`string ${what} of ${n} bytes runs past the end of the file`, at);
    return this.bytes(n, what).toString("utf8");
  }
}

function readValue(c: Cursor, type: number, key: string, depth = 0): MetaValue {
  switch (type) {
    case ValueType.UINT8:
      return { type, value: c.u8() };
    case ValueType.INT8:
      return { type, value: c.i8() };
    case ValueType.UINT16:
      return { type, value: c.u16() };
    case ValueType.INT16:
      return { type, value: c.i16() };
    case ValueType.UINT32:
      return { type, value: c.u32() };
    case ValueType.INT32:
      return { type, value: c.i32() };
    case ValueType.FLOAT32:
      return { type, value: c.f32() };
    case ValueType.BOOL: {
      const at = c.pos;
      const b = c.u8();
      if (b > 1) c.fail(`key ${key}: bool value ${b} is neither 0 nor 1`, at);
      return { type, value: b === 1 };
    }
    case ValueType.STRING:
      return { type, value: c.string(`value of ${key}`) };
    case ValueType.UINT64:
      return { type, value: c.u64big() };
    case ValueType.INT64:
      return { type, value: c.i64big() };
    case ValueType.FLOAT64:
      return { type, value: c.f64() };
    case ValueType.ARRAY: {
      if (depth > 2) c.fail(`key ${key}: arrays nested too deeply`);
      const at = c.pos;
      const elemType = c.u32("array element type") as ValueTypeId;
      if (elemType > 12) c.fail(`key ${key}: unknown array element type ${elemType}`, at);
      const n = c.count(`array length of ${key}`, c.size); // each element is at least one byte
      return { type, elemType, value: readArray(c, elemType, n, key, depth) };
    }
    default:
      return c.fail(`key ${key}: unknown metadata value type ${type}`, c.pos - 4);
  }
}

function readArray(c: Cursor, t: ValueTypeId, n: number, key: string, depth: number): MetaValue["value"] {
  const fixed: Partial<Record<number, [number, (b: Buffer) => MetaValue["value"]]>> = {
    [ValueType.UINT8]: [1, (b) => new Uint8Array(b)],
    [ValueType.INT8]: [1, (b) => new Int8Array(new Uint8Array(b).buffer)],
    [ValueType.UINT16]: [2, (b) => new Uint16Array(copyAligned(b))],
    [ValueType.INT16]: [2, (b) => new Int16Array(copyAligned(b))],
    [ValueType.UINT32]: [4, (b) => new Uint32Array(copyAligned(b))],
    [ValueType.INT32]: [4, (b) => new Int32Array(copyAligned(b))],
    [ValueType.FLOAT32]: [4, (b) => new Float32Array(copyAligned(b))],
    [ValueType.UINT64]: [8, (b) => new BigUint64Array(copyAligned(b))],
    [ValueType.INT64]: [8, (b) => new BigInt64Array(copyAligned(b))],
    [ValueType.FLOAT64]: [8, (b) => new Float64Array(copyAligned(b))],
  };
  const f = fixed[t];
  if (f) {
    const [size, make] = f;
    if (c.pos + n * size > c.size) c.fail(`key ${key}: array of ${n} elements runs past the end of the file`);
    // read in bounded pieces so a large array does not need one giant buffer read
    const out = Buffer.allocUnsafe(n * size);
    let done = 0;
    while (done < out.length) {
      const take = Math.min(CHUNK, out.length - done);
      c.bytes(take, `array ${key}`).copy(out, done);
      done += take;
    }
    return make(out);
  }
  if (t === ValueType.STRING) {
    const a: string[] = new Array(n);
    for (let i = 0; i < n; i++) a[i] = c.string(`${key}[${i}]`);
    return a;
  }
  if (t === ValueType.BOOL) {
    const a: boolean[] = new Array(n);
    for (let i = 0; i < n; i++) a[i] = c.u8() !== 0;
    return a;
  }
  // nested array
  const a: MetaValue[][] = new Array(n);
  for (let i = 0; i < n; i++) a[i] = [readValue(c, t, `${key}[${i}]`, depth + 1)];
  return a;
}

function copyAligned(b: Buffer): ArrayBuffer {
  const ab = new ArrayBuffer(b.length);
  new Uint8Array(ab).set(b);
  return ab;
}

/** Read a GGUF (or PWRI) file's header, metadata and tensor directory. */
export function readGGUF(path: string): GGUFFile {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (e) {
    throw new GGUFError(path, `cannot open: ${(e as Error).message}`);
  }
  try {
    const size = fstatSync(fd).size;
    const c = new Cursor(fd, size, path);
    if (size < 24) c.fail(`too small to be a GGUF file (${size} bytes)`, 0);
    const magicNum = c.u32("magic");
    if (magicNum !== GGUF_MAGIC && magicNum !== PWRI_MAGIC) {
      const shown = Buffer.alloc(4);
      shown.writeUInt32LE(magicNum);
      c.fail(`bad magic ${JSON.stringify(shown.toString("latin1"))}: not a GGUF file`, 0);
    }
    const magic = magicNum === GGUF_MAGIC ? "GGUF" : "PWRI";
    const version = c.u32("version");
    if (version === 1) c.fail("GGUF version 1 is not supported (re-convert the model)", 4);
    if (version !== 2 && version !== 3) c.fail(`unsupported GGUF version ${version}`, 4);
    const nTensors = c.count("tensor count", MAX_TENSORS);
    const nKV = c.count("metadata count", MAX_KV);

    const metadata = new Map<string, MetaValue>();
    for (let i = 0; i < nKV; i++) {
      const key = c.string(`metadata key #${i}`, MAX_KEY);
      const at = c.pos;
      const type = c.u32(`type of ${key}`);
      if (type > 12) c.fail(`key ${key}: unknown metadata value type ${type}`, at);
      if (metadata.has(key)) c.fail(`duplicate metadata key ${key}`, at);
      metadata.set(key, readValue(c, type, key));
    }

    let alignment = GGUF_DEFAULT_ALIGNMENT;
    const al = metadata.get("general.alignment");
    if (al) {
      const v = Number(al.value);
      if (!Number.isInteger(v) || v <= 0 || (v & (v - 1)) !== 0 || v > 1 << 20) {
        c.fail(`general.alignment ${String(al.value)} is not a power of two`);
      }
      alignment = v;
    }

    const tensors: TensorInfo[] = [];
    const byName = new Map<string, TensorInfo>();
    for (let i = 0; i < nTensors; i++) {
      const name = c.string(`name of tensor #${i}`, MAX_NAME);
      const at = c.pos;
      const nd = c.u32(`dims of ${name}`);
      if (nd < 1 || nd > MAX_DIMS) c.fail(`tensor ${name}: ${nd} dimensions (1..${MAX_DIMS} allowed)`, at);
      const ne: number[] = [];
      let elems = 1;
      for (let d = 0; d < nd; d++) {
        const v = c.count(`dimension ${d} of ${name}`, MAX_ELEMENTS);
        if (v === 0) c.fail(`tensor ${name}: dimension ${d} is 0`, c.pos - 8);
        elems *= v;
        if (elems > MAX_ELEMENTS) c.fail(`tensor ${name}: absurd size (${ne.concat(v).join(" x ")})`, c.pos - 8);
        ne.push(v);
      }
      const tAt = c.pos;
      const type = c.u32(`type of ${name}`);
      const info = tensorTypes[type];
      if (!info) c.fail(`tensor ${name}: unknown tensor type ${type}`, tAt);
      if (ne[0]! % info.blockSize !== 0) {
        c.fail(`tensor ${name}: first dimension ${ne[0]} not a multiple of ${tensorTypeName(type)}'s block size ${info.blockSize}`, at);
      }
      const relOffset = c.count(`offset of ${name}`, Number.MAX_SAFE_INTEGER);
      if (relOffset % alignment !== 0) c.fail(`tensor ${name}: data offset ${relOffset} not aligned to ${alignment}`, c.pos - 8);
      const nbytes = (elems / info.blockSize) * info.blockBytes;
      if (byName.has(name)) c.fail(`duplicate tensor name ${name}`, at);
      const t: TensorInfo = { name, ne, type, relOffset, offset: 0, nbytes };
      tensors.push(t);
      byName.set(name, t);
    }
    const dataOffset = Math.ceil(c.pos / alignment) * alignment;
    for (const t of tensors) {
      t.offset = dataOffset + t.relOffset;
      if (t.offset + t.nbytes > size) {
        throw new GGUFError(
          path,
          `tensor ${t.name} (${t.ne.join(" x ")} ${tensorTypeName(t.type)}, ${t.nbytes} bytes at data offset ${t.relOffset}) lies outside the file (size ${size}); the file is truncated or corrupt`,
          t.offset,
        );
      }
    }
    return { path, magic, version, alignment, metadata, tensors, tensorsByName: byName, dataOffset, fileSize: size };
  } finally {
    closeSync(fd);
  }
}

// ---- typed metadata access ---------------------------------------------------------

export function metaNumber(f: GGUFFile, key: string): number | undefined {
  const v = f.metadata.get(key);
  if (!v) return undefined;
  if (typeof v.value === "number") return v.value;
  if (typeof v.value === "bigint") return Number(v.value);
  throw new GGUFError(f.path, `metadata ${key} should be a number, is ${typeof v.value}`);
}

export function metaString(f: GGUFFile, key: string): string | undefined {
  const v = f.metadata.get(key);
  if (!v) return undefined;
  if (typeof v.value !== "string") throw new GGUFError(f.path, `metadata ${key} should be a string`);
  return v.value;
}

export function metaBool(f: GGUFFile, key: string): boolean | undefined {
  const v = f.metadata.get(key);
  if (!v) return undefined;
  if (typeof v.value !== "boolean") throw new GGUFError(f.path, `metadata ${key} should be a bool`);
  return v.value;
}

export function metaArray(f: GGUFFile, key: string): MetaValue["value"] | undefined {
  const v = f.metadata.get(key);
  if (!v) return undefined;
  if (v.type !== ValueType.ARRAY) throw new GGUFError(f.path, `metadata ${key} should be an array`);
  return v.value;
}

export function requireNumber(f: GGUFFile, key: string): number {
  const v = metaNumber(f, key);
  if (v === undefined) throw new GGUFError(f.path, `missing metadata key ${key}`);
  return v;
}
