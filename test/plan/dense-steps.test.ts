// The dense steps the planner times (plan/dense-steps.ts) against independent references: the
// shapes read from the shipped model by hand; what is timed — every kernel call of a timed token,
// its weight type, shape, row stride and gathered rows, in order — against the calls the model's
// tensors name and against a resident decode's token of the pack, recorded on the addon; the time
// model against a hand computation with a machine whose dense steps the test sets; the cache
// against the file it writes. How long the copies take against a decode is a speed, and so a
// benchmark's (bench/planner.js, predicted against measured): these tests once compared timings
// and failed a clean-clone CI run at 1.62× where they allowed 1.6.
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
import { native } from "../../src/native.js";
import { tensorTypeName } from "../../src/gguf/types.js";
import { loadSparseModel } from "../../src/api/model.js";
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

/** The kernels a token's dense steps call (native.ts), recorded by `recordCalls`. */
const KERNELS = ["matvec", "attention", "flagAbove", "matvecRows", "axpyRows", "gatedAct", "predictorScores"] as const;

/** One kernel call: what decides its time (kernel, weight type, shape, row stride), not its buffers; `count` for a gather: how many rows. */
interface Call {
  kernel: string;
  sig: string;
  count?: number;
}

function describeCall(kernel: (typeof KERNELS)[number], a: number[]): Call {
  switch (kernel) {
    case "matvec": // (type, w, wOff, rows, cols, …)
      return { kernel, sig: `matvec ${tensorTypeName(a[0]!)} ${a[3]}×${a[4]}` };
    case "attention": // (kvType, q, qOff, k, kOff, v, vOff, ctx, nHead, nHeadKv, headDim, …)
      return { kernel, sig: `attention ${tensorTypeName(a[0]!)} ${a[8]}/${a[9]} heads of ${a[10]}` };
    case "flagAbove": // (scores, off, thresholds, off, n, …)
      return { kernel, sig: `flagAbove ${a[4]}` };
    case "matvecRows": // (type, w, wOff, rows, cols, idx, idxOff, nIdx, x, xOff, y, yOff, rowStride)
    case "axpyRows":
      return { kernel, sig: `${kernel} ${tensorTypeName(a[0]!)} ${a[4]} wide, rows ${a[12]} B apart`, count: a[7] };
    case "gatedAct": // (kind, …, n)
      return { kernel, sig: `gatedAct ${a[0]}`, count: a[7] };
    default:
      return { kernel, sig: kernel };
  }
}

/** The calls `run` makes to KERNELS, in order: each wrapped on the addon (as every caller looks it up at the call) and put back after. */
function recordCalls(run: () => void): Call[] {
  const n = native() as unknown as Record<string, (...a: number[]) => unknown>;
  const calls: Call[] = [];
  const originals = KERNELS.map((k) => [k, n[k]!] as const);
  for (const [k, f] of originals) n[k] = (...a: number[]) => (calls.push(describeCall(k, a)), f(...a));
  try {
    run();
  } finally {
    for (const [k, f] of originals) n[k] = f;
  }
  return calls;
}

/**
 * The tokens of measureDenseSteps' calls: each ends at a classifier call (`classifier`, the
 * signature of the model's classifier matvec); the calls before the first are dropped.
 */
function timedTokens(calls: Call[], classifier: string): Call[][] {
  const tokens: Call[][] = [];
  let from = calls.findIndex((c) => c.sig === classifier) + 1;
  for (let i = from; i < calls.length; i++) {
    if (calls[i]!.sig !== classifier) continue;
    tokens.push(calls.slice(from, i + 1));
    from = i + 1;
  }
  return tokens;
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

  it("timed on copies of the shapes: every token the calls the model's tensors name, in a decode's order (q, k, v, the scores, the output per layer; then the classifier)", () => {
    const file = readGGUF(defaultModel);
    const shapes = denseShapes(file, SHIPPED)!;
    let timed!: ReturnType<typeof measureDenseSteps>;
    const calls = recordCalls(() => (timed = measureDenseSteps(shapes, 0.02)));
    expect(timed.key).toBe(SHIPPED_KEY);
    expect(timed.threads).toBe(native().getThreads());
    expect(timed.outputUs).toBeGreaterThan(0);
    expect(timed.predictorUs).toBeUndefined();
    // by hand from the file's tensors: the KV cache F16 (as the decoders keep it), 8 heads of 32 over 4
    const matvec = (name: string) => {
      const t = file.tensorsByName.get(name)!;
      return `matvec ${tensorTypeName(t.type)} ${t.ne[1]}×${t.ne[0]}`;
    };
    const layer = (l: number) => [`blk.${l}.attn_q.weight`, `blk.${l}.attn_k.weight`, `blk.${l}.attn_v.weight`].map(matvec).concat("attention F16 8/4 heads of 32", matvec(`blk.${l}.attn_output.weight`));
    const token = [...Array.from({ length: 6 }, (_, l) => layer(l)).flat(), matvec("token_embd.weight")];
    const tokens = timedTokens(calls, token.at(-1)!);
    expect(tokens.length).toBeGreaterThanOrEqual(3 * 4); // the passes: at least 3 at each of 4 positions
    for (const t of tokens) expect(t.map((c) => c.sig)).toEqual(token);
  });

  it("a pack's steps timed on copies: every token the calls of a resident decode's token of the pack, at the profile's mean flagged and fired neurons", async () => {
    const pack = openPack(packPath);
    const shapes = packDenseShapes(pack)!;
    const ffn = ffnKey(pack);
    const { flagged, fired } = ffn;
    // the reference: one token of the inline decoder with every neuron in the cache (its slots:
    // gate, up and down rows together, as measureDenseSteps lays out its copies)
    const m = await loadSparseModel(packPath, { memory: "1GiB", predictor: "trained", decoder: "inline", contextSize: 64, pinGates: false, readAhead: 0 });
    let decode: Call[];
    try {
      const s = m.createSession({ contextSize: 64 });
      s.evaluate(m.tokenizer.encode("The whale"));
      decode = recordCalls(() => s.evaluate([42]));
      s.dispose();
    } finally {
      m.dispose();
    }
    let timed!: ReturnType<typeof measureDenseSteps>;
    const calls = recordCalls(() => (timed = measureDenseSteps(shapes, 0.02)));
    expect(timed.key).toBe(PACK_KEY + ffn.key);
    const tokens = timedTokens(calls, decode.at(-1)!.sig);
    expect(tokens.length).toBeGreaterThanOrEqual(3 * 4);
    // per layer: q, k, v, the scores, the output, the predictor's two matvecs and flagging, the
    // gate rows, the up rows, the activation, the down rows; then the classifier
    const perLayer = 12;
    expect(decode.length).toBe(6 * perLayer + 1);
    expect(decode.slice(0, perLayer).map((c) => c.kernel)).toEqual(["matvec", "matvec", "matvec", "attention", "matvec", "matvec", "matvec", "flagAbove", "matvecRows", "matvecRows", "gatedAct", "axpyRows"]);
    // the slots as the cache lays them out: a gate, an up and a down row of 256 F32, 3 KiB
    expect(decode[8]!.sig).toBe("matvecRows F32 256 wide, rows 3072 B apart");
    // the same calls in the same order; the predictor at every layer at layer 0's rank (192; this
    // pack's later layers have 128: the key names one rank) and the gathers at the mean counts
    const expected = decode.map((c, i) => (i < 6 * perLayer && [5, 6].includes(i % perLayer) ? decode[i % perLayer]!.sig : c.sig));
    for (const t of tokens) {
      expect(t.map((c) => c.sig)).toEqual(expected);
      for (let l = 0; l < 6; l++) {
        const counts = t.slice(l * perLayer + 8, l * perLayer + 12).map((c) => c.count);
        expect(counts).toEqual([flagged, fired, fired, fired]);
      }
    }
    // and the decode's own counts are a token's: flagged at least fired, of 1,024
    for (let l = 0; l < 6; l++) {
      const [gate, up, act, down] = decode.slice(l * perLayer + 8, l * perLayer + 12).map((c) => c.count!);
      expect(gate).toBeLessThanOrEqual(1024);
      expect(up).toBeLessThanOrEqual(gate!);
      expect([act, down]).toEqual([up, up]);
    }
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
