// The neuron pack against independent references: bundle bytes read with fs and compared with
// the source tensors' bytes, down columns decoded by a plain TypeScript Q8_0/Q4_0/F32 decoder,
// the re-layout error recomputed in f64, the hot-first order from the profile counts, the
// fixed region byte for byte, predictor scores permuted into pack order, corrupted files, and
// the CLI.
import { createHash } from "node:crypto";
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { f16ToF32 } from "../native/helpers.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel } from "../../src/index.js";
import { readGGUF, type GGUFFile, type TensorInfo } from "../../src/gguf/reader.js";
import { GGUFWriter } from "../../src/gguf/writer.js";
import { ValueType } from "../../src/gguf/types.js";
import { readConfig } from "../../src/model/config.js";
import { vocabFromGGUF } from "../../src/model/vocab.js";
import { native } from "../../src/native.js";
import { openPack, readPackLayerF32 } from "../../src/sparse/pack/open.js";
import { writePack } from "../../src/sparse/pack/write.js";
import { PackError, type Pack } from "../../src/sparse/pack/format.js";
import { modelFingerprint } from "../../src/sparse/pack/fingerprint.js";
import { profileActivations } from "../../src/tools/profile.js";
import { readProfile, writeProfile } from "../../src/sparse/profile-file.js";
import { readPredictors, type LinearPredictor, type MlpPredictor } from "../../src/sparse/predictor-file.js";
import { synthModel } from "../../src/tools/synth/synth.js";

const root = join(import.meta.dirname, "..", "..");
const defModel = join(root, "models", "neuronpipe-default.gguf");
const defProfile = `${defModel}.profile.gguf`;
const defPredictor = `${defModel}.predictor.gguf`;
const dir = mkdtempSync(join(tmpdir(), "np-pack-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// ---- an independent decoder (ggml block layouts, docs/formats.md) ------------------------

const f16 = f16ToF32; // the native tests' independent decoder

/** Decode one row of `cols` values of type t from bytes b at offset o; also the per-block scale. */
function decodeRow(t: number, b: Buffer, o: number, cols: number): { v: Float64Array; scale: Float64Array } {
  const v = new Float64Array(cols);
  const scale = new Float64Array(cols);
  if (t === 0) for (let i = 0; i < cols; i++) v[i] = b.readFloatLE(o + 4 * i);
  else if (t === 1) for (let i = 0; i < cols; i++) v[i] = f16(b.readUInt16LE(o + 2 * i));
  else if (t === 8) {
    for (let k = 0; k < cols / 32; k++) {
      const d = f16(b.readUInt16LE(o + 34 * k));
      for (let i = 0; i < 32; i++) {
        v[32 * k + i] = Math.fround(b.readInt8(o + 34 * k + 2 + i) * d);
        scale[32 * k + i] = Math.abs(d);
      }
    }
  } else if (t === 2) {
    for (let k = 0; k < cols / 32; k++) {
      const d = f16(b.readUInt16LE(o + 18 * k));
      for (let i = 0; i < 16; i++) {
        const q = b[o + 18 * k + 2 + i]!;
        v[32 * k + i] = Math.fround(((q & 15) - 8) * d);
        v[32 * k + i + 16] = Math.fround(((q >> 4) - 8) * d);
        scale[32 * k + i] = scale[32 * k + i + 16] = Math.abs(d);
      }
    }
  } else throw new Error(`decoder: type ${t}`);
  return { v, scale };
}

const rowBytesOf = (t: number, cols: number) => ({ 0: cols * 4, 1: cols * 2, 8: (cols / 32) * 34, 2: (cols / 32) * 18 })[t]!;

function ffnName(f: GGUFFile, l: number, m: string) {
  return f.tensorsByName.has(`blk.${l}.ffn_${m}.weight`) ? `blk.${l}.ffn_${m}.weight` : `blk.${l}.ffn_${m}_exps.weight`;
}
const isFfn = (name: string) => /^blk\.\d+\.(ffn_(gate|up|down)(_exps)?|ffn_gate_inp)\.weight$/.test(name);

/** Source down matrix dequantised, as columns: cols[j] = n_embd values of neuron j. */
function sourceDownCols(f: GGUFFile, bytes: Buffer, l: number, nEmbd: number, nFF: number): Float64Array {
  const t = f.tensorsByName.get(ffnName(f, l, "down"))!;
  const rb = rowBytesOf(t.type, nFF);
  const out = new Float64Array(nFF * nEmbd);
  for (let r = 0; r < nEmbd; r++) {
    const { v } = decodeRow(t.type, bytes, t.offset + r * rb, nFF);
    for (let j = 0; j < nFF; j++) out[j * nEmbd + r] = v[j]!;
  }
  return out;
}

function tensorBytesOf(bytes: Buffer, t: TensorInfo) {
  return bytes.subarray(t.offset, t.offset + t.nbytes);
}

function independentFingerprint(path: string): string {
  const f = readGGUF(path);
  const b = readFileSync(path);
  const h = createHash("sha256");
  const size = Buffer.alloc(8);
  size.writeBigUInt64LE(BigInt(b.length));
  h.update(size).update(b.subarray(0, f.dataOffset));
  for (const t of f.tensors) h.update(b.subarray(t.offset, t.offset + Math.min(4096, t.nbytes)));
  return h.digest("hex");
}

async function waitFor(path: string, ms: number) {
  const t0 = Date.now();
  while (!existsSync(path)) {
    if (Date.now() - t0 > ms) throw new Error(`${path} did not appear within ${ms / 1000} s`);
    await new Promise((r) => setTimeout(r, 2000));
  }
  await new Promise((r) => setTimeout(r, 1000)); // written by rename: complete once it exists
}

// ---- fixtures ----------------------------------------------------------------------------

interface Case {
  label: string;
  model: string;
  profile: string;
  pack: string;
  predictor?: string;
}
const cases: Case[] = [];
const measured: Record<string, number[]> = {};

beforeAll(async () => {
  await waitFor(defProfile, 300_000);
  await waitFor(defPredictor, 300_000);
  const text = readFileSync(join(root, "models", "heldout.txt"), "utf8").slice(0, 8000);
  for (const type of ["q8_0", "q4_0"] as const) {
    const model = join(dir, `synth-${type}.gguf`);
    const w = synthModel({
      shape: { embd: 128, ff: 384, layers: 2, heads: 4, kvHeads: 2, ctx: 256 },
      type,
      activation: "reglu",
      seed: 3,
      sparsity: { activeFraction: 0.1, hotNeurons: 0.2, hotShare: 0.8 },
    });
    await w.write(model);
    const m = await loadModel(model);
    // Q8_0 profiled hot-first only; Q4_0 with its cold neurons ordered by co-activation
    const p = profileActivations(m, m.tokenizer.encode(text).slice(0, 384), 128, { corpus: "heldout.txt[0:384 tokens]", ...(type === "q8_0" && { coactivationTokens: 0 }) });
    p.modelFingerprint = modelFingerprint(model, m.file);
    m.dispose();
    const profile = `${model}.profile.gguf`;
    await writeProfile(profile, p);
    cases.push({ label: type.toUpperCase(), model, profile, pack: join(dir, `synth-${type}.pack.gguf`) });
  }
  cases.unshift({ label: "F32 (default model)", model: defModel, profile: defProfile, predictor: defPredictor, pack: join(dir, "default.pack.gguf") });
  for (const c of cases) {
    const t0 = performance.now();
    let calls = 0;
    const r = await writePack(c.model, c.pack, { profile: c.profile, predictor: c.predictor, onProgress: () => calls++ });
    expect(calls).toBeGreaterThan(0);
    expect(r.bytes).toBe(statSync(c.pack).size);
    measured[c.label] = r.downRelayoutError;
    console.log(`[pack] ${c.label}: ${(r.bytes / 2 ** 20).toFixed(1)} MiB in ${((performance.now() - t0) / 1000).toFixed(2)} s; down re-layout error per layer ${r.downRelayoutError.map((e) => e.toExponential(3)).join(" ")}`);
  }
}, 600_000);

describe.each([0, 1, 2])("pack case %i", (ci) => {
  let c: Case;
  let pack: Pack;
  let src: GGUFFile;
  let srcBytes: Buffer;
  let packBytes: Buffer;
  beforeAll(() => {
    c = cases[ci]!;
    pack = openPack(c.pack);
    src = readGGUF(c.model);
    srcBytes = readFileSync(c.model);
    packBytes = readFileSync(c.pack);
  });

  it("bundles: gate and up rows are the source rows byte for byte, padding is zero, down columns are the source columns (exact for F32, within one quantisation step otherwise); the stored re-layout error matches an f64 recomputation", () => {
    const { nEmbd, nFF, nLayer } = pack.config;
    expect(pack.layers.length).toBe(nLayer);
    expect(pack.file.alignment).toBe(4096);
    for (let l = 0; l < nLayer; l++) {
      const L = pack.layers[l]!;
      expect(L.bundlesOffset % 4096).toBe(0);
      const g = src.tensorsByName.get(ffnName(src, l, "gate"))!;
      const u = src.tensorsByName.get(ffnName(src, l, "up"))!;
      const d = src.tensorsByName.get(ffnName(src, l, "down"))!;
      expect([pack.gateType, pack.upType, pack.downType]).toEqual([g.type, u.type, d.type]);
      const gb = rowBytesOf(g.type, nEmbd);
      const ub = rowBytesOf(u.type, nEmbd);
      const db = rowBytesOf(d.type, nEmbd);
      expect([pack.gateBytes, pack.upBytes, pack.downBytes]).toEqual([gb, ub, db]);
      expect(pack.gateBlock).toBe(Math.ceil(gb / 4096) * 4096);
      expect(pack.upDownBlock).toBe(Math.ceil((ub + db) / 4096) * 4096);
      expect(pack.bundleBytes).toBe(pack.gateBlock + pack.upDownBlock);
      const orig = sourceDownCols(src, srcBytes, l, nEmbd, nFF);
      let num = 0;
      let den = 0;
      for (let p = 0; p < nFF; p++) {
        const j = L.order[p]!;
        const b = L.bundlesOffset + p * pack.bundleBytes;
        const ud = b + pack.gateBlock;
        const check = p % 37 === 0 || p === nFF - 1;
        if (check) {
          expect(packBytes.subarray(b, b + gb).equals(srcBytes.subarray(g.offset + j * gb, g.offset + (j + 1) * gb))).toBe(true);
          expect(packBytes.subarray(b + gb, ud).every((x) => x === 0)).toBe(true);
          expect(packBytes.subarray(ud, ud + ub).equals(srcBytes.subarray(u.offset + j * ub, u.offset + (j + 1) * ub))).toBe(true);
          expect(packBytes.subarray(ud + ub + db, b + pack.bundleBytes).every((x) => x === 0)).toBe(true);
        }
        const { v, scale } = decodeRow(pack.downType, packBytes, ud + ub, nEmbd);
        for (let r = 0; r < nEmbd; r++) {
          const x = orig[j * nEmbd + r]!;
          const e = v[r]! - x;
          if (check) {
            if (pack.downType === 0) expect(v[r]).toBe(x);
            else expect(Math.abs(e)).toBeLessThanOrEqual(scale[r]! * (pack.downType === 8 ? 0.6 : 1.1) + 1e-7);
          }
          num += e * e;
          den += x * x;
        }
      }
      const ref = Math.sqrt(num / den);
      if (pack.downType === 0) expect(pack.downRelayoutError[l]).toBe(0);
      else {
        expect(ref).toBeGreaterThan(0);
        expect(Math.abs(pack.downRelayoutError[l]! - ref) / ref).toBeLessThan(1e-4);
      }
      expect(measured[c.label]![l]).toBe(pack.downRelayoutError[l]);
    }
  });

  it("readPackLayerF32 gives the source's dequantised gate/up rows exactly and the stored down columns, in original neuron order", () => {
    const { nEmbd, nFF } = pack.config;
    const l = pack.layers.length - 1;
    const r = readPackLayerF32(pack, l);
    const g = src.tensorsByName.get(ffnName(src, l, "gate"))!;
    const u = src.tensorsByName.get(ffnName(src, l, "up"))!;
    const orig = sourceDownCols(src, srcBytes, l, nEmbd, nFF);
    for (let j = 0; j < nFF; j += 7) {
      const gv = decodeRow(g.type, srcBytes, g.offset + j * pack.gateBytes, nEmbd).v;
      const uv = decodeRow(u.type, srcBytes, u.offset + j * pack.upBytes, nEmbd).v;
      expect(Array.from(r.gate.subarray(j * nEmbd, (j + 1) * nEmbd))).toEqual(Array.from(gv));
      expect(Array.from(r.up.subarray(j * nEmbd, (j + 1) * nEmbd))).toEqual(Array.from(uv));
      const p = pack.layers[l]!.order.indexOf(j);
      const stored = decodeRow(pack.downType, packBytes, pack.layers[l]!.bundlesOffset + p * pack.bundleBytes + pack.gateBlock + pack.upBytes, nEmbd).v;
      expect(Array.from(r.downCols.subarray(j * nEmbd, (j + 1) * nEmbd))).toEqual(Array.from(stored));
      if (pack.downType === 0) expect(Array.from(r.downCols.subarray(j * nEmbd, (j + 1) * nEmbd))).toEqual(Array.from(orig.subarray(j * nEmbd, (j + 1) * nEmbd)));
    }
  });

  it("order is hot-first by the profile's counts (ties by id), or the profile's order past the hot set; act_count and hot_count follow", () => {
    const prof = readProfile(c.profile);
    // the shipped profile and Q4_0's order by co-activation, Q8_0's hot-first only
    expect(prof.layers.every((L) => L.order)).toBe(c.label !== "Q8_0");
    expect(pack.profileTokens).toBe(prof.tokens);
    // the profile's overlap of consecutive active sets, per layer (the planner's persistence)
    expect(pack.profileOverlap).toEqual(prof.layers.map((L) => Math.fround(L.overlap)));
    // and how soon neurons fired again (the planner's cache model), as the profile measured it
    expect(prof.reuse).toBeDefined();
    expect(pack.profileReuse).toEqual(prof.reuse);
    pack.layers.forEach((L, l) => {
      const counts = prof.layers[l]!.counts;
      const seen = new Set(L.order);
      expect(seen.size).toBe(L.order.length);
      let total = 0;
      for (let p = 0; p < L.order.length; p++) {
        expect(L.counts[p]).toBe(counts[L.order[p]!]);
        total += L.counts[p]!;
        if (prof.layers[l]!.order) expect(L.order[p]).toBe(prof.layers[l]!.order![p]);
        if (p > 0 && (!prof.layers[l]!.order || p < L.hotCount)) {
          expect(L.counts[p]!).toBeLessThanOrEqual(L.counts[p - 1]!);
          if (L.counts[p] === L.counts[p - 1]) expect(L.order[p]!).toBeGreaterThan(L.order[p - 1]!);
        }
      }
      let lead = 0;
      for (let p = 0; p < L.hotCount; p++) lead += L.counts[p]!;
      expect(lead).toBeGreaterThanOrEqual(0.8 * total);
      expect(lead - L.counts[L.hotCount - 1]!).toBeLessThan(0.8 * total);
      expect(L.hotCount).toBe(prof.layers[l]!.hot80); // the profile's own hot80
      // past the hot set, the same neurons as hot-first puts there (in another order when by co-activation)
      const hotFirst = Array.from(counts.keys()).sort((a, b) => counts[b]! - counts[a]! || a - b);
      expect(Array.from(L.order.subarray(L.hotCount)).sort((a, b) => a - b)).toEqual(hotFirst.slice(L.hotCount).sort((a, b) => a - b));
      if (prof.layers[l]!.order) expect(pack.layers[l]!.coldRequests).toBe(Math.fround(prof.layers[l]!.coldRequests!.coactivation));
      else expect(pack.layers[l]!.coldRequests).toBeUndefined();
    });
  });

  it("fixed region byte-identical; metadata, config and vocabulary carried over; source identified", () => {
    const fixed = src.tensors.filter((t) => !isFfn(t.name));
    for (const t of fixed) {
      const q = pack.file.tensorsByName.get(t.name);
      expect(q, t.name).toBeDefined();
      expect([q!.type, q!.ne]).toEqual([t.type, t.ne]);
      expect(tensorBytesOf(packBytes, q!).equals(tensorBytesOf(srcBytes, t))).toBe(true);
    }
    const nL = pack.config.nLayer;
    const expected = new Set([
      ...fixed.map((t) => t.name),
      ...Array.from({ length: nL }, (_, l) => [`blk.${l}.ffn_bundles`, `blk.${l}.ffn_order`, `blk.${l}.act_count`, ...(c.predictor ? [`blk.${l}.fc1.weight`, `blk.${l}.fc2.weight`, ...(readPredictors(c.predictor).layers[l]!.form === "linear" ? [`blk.${l}.fc2.threshold`] : []), ...((readPredictors(c.predictor).layers[l] as LinearPredictor).falseFlags ? [`blk.${l}.fc2.false_flags`] : [])] : [])]).flat(),
    ]);
    expect(new Set(pack.file.tensors.map((t) => t.name))).toEqual(expected);
    for (const [k, v] of src.metadata) {
      if (k === "general.alignment") continue;
      expect(pack.file.metadata.get(k), k).toEqual(v);
    }
    expect(pack.config).toEqual(readConfig(src));
    expect(vocabFromGGUF(pack.file)).toEqual(vocabFromGGUF(src));
    expect(pack.source).toEqual({ name: c.model.split("/").pop(), size: srcBytes.length, fingerprint: independentFingerprint(c.model) });
    expect(pack.predictor === undefined).toBe(c.predictor === undefined);
  });
});

it("linear predictor: fc1 as trained, fc2 rows, per-neuron thresholds and false-flag rates permuted into pack order: pack scores at position p equal the original's for neuron order[p]", () => {
  const pack = openPack(cases[0]!.pack);
  const orig = readPredictors(defPredictor);
  const n = native();
  const { nEmbd, nFF } = pack.config;
  const nTok = 5;
  const x = Float32Array.from({ length: nTok * nEmbd }, (_, i) => Math.sin(i * 0.37) * 2);
  const put = (a: Uint8Array) => {
    const id = n.alloc(a.byteLength);
    n.viewU8(id, 0, a.length).set(a);
    return id;
  };
  const xb = put(new Uint8Array(x.buffer));
  const ids = [xb];
  try {
    for (let l = 0; l < pack.config.nLayer; l++) {
      const P = pack.predictor![l]!;
      const O = orig.layers[l] as LinearPredictor;
      expect(P.form).toBe("linear");
      expect(O.form).toBe("linear");
      expect([P.hidden, P.type]).toEqual([O.hidden, O.type]);
      // the stored bytes, read back from the pack file
      const raw = (off: number, len: number) => Uint8Array.from(readFileSync(cases[0]!.pack).subarray(off, off + len));
      const fc1 = raw(P.fc1Offset, P.fc1Bytes);
      const fc2 = raw(P.fc2Offset, P.fc2Bytes);
      expect(Buffer.from(fc1).equals(Buffer.from(O.fc1))).toBe(true);
      const order = pack.layers[l]!.order;
      for (let p = 0; p < nFF; p++) expect(P.thresholds![p]).toBe(O.thresholds[order[p]!]);
      // the trainer's false-flag rates ride along in the same order
      expect(O.falseFlags).toBeDefined();
      for (let p = 0; p < nFF; p++) expect(P.falseFlags![p]).toBe(O.falseFlags![order[p]!]);
      const score = (a1: Uint8Array, a2: Uint8Array) => {
        const [a, b, h, out] = [put(a1), put(a2), n.alloc(P.hidden * 4), n.alloc(nTok * nFF * 4)];
        ids.push(a, b, h, out);
        for (let t = 0; t < nTok; t++) {
          n.matvec(P.type, a, 0, P.hidden, nEmbd, xb, t * nEmbd * 4, h, 0);
          n.matvec(P.type, b, 0, nFF, P.hidden, h, 0, out, t * nFF * 4);
        }
        return n.viewF32(out, 0, nTok * nFF);
      };
      const sp = score(fc1, fc2);
      const so = score(O.fc1, O.fc2);
      for (let t = 0; t < nTok; t++) for (let p = 0; p < nFF; p++) expect(sp[t * nFF + p]).toBe(so[t * nFF + order[p]!]);
      // the dequantised view the pack offers equals the stored rows
      const rb = n.rowBytes(P.type, P.hidden);
      const tmp = n.alloc(P.hidden * 4);
      ids.push(tmp);
      const src = put(fc2);
      ids.push(src);
      for (const p of [0, 7, nFF - 1]) {
        n.dequantizeRow(P.type, src, 0, P.hidden, p, tmp, 0);
        expect(Array.from(P.fc2.subarray(p * P.hidden, (p + 1) * P.hidden))).toEqual(Array.from(n.viewF32(tmp, 0, P.hidden)));
      }
      expect(rb * nFF).toBe(P.fc2Bytes);
    }
  } finally {
    for (const id of ids) n.free(id);
  }
  expect(pack.file.metadata.get("neuronpipe.predictor.threshold")).toBeUndefined();
});

it("mlp predictor (PowerInfer's form): fc2 is permuted into pack order: pack scores at position p equal the original predictor's score for neuron order[p]", async () => {
  const mlpPredictor = join(import.meta.dirname, "..", "fixtures", "default-mlp.predictor.gguf");
  const path = join(dir, "default-mlp.pack.gguf");
  await writePack(defModel, path, { profile: defProfile, predictor: mlpPredictor });
  const pack = openPack(path);
  const orig = readPredictors(mlpPredictor);
  const n = native();
  const { nEmbd, nFF } = pack.config;
  const nTok = 5;
  const x = Float32Array.from({ length: nTok * nEmbd }, (_, i) => Math.sin(i * 0.37) * 2);
  const put = (a: Float32Array) => {
    const id = n.alloc(a.byteLength);
    n.viewF32(id, 0, a.length).set(a);
    return id;
  };
  const xb = put(x);
  const ids = [xb];
  try {
    for (let l = 0; l < pack.config.nLayer; l++) {
      const P = pack.predictor![l]!;
      const O = orig.layers[l] as MlpPredictor;
      expect(P.form).toBe("mlp");
      expect(P.hidden).toBe(O.hidden);
      expect(P.threshold).toBe(O.threshold);
      expect(Array.from(P.fc1)).toEqual(Array.from(O.fc1));
      const score = (fc1: Float32Array, fc2: Float32Array) => {
        const [a, b, out] = [put(fc1), put(fc2), n.alloc(nTok * nFF * 4)];
        ids.push(a, b, out);
        n.predictorScores(a, 0, b, 0, nEmbd, P.hidden, nFF, xb, 0, nTok, out, 0);
        return n.viewF32(out, 0, nTok * nFF);
      };
      const sp = score(P.fc1, P.fc2);
      const so = score(O.fc1, O.fc2);
      const order = pack.layers[l]!.order;
      for (let t = 0; t < nTok; t++) for (let p = 0; p < nFF; p++) expect(sp[t * nFF + p]).toBe(so[t * nFF + order[p]!]);
    }
  } finally {
    for (const id of ids) n.free(id);
  }
  const thr = pack.file.metadata.get("neuronpipe.predictor.threshold")!.value as Float32Array;
  expect(Array.from(thr)).toEqual(orig.layers.map((l) => Math.fround((l as MlpPredictor).threshold)));
});

it("modelFingerprint is sha256 over size, header and each tensor's first 4096 bytes; profile/predictor files carry it", async () => {
  const f = readGGUF(defModel);
  expect(modelFingerprint(defModel, f)).toBe(independentFingerprint(defModel));
  expect(readProfile(cases[1]!.profile).modelFingerprint).toBe(independentFingerprint(cases[1]!.model));
});

describe("refusals", () => {
  const patchKeyU32 = (path: string, key: string, value: number) => {
    const b = readFileSync(path);
    const needle = Buffer.alloc(8 + key.length);
    needle.writeBigUInt64LE(BigInt(key.length));
    needle.write(key, 8);
    const at = b.indexOf(needle);
    expect(at).toBeGreaterThan(0);
    expect(b.readUInt32LE(at + needle.length)).toBe(ValueType.UINT32);
    b.writeUInt32LE(value, at + needle.length + 4);
    writeFileSync(path, b);
  };

  it("a truncated pack", () => {
    const p = join(dir, "truncated.pack.gguf");
    copyFileSync(cases[1]!.pack, p);
    truncateSync(p, statSync(p).size - 5000);
    expect(() => openPack(p)).toThrow(PackError);
    expect(() => openPack(p)).toThrow(new RegExp(`^${p}: .*blk\\.1\\.ffn_bundles.*outside the file.*truncated`));
  });

  it("a plain model is not a pack", () => {
    expect(() => openPack(defModel)).toThrow(`${defModel}: is not a neuron pack (no neuronpipe.pack.version); create one with \`neuronpipe pack\``);
  });

  it("an order tensor with a duplicate neuron", () => {
    const p = join(dir, "dup.pack.gguf");
    copyFileSync(cases[2]!.pack, p);
    const t = readGGUF(p).tensorsByName.get("blk.1.ffn_order")!;
    const b = readFileSync(p);
    b.writeInt32LE(b.readInt32LE(t.offset), t.offset + 4 * 5);
    writeFileSync(p, b);
    expect(() => openPack(p)).toThrow(new RegExp(`^${p}: tensor blk\\.1\\.ffn_order: neuron \\d+ appears twice \\(again at position 5, byte ${t.offset + 20}\\)`));
  });

  it("a wrong bundle_bytes key; a bundle tensor of the wrong shape", () => {
    const p = join(dir, "bb.pack.gguf");
    copyFileSync(cases[1]!.pack, p);
    const pk = openPack(p);
    patchKeyU32(p, "neuronpipe.pack.bundle_bytes", pk.bundleBytes + 4096);
    expect(() => openPack(p)).toThrow(`${p}: neuronpipe.pack.bundle_bytes is ${pk.bundleBytes + 4096}, expected gate_block + updown_block = ${pk.bundleBytes}`);
    copyFileSync(cases[1]!.pack, p);
    patchKeyU32(p, "neuronpipe.pack.gate_bytes", pk.gateBytes + 2);
    expect(() => openPack(p)).toThrow(`${p}: neuronpipe.pack.gate_bytes is ${pk.gateBytes + 2}, but a Q8_0 row of n_embd 128 takes ${pk.gateBytes} bytes`);
  });

  it("a reuse probability outside [0, 1]", () => {
    const p = join(dir, "reuse.pack.gguf");
    copyFileSync(cases[1]!.pack, p);
    const key = "neuronpipe.pack.reuse_recent";
    const b = readFileSync(p);
    const needle = Buffer.alloc(8 + key.length);
    needle.writeBigUInt64LE(BigInt(key.length));
    needle.write(key, 8);
    const at = b.indexOf(needle) + needle.length;
    expect(b.readUInt32LE(at)).toBe(ValueType.ARRAY);
    expect(b.readUInt32LE(at + 4)).toBe(ValueType.FLOAT32);
    b.writeFloatLE(2, at + 16 + 4 * 3);
    writeFileSync(p, b);
    expect(() => openPack(p)).toThrow(`${p}: neuronpipe.pack.reuse_recent[3] is 2, not a probability in [0, 1] (or NaN)`);
  });

  it("a pack with an unsupported version, or fc1/fc2 in some layers only", async () => {
    const p = join(dir, "ver.pack.gguf");
    copyFileSync(cases[1]!.pack, p);
    patchKeyU32(p, "neuronpipe.pack.version", 7);
    expect(() => openPack(p)).toThrow(`${p}: unsupported neuron pack version 7 (this neuronpipe reads version 1)`);
    // rewrite the default pack without layer 2's fc2
    const f = readGGUF(cases[0]!.pack);
    const b = readFileSync(cases[0]!.pack);
    const w = new GGUFWriter();
    for (const [k, v] of f.metadata) w.metadata.set(k, v);
    for (const t of f.tensors) if (t.name !== "blk.2.fc2.weight") w.addTensor({ name: t.name, ne: t.ne, type: t.type, data: () => tensorBytesOf(b, t) });
    const q = join(dir, "partial.pack.gguf");
    await w.write(q);
    expect(() => openPack(q)).toThrow(`${q}: predictor present in some layers but not others: missing blk.2.fc2.weight`);
  });

  it("a profile or predictor of another model", async () => {
    const out = join(dir, "wrong.pack.gguf");
    // the Q8_0 synthetic model's profile (with its fingerprint) for the default model
    await expect(writePack(defModel, out, { profile: cases[1]!.profile })).rejects.toThrow(
      new RegExp(`^${cases[1]!.profile}: this profile was made from another model than ${defModel} \\(model fingerprint`),
    );
    // a profile without fingerprint but of another shape
    const p = readProfile(cases[1]!.profile);
    delete p.modelFingerprint;
    const shapeless = join(dir, "nofp.profile.gguf");
    await writeProfile(shapeless, p);
    await expect(writePack(defModel, out, { profile: shapeless })).rejects.toThrow(
      `${shapeless}: profile shape (n_layer 2, n_ff 384) does not match the model ${defModel} (n_layer 6, n_ff 1024)`,
    );
    // a predictor of the wrong width (no fingerprint): 6 layers, n_embd 256, n_ff 512
    const pw = new GGUFWriter();
    pw.setString("general.architecture", "neuronpipe.predictor");
    for (let l = 0; l < 6; l++) {
      pw.addTensor({ name: `blk.${l}.fc1.weight`, ne: [256, 32], type: 0, data: () => new Uint8Array(256 * 32 * 4) });
      pw.addTensor({ name: `blk.${l}.fc2.weight`, ne: [32, 512], type: 0, data: () => new Uint8Array(32 * 512 * 4) });
    }
    const badPred = join(dir, "bad.predictor.gguf");
    await pw.write(badPred);
    await expect(writePack(defModel, out, { profile: defProfile, predictor: badPred })).rejects.toThrow(
      `${badPred}: predictor shape (n_layer 6, n_embd 256, n_ff 512) does not match the model ${defModel} (n_layer 6, n_embd 256, n_ff 1024)`,
    );
    // a predictor whose fingerprint names another model
    pw.setString("neuronpipe.predictor.model_fingerprint", "0".repeat(64));
    await pw.write(badPred);
    await expect(writePack(defModel, out, { profile: defProfile, predictor: badPred })).rejects.toThrow(
      new RegExp(`^${badPred}: this predictor was trained on another model than ${defModel}`),
    );
    expect(existsSync(out)).toBe(false);
    // never over an input
    await expect(writePack(cases[1]!.model, cases[1]!.model, { profile: cases[1]!.profile })).rejects.toThrow(/refusing to overwrite the input model/);
  });
});

it("CLI: `neuronpipe pack` writes a pack, refuses to overwrite the model, and asks for a profile", () => {
  const bin = join(root, "bin", "neuronpipe.js");
  const c = cases[2]!;
  const out = join(dir, "cli.pack.gguf");
  const stdout = execFileSync("node", [bin, "pack", "--model", c.model, "--profile", c.profile, "--out", out], { encoding: "utf8" });
  expect(stdout).toContain(`wrote ${out}`);
  expect(stdout).toMatch(/gate Q4_0 72 B → 4096 B block, up Q4_0 72 B \+ down column Q4_0 72 B → 4096 B block/);
  const pk = openPack(out);
  expect(Array.from(pk.layers[0]!.order)).toEqual(Array.from(openPack(c.pack).layers[0]!.order));
  expect(stdout).toContain(pk.downRelayoutError[0]!.toExponential(3));
  // Q4_0's profile orders cold neurons by co-activation: the table gives what the profile measured for it
  const cold = readProfile(c.profile).layers.map((L) => L.coldRequests!.coactivation.toFixed(2));
  expect(stdout).toContain("cold reads per fired neuron (co-activation order)");
  expect(stdout).toMatch(new RegExp(`\\n +0 +\\d+ of 384 +\\S+ +${cold[0]!.replace(".", "\\.")}\\n +1 +\\d+ of 384 +\\S+ +${cold[1]!.replace(".", "\\.")}\\n`));

  const before = createHash("sha256").update(readFileSync(c.model)).digest("hex");
  const r = spawnSync("node", [bin, "pack", "--model", c.model, "--profile", c.profile, "--out", c.model], { encoding: "utf8" });
  expect(r.status).toBe(2);
  expect(r.stderr).toContain(`--out ${c.model} is the input model`);
  expect(createHash("sha256").update(readFileSync(c.model)).digest("hex")).toBe(before);

  const r2 = spawnSync("node", [bin, "pack", "--model", c.model, "--profile", join(dir, "none.gguf"), "--out", join(dir, "x.gguf")], { encoding: "utf8" });
  expect(r2.status).toBe(1);
  expect(r2.stderr).toContain("no activation profile; run `neuronpipe profile");
});
