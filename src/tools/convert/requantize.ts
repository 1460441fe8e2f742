// Re-encode a GGUF's weight matrices in another type (llama-quantize's job for our four types).
// Norms and other 1-D tensors stay F32; every 2-D+ matrix whose rows fit the type is converted
// (dequantised row by row to f32, then quantised), metadata is copied unchanged.
import { readGGUF, type GGUFFile, type TensorInfo } from "../../gguf/reader.js";
import { GGUFWriter } from "../../gguf/writer.js";
import { tensorTypeName, tensorTypes } from "../../gguf/types.js";
import { GGMLType, native } from "../../native.js";

/** Data of `t` converted to `type` (rows of ne[0] elements), via f32. */
export function convertTensorData(fileBuf: number, t: TensorInfo, type: number): Uint8Array {
  const n = native();
  const cols = t.ne[0]!;
  const rows = t.ne.slice(1).reduce((a, b) => a * b, 1);
  const f32 = n.alloc(cols * 4);
  const outRow = n.rowBytes(type, cols);
  const out = n.alloc(rows * outRow);
  for (let r = 0; r < rows; r++) {
    n.dequantizeRow(t.type, fileBuf, t.offset, cols, r, f32, 0);
    n.quantize(type, f32, 0, out, r * outRow, 1, cols);
  }
  n.free(f32);
  const view = n.viewU8(out, 0, rows * outRow);
  n.free(out); // released when the view is collected
  return view;
}

/** Which type a tensor gets: 1-D tensors and rows that do not fit the block size stay as they are (or F32). */
export function targetType(t: TensorInfo, type: number): number {
  if (t.ne.length < 2 || t.ne[1] === 1) return t.type === GGMLType.F16 ? GGMLType.F32 : t.type;
  const bs = tensorTypes[type]!.blockSize;
  return t.ne[0]! % bs === 0 ? type : t.type;
}

export async function requantize(
  input: string,
  output: string,
  type: number,
  onProgress?: (done: number, total: number) => void,
): Promise<{ file: GGUFFile; bytes: number }> {
  if (![GGMLType.F32, GGMLType.F16, GGMLType.Q8_0, GGMLType.Q4_0].includes(type as 0)) {
    throw new Error(`requantize: cannot write type ${tensorTypeName(type)} (F32, F16, Q8_0, Q4_0)`);
  }
  const f = readGGUF(input);
  for (const t of f.tensors) {
    if (![0, 1, 2, 8].includes(t.type)) throw new Error(`${input}: tensor ${t.name} has type ${tensorTypeName(t.type)}, which cannot be converted`);
  }
  const n = native();
  const mapped = n.mapFile(input);
  try {
    const w = new GGUFWriter();
    for (const [k, v] of f.metadata) w.metadata.set(k, v);
    const ftype: Record<number, number> = { 0: 0, 1: 1, 2: 2, 8: 7 };
    w.setU32("general.file_type", ftype[type]!);
    for (const t of f.tensors) {
      const tt = targetType(t, type);
      w.addTensor({ name: t.name, ne: t.ne, type: tt, data: () => convertTensorData(mapped.id, t, tt) });
    }
    const bytes = await w.write(output, { onProgress });
    return { file: f, bytes };
  } finally {
    n.free(mapped.id);
  }
}
