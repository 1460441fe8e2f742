// Writing a neuron pack (`neuronpipe pack`): the model's fixed region byte for byte, its FFN
// re-laid as neuron bundles in hot-first order (format.ts), predictors and profile inside.
import { closeSync, existsSync, openSync, readSync, realpathSync, renameSync, unlinkSync, writeSync } from "node:fs";
import { basename, resolve } from "node:path";
import { readGGUF, type GGUFFile } from "../../gguf/reader.js";
import { GGUFWriter } from "../../gguf/writer.js";
import { tensorTypeName, ValueType } from "../../gguf/types.js";
import { readConfig, type ModelConfig } from "../../model/config.js";
import { native } from "../../native.js";
import { modelFingerprint } from "./fingerprint.js";
import { hotSetSize, readProfile } from "../profile-file.js";
import { isLinear, readPredictors, type MlpPredictor } from "../predictor-file.js";
import { checkMatrix, F32, ffnTensorName, hotFirstOrder, I32, I8, isFfnOrAux, P, PACK_ALIGNMENT, PACK_VERSION, PackError, roundUp } from "./format.js";

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

  // the profile's order (cold neurons by co-activation) when it has one, else hot-first by counts
  const orders = profile.layers.map((l) => l.order ?? hotFirstOrder(l.counts));
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
  if (profile.layers.every((l) => l.coldRequests)) w.setArray(`${P}cold_requests`, ValueType.FLOAT32, Float32Array.from(profile.layers, (l) => l.coldRequests!.coactivation));
  w.setArray(`${P}profile_overlap`, ValueType.FLOAT32, Float32Array.from(profile.layers, (l) => l.overlap));
  if (profile.reuse) {
    w.setArray(`${P}reuse_spans`, ValueType.UINT32, Uint32Array.from(profile.reuse.spans));
    w.setArray(`${P}reuse_recent`, ValueType.FLOAT32, profile.reuse.recent);
    w.setArray(`${P}reuse_fired_recent`, ValueType.FLOAT32, profile.reuse.firedRecent);
  }
  // placeholder, patched once the layers have been re-laid (the header is written first)
  const errKey = `${P}down_relayout_error`;
  w.setArray(errKey, ValueType.FLOAT32, new Float32Array(nLayer));
  if (pred && predFile) {
    for (const [k, v] of predFile.metadata) {
      if (k.startsWith("neuronpipe.predictor.") || k === "powerinfer.sparse_threshold") w.metadata.set(k, v);
    }
    const mlp = pred.layers.filter((l) => !isLinear(l)) as MlpPredictor[];
    if (mlp.length === pred.layers.length) w.setArray("neuronpipe.predictor.threshold", ValueType.FLOAT32, Float32Array.from(mlp, (l) => l.threshold));
    w.setString("neuronpipe.predictor.order", "fc2 rows (and per-neuron thresholds and false-flag rates) in pack order: score[p] belongs to neuron blk.N.ffn_order[p]");
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
        const permuteRows = (src: Uint8Array, rowBytes: number) => {
          const out = new Uint8Array(nFF * rowBytes);
          for (let p = 0; p < nFF; p++) out.set(src.subarray(order[p]! * rowBytes, (order[p]! + 1) * rowBytes), p * rowBytes);
          return out;
        };
        const bytes = (a: Float32Array | Uint8Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
        const type = isLinear(pl) ? pl.type : F32;
        w.addTensor({ name: `blk.${l}.fc1.weight`, ne: [nEmbd, pl.hidden], type, data: () => bytes(pl.fc1) });
        w.addTensor({ name: `blk.${l}.fc2.weight`, ne: [pl.hidden, nFF], type, data: () => permuteRows(bytes(pl.fc2), n.rowBytes(type, pl.hidden)) });
        if (isLinear(pl)) w.addTensor({ name: `blk.${l}.fc2.threshold`, ne: [nFF], type: F32, data: () => permuteRows(bytes(pl.thresholds), 4) });
        if (isLinear(pl) && pl.falseFlags) w.addTensor({ name: `blk.${l}.fc2.false_flags`, ne: [nFF], type: F32, data: () => permuteRows(bytes(pl.falseFlags!), 4) });
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

