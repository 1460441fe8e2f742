// The decoders' own costs on this machine (`neuronpipe probe`, last step): what the planner's time
// model (plan/time-model.ts) does not get from kernel and read rates. Each decoder decodes the
// shipped model's pack — everything resident, with its trained predictor and with the oracle
// (every neuron flagged) — and at a quarter and a half of the FFN resident, with reads. From the
// resident runs: µs per layer and ns per flagged neuron (what the kernels do not explain); from
// the runs with reads: what each read request costs it beyond the probe's rates; and for the
// inline decoder, from a resident run with and without reads ahead, what looking a layer ahead
// costs it per flagged neuron. First, attention's cost per head and position beyond its KV bytes,
// from the two halves of long resident generations. Every run generates what `generate` does by
// default (128 tokens). Other models and budgets are predicted from these; bench/planner.js
// measures how well.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { loadModel } from "../api/model.js";
import { DEFAULT_MAX_TOKENS } from "../api/session.js";
import { packPlannerInput, sparsePlanOptions } from "../decode/planned.js";
import { budgetForFfnFraction, planMemory, planOptions } from "../sparse/memory-plan.js";
import { openPack } from "../sparse/pack/open.js";
import { writePack } from "../sparse/pack/write.js";
import type { AttentionCalibration, DecoderCalibration, MachineBounds } from "../plan/machine.js";
import { PIPELINE_OVERLAP, tokenTime } from "../plan/time-model.js";
import { shippedFile } from "../util/package-files.js";
import { createTokenizer } from "../tokenizer/index.js";
import { vocabFromGGUF } from "../model/vocab.js";

const DECODERS = ["inline", "pipeline", "blocking"] as const;
const CONTEXT = 256;
const PROMPT = "The whale";
/** Tokens per generation: as many as `generate` makes by default (at 64 the timed tokens sat at positions a third as far on, and decoded ~10% faster). */
const TOKENS = DEFAULT_MAX_TOKENS;

/** The shipped model's pack: models/neuronpipe-default.pack.gguf when built, else one written once into `cacheDir`. */
export async function calibrationPack(cacheDir: string): Promise<string> {
  const model = shippedFile("neuronpipe-default.gguf");
  const built = model.replace(/\.gguf$/, ".pack.gguf");
  if (existsSync(built)) return built;
  const out = join(cacheDir, "calibration.pack.gguf");
  if (!existsSync(out)) await writePack(model, out, { profile: `${model}.profile.gguf`, predictor: `${model}.predictor.gguf` });
  return out;
}

type DecodeOptions = NonNullable<Parameters<typeof loadModel>[1]>;

/** One calibration run: a decoder's options, tokens generated, and which of them are timed (token indices [from, to); default all after the first). */
interface Run {
  o: DecodeOptions;
  tokens?: number;
  timed?: [number, number];
}

/** µs per decode token of a run: the median of 5 sampled generations (seeded; greedy decoding of a small model falls into loops that read nothing) after a 64-token warm-up. */
async function decodeUs(path: string, run: Run): Promise<number> {
  const tokens = run.tokens ?? TOKENS;
  const model = await loadModel(path, { ...run.o, contextSize: CONTEXT, plan: false });
  const s = model.createSession({ contextSize: CONTEXT });
  const runs: number[] = [];
  try {
    for (let rep = -1; rep < 5; rep++) {
      s.reset();
      const at: number[] = [];
      for await (const _ of s.generate(PROMPT, { maxTokens: rep < 0 ? 64 : tokens, seed: rep + 1 })) at.push(performance.now());
      const [from, to] = run.timed ?? [0, at.length - 1];
      if (rep >= 0) runs.push(((at[Math.min(to, at.length - 1)]! - at[from]!) * 1000) / (Math.min(to, at.length - 1) - from));
    }
  } finally {
    s.dispose();
    model.dispose();
  }
  return runs.sort((a, b) => a - b)[2]!;
}

/** Tokens of the attention runs, timed in two halves of 96 decodes each: early and late positions of the same generations' kind. */
const ATTENTION_TOKENS = 193;

/** Rounds of every calibration run by default, interleaved (after one round not counted): this machine's speed drifts for seconds at a time, so each run's median comes from several moments (`probe --rounds`). */
export const CALIBRATION_ROUNDS = 3;

/**
 * Fit attention's and each decoder's costs on the shipped pack (about a minute and a half); `onStep` hears each decode
 * measured, and how many there are; `afterRound` runs after each counted round, before the fit
 * (the probe measures its kernels again there, into `m.kernels`, which the fit then uses).
 */
export async function calibrateDecoders(
  m: MachineBounds,
  cacheDir: string,
  onStep?: (what: string, done: number, total: number) => void,
  afterRound?: () => void,
  rounds = CALIBRATION_ROUNDS,
): Promise<Calibration> {
  const path = await calibrationPack(cacheDir);
  // first pass: list the runs the fit needs; then measure them in interleaved rounds; then fit
  const wanted = new Map<string, { run: Run; what: string }>();
  await fit(m, path, async (run, what) => (wanted.set(JSON.stringify(run), { run, what }), 1));
  const times = new Map<string, number[]>();
  const total = wanted.size * (rounds + 1);
  let done = 0;
  for (let round = 0; round <= rounds; round++) {
    for (const [key, { run, what }] of wanted) {
      onStep?.(`${what} (round ${round + 1} of ${rounds + 1})`, done++, total);
      const us = await decodeUs(path, run);
      if (round > 0) times.set(key, [...(times.get(key) ?? []), us]);
    }
    if (round > 0) afterRound?.();
  }
  const median = (a: number[]) => [...a].sort((x, y) => x - y)[a.length >> 1]!;
  return fit(m, path, async (run) => median(times.get(JSON.stringify(run))!));
}

export interface Calibration {
  decoders: NonNullable<MachineBounds["decoders"]>;
  attention: AttentionCalibration;
}

/** The fit from measured µs per token of each run (`measure`): attention over positions first, then each decoder with it. */
async function fit(m0: MachineBounds, path: string, measure: (run: Run, what: string) => Promise<number>): Promise<Calibration> {
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
      const measuredUs = await measure({ o: { decoder: "inline", predictor: "trained", threads }, tokens: ATTENTION_TOKENS, timed }, `attention at positions ${Math.round(position)}`);
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
  const out: NonNullable<MachineBounds["decoders"]> = {};
  for (const decoder of DECODERS) {
    const runs: NonNullable<DecoderCalibration["runs"]> = [];
    const input = (predictor: "trained" | "oracle") => packPlannerInput(pack, { contextSize: CONTEXT, predictor });
    const uncalibrated = { ...m, decoders: { [decoder]: { layerUs: 0, neuronNs: 0, requestUs: 0 } } };
    for (const predictor of ["trained", "oracle"] as const) {
      const inp = input(predictor);
      const mem = planMemory(pack, Number.MAX_SAFE_INTEGER, sparsePlanOptions(pack, decoder, Number.MAX_SAFE_INTEGER, { contextSize: CONTEXT, predictor }));
      const t = tokenTime(inp.shape, mem, uncalibrated, { decoder, threads, queueDepth: 32, readAhead: false, position, window: 5 });
      const measured = await measure({ o: { decoder, predictor, threads } }, `${decoder} decoder, ${predictor} predictor`);
      runs.push({ flagged: t.flagged, measuredUs: measured, modelledUs: t.total });
    }
    // two runs, two unknowns: measured − modelled = n_layer·a + flagged·b
    const [r0, r1] = runs as [(typeof runs)[0], (typeof runs)[0]];
    const e0 = r0.measuredUs - r0.modelledUs;
    const e1 = r1.measuredUs - r1.modelledUs;
    const b = Math.max(0, r1.flagged !== r0.flagged ? (e1 - e0) / (r1.flagged - r0.flagged) : 0);
    const a = Math.max(0, (e0 - r0.flagged * b) / pack.config.nLayer);
    const cal: DecoderCalibration = { layerUs: a, neuronNs: b * 1e3, requestUs: 0, runs };
    // reads: a quarter and a half of the FFN resident, with the memory plan the decoder gets by
    // default there
    const inp = input("trained");
    const withReads: { throughput: number; requests: number; excess: number }[] = [];
    for (const f of [0.25, 0.5]) {
      const budget = budgetForFfnFraction(pack, f, planOptions(pack.config, { contextSize: CONTEXT }));
      const mem = planMemory(pack, budget, sparsePlanOptions(pack, decoder, budget, { contextSize: CONTEXT }));
      const t = tokenTime(inp.shape, mem, { ...m, decoders: { [decoder]: { ...cal, requestUs: 0 } } }, { decoder, threads, queueDepth: 32, readAhead: mem.readAheadBytes > 0, position, window: 5 });
      const measured = await measure({ o: { decoder, threads, memory: budget } }, `${decoder} decoder with reads (${100 * f}% resident)`);
      runs.push({ flagged: t.flagged, measuredUs: measured, modelledUs: t.total });
      const compute = t.attention + t.predictor + t.gate + t.upDown + t.output + t.host;
      // the read time the run implies: the pipeline hides PIPELINE_OVERLAP of the shorter side
      // (here its reads are the longer: t = compute + reads − overlap·compute), the others add
      // their reads less what reads ahead hide
      const excess = decoder === "pipeline" ? measured - compute + PIPELINE_OVERLAP * compute : measured - compute + t.hidden;
      withReads.push({ throughput: t.readThroughputUs, requests: t.readsPerToken, excess });
    }
    // least squares over the two runs: excess = (requests at the probe's rates) + requestUs · requests
    const c = withReads.reduce((q, w) => q + (w.excess - w.throughput) * w.requests, 0) / Math.max(1e-9, withReads.reduce((q, w) => q + w.requests * w.requests, 0));
    cal.requestUs = Math.max(0, c);
    if (decoder === "inline") {
      // reads ahead: the same resident run with gate rows pinned, with and without them (the
      // look-ahead still predicts, computes and chooses when nothing is left to read)
      const withAhead: number[] = [];
      for (const readAhead of [128, 0]) {
        withAhead.push(await measure({ o: { decoder, threads, pinGates: true, readAhead } }, `inline decoder, reads ahead ${readAhead ? "on" : "off"}`));
      }
      const inp = input("trained");
      const opts = (readAhead: number) => sparsePlanOptions(pack, decoder, Number.MAX_SAFE_INTEGER, { contextSize: CONTEXT, pinGates: true, readAhead });
      const t = (readAhead: number) =>
        tokenTime(inp.shape, planMemory(pack, Number.MAX_SAFE_INTEGER, opts(readAhead)), { ...m, decoders: { inline: { ...cal, aheadNeuronNs: 0 } } }, { decoder, threads, queueDepth: 32, readAhead: readAhead > 0, position, window: 5 });
      const modelled = t(128).total - t(0).total;
      cal.aheadNeuronNs = Math.max(0, ((withAhead[0]! - withAhead[1]! - modelled) / t(128).flagged) * 1e3);
      runs.push({ flagged: t(128).flagged, measuredUs: withAhead[0]!, modelledUs: t(128).total }, { flagged: t(0).flagged, measuredUs: withAhead[1]!, modelledUs: t(0).total });
    }
    out[decoder] = cal;
  }
  return { decoders: out, attention };
}

