// Where each field of a GGUF file's header lies, so the fuzzer can mutate fields rather than only
// bytes. Written apart from the reader (gguf/reader.ts) on purpose: a walker that shares the
// reader's code would share its blind spots. Only well-formed seed files are walked.

export type FieldKind =
  | "magic"
  | "version"
  | "count"
  | "key-length"
  | "key"
  | "value-type"
  | "value"
  | "string-length"
  | "string"
  | "array-type"
  | "array-length"
  | "name-length"
  | "name"
  | "dims"
  | "dim"
  | "tensor-type"
  | "tensor-offset";

export interface Field {
  kind: FieldKind;
  offset: number;
  size: number;
  /** For a value: its GGUF value type (0..12); the key it belongs to. */
  valueType?: number;
  key?: string;
}

export interface GGUFLayout {
  fields: Field[];
  /** Where the tensor data begins, and each tensor's data range with its ggml type. */
  dataOffset: number;
  tensors: { name: string; type: number; offset: number; nbytes: number }[];
}

const SCALAR_SIZE: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
// ggml types the seeds use: block elements and bytes
const TYPE_BLOCK: Record<number, [number, number]> = { 0: [1, 4], 1: [1, 2], 2: [32, 18], 8: [32, 34], 24: [1, 1], 25: [1, 2], 26: [1, 4] };

export function layoutOf(b: Buffer): GGUFLayout {
  const fields: Field[] = [];
  let p = 0;
  const field = (kind: FieldKind, size: number, extra: Partial<Field> = {}) => {
    fields.push({ kind, offset: p, size, ...extra });
    p += size;
  };
  const u32 = () => b.readUInt32LE(p);
  const u64 = () => Number(b.readBigUInt64LE(p));
  field("magic", 4);
  field("version", 4);
  const nTensors = u64();
  field("count", 8);
  const nKV = u64();
  field("count", 8);
  const str = (lenKind: FieldKind, kind: FieldKind, extra: Partial<Field> = {}): string => {
    const n = u64();
    field(lenKind, 8, extra);
    const s = b.toString("utf8", p, p + n);
    field(kind, n, extra);
    return s;
  };
  let alignment = 32;
  for (let i = 0; i < nKV; i++) {
    const key = str("key-length", "key");
    const t = u32();
    field("value-type", 4, { key });
    if (t === 8) str("string-length", "string", { key });
    else if (t === 9) {
      const et = u32();
      field("array-type", 4, { key });
      const n = u64();
      field("array-length", 8, { key });
      for (let j = 0; j < n; j++) {
        if (et === 8) str("string-length", "string", { key });
        else field("value", SCALAR_SIZE[et]!, { valueType: et, key });
      }
    } else {
      if (key === "general.alignment") alignment = u32();
      field("value", SCALAR_SIZE[t]!, { valueType: t, key });
    }
  }
  const infos: { name: string; type: number; rel: number; elems: number }[] = [];
  for (let i = 0; i < nTensors; i++) {
    const name = str("name-length", "name");
    const nd = u32();
    field("dims", 4);
    let elems = 1;
    for (let d = 0; d < nd; d++) {
      elems *= u64();
      field("dim", 8);
    }
    const type = u32();
    field("tensor-type", 4);
    const rel = u64();
    field("tensor-offset", 8);
    infos.push({ name, type, rel, elems });
  }
  const dataOffset = Math.ceil(p / alignment) * alignment;
  const tensors = infos.map((t) => {
    const [be, bb] = TYPE_BLOCK[t.type] ?? [1, 4];
    return { name: t.name, type: t.type, offset: dataOffset + t.rel, nbytes: (t.elems / be) * bb };
  });
  return { fields, dataOffset, tensors };
}
