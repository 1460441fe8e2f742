// The decoders' own costs on this machine (`neuronpipe probe`, last step): what the planner's time
// model (plan/time-model.ts) does not get from kernel and read rates. Each decoder decodes the
// shipped model's pack — everything resident, with its trained predictor and with the oracle
// (every neuron flagged), and at a quarter and a half of the FFN resident, with reads; the inline
// decoder also resident with gate rows pinned, with and without reads ahead, and at half the FFN
// with gate rows not pinned. Each run is modelled with the reads it counted. One least-squares
// fit over those runs, every cost ≥ 0, gives µs per layer, ns per flagged neuron, µs per read
// batch and per read request beyond the probe's rates, and (inline) ns per flagged neuron looked
// ahead. Batches and requests are separate because a small model's reads come a few per batch,
// a large one's hundreds: fitted as requests alone on this model, the batches' cost made the
// 7B's reads 1.5× the measured (docs/benchmarks.md, "2026-11-26 (night)"). First, attention's
// cost per head and position beyond its KV bytes, from the two halves of long resident
// generations. Every run generates what `generate` does by default (128 tokens). Other models
// and budgets are predicted from these; bench/planner.js measures how well.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { loadModel } from "../api/model.js";
import { DEFAULT_MAX_TOKENS } from "../api/session.js";
import { packPlannerInput, sparsePlanOptions } from "../decode/planned.js";
import { budgetForFfnFraction, planMemory, planOptions } from "../sparse/memory-plan.js";
import { openPack } from "../sparse/pack/open.js";
import { writePack } from "../sparse/pack/write.js";
import { DenseStepSampler, packDenseShapes, type DenseShapes } from "../plan/dense-steps.js";
import { DECODER_COSTS, decoderCosts, type AttentionCalibration, type CalibrationRun, type DecoderCalibration, type DecoderCost, type DenseStepRate, type MachineBounds } from "../plan/machine.js";
import { nonNegativeLeastSquares } from "../plan/least-squares.js";
import { tokenTime } from "../plan/time-model.js";
import { median } from "../util/median.js";
import { shippedFile } from "../util/package-files.js";
import { createTokenizer } from "../tokenizer/index.js";
import { vocabFromGGUF } from "../model/vocab.js";

const DECODERS = ["inline", "pipeline", "blocking"] as const;
const CONTEXT = 256;
const PROMPT = "The whale";
/** Tokens per generation: as many as `generate` makes by default (at 64 the timed tokens sat at positions a third as far on, and decoded ~10% faster). */
const TOKENS = DEFAULT_MAX_TOKENS;

/**
 * The shipped model's pack: models/neuronpipe-default.pack.gguf when built after its profile and
 * predictor, else one written once into `cacheDir`, named by those two files' contents (a cached
 * pack of an older shipped profile, in another order, is not calibrated on; it is removed).
 */
export async function calibrationPack(cacheDir: string): Promise<string> {
  const model = shippedFile("neuronpipe-default.gguf");
  const [profile, predictor] = [`${model}.profile.gguf`, `${model}.predictor.gguf`];
  const built = model.replace(/\.gguf$/, ".pack.gguf");
  if (existsSync(built) && [profile, predictor].every((f) => statSync(f).mtimeMs <= statSync(built).mtimeMs)) return built;
  const key = createHash("sha256").update(readFileSync(profile)).update(readFileSync(predictor)).digest("hex").slice(0, 16);
  const name = `calibration-${key}.pack.gguf`;
  const out = join(cacheDir, name);
  if (!existsSync(out)) {
    mkdirSync(cacheDir, { recursive: true });
    for (const f of readdirSync(cacheDir)) if (/^calibration(-[0-9a-f]+)?\.pack\.gguf$/.test(f) && f !== name) rmSync(join(cacheDir, f), { force: true });
    await writePack(model, out, { profile, predictor });
  }
  return out;
}

type DecodeOptions = NonNullable<Parameters<typeof loadModel>[1]>;

/** One calibration run: a decoder's options, tokens generated, and which of them are timed (token indices [from, to); default all after the first). */
interface Run {
  o: DecodeOptions;
  tokens?: number;
  timed?: [number, number];
}

/** A run as measured: µs per decode token, and read requests per token as the decoder counted them. */
interface Measured {
  us: number;
  reads: number;
}

/** µs per decode token of a run: the median of 5 sampled generations (seeded; greedy decoding of a small model falls into loops that read nothing) after a 64-token warm-up; and the reads per token over the five. */
async function decodeUs(path: string, run: Run): Promise<Measured> {
  const tokens = run.tokens ?? TOKENS;
  const model = await loadModel(path, { ...run.o, contextSize: CONTEXT, plan: false });
  const s = model.createSession({ contextSize: CONTEXT });
  const runs: number[] = [];
  let reads = 0;
  try {
    for (let rep = -1; rep < 5; rep++) {
      s.reset();
      const at: number[] = [];
      for await (const _ of s.generate(PROMPT, { maxTokens: rep < 0 ? 64 : tokens, seed: rep + 1 })) at.push(performance.now());
      if (rep < 0) model.sparse?.resetStats();
      const [from, to] = run.timed ?? [0, at.length - 1];
      if (rep >= 0) runs.push(((at[Math.min(to, at.length - 1)]! - at[from]!) * 1000) / (Math.min(to, at.length - 1) - from));
    }
    const r = model.sparse?.report();
    if (r && r[0]!.tokens > 0) reads = r.reduce((a, x) => a + x.reads, 0) / r[0]!.tokens;
  } finally {
    s.dispose();
    model.dispose();
  }
  return { us: runs.sort((a, b) => a - b)[2]!, reads };
}

/** Tokens of the attention runs, timed in two halves of 96 decodes each: early and late positions of the same generations' kind. */
const ATTENTION_TOKENS = 193;

/**
 * Rounds of every calibration run by default, interleaved (after one round not counted): this
 * machine's speed drifts for seconds at a time, so each run's median comes from several moments
 * (`probe --rounds`). At 3, the inline run of pinned gate rows resident took 1,587 µs a token in
 * 2 of its rounds where 11 rounds of the bench gave 731 for the same configuration, and the fit
 * put the excess into every layer (the plan at 100% predicted 37% slow).
 */
export const CALIBRATION_ROUNDS = 5;

export interface CalibrationOptions {
  /** Hears each decode measured, and how many there are. */
  onStep?: (what: string, done: number, total: number) => void;
  /** Runs after each counted round, before the fit (the probe measures its kernels again there, into `m.kernels`, which the fit then uses). */
  afterRound?: () => void;
  /** Rounds counted (CALIBRATION_ROUNDS by default). */
  rounds?: number;
  /**
   * Other models' dense steps to time in every round beside the shipped model's (the probe's
   * `--file`), each step the median of the rounds: timed once at a first plan, the 7B's attention
   * was a one-second snapshot of 22.6 ms a token where other timings read 29.9–31.9, and the plan
   * predicted its resident decode 26% fast (docs/benchmarks.md, "2026-11-28 (morning)").
   */
  alsoTime?: readonly DenseShapes[];
}

/**
 * Fit attention's and each decoder's costs on the shipped pack (about four minutes at 5 rounds on
 * a 2-core VM), and time the dense steps of it and of `o.alsoTime` in every round.
 */
export async function calibrateDecoders(m: MachineBounds, cacheDir: string, o: CalibrationOptions = {}): Promise<Calibration> {
  const rounds = o.rounds ?? CALIBRATION_ROUNDS;
  const path = await calibrationPack(cacheDir);
  // first pass: list the runs the fit needs; then measure them in interleaved rounds; then fit
  const wanted = new Map<string, { run: Run; what: string }>();
  await fit(m, path, async (run, what) => (wanted.set(JSON.stringify(run), { run, what }), { us: 1, reads: 0 }));
  const times = new Map<string, Measured[]>();
  const shipped = packDenseShapes(openPack(path));
  const dense = new DenseStepSampler([...(shipped ? [shipped] : []), ...(o.alsoTime ?? [])]);
  const total = wanted.size * (rounds + 1);
  let done = 0;
  for (let round = 0; round <= rounds; round++) {
    for (const [key, { run, what }] of wanted) {
      o.onStep?.(`${what} (round ${round + 1} of ${rounds + 1})`, done++, total);
      const measured = await decodeUs(path, run);
      if (round > 0) times.set(key, [...(times.get(key) ?? []), measured]);
    }
    if (round > 0) {
      o.afterRound?.();
      dense.pass();
    }
  }
  // the fit models the shipped model's runs with its dense steps as timed over the rounds, as the planner will
  const denseSteps = dense.rates();
  const mFit = { ...m, denseSteps: [...(m.denseSteps ?? []).filter((d) => !denseSteps.some((x) => x.key === d.key && x.threads === d.threads)), ...denseSteps] };
  // each run: the median of its rounds' µs per token, and of their reads per token
  const medianRun = (ms: Measured[]): Measured => ({ us: median(ms.map((x) => x.us)), reads: median(ms.map((x) => x.reads)) });
  return { ...(await fit(mFit, path, async (run) => medianRun(times.get(JSON.stringify(run))!))), denseSteps };
}

export interface Calibration {
  decoders: NonNullable<MachineBounds["decoders"]>;
  attention: AttentionCalibration;
  /** The dense steps of the shipped model and of `alsoTime`, as timed over the rounds. */
  denseSteps: DenseStepRate[];
}

/** The fit from measured µs per token of each run (`measure`): attention over positions first, then each decoder with it. */
async function fit(m0: MachineBounds, path: string, measure: (run: Run, what: string) => Promise<Measured>): Promise<Omit<Calibration, "denseSteps">> {
  const pack = openPack(path);
  const threads = Math.max(...m0.memory.map((x) => x.threads));
  const prompt = createTokenizer(vocabFromGGUF(pack.file)).encode(PROMPT).length;
  // token k of a generation comes from the decode at position prompt + k − 1: timing [from, to)
  // measures the decodes at prompt + from … prompt + to − 1
  const meanPosition = (from: number, to: number) => prompt + (from + to - 1) / 2;
  // attention: µs per token at early and late positions of the same kind of generation; the
  // slope over position beyond the KV bytes' is the cost of a head at a position
  const half = (ATTENTION_TOKENS - 1) / 2;
  const attentionRuns: AttentionCalibration["runs"] = [];
  {
    const inp = packPlannerInput(pack, { contextSize: CONTEXT, predictor: "trained" });
    const mem = planMemory(pack, Number.MAX_SAFE_INTEGER, sparsePlanOptions(pack, "inline", Number.MAX_SAFE_INTEGER, { contextSize: CONTEXT, predictor: "trained" }));
    for (const timed of [[0, half], [half, ATTENTION_TOKENS - 1]] as [number, number][]) {
      const position = meanPosition(timed[0], timed[1]);
      const t = tokenTime(inp.shape, mem, { ...m0, attention: undefined }, { decoder: "inline", threads, queueDepth: 32, readAhead: false, position, window: 5 });
      const { us: measuredUs } = await measure({ o: { decoder: "inline", predictor: "trained", threads }, tokens: ATTENTION_TOKENS, timed }, `attention at positions ${Math.round(position)}`);
      attentionRuns.push({ position, measuredUs, modelledUs: t.total });
    }
  }
  const [e, l] = attentionRuns as [AttentionCalibration["runs"][0], AttentionCalibration["runs"][0]];
  const heads = pack.config.nLayer * pack.config.nHead;
  const slope = (l.measuredUs - e.measuredUs - (l.modelledUs - e.modelledUs)) / (l.position - e.position);
  const attention: AttentionCalibration = { headPositionNs: Math.max(0, (slope / heads) * 1e3), runs: attentionRuns };
  const m: MachineBounds = { ...m0, attention };
  // the timed tokens decode at positions prompt … prompt + TOKENS − 2: modelled at their mean
  const position = meanPosition(0, TOKENS - 1);
  const none = Object.fromEntries(DECODER_COSTS.map((k) => [k, 0])) as Record<DecoderCost, number>;
  const inputs = { trained: packPlannerInput(pack, { contextSize: CONTEXT, predictor: "trained" }), oracle: packPlannerInput(pack, { contextSize: CONTEXT, predictor: "oracle" }) };
  const withReads = [0.25, 0.5].map((f) => ({ f, budget: budgetForFfnFraction(pack, f, planOptions(pack.config, { contextSize: CONTEXT })) }));
  const out: NonNullable<MachineBounds["decoders"]> = {};
  for (const decoder of DECODERS) {
    // the runs: the whole FFN resident (trained predictor, oracle); a quarter and a half of it,
    // with the memory plan the decoder gets by default there; and for the inline decoder a
    // resident run with gate rows pinned, with and without reads ahead (the look-ahead still
    // predicts, computes and chooses when nothing is left to read)
    const configs: { what: string; predictor: "trained" | "oracle"; budget: number; o: DecodeOptions }[] = [
      ...(["trained", "oracle"] as const).map((predictor) => ({ what: `${decoder} decoder, ${predictor} predictor`, predictor, budget: Number.MAX_SAFE_INTEGER, o: { predictor } })),
      ...withReads.map(({ f, budget }) => ({ what: `${decoder} decoder with reads (${100 * f}% resident)`, predictor: "trained" as const, budget, o: { memory: budget } })),
      ...(decoder === "inline" ? [128, 0].map((readAhead) => ({ what: `inline decoder, reads ahead ${readAhead ? "on" : "off"}`, predictor: "trained" as const, budget: Number.MAX_SAFE_INTEGER, o: { pinGates: true, readAhead } })) : []),
      // and with half the FFN and gate rows not pinned (the default pins them there): twice the
      // read batches of the pinned run at the same budget, half its reads, so the fit can tell a
      // batch's cost from a read's (the pipeline's too: without this run its fit put all of it in
      // the batch, 215 µs a batch, and priced the 7B's batches of 120–210 reads as the shipped model's of ~20)
      ...(decoder !== "blocking" ? [{ what: `${decoder} decoder with reads, gate rows not pinned (50% resident)`, predictor: "trained" as const, budget: withReads[1]!.budget, o: { memory: withReads[1]!.budget, pinGates: false } }] : []),
    ];
    // each run's modelled token without the decoder's costs, and what one unit of each cost adds
    // to it (the time model is linear in them)
    // each run is modelled with the reads it measured (the forecast's misses scaled to them): the
    // costs fitted are the decoder's, not the cache model's error on the calibration's text
    const runs: CalibrationRun[] = [];
    for (const c of configs) {
      const { pinGates, readAhead } = c.o;
      const measured = await measure({ o: { decoder, threads, ...c.o } }, c.what);
      const mem = planMemory(pack, c.budget, sparsePlanOptions(pack, decoder, c.budget, { contextSize: CONTEXT, predictor: c.predictor, pinGates, readAhead }));
      const timeOptions = { decoder, threads, queueDepth: 32, readAhead: mem.readAheadBytes > 0, position, window: 5 };
      const forecastReads = tokenTime(inputs[c.predictor].shape, mem, { ...m, decoders: { [decoder]: none } }, timeOptions).readsPerToken;
      const readScale = forecastReads > 0 && measured.reads > 0 ? measured.reads / forecastReads : 1;
      const t = (cal: DecoderCalibration) => tokenTime(inputs[c.predictor].shape, mem, { ...m, decoders: { [decoder]: cal } }, { ...timeOptions, readScale });
      const t0 = t(none);
      const perUnit = Object.fromEntries(DECODER_COSTS.map((k) => [k, t({ ...none, [k]: 1 }).total - t0.total])) as Record<DecoderCost, number>;
      runs.push({ flagged: t0.flagged, measuredUs: measured.us, modelledUs: t0.total, measuredReads: measured.reads, forecastReads, perUnit });
    }
    // least squares, every cost ≥ 0: measured − modelled = Σ cost · perUnit. The pipeline's
    // reads go through the same cache code as inline's (choosing a slot, queueing, placing), so
    // its cost per read is at least inline's: the shipped model's batches (4–50 reads) cannot
    // tell a batch's cost from a read's, and fitted freely the pipeline's came out at 0 µs per
    // read, the planner chose it for the 7B at 25% and 50% of the FFN, and it decoded 1.68 and
    // 3.05 tok/s where it predicted 2.72 and 6.19
    // Each run's equation is divided by its measured µs, so the fit minimises relative errors, as
    // the planner is judged (within 15%): in absolute µs the runs with reads (1.4–3.8 ms a token)
    // outweighed the resident ones (0.36 ms), whose fit came out 6–16% slow in four probes; by
    // relative error, within 1% (docs/benchmarks.md, "2026-11-28 (day)").
    const costs = decoderCosts(decoder);
    const floor = decoder === "pipeline" ? (out.inline?.requestUs ?? 0) : 0;
    const { w } = nonNegativeLeastSquares(
      runs.map((r) => costs.map((k) => r.perUnit![k] / r.measuredUs)),
      runs.map((r) => (r.measuredUs - r.modelledUs - floor * r.perUnit!.requestUs) / r.measuredUs),
    );
    const fitted = Object.fromEntries(costs.map((k, j) => [k, w[j]!])) as Pick<DecoderCalibration, "layerUs" | "neuronNs" | "requestUs">;
    out[decoder] = { ...fitted, requestUs: fitted.requestUs + floor, runs };
  }
  return { decoders: out, attention };
}

