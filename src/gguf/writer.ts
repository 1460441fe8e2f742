// GGUF v3 writer. Metadata is written in insertion order; tensor data is produced lazily,
// one tensor at a time (a 7B model never has to be in memory at once), and written to a
// temporary file renamed into place at the end, so a failed write never leaves a
// half-written file under the requested name.
import { closeSync, openSync, renameSync, unlinkSync, writeSync } from "node:fs";
import {
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  PWRI_MAGIC,
  type MetaValue,
  type ScalarValue,
  ValueType,
  type ValueTypeId,
  tensorBytes,
} from "./types.js";

export interface TensorToWrite {
  name: string;
  ne: number[];
  type: number;
  /** Called once when the tensor's turn comes; returns the data (exactly nbytes). */
  data: () => Uint8Array | Promise<Uint8Array>;
}

export interface WriteOptions {
  alignment?: number;
  magic?: "GGUF" | "PWRI";
  /** Called after each tensor with (done, total) bytes. */
  onProgress?: (done: number, total: number) => void;
}

class ByteSink {
  private chunks: Buffer[] = [];
  length = 0;
  push(b: Buffer) {
    this.chunks.push(b);
    this.length += b.length;
  }
  u32(v: number) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.push(b);
  }
  u64(v: number | bigint) {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.push(b);
  }
  str(s: string) {
    const b = Buffer.from(s, "utf8");
    this.u64(b.length);
    this.push(b);
  }
  concat() {
    return Buffer.concat(this.chunks);
  }
}

function writeScalar(s: ByteSink, type: ValueTypeId, v: ScalarValue, key: string) {
  const b = Buffer.alloc(8);
  switch (type) {
    case ValueType.UINT8:
      b.writeUInt8(Number(v));
      return s.push(b.subarray(0, 1));
    case ValueType.INT8:
      b.writeInt8(Number(v));
      return s.push(b.subarray(0, 1));
    case ValueType.UINT16:
      b.writeUInt16LE(Number(v));
      return s.push(b.subarray(0, 2));
    case ValueType.INT16:
      b.writeInt16LE(Number(v));
      return s.push(b.subarray(0, 2));
    case ValueType.UINT32:
      b.writeUInt32LE(Number(v));
      return s.push(b.subarray(0, 4));
    case ValueType.INT32:
      b.writeInt32LE(Number(v));
      return s.push(b.subarray(0, 4));
    case ValueType.FLOAT32:
      b.writeFloatLE(Number(v));
      return s.push(b.subarray(0, 4));
    case ValueType.BOOL:
      b.writeUInt8(v ? 1 : 0);
      return s.push(b.subarray(0, 1));
    case ValueType.STRING:
      return s.str(String(v));
    case ValueType.UINT64:
      b.writeBigUInt64LE(BigInt(v));
      return s.push(b);
    case ValueType.INT64:
      b.writeBigInt64LE(BigInt(v));
      return s.push(b);
    case ValueType.FLOAT64:
      b.writeDoubleLE(Number(v));
      return s.push(b);
    default:
      throw new Error(`gguf writer: key ${key}: cannot write value type ${type}`);
  }
}

function writeValue(s: ByteSink, m: MetaValue, key: string) {
  if (m.type !== ValueType.ARRAY) return writeScalar(s, m.type, m.value as ScalarValue, key);
  const et = m.elemType;
  if (et === undefined) throw new Error(`gguf writer: key ${key}: array without element type`);
  const arr = m.value as ArrayLike<unknown>;
  s.u32(et);
  s.u64(arr.length);
  if (ArrayBuffer.isView(arr) && et !== ValueType.BOOL) {
    const v = arr as unknown as ArrayBufferView;
    s.push(Buffer.from(new Uint8Array(v.buffer, v.byteOffset, v.byteLength)));
    return;
  }
  for (let i = 0; i < arr.length; i++) writeScalar(s, et, arr[i] as ScalarValue, key);
}

/** Builder for a GGUF file: add metadata and tensors, then write(). */
export class GGUFWriter {
  readonly metadata = new Map<string, MetaValue>();
  readonly tensors: TensorToWrite[] = [];

  set(key: string, type: ValueTypeId, value: ScalarValue): this {
    this.metadata.set(key, { type, value });
    return this;
  }
  setString(key: string, v: string) {
    return this.set(key, ValueType.STRING, v);
  }
  setU32(key: string, v: number) {
    return this.set(key, ValueType.UINT32, v);
  }
  setF32(key: string, v: number) {
    return this.set(key, ValueType.FLOAT32, v);
  }
  setBool(key: string, v: boolean) {
    return this.set(key, ValueType.BOOL, v);
  }
  setArray(key: string, elemType: ValueTypeId, value: MetaValue["value"]) {
    this.metadata.set(key, { type: ValueType.ARRAY, elemType, value });
    return this;
  }
  addTensor(t: TensorToWrite) {
    if (this.tensors.some((x) => x.name === t.name)) throw new Error(`gguf writer: duplicate tensor ${t.name}`);
    tensorBytes(t.type, t.ne); // validates the shape against the type's block size
    this.tensors.push(t);
    return this;
  }

  async write(path: string, opts: WriteOptions = {}): Promise<number> {
    const alignment = opts.alignment ?? Number(this.metadata.get("general.alignment")?.value ?? GGUF_DEFAULT_ALIGNMENT);
    const head = new ByteSink();
    head.u32(opts.magic === "PWRI" ? PWRI_MAGIC : GGUF_MAGIC);
    head.u32(3);
    head.u64(this.tensors.length);
    head.u64(this.metadata.size);
    for (const [k, v] of this.metadata) {
      head.str(k);
      head.u32(v.type);
      writeValue(head, v, k);
    }
    const sizes = this.tensors.map((t) => tensorBytes(t.type, t.ne));
    let rel = 0;
    const offsets: number[] = [];
    for (const [i, t] of this.tensors.entries()) {
      offsets.push(rel);
      head.str(t.name);
      head.u32(t.ne.length);
      for (const d of t.ne) head.u64(d);
      head.u32(t.type);
      head.u64(rel);
      rel += Math.ceil(sizes[i]! / alignment) * alignment;
    }
    const total = rel;
    const header = head.concat();
    const dataStart = Math.ceil(header.length / alignment) * alignment;

    const tmp = `${path}.tmp-${process.pid}`;
    const fd = openSync(tmp, "w");
    let ok = false;
    try {
      writeAll(fd, header, 0);
      writeAll(fd, Buffer.alloc(dataStart - header.length), header.length);
      let pos = dataStart;
      for (const [i, t] of this.tensors.entries()) {
        const data = await t.data();
        if (data.byteLength !== sizes[i]) {
          throw new Error(`gguf writer: tensor ${t.name} produced ${data.byteLength} bytes, expected ${sizes[i]}`);
        }
        writeAll(fd, data, pos);
        const padded = Math.ceil(sizes[i]! / alignment) * alignment;
        if (padded > sizes[i]!) writeAll(fd, Buffer.alloc(padded - sizes[i]!), pos + sizes[i]!);
        pos += padded;
        opts.onProgress?.(offsets[i]! + padded, total);
      }
      ok = true;
    } finally {
      closeSync(fd);
      if (!ok) {
        try {
          unlinkSync(tmp);
        } catch {
          /* already gone */
        }
      }
    }
    renameSync(tmp, path);
    return dataStart + total;
  }
}

function writeAll(fd: number, data: Uint8Array, pos: number) {
  let done = 0;
  while (done < data.byteLength) {
    // write in ≤1 GiB pieces (writeSync's length limit)
    const n = writeSync(fd, data, done, Math.min(data.byteLength - done, 1 << 30), pos + done);
    done += n;
  }
}
