// Opening a neuron pack: header, keys and layout checked, every error naming the file (and the
// tensor or offset); predictors are read from the file only on demand.
import { closeSync, openSync, readSync } from "node:fs";
import { GGUFError, readGGUF, type GGUFFile, type TensorInfo } from "../../gguf/reader.js";
import { computeTypes, tensorTypeName } from "../../gguf/types.js";
import { readConfig, type ModelConfig } from "../../model/config.js";
import { GGMLType, native } from "../../native.js";
import { readReuse } from "../profile-file.js";
import type { FiringReuse } from "../reuse.js";
import { permutationFault } from "../../util/permutation.js";
import { F32, I32, I8, P, PACK_ALIGNMENT, roundUp, PACK_VERSION, PackError, type Pack, type PackLayer, type PackPredictorLayer } from "./format.js";

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
  // optional (packs written before it have none): checked as the other per-layer arrays
  const overlap = file.metadata.has(`${P}profile_overlap`) ? Array.from(arr("profile_overlap"), Number) : undefined;
  if (overlap?.some((x) => !(x >= 0 && x <= 1))) fail(`${P}profile_overlap holds a value outside [0, 1]`);
  const coldRequests = file.metadata.has(`${P}cold_requests`) ? Array.from(arr("cold_requests"), Number) : undefined;
  const badCold = coldRequests?.findIndex((x) => !(x > 0 && x <= 1)) ?? -1;
  if (badCold >= 0) fail(`${P}cold_requests[${badCold}] = ${coldRequests![badCold]} is not a share of requests per fired neuron in (0, 1]`);
  let reuse: FiringReuse | undefined;
  if (file.metadata.has(`${P}reuse_spans`)) {
    try {
      reuse = readReuse(path, (k) => file.metadata.get(`${P}${k}`)?.value, nLayer, P);
    } catch (e) {
      fail((e as Error).message.slice(path.length + 2));
    }
  }

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
      const bad = permutationFault(order);
      if (bad && !bad.repeated) fail(`tensor ${ot.name}: position ${bad.position} holds neuron ${bad.id}, outside 0..${nFF - 1} (at byte ${ot.offset + 4 * bad.position})`);
      if (bad) fail(`tensor ${ot.name}: neuron ${bad.id} appears twice (again at position ${bad.position}, byte ${ot.offset + 4 * bad.position}); the order must be a permutation of 0..${nFF - 1}`);
      const ct = tensor(`blk.${l}.act_count`, I32, [nFF]);
      const c = readI32(ct);
      const counts = new Uint32Array(c.buffer, c.byteOffset, nFF);
      const hotCount = Number(hot[l]);
      if (!(Number.isInteger(hotCount) && hotCount >= 0 && hotCount <= nFF)) fail(`${P}hot_count[${l}] = ${hotCount} is outside 0..${nFF}`);
      layers.push({ bundlesOffset: bt.offset, order, counts, hotCount, ...(coldRequests && { coldRequests: coldRequests[l]! }) });
    }
    const has = Array.from({ length: nLayer }, (_, l) => [file.tensorsByName.has(`blk.${l}.fc1.weight`), file.tensorsByName.has(`blk.${l}.fc2.weight`)] as const);
    if (has.some(([a, b]) => a || b)) {
      const missing = has.flatMap(([a, b], l) => [...(a ? [] : [`blk.${l}.fc1.weight`]), ...(b ? [] : [`blk.${l}.fc2.weight`])]);
      if (missing.length) fail(`predictor present in some layers but not others: missing ${missing.join(", ")}`);
      const form = String(file.metadata.get("neuronpipe.predictor.form")?.value ?? "mlp") as "mlp" | "linear";
      if (form !== "mlp" && form !== "linear") fail(`neuronpipe.predictor.form is "${form}", expected "mlp" or "linear"`);
      const thr = file.metadata.get("neuronpipe.predictor.threshold")?.value as ArrayLike<number> | undefined;
      if (form === "mlp" && (!thr || typeof thr !== "object" || thr.length !== nLayer)) fail(`predictor tensors present but neuronpipe.predictor.threshold is missing or not one value per layer (${nLayer})`);
      // lazily: the file is reopened when a test or tool asks for the values
      const readBytes = (t: TensorInfo) => {
        const f = openSync(path, "r");
        try {
          const b = Buffer.alloc(t.nbytes);
          for (let got = 0; got < b.length; ) {
            const r = readSync(f, b, got, b.length - got, t.offset + got);
            if (r === 0) fail(`tensor ${t.name}: file ends at ${t.offset + got} (truncated)`);
            got += r;
          }
          return b;
        } finally {
          closeSync(f);
        }
      };
      const readF32 = (t: TensorInfo, cols: number, rows: number) => {
        const b = readBytes(t);
        if (t.type === F32) return new Float32Array(b.buffer, b.byteOffset, t.nbytes / 4);
        const n = native();
        const src = n.alloc(t.nbytes);
        const dst = n.alloc(cols * rows * 4);
        try {
          n.viewU8(src, 0, t.nbytes).set(b);
          for (let r = 0; r < rows; r++) n.dequantizeRow(t.type, src, 0, cols, r, dst, r * cols * 4);
          return Float32Array.from(n.viewF32(dst, 0, cols * rows));
        } finally {
          n.free(src);
          n.free(dst);
        }
      };
      predictor = [];
      for (let l = 0; l < nLayer; l++) {
        const t1 = file.tensorsByName.get(`blk.${l}.fc1.weight`)!;
        const hidden = t1.ne[1] ?? 1;
        const type = form === "linear" ? t1.type : F32;
        if (form === "linear" && type !== F32 && type !== GGMLType.Q8_0) fail(`tensor ${t1.name} is ${tensorTypeName(type)}; a linear predictor is F32 or Q8_0`);
        tensor(t1.name, type, [nEmbd, hidden]);
        const t2 = tensor(`blk.${l}.fc2.weight`, type, [hidden, nFF]);
        const t3 = form === "linear" ? tensor(`blk.${l}.fc2.threshold`, F32, [nFF]) : undefined;
        const t4 = form === "linear" && file.tensorsByName.has(`blk.${l}.fc2.false_flags`) ? tensor(`blk.${l}.fc2.false_flags`, F32, [nFF]) : undefined;
        for (const t of [t1, t2, ...(t3 ? [t3] : []), ...(t4 ? [t4] : [])]) if (t.offset + t.nbytes > file.fileSize) fail(`predictor tensors of layer ${l} run past the end of the file (truncated)`);
        let fc1: Float32Array | undefined;
        let fc2: Float32Array | undefined;
        let th: Float32Array | undefined;
        let ffl: Float32Array | undefined;
        predictor.push({
          form,
          hidden,
          type,
          threshold: form === "mlp" ? Number(thr![l]) : NaN,
          fc1Offset: t1.offset,
          fc2Offset: t2.offset,
          fc1Bytes: t1.nbytes,
          fc2Bytes: t2.nbytes,
          thresholdsOffset: t3 ? t3.offset : -1,
          get fc1() {
            return (fc1 ??= readF32(t1, nEmbd, hidden));
          },
          get fc2() {
            return (fc2 ??= readF32(t2, hidden, nFF));
          },
          get thresholds() {
            if (!t3) return undefined;
            return (th ??= (() => {
              const b = readBytes(t3);
              return new Float32Array(b.buffer, b.byteOffset, nFF);
            })());
          },
          get falseFlags() {
            if (!t4) return undefined;
            return (ffl ??= (() => {
              const b = readBytes(t4);
              const v = new Float32Array(b.buffer, b.byteOffset, nFF);
              if (v.some((x) => !(x >= 0 && x <= 1))) fail(`tensor ${t4.name} holds a value outside [0, 1]`);
              return v;
            })());
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
    ...(overlap && { profileOverlap: overlap }),
    ...(reuse && { profileReuse: reuse }),
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
