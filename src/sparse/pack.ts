// The neuron pack (`neuronpipe pack`, docs/formats.md "Neuron pack"): a GGUF v3 file, aligned
// to 4096, holding a model's fixed region (embeddings, attention, norms, output) byte for byte
// and its FFN re-laid as neuron bundles in hot-first order, so that a neuron's gate row is one
// 4 KiB-aligned read and its up row + down column one more, the way PowerInfer-2 reads flash.
//
// Bundle p of layer N (pack position p, original neuron order[p]):
//   [gate row (gate_bytes) | zeros to gate_block][up row (up_bytes) | down column (down_bytes) | zeros to updown_block]
// The down column is the neuron's column of the down matrix, dequantised and re-quantised as a
// row of n_embd values in down_type (exact for F32/F16, a second rounding for Q8_0/Q4_0; the
// measured relative error is stored per layer).
import { closeSync, existsSync, openSync, readSync, realpathSync, renameSync, unlinkSync, writeSync } from "node:fs";
import { basename, resolve } from "node:path";
import { GGUFError, readGGUF, type GGUFFile, type TensorInfo } from "../gguf/reader.js";
import { GGUFWriter } from "../gguf/writer.js";
import { computeTypes, tensorTypeName, ValueType } from "../gguf/types.js";
import { readConfig, type ModelConfig } from "../model/config.js";
import { native } from "../native.js";
import { modelFingerprint } from "./fingerprint.js";
import { hotSetSize, readProfile } from "./profile.js";
import { readPredictors } from "./predictor.js";

export { modelFingerprint } from "./fingerprint.js";

export interface PackLayer {
  bundlesOffset: number; // absolute file offset of bundle 0 of this layer (4096-aligned)
  order: Int32Array; // order[p] = original neuron id at pack position p
  counts: Uint32Array; // profiled firing count per pack position
  hotCount: number; // leading pack positions holding 80% of firings
}
export interface PackPredictorLayer {
  hidden: number;
  /** Read from the file on first use (a 7B pack holds hundreds of MB of predictors; loadSparseModel reads them straight into native memory instead). */
  readonly fc1: Float32Array; // (hidden, n_embd)
  readonly fc2: Float32Array; // (n_ff, hidden), rows in pack order
  /** File offsets of the F32 tensors blk.N.fc1.weight and blk.N.fc2.weight. */
  fc1Offset: number;
  fc2Offset: number;
  threshold: number;
}
export interface Pack {
  path: string;
  file: GGUFFile; // parsed header (readGGUF) — fixed-region tensors are in file.tensorsByName
  config: ModelConfig; // readConfig(file)
  gateType: number;
  upType: number;
  downType: number;
  gateBytes: number;
  upBytes: number;
  downBytes: number;
  gateBlock: number;
  upDownBlock: number;
  bundleBytes: number;
  layers: PackLayer[];
  predictor?: PackPredictorLayer[]; // undefined when the pack has none
  profileTokens: number;
  downRelayoutError: number[];
  source: { name: string; size: number; fingerprint: string };
}

/** A malformed or unusable pack (or pack input); the message starts with the file path. */
export class PackError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PackError";
  }
}

export interface PackOptions {
  profile: string;
  predictor?: string;
  /**
   * Type of the re-laid down columns (default: the model's down type). Q8_0 columns for a Q4_0
   * model cut the re-layout error ~12× (measured 4.4% → 0.36%) and, at n_embd 4096, still fit the
   * 8 KiB up+down block the Q4_0 columns need: no extra reads, 30% more cache per neuron.
   */
  downType?: number;
  onProgress?: (done: number, total: number) => void;
}

export const PACK_VERSION = 1;
export const PACK_ALIGNMENT = 4096;
const P = "neuronpipe.pack.";
const I8 = 24;
const I32 = 26;
const F32 = 0;

const roundUp = (n: number, a: number) => Math.ceil(n / a) * a;

/** The FFN matrix of layer l (plain llama names, or smallthinker's one-expert `_exps` names). */
function ffnTensorName(f: GGUFFile, l: number, m: "gate" | "up" | "down"): string {
  const plain = `blk.${l}.ffn_${m}.weight`;
  if (f.tensorsByName.has(plain)) return plain;
  const exps = `blk.${l}.ffn_${m}_exps.weight`;
  if (f.tensorsByName.has(exps)) return exps;
  throw new PackError(`${f.path}: missing tensor ${plain} (or ${exps})`);
}

/** Tensors that are not copied into the fixed region: FFN matrices, the smallthinker router, predictors. */
function isFfnOrAux(name: string): boolean {
  return /^blk\.\d+\.(ffn_(gate|up|down)(_exps)?\.weight|ffn_gate_inp\.weight|fc[12]\.weight)$/.test(name);
}

function checkMatrix(f: GGUFFile, t: TensorInfo, cols: number, rows: number) {
  const [c, r = 1, ...more] = t.ne;
  if (c !== cols || r !== rows || more.some((d) => d !== 1)) {
    throw new PackError(`${f.path}: tensor ${t.name} has shape [${t.ne.join(", ")}], expected [${cols}, ${rows}]`);
  }
  if (!computeTypes.has(t.type)) {
    throw new PackError(`${f.path}: tensor ${t.name} has type ${tensorTypeName(t.type)}; packs support F32, F16, Q8_0, Q4_0`);
  }
}

/** Pack positions: neurons by firing count descending, ties by ascending neuron id. */
export function hotFirstOrder(counts: Uint32Array): Int32Array {
  const ids = Array.from({ length: counts.length }, (_, i) => i);
  ids.sort((a, b) => counts[b]! - counts[a]! || a - b);
  return Int32Array.from(ids);
}

function sameFile(a: string, b: string): boolean {
  const ra = resolve(a);
  const rb = resolve(b);
  if (ra === rb) return true;
  try {
    return existsSync(a) && existsSync(b) && realpathSync(a) === realpathSync(b);
  } catch {
    return false;
  }
}

/**
 * Write the neuron pack of `modelPath` to `outPath`, ordering each layer's neurons by the
 * profile's firing counts and (optionally) embedding the predictor with fc2 rows in pack order.
 * One layer's FFN is in memory at a time.
 */
export async function writePack(modelPath: string, outPath: string, opts: PackOptions): Promise<{ bytes: number; downRelayoutError: number[] }> {
  for (const [what, p] of [["model", modelPath], ["profile", opts.profile], ["predictor", opts.predictor]] as const) {
    if (p !== undefined && sameFile(outPath, p)) throw new PackError(`${outPath}: refusing to overwrite the input ${what} ${p}`);
  }
  let src: GGUFFile;
  let cfg: ModelConfig;
  try {
    src = readGGUF(modelPath);
    if (src.metadata.has(`${P}version`)) throw new PackError(`${modelPath}: is already a neuron pack; pack the original model`);
    cfg = readConfig(src);
  } catch (e) {
    if (e instanceof PackError) throw e;
    throw new PackError((e as Error).message);
  }
  const { nLayer, nEmbd, nFF } = cfg;
  const fingerprint = modelFingerprint(modelPath, src);

  // ---- the profile and predictor must come from this model --------------------------
  const profile = readProfile(opts.profile);
  if (profile.modelFingerprint !== undefined && profile.modelFingerprint !== fingerprint) {
    throw new PackError(
      `${opts.profile}: this profile was made from another model than ${modelPath} (model fingerprint ${profile.modelFingerprint.slice(0, 16)}… ≠ ${fingerprint.slice(0, 16)}…); profile ${modelPath} with \`neuronpipe profile\``,
    );
  }
  if (profile.nLayer !== nLayer || profile.nFF !== nFF) {
    throw new PackError(
      `${opts.profile}: profile shape (n_layer ${profile.nLayer}, n_ff ${profile.nFF}) does not match the model ${modelPath} (n_layer ${nLayer}, n_ff ${nFF})`,
    );
  }
  let pred: ReturnType<typeof readPredictors> | undefined;
  let predFile: GGUFFile | undefined;
  if (opts.predictor !== undefined) {
    try {
      pred = readPredictors(opts.predictor);
      predFile = readGGUF(opts.predictor);
    } catch (e) {
      const m = (e as Error).message;
      throw new PackError(m.startsWith(opts.predictor) ? m : `${opts.predictor}: ${m}`);
    }
    if (pred.modelFingerprint !== undefined && pred.modelFingerprint !== fingerprint) {
      throw new PackError(
        `${opts.predictor}: this predictor was trained on another model than ${modelPath} (model fingerprint ${pred.modelFingerprint.slice(0, 16)}… ≠ ${fingerprint.slice(0, 16)}…)`,
      );
    }
    if (pred.layers.length !== nLayer || pred.nFF !== nFF || pred.nEmbd !== nEmbd) {
      throw new PackError(
        `${opts.predictor}: predictor shape (n_layer ${pred.layers.length}, n_embd ${pred.nEmbd}, n_ff ${pred.nFF}) does not match the model ${modelPath} (n_layer ${nLayer}, n_embd ${nEmbd}, n_ff ${nFF})`,
      );
    }
  }

  // ---- FFN tensors and the bundle layout ------------------------------------------
  const ffn = Array.from({ length: nLayer }, (_, l) => {
    const g = src.tensorsByName.get(ffnTensorName(src, l, "gate"))!;
    const u = src.tensorsByName.get(ffnTensorName(src, l, "up"))!;
    const d = src.tensorsByName.get(ffnTensorName(src, l, "down"))!;
    checkMatrix(src, g, nEmbd, nFF);
    checkMatrix(src, u, nEmbd, nFF);
    checkMatrix(src, d, nFF, nEmbd);
    return { g, u, d };
  });
  const [gateType, upType, srcDownType] = [ffn[0]!.g.type, ffn[0]!.u.type, ffn[0]!.d.type];
  const downType = opts.downType ?? srcDownType;
  if (![0, 1, 2, 8].includes(downType)) throw new PackError(`${outPath}: down column type ${downType} is not one of F32 (0), F16 (1), Q4_0 (2), Q8_0 (8)`);
  for (const [l, { g, u, d }] of ffn.entries()) {
    if (g.type !== gateType || u.type !== upType || d.type !== srcDownType) {
      throw new PackError(
        `${modelPath}: layer ${l} FFN types (${[g, u, d].map((t) => tensorTypeName(t.type)).join("/")}) differ from layer 0's (${[gateType, upType, srcDownType].map(tensorTypeName).join("/")}); a pack needs one type per matrix kind`,
      );
    }
  }
  const n = native();
  if (nEmbd % 32 !== 0 && (downType === 2 || downType === 8)) {
    throw new PackError(`${modelPath}: n_embd ${nEmbd} is not a multiple of 32, so down columns cannot be stored as ${tensorTypeName(downType)} rows`);
  }
  const gateBytes = n.rowBytes(gateType, nEmbd);
  const upBytes = n.rowBytes(upType, nEmbd);
  const downBytes = n.rowBytes(downType, nEmbd);
  const gateBlock = roundUp(gateBytes, PACK_ALIGNMENT);
  const upDownBlock = roundUp(upBytes + downBytes, PACK_ALIGNMENT);
  const bundleBytes = gateBlock + upDownBlock;

  const orders = profile.layers.map((l) => hotFirstOrder(l.counts));
  const packCounts = profile.layers.map((l, i) => Int32Array.from(orders[i]!, (j) => l.counts[j]!));
  const hotCounts = profile.layers.map((l) => hotSetSize(l.counts, 0.8));

  // ---- metadata ------------------------------------------------------------------
  const w = new GGUFWriter();
  for (const [k, v] of src.metadata) w.metadata.set(k, v);
  w.setU32("general.alignment", PACK_ALIGNMENT);
  w.setU32(`${P}version`, PACK_VERSION);
  w.setString(`${P}source_name`, basename(modelPath));
  w.set(`${P}source_size`, ValueType.UINT64, BigInt(src.fileSize));
  w.setString(`${P}source_fingerprint`, fingerprint);
  w.setU32(`${P}gate_type`, gateType);
  w.setU32(`${P}up_type`, upType);
  w.setU32(`${P}down_type`, downType);
  w.setU32(`${P}gate_bytes`, gateBytes);
  w.setU32(`${P}up_bytes`, upBytes);
  w.setU32(`${P}down_bytes`, downBytes);
  w.setU32(`${P}gate_block`, gateBlock);
  w.setU32(`${P}updown_block`, upDownBlock);
  w.setU32(`${P}bundle_bytes`, bundleBytes);
  w.setArray(`${P}hot_count`, ValueType.UINT32, Uint32Array.from(hotCounts));
  w.set(`${P}profile_tokens`, ValueType.UINT64, BigInt(profile.tokens));
  // placeholder, patched once the layers have been re-laid (the header is written first)
  const errKey = `${P}down_relayout_error`;
  w.setArray(errKey, ValueType.FLOAT32, new Float32Array(nLayer));
  if (pred && predFile) {
    for (const [k, v] of predFile.metadata) {
      if (k.startsWith("neuronpipe.predictor.") || k === "powerinfer.sparse_threshold") w.metadata.set(k, v);
    }
    w.setArray("neuronpipe.predictor.threshold", ValueType.FLOAT32, Float32Array.from(pred.layers, (l) => l.threshold));
    w.setString("neuronpipe.predictor.order", "fc2 rows in pack order: score[p] belongs to neuron blk.N.ffn_order[p]");
  }

  // ---- tensors: fixed region, small per-layer tensors, then the bundles -------------
  const mapped = n.mapFile(modelPath);
  const errors = new Array<number>(nLayer).fill(0);
  // one layer at a time, in buffers reused for every layer (the writer writes each tensor's
  // data before asking for the next, and padding positions are never written, so stay zero)
  let relayout: DownRelayout | undefined;
  let out: Uint8Array | undefined;
  try {
    for (const t of src.tensors) {
      if (isFfnOrAux(t.name)) continue;
      w.addTensor({ name: t.name, ne: t.ne, type: t.type, data: () => n.viewU8(mapped.id, t.offset, t.nbytes) });
    }
    for (let l = 0; l < nLayer; l++) {
      const order = orders[l]!;
      w.addTensor({ name: `blk.${l}.ffn_order`, ne: [nFF], type: I32, data: () => new Uint8Array(order.buffer, order.byteOffset, order.byteLength) });
      const c = packCounts[l]!;
      w.addTensor({ name: `blk.${l}.act_count`, ne: [nFF], type: I32, data: () => new Uint8Array(c.buffer, c.byteOffset, c.byteLength) });
      if (pred) {
        const pl = pred.layers[l]!;
        w.addTensor({ name: `blk.${l}.fc1.weight`, ne: [nEmbd, pl.hidden], type: F32, data: () => new Uint8Array(pl.fc1.buffer, pl.fc1.byteOffset, pl.fc1.byteLength) });
        w.addTensor({
          name: `blk.${l}.fc2.weight`,
          ne: [pl.hidden, nFF],
          type: F32,
          data: () => {
            const h = pl.hidden;
            const out = new Float32Array(nFF * h);
            for (let p = 0; p < nFF; p++) out.set(pl.fc2.subarray(order[p]! * h, order[p]! * h + h), p * h);
            return new Uint8Array(out.buffer);
          },
        });
      }
    }
    for (let l = 0; l < nLayer; l++) {
      w.addTensor({
        name: `blk.${l}.ffn_bundles`,
        ne: [bundleBytes, nFF],
        type: I8,
        data: () => {
          const { g, u, d } = ffn[l]!;
          const order = orders[l]!;
          relayout ??= new DownRelayout(srcDownType, downType, nEmbd, nFF);
          errors[l] = relayout.run(mapped.id, d.offset);
          const cols = relayout.cols;
          out ??= new Uint8Array(bundleBytes * nFF);
          const gate = n.viewU8(mapped.id, g.offset, g.nbytes);
          const up = n.viewU8(mapped.id, u.offset, u.nbytes);
          for (let p = 0; p < nFF; p++) {
            const j = order[p]!;
            const b = p * bundleBytes;
            out.set(gate.subarray(j * gateBytes, (j + 1) * gateBytes), b);
            out.set(up.subarray(j * upBytes, (j + 1) * upBytes), b + gateBlock);
            out.set(cols.subarray(j * downBytes, (j + 1) * downBytes), b + gateBlock + upBytes);
          }
          return out;
        },
      });
    }
    const tmp = `${outPath}.tmp-pack-${process.pid}`;
    let bytes: number;
    try {
      bytes = await w.write(tmp, { alignment: PACK_ALIGNMENT, onProgress: opts.onProgress });
      patchF32Array(tmp, errKey, errors);
      renameSync(tmp, outPath);
    } catch (e) {
      try {
        unlinkSync(tmp);
      } catch {
        /* not written */
      }
      throw e;
    }
    return { bytes, downRelayoutError: errors.map((e) => Math.fround(e)) };
  } finally {
    relayout?.dispose();
    n.free(mapped.id);
  }
}

/**
 * Re-lays down matrices (n_embd rows of n_ff) as n_ff rows of n_embd in the same type:
 * dequantise, transpose, quantise; measures ‖D' − D‖_F / ‖D‖_F (f64) between the dequantised
 * re-laid columns and the dequantised original. Its native buffers are allocated once and
 * reused for every layer (a freed buffer is only released when its views are collected).
 */
class DownRelayout {
  private readonly n = native();
  readonly colBytes: number;
  private readonly chunk: number;
  private readonly ids: number[];
  private readonly D: Float32Array;
  private readonly T: Float32Array;
  private readonly R: Float32Array;
  private readonly Q: Uint8Array;
  /** The re-laid columns of the last layer (n_ff rows of colBytes), overwritten by the next call. */
  readonly cols: Uint8Array;

  constructor(
    readonly srcType: number, // the model's down matrix
    readonly type: number, // the re-laid columns
    readonly nEmbd: number,
    readonly nFF: number,
  ) {
    const n = this.n;
    this.colBytes = n.rowBytes(type, nEmbd);
    this.chunk = Math.min(nFF, 512); // columns transposed, quantised and checked at a time
    this.ids = [n.alloc(nEmbd * nFF * 4), n.alloc(this.chunk * nEmbd * 4), n.alloc(this.chunk * nEmbd * 4), n.alloc(this.chunk * this.colBytes)];
    const [d, t, r, q] = this.ids as [number, number, number, number];
    this.D = n.viewF32(d, 0, nEmbd * nFF);
    this.T = n.viewF32(t, 0, this.chunk * nEmbd);
    this.R = n.viewF32(r, 0, this.chunk * nEmbd);
    this.Q = n.viewU8(q, 0, this.chunk * this.colBytes);
    this.cols = new Uint8Array(nFF * this.colBytes);
  }

  /** Re-lay the down matrix at (buf, off); returns the relative error. */
  run(buf: number, off: number): number {
    const { n, nEmbd, nFF, chunk, colBytes, D, T, R, Q } = this;
    const [dId, tId, rId, qId] = this.ids as [number, number, number, number];
    for (let r = 0; r < nEmbd; r++) n.dequantizeRow(this.srcType, buf, off, nFF, r, dId, r * nFF * 4);
    let num = 0;
    let den = 0;
    for (let j0 = 0; j0 < nFF; j0 += chunk) {
      const m = Math.min(chunk, nFF - j0);
      // T[k, r] = D[r, j0 + k], blocked over rows so D is read in cache-sized pieces
      for (let r0 = 0; r0 < nEmbd; r0 += 64) {
        const r1 = Math.min(nEmbd, r0 + 64);
        for (let k = 0; k < m; k++) {
          const src = j0 + k;
          const dst = k * nEmbd;
          for (let r = r0; r < r1; r++) T[dst + r] = D[r * nFF + src]!;
        }
      }
      n.quantize(this.type, tId, 0, qId, 0, m, nEmbd);
      this.cols.set(Q.subarray(0, m * colBytes), j0 * colBytes);
      for (let k = 0; k < m; k++) n.dequantizeRow(this.type, qId, 0, nEmbd, k, rId, k * nEmbd * 4);
      for (let i = 0; i < m * nEmbd; i++) {
        const x = T[i]!;
        const e = R[i]! - x;
        num += e * e;
        den += x * x;
      }
    }
    return den > 0 ? Math.sqrt(num / den) : 0;
  }

  dispose() {
    for (const id of this.ids) this.n.free(id);
  }
}

/** Overwrite the values of an f32 array metadata entry in a written GGUF file (same length). */
function patchF32Array(path: string, key: string, values: number[]) {
  const f = readGGUF(path);
  const fd = openSync(path, "r+");
  try {
    const head = Buffer.alloc(f.dataOffset);
    readSync(fd, head, 0, head.length, 0);
    const needle = Buffer.alloc(8 + Buffer.byteLength(key));
    needle.writeBigUInt64LE(BigInt(Buffer.byteLength(key)));
    needle.write(key, 8, "utf8");
    const at = head.indexOf(needle);
    if (at < 0) throw new Error(`${path}: metadata key ${key} not found to patch`);
    const v = at + needle.length;
    if (head.readUInt32LE(v) !== ValueType.ARRAY || head.readUInt32LE(v + 4) !== ValueType.FLOAT32 || Number(head.readBigUInt64LE(v + 8)) !== values.length) {
      throw new Error(`${path}: metadata key ${key} is not an f32[${values.length}] array`);
    }
    const b = Buffer.alloc(4 * values.length);
    values.forEach((x, i) => b.writeFloatLE(x, 4 * i));
    writeSync(fd, b, 0, b.length, v + 16);
  } finally {
    closeSync(fd);
  }
}

// ---- reading ------------------------------------------------------------------------

/** Open and validate a neuron pack. Throws PackError naming the file (and tensor / offset). */
export function openPack(path: string): Pack {
  let file: GGUFFile;
  try {
    file = readGGUF(path);
  } catch (e) {
    if (e instanceof GGUFError) throw new PackError(e.message);
    throw new PackError(`${path}: ${(e as Error).message}`);
  }
  const fail = (msg: string): never => {
    throw new PackError(`${path}: ${msg}`);
  };
  const ver = file.metadata.get(`${P}version`);
  if (!ver) fail("is not a neuron pack (no neuronpipe.pack.version); create one with `neuronpipe pack`");
  if (Number(ver!.value) !== PACK_VERSION) fail(`unsupported neuron pack version ${String(ver!.value)} (this neuronpipe reads version ${PACK_VERSION})`);
  let config: ModelConfig;
  try {
    config = readConfig(file);
  } catch (e) {
    return fail(`model metadata: ${(e as Error).message}`);
  }
  const { nLayer, nEmbd, nFF } = config;
  const num = (k: string): number => {
    const v = file.metadata.get(`${P}${k}`);
    if (!v || (typeof v.value !== "number" && typeof v.value !== "bigint")) return fail(`missing or non-numeric key ${P}${k}`);
    return Number(v.value);
  };
  const str = (k: string): string => {
    const v = file.metadata.get(`${P}${k}`);
    if (!v || typeof v.value !== "string") return fail(`missing key ${P}${k} (string)`);
    return v.value;
  };
  const arr = (k: string): ArrayLike<number> => {
    const v = file.metadata.get(`${P}${k}`)?.value as ArrayLike<number> | undefined;
    if (!v || typeof v !== "object" || !("length" in v)) return fail(`missing array key ${P}${k}`);
    if (v.length !== nLayer) fail(`${P}${k} has ${v.length} entries, expected one per layer (${nLayer})`);
    return v;
  };
  if (file.alignment !== PACK_ALIGNMENT) fail(`general.alignment is ${file.alignment}, a pack needs ${PACK_ALIGNMENT}`);
  const n = native();
  const types = { gate: num("gate_type"), up: num("up_type"), down: num("down_type") };
  for (const [k, t] of Object.entries(types)) {
    if (!computeTypes.has(t)) fail(`${P}${k}_type is ${tensorTypeName(t)}; packs support F32, F16, Q8_0, Q4_0`);
  }
  const gateBytes = num("gate_bytes");
  const upBytes = num("up_bytes");
  const downBytes = num("down_bytes");
  const gateBlock = num("gate_block");
  const upDownBlock = num("updown_block");
  const bundleBytes = num("bundle_bytes");
  for (const [k, t, got] of [["gate", types.gate, gateBytes], ["up", types.up, upBytes], ["down", types.down, downBytes]] as const) {
    const want = n.rowBytes(t, nEmbd);
    if (got !== want) fail(`${P}${k}_bytes is ${got}, but a ${tensorTypeName(t)} row of n_embd ${nEmbd} takes ${want} bytes`);
  }
  if (gateBlock !== roundUp(gateBytes, PACK_ALIGNMENT)) fail(`${P}gate_block is ${gateBlock}, expected ${roundUp(gateBytes, PACK_ALIGNMENT)} (gate_bytes ${gateBytes} rounded up to ${PACK_ALIGNMENT})`);
  if (upDownBlock !== roundUp(upBytes + downBytes, PACK_ALIGNMENT)) {
    fail(`${P}updown_block is ${upDownBlock}, expected ${roundUp(upBytes + downBytes, PACK_ALIGNMENT)} (up_bytes + down_bytes = ${upBytes + downBytes} rounded up to ${PACK_ALIGNMENT})`);
  }
  if (bundleBytes !== gateBlock + upDownBlock) fail(`${P}bundle_bytes is ${bundleBytes}, expected gate_block + updown_block = ${gateBlock + upDownBlock}`);
  const hot = arr("hot_count");
  const relErr = arr("down_relayout_error");

  const fd = openSync(path, "r");
  const readI32 = (t: TensorInfo): Int32Array => {
    const b = Buffer.alloc(t.nbytes);
    let got = 0;
    while (got < b.length) {
      const r = readSync(fd, b, got, b.length - got, t.offset + got);
      if (r === 0) fail(`tensor ${t.name}: file ends at ${t.offset + got} (truncated)`);
      got += r;
    }
    return new Int32Array(b.buffer, b.byteOffset, t.nbytes / 4);
  };
  const tensor = (name: string, type: number, ne: number[]): TensorInfo => {
    const t = file.tensorsByName.get(name);
    if (!t) return fail(`missing tensor ${name}`);
    const shape = t.ne.length === ne.length && t.ne.every((d, i) => d === ne[i]);
    if (!shape || t.type !== type) fail(`tensor ${name} is ${tensorTypeName(t.type)} [${t.ne.join(", ")}], expected ${tensorTypeName(type)} [${ne.join(", ")}] (at byte ${t.offset})`);
    return t;
  };
  const layers: PackLayer[] = [];
  let predictor: PackPredictorLayer[] | undefined;
  try {
    for (let l = 0; l < nLayer; l++) {
      const bt = tensor(`blk.${l}.ffn_bundles`, I8, [bundleBytes, nFF]);
      if (bt.offset % PACK_ALIGNMENT !== 0) fail(`tensor ${bt.name} starts at byte ${bt.offset}, not ${PACK_ALIGNMENT}-aligned`);
      const ot = tensor(`blk.${l}.ffn_order`, I32, [nFF]);
      const order = readI32(ot);
      const seen = new Uint8Array(nFF);
      for (let p = 0; p < nFF; p++) {
        const j = order[p]!;
        if (!(j >= 0 && j < nFF)) fail(`tensor ${ot.name}: position ${p} holds neuron ${j}, outside 0..${nFF - 1} (at byte ${ot.offset + 4 * p})`);
        if (seen[j]) fail(`tensor ${ot.name}: neuron ${j} appears twice (again at position ${p}, byte ${ot.offset + 4 * p}); the order must be a permutation of 0..${nFF - 1}`);
        seen[j] = 1;
      }
      const ct = tensor(`blk.${l}.act_count`, I32, [nFF]);
      const c = readI32(ct);
      const counts = new Uint32Array(c.buffer, c.byteOffset, nFF);
      const hotCount = Number(hot[l]);
      if (!(Number.isInteger(hotCount) && hotCount >= 0 && hotCount <= nFF)) fail(`${P}hot_count[${l}] = ${hotCount} is outside 0..${nFF}`);
      layers.push({ bundlesOffset: bt.offset, order, counts, hotCount });
    }
    const has = Array.from({ length: nLayer }, (_, l) => [file.tensorsByName.has(`blk.${l}.fc1.weight`), file.tensorsByName.has(`blk.${l}.fc2.weight`)] as const);
    if (has.some(([a, b]) => a || b)) {
      const missing = has.flatMap(([a, b], l) => [...(a ? [] : [`blk.${l}.fc1.weight`]), ...(b ? [] : [`blk.${l}.fc2.weight`])]);
      if (missing.length) fail(`predictor present in some layers but not others: missing ${missing.join(", ")}`);
      const thr = file.metadata.get("neuronpipe.predictor.threshold")?.value as ArrayLike<number> | undefined;
      if (!thr || typeof thr !== "object" || thr.length !== nLayer) fail(`predictor tensors present but neuronpipe.predictor.threshold is missing or not one value per layer (${nLayer})`);
      // lazily: the file is reopened when a test or tool asks for the values
      const readF32 = (t: TensorInfo) => {
        const f = openSync(path, "r");
        try {
          const b = Buffer.alloc(t.nbytes);
          for (let got = 0; got < b.length; ) {
            const r = readSync(f, b, got, b.length - got, t.offset + got);
            if (r === 0) fail(`tensor ${t.name}: file ends at ${t.offset + got} (truncated)`);
            got += r;
          }
          return new Float32Array(b.buffer, b.byteOffset, t.nbytes / 4);
        } finally {
          closeSync(f);
        }
      };
      predictor = [];
      for (let l = 0; l < nLayer; l++) {
        const t1 = file.tensorsByName.get(`blk.${l}.fc1.weight`)!;
        const hidden = t1.ne[1] ?? 1;
        tensor(t1.name, F32, [nEmbd, hidden]);
        const t2 = tensor(`blk.${l}.fc2.weight`, F32, [hidden, nFF]);
        if (t1.offset + t1.nbytes > file.fileSize || t2.offset + t2.nbytes > file.fileSize) fail(`predictor tensors of layer ${l} run past the end of the file (truncated)`);
        let fc1: Float32Array | undefined;
        let fc2: Float32Array | undefined;
        predictor.push({
          hidden,
          threshold: Number(thr![l]),
          fc1Offset: t1.offset,
          fc2Offset: t2.offset,
          get fc1() {
            return (fc1 ??= readF32(t1));
          },
          get fc2() {
            return (fc2 ??= readF32(t2));
          },
        });
      }
    }
  } finally {
    closeSync(fd);
  }
  return {
    path,
    file,
    config,
    gateType: types.gate,
    upType: types.up,
    downType: types.down,
    gateBytes,
    upBytes,
    downBytes,
    gateBlock,
    upDownBlock,
    bundleBytes,
    layers,
    predictor,
    profileTokens: num("profile_tokens"),
    downRelayoutError: Array.from(relErr, Number),
    source: { name: str("source_name"), size: num("source_size"), fingerprint: str("source_fingerprint") },
  };
}

/** The FFN matrices a pack was built from, for tests/reference: dequantised f32 rows of gate/up (n_ff, n_embd) and the re-laid down columns (n_ff, n_embd), in ORIGINAL neuron order, for one layer. */
export function readPackLayerF32(pack: Pack, layer: number): { gate: Float32Array; up: Float32Array; downCols: Float32Array } {
  const L = pack.layers[layer];
  if (!L) throw new PackError(`${pack.path}: no layer ${layer} (the pack has ${pack.layers.length})`);
  const { nEmbd, nFF } = pack.config;
  const n = native();
  const size = pack.bundleBytes * nFF;
  const buf = n.alloc(size);
  const dst = n.alloc(3 * nFF * nEmbd * 4);
  try {
    const fd = openSync(pack.path, "r");
    try {
      const view = n.viewU8(buf, 0, size);
      let got = 0;
      while (got < size) {
        const r = readSync(fd, view, got, Math.min(size - got, 1 << 30), L.bundlesOffset + got);
        if (r === 0) throw new PackError(`${pack.path}: blk.${layer}.ffn_bundles: file ends at ${L.bundlesOffset + got} (truncated)`);
        got += r;
      }
    } finally {
      closeSync(fd);
    }
    const stride = nFF * nEmbd * 4;
    for (let p = 0; p < nFF; p++) {
      const j = L.order[p]!;
      const b = p * pack.bundleBytes;
      n.dequantizeRow(pack.gateType, buf, b, nEmbd, 0, dst, j * nEmbd * 4);
      n.dequantizeRow(pack.upType, buf, b + pack.gateBlock, nEmbd, 0, dst, stride + j * nEmbd * 4);
      n.dequantizeRow(pack.downType, buf, b + pack.gateBlock + pack.upBytes, nEmbd, 0, dst, 2 * stride + j * nEmbd * 4);
    }
    const all = n.viewF32(dst, 0, 3 * nFF * nEmbd);
    const m = nFF * nEmbd;
    return { gate: all.slice(0, m), up: all.slice(m, 2 * m), downCols: all.slice(2 * m, 3 * m) };
  } finally {
    n.free(buf);
    n.free(dst);
  }
}
