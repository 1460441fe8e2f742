// The dense steps the planner times (plan/dense-steps.ts) against independent references: the
// shapes read from the shipped model by hand, the timing against the same matvecs run by this test
// on the model's real weights (its file mapped), the time model against a hand computation with
// a machine whose dense steps the test sets, and the cache against the file it writes.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { fileDenseShapes, packPlannerInput, withDenseSteps } from "../../src/decode/planned.js";
import { readGGUF } from "../../src/gguf/reader.js";
import { DenseStepSampler, denseShapes, measureDenseSteps, packDenseShapes } from "../../src/plan/dense-steps.js";
import { profileRates } from "../../src/plan/cache-model.js";
import { machineIdentity, type MachineBounds } from "../../src/plan/machine.js";
import { tokenTime } from "../../src/plan/time-model.js";
import { GateKind, native } from "../../src/native.js";
import { planMemory } from "../../src/sparse/memory-plan.js";
import { openPack } from "../../src/sparse/pack/open.js";
import { defaultModel, scratchDefaultPack } from "../helpers/default-pack.js";
import { fakeMachine } from "../helpers/fake-machine.js";

const { packPath } = scratchDefaultPack("np-dense-");
const scratch = mkdtempSync(join(tmpdir(), "np-dense-cache-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The shipped model's shapes, read off its tensors by hand (llama.cpp's names; ne = [cols, rows]): 6 layers, 256 wide, 8 heads of 32 with 4 KV heads, a 4096-token vocabulary, F32. */
const SHIPPED_KEY = "6 × (F32 256×256, F32 128×256, F32 128×256, F32 256×256; 8 heads of 32, 4 KV); F32 4096×256";
/** Its configuration as the shapes need it, by hand. */
const SHIPPED = { nLayer: 6, nHead: 8, nHeadKv: 4, headDim: 32 };
/** Its pack's linear predictor, read off blk.0.fc1/fc2 by hand: rank 192 over 256, 1,024 neurons, Q8_0. */
const PACK_KEY = `${SHIPPED_KEY}; predictor linear Q8_0 192×256, Q8_0 1024×192`;

/**
 * The pack's sparse FFN per layer: neurons fired per token, the profile's counts ÷ its tokens summed
 * by hand, and flagged as the cache model estimates them (≥ fired, ≤ 1,024); F32 rows 256 wide.
 */
function ffnKey(pack: ReturnType<typeof openPack>): { key: string; flagged: number; fired: number } {
  let fired = 0;
  for (const l of pack.layers) for (const c of l.counts) fired += Math.min(1, c / pack.profileTokens);
  const perLayer = (x: number) => Math.round(x / pack.config.nLayer);
  const flagged = perLayer(profileRates(pack).flaggedPerToken);
  return { key: `; ffn ${flagged} flagged, ${perLayer(fired)} fired of 1024 (F32/F32/F32, 256 wide)`, flagged, fired: perLayer(fired) };
}

/** The model's attention tensors, layer by layer in a decode's order, read off `file` by name. */
function attentionTensors(file: ReturnType<typeof readGGUF>, nLayer: number) {
  return Array.from({ length: nLayer }, (_, l) => ["attn_q", "attn_k", "attn_v", "attn_output"].map((k) => file.tensorsByName.get(`blk.${l}.${k}.weight`)!)).flat();
}

/**
 * The medians of `reference()` and `timed()` measured in turn five times: vitest runs other test
 * files on the same two cores, and one measurement after the other can catch different loads
 * (with three turns, a clean-clone CI run on 2026-11-28 had the gathers' copies at 1.72× their
 * reference, where every run before stayed inside 1.6).
 */
function alternately(reference: () => number, timed: () => number): [number, number] {
  const r: number[] = [];
  const t: number[] = [];
  for (let k = 0; k < 5; k++) {
    r.push(reference());
    t.push(timed());
  }
  const mid = (a: number[]) => a.sort((x, y) => x - y)[2]!;
  return [mid(r), mid(t)];
}

/** µs of `pass` on this machine: the median of 301 timed passes after 200 untimed, each after an untimed `before` (if given). */
function medianUs(pass: () => void, before?: () => void): number {
  for (let i = 0; i < 200; i++) {
    before?.();
    pass();
  }
  const us: number[] = [];
  for (let k = 0; k < 301; k++) {
    before?.();
    const t0 = performance.now();
    pass();
    us.push((performance.now() - t0) * 1000);
  }
  return us.sort((a, b) => a - b)[150]!;
}

/** The planner tests' machine as this host's (no working-set rates: the dense steps are kept as timed). */
const machine = (): MachineBounds => ({ ...fakeMachine(), ...machineIdentity() });

describe("dense steps", () => {
  it("the shapes of the shipped model and of its pack: the same key, as read by hand", () => {
    const plain = denseShapes(readGGUF(defaultModel), SHIPPED)!;
    const pack = openPack(packPath);
    expect(plain.key).toBe(SHIPPED_KEY);
    expect(denseShapes(pack.file, SHIPPED)!.key).toBe(SHIPPED_KEY);
    const fc1 = pack.file.tensorsByName.get("blk.0.fc1.weight")!;
    const fc2 = pack.file.tensorsByName.get("blk.0.fc2.weight")!;
    expect([fc1.ne, fc2.ne, pack.predictor![0]!.form]).toEqual([[256, 192], [192, 1024], "linear"]);
    expect(denseShapes(pack.file, SHIPPED, "linear")!.key).toBe(PACK_KEY);
    // the one derivation the time model, the planner at load and the calibration share: with the
    // sparse FFN timed between layers at the profile's rates
    const ffn = ffnKey(pack);
    expect(ffn.fired).toBeGreaterThan(10);
    expect(ffn.flagged).toBeGreaterThanOrEqual(ffn.fired);
    expect(ffn.flagged).toBeLessThan(1024);
    expect(packDenseShapes(pack)!.key).toBe(PACK_KEY + ffn.key);
    // the mlp form runs on F32 weights only: Q8_0 matrices are not timed as one
    expect(denseShapes(pack.file, SHIPPED, "mlp")!.predictor).toBeUndefined();
    expect(plain.attention.map((m) => [m.rows, m.cols])).toEqual([
      [256, 256],
      [128, 256],
      [128, 256],
      [256, 256],
    ]);
  });

  it("timed on copies of the shapes, as long as the same matvecs on the model's real weights take (within this machine's noise)", () => {
    const file = readGGUF(defaultModel);
    const shapes = denseShapes(file, SHIPPED)!;
    const n = native();
    const mapped = n.mapFile(defaultModel);
    const x = n.alloc(4096 * 4);
    const y = n.alloc(4096 * 4);
    let reference = NaN;
    let attentionUs = NaN;
    let timed!: ReturnType<typeof measureDenseSteps>; // the last timing (its key and threads)
    try {
      n.fillUniform(x, 0, 4096, 5n, 1);
      const attention = attentionTensors(file, 6);
      const pass = () => {
        for (const t of attention) n.matvec(t.type, mapped.id, t.offset, t.ne[1]!, t.ne[0]!, x, 0, y, 0);
      };
      [reference, attentionUs] = alternately(
        () => medianUs(pass),
        () => (timed = measureDenseSteps(shapes, 0.3)).attentionUs,
      );
    } finally {
      for (const id of [mapped.id, x, y]) n.free(id);
    }
    expect(timed.key).toBe(SHIPPED_KEY);
    expect(timed.threads).toBe(n.getThreads());
    // the same 24 calls on the same shapes: equal but for noise (a bytes model said 3.6× this)
    expect(attentionUs / reference).toBeGreaterThan(0.6);
    expect(attentionUs / reference).toBeLessThan(1.6);
    expect(timed.outputUs).toBeGreaterThan(0);
    expect(timed.predictorUs).toBeUndefined();
  });

  it("the predictor timed on copies of its shapes, as long as FfnSteps' calls on the pack's real predictor take (within this machine's noise)", () => {
    const pack = openPack(packPath);
    const n = native();
    const mapped = n.mapFile(packPath);
    const x = n.alloc(1024 * 4);
    const h = n.alloc(1024 * 4);
    const y = n.alloc(1024 * 4);
    const flags = n.alloc(1024 * 4);
    const logits = n.alloc(4096 * 4);
    const shapes = denseShapes(pack.file, SHIPPED, "linear")!;
    let reference = NaN;
    let predictorUs = NaN;
    let timed!: ReturnType<typeof measureDenseSteps>; // the last timing (its key)
    try {
      n.fillUniform(x, 0, 256, 5n, 1);
      // what FfnSteps.predict does per layer (linear): h = fc1·x̂, s = fc2·h, the flagging against the layer's thresholds
      const pass = () => {
        for (const p of pack.predictor!) {
          n.matvec(p.type, mapped.id, p.fc1Offset, p.hidden, 256, x, 0, h, 0);
          n.matvec(p.type, mapped.id, p.fc2Offset, 1024, p.hidden, h, 0, y, 0);
          n.flagAbove(y, 0, mapped.id, p.thresholdsOffset, 1024, flags, 0);
        }
      };
      // before each pass, as measureDenseSteps and a decode run them: every layer's attention
      // matvecs and the classifier, on the pack's real weights (untimed). Back to back, the
      // predictor's passes alone timed ~1.7× faster than the copies' beside another test file
      const classifier = pack.file.tensorsByName.get(pack.file.tensorsByName.has("output.weight") ? "output.weight" : "token_embd.weight")!;
      const dense = [...attentionTensors(pack.file, pack.config.nLayer), classifier];
      const before = () => {
        for (const t of dense) n.matvec(t.type, mapped.id, t.offset, t.ne[1]!, t.ne[0]!, x, 0, logits, 0);
      };
      [reference, predictorUs] = alternately(
        () => medianUs(pass, before),
        () => (timed = measureDenseSteps(shapes, 0.3)).predictorUs!,
      );
    } finally {
      for (const id of [mapped.id, x, h, y, flags, logits]) n.free(id);
    }
    expect(timed.key).toBe(PACK_KEY);
    expect(predictorUs / reference).toBeGreaterThan(0.6);
    expect(predictorUs / reference).toBeLessThan(1.6);
  });

  it("the sparse FFN's gathers timed on copies, as long as the same gathers over the pack's real rows take (within this machine's noise)", () => {
    const pack = openPack(packPath);
    const { flagged, fired } = ffnKey(pack);
    const n = native();
    const mapped = n.mapFile(packPath);
    const x = n.alloc(256 * 4);
    const idx = n.alloc(6 * (flagged + fired) * 4);
    const g = n.alloc(1024 * 4);
    const u = n.alloc(1024 * 4);
    const h = n.alloc(1024 * 4);
    const o = n.alloc(4096 * 4);
    const shapes = packDenseShapes(pack)!;
    let reference = NaN;
    let ffnUs = NaN;
    let timed!: ReturnType<typeof measureDenseSteps>;
    try {
      n.fillUniform(x, 0, 256, 5n, 1);
      n.fillUniform(g, 0, 1024, 6n, 1);
      // per layer: every 1024/flagged-th neuron's gate row, the first `fired` of those up and down,
      // read from the pack's bundles (gate, up, down rows of a neuron together, as in a cache slot)
      const iv = n.viewI32(idx, 0, 6 * (flagged + fired));
      for (let l = 0; l < 6; l++) {
        for (let k = 0; k < flagged; k++) iv[l * (flagged + fired) + k] = Math.floor((k * 1024) / flagged);
        for (let k = 0; k < fired; k++) iv[l * (flagged + fired) + flagged + k] = Math.floor((k * 1024) / flagged);
      }
      const B = pack.bundleBytes;
      const pass = () => {
        for (let l = 0; l < 6; l++) {
          const at = pack.layers[l]!.bundlesOffset;
          const i = l * (flagged + fired) * 4;
          n.matvecRows(pack.gateType, mapped.id, at, 1024, 256, idx, i, flagged, x, 0, g, 0, B);
          n.matvecRows(pack.upType, mapped.id, at + pack.gateBlock, 1024, 256, idx, i + flagged * 4, fired, x, 0, u, 0, B);
          n.gatedAct(GateKind.ReGLU, g, 0, u, 0, h, 0, fired);
          n.axpyRows(pack.downType, mapped.id, at + pack.gateBlock + pack.upBytes, 1024, 256, idx, i + flagged * 4, fired, h, 0, o, 0, B);
        }
      };
      // before each pass, the attention matvecs and the classifier on the pack's real weights (untimed)
      const classifier = pack.file.tensorsByName.get(pack.file.tensorsByName.has("output.weight") ? "output.weight" : "token_embd.weight")!;
      const dense = [...attentionTensors(pack.file, 6), classifier];
      const before = () => {
        for (const t of dense) n.matvec(t.type, mapped.id, t.offset, t.ne[1]!, t.ne[0]!, x, 0, o, 0);
      };
      [reference, ffnUs] = alternately(
        () => medianUs(pass, before),
        () => {
          timed = measureDenseSteps(shapes, 0.3);
          return timed.gateUs! + timed.upDownUs!;
        },
      );
    } finally {
      for (const id of [mapped.id, x, idx, g, u, h, o]) n.free(id);
    }
    expect(timed.key).toBe(PACK_KEY + ffnKey(pack).key);
    expect(ffnUs / reference).toBeGreaterThan(0.6);
    expect(ffnUs / reference).toBeLessThan(1.6);
  });

  it("the time model takes the timed steps for the shapes and threads they were timed on, else its kernel rates", () => {
    const pack = openPack(packPath);
    const inp = packPlannerInput(pack, { contextSize: 128 });
    const mem = planMemory(pack, Number.MAX_SAFE_INTEGER, inp.optionsFor("inline", Number.MAX_SAFE_INTEGER, { pinGates: false, hotShare: 0.75, clusterSize: 32 }));
    const o = { decoder: "inline", threads: 2, queueDepth: 32, readAhead: false, position: 9, window: 5 } as const;
    const key = PACK_KEY + ffnKey(pack).key;
    const m = { ...machine(), denseSteps: [{ key, threads: 2, attentionUs: 1000, scoresUs: 30, positionUs: 2, outputUs: 500, predictorUs: 250, gateUs: 120, upDownUs: 180, measuredAt: "then" }] };
    const t = tokenTime(inp.shape, mem, m, o);
    expect(inp.shape.dense!.key).toBe(key);
    expect(t.predictor).toBe(250); // no reads ahead: one pass, as timed
    expect([t.gate, t.upDown]).toEqual([120, 180]);
    // the oracle computes every gate row: not the gathers timed at the trained predictor's rates
    const oracle = packPlannerInput(pack, { contextSize: 128, predictor: "oracle" });
    const to = tokenTime(oracle.shape, mem, m, o);
    expect(oracle.shape.dense!.key).toBe(key);
    expect(to.gate).not.toBe(120);
    expect(to.upDown).not.toBe(180);
    // by hand: the timed matvecs + the scores at position 0 + 9 positions on at the timed cost of one
    expect(t.attention).toBeCloseTo(1000 + 30 + 9 * 2, 9);
    // a probe that did not time positions: the KV cache of 10 positions at 40 GB/s (no head cost calibrated)
    const kv = (6 * inp.shape.costs.kvBytesPerPosition * 10) / (40 * 1e3);
    const noPositions = { ...m, denseSteps: [{ ...m.denseSteps[0]!, scoresUs: undefined, positionUs: undefined }] };
    expect(tokenTime(inp.shape, mem, noPositions, o).attention).toBeCloseTo(1000 + kv, 9);
    expect(t.output).toBe(500);
    const untimed = tokenTime(inp.shape, mem, machine(), o);
    const oneThread = tokenTime(inp.shape, mem, m, { ...o, threads: 1 });
    expect(untimed.attention).not.toBeCloseTo(t.attention, 0);
    expect(oneThread.output).not.toBe(500); // timed on 2 threads: not used for 1
    const otherKey = { ...machine(), denseSteps: [{ ...m.denseSteps[0]!, key: "6 × (F16 256×256, …)" }] };
    expect(tokenTime(inp.shape, mem, otherKey, o).output).toBeCloseTo(untimed.output, 9);
    expect(untimed.predictor).not.toBe(250);
  });

  it("timed once per shape set and thread count: the cache holds it and the next plan reuses it", () => {
    const cache = join(scratch, "machine.json");
    const pack = openPack(packPath);
    const first = withDenseSteps(machine(), denseShapes(pack.file, SHIPPED), cache);
    const kept = JSON.parse(readFileSync(cache, "utf8")) as MachineBounds;
    expect(kept.denseSteps).toHaveLength(1);
    expect(kept.denseSteps![0]!.key).toBe(SHIPPED_KEY);
    expect(kept.denseSteps![0]!.attentionUs).toBe(first.denseSteps![0]!.attentionUs);
    // attention over 256 more positions of 6 layers' F16 KV cache (4 KV heads of 32: 256 B a row
    // of K and of V) costs something, and less than reading it all at 1 GB/s would
    expect(kept.denseSteps![0]!.positionUs).toBeGreaterThan(0);
    expect(kept.denseSteps![0]!.positionUs).toBeLessThan((6 * 2 * 256) / 1e3);
    // with its predictor: another shape set, timed and kept beside the first
    const withPredictor = withDenseSteps(kept, packDenseShapes(pack), cache);
    expect(withPredictor.denseSteps!.map((d) => d.key)).toEqual([SHIPPED_KEY, PACK_KEY + ffnKey(pack).key]);
    expect(withPredictor.denseSteps![1]!.predictorUs).toBeGreaterThan(0);
    expect(withPredictor.denseSteps![1]!.gateUs).toBeGreaterThan(0);
    expect(withPredictor.denseSteps![1]!.upDownUs).toBeGreaterThan(0);
    // no working-set rates in the test machine: the µs as timed, no phase scaling
    const again = withDenseSteps(kept, denseShapes(readGGUF(defaultModel), SHIPPED), cache); // the plain model: the same shapes
    expect(again).toBe(kept); // nothing timed, nothing written
    const keptBoth = JSON.parse(readFileSync(cache, "utf8")) as MachineBounds;
    expect(withDenseSteps(keptBoth, packDenseShapes(pack), cache)).toBe(keptBoth);
  });

  it("in passes (DenseStepSampler): a model's steps once a pass however often given, each step the median of its passes", () => {
    const pack = openPack(packPath);
    const plain = denseShapes(pack.file, SHIPPED)!;
    const withPredictor = packDenseShapes(pack)!;
    const s = new DenseStepSampler([plain, withPredictor, plain], 0.02);
    for (let i = 0; i < 3; i++) s.pass();
    expect([...s.samples.keys()]).toEqual([SHIPPED_KEY, withPredictor.key]);
    const rates = s.rates();
    expect(rates.map((r) => r.key)).toEqual([SHIPPED_KEY, withPredictor.key]);
    for (const r of rates) {
      const samples = s.samples.get(r.key)!;
      expect(samples).toHaveLength(3);
      for (const k of ["attentionUs", "outputUs", "scoresUs", "positionUs"] as const) expect(r[k], `${r.key} ${k}`).toBe(samples.map((x) => x[k]!).sort((a, b) => a - b)[1]);
    }
    // the plain model has no predictor to time; the pack's is the middle of its passes too
    expect(rates[0]!.predictorUs).toBeUndefined();
    expect(rates[1]!.predictorUs).toBe(s.samples.get(withPredictor.key)!.map((x) => x.predictorUs!).sort((a, b) => a - b)[1]);
  });

  it("a file's dense shapes (the probe's --file): a pack's with its predictor, a plain model's without, none for a file that is not a GGUF, a clear error for a broken one", () => {
    expect(fileDenseShapes(packPath)!.key).toBe(packDenseShapes(openPack(packPath))!.key);
    expect(fileDenseShapes(packPath)!.key).toMatch(new RegExp(`^${PACK_KEY.replace(/[()]/g, "\\$&")}; ffn `));
    expect(fileDenseShapes(defaultModel)!.key).toBe(SHIPPED_KEY);
    const noise = join(scratch, "noise.bin");
    writeFileSync(noise, Buffer.from("not a model at all"));
    expect(fileDenseShapes(noise)).toBeUndefined();
    const short = join(scratch, "short.gguf");
    writeFileSync(short, Buffer.from("GG"));
    expect(fileDenseShapes(short)).toBeUndefined();
    // "GGUF" and then a header cut short: the reader's error, naming the file
    const cut = join(scratch, "cut.gguf");
    writeFileSync(cut, readFileSync(defaultModel).subarray(0, 64));
    expect(() => fileDenseShapes(cut)).toThrow(/cut\.gguf/);
  });
});
