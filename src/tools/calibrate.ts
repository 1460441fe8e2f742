// The decoders' own costs on this machine (`neuronpipe probe`, last step): what the planner's time
// model (plan/time-model.ts) does not get from kernel and read rates. Each decoder decodes the
// shipped model's pack — everything resident, with its trained predictor and with the oracle
// (every neuron flagged) — and at a quarter and a half of the FFN resident, with reads. From the
// resident runs: µs per layer and ns per flagged neuron (what the kernels do not explain); from
// the runs with reads: what each read request costs it beyond the probe's rates; and for the
// inline decoder, from a resident run with and without reads ahead, what looking a layer ahead
// costs it per flagged neuron. Other models and budgets are predicted from these; bench/planner.js measures how
// well.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { loadModel } from "../api/model.js";
import { packPlannerInput, sparsePlanOptions } from "../decode/planned.js";
import { budgetForFfnFraction, planMemory, planOptions } from "../sparse/memory-plan.js";
import { openPack } from "../sparse/pack/open.js";
import { writePack } from "../sparse/pack/write.js";
import type { DecoderCalibration, MachineBounds } from "../plan/machine.js";
import { PIPELINE_OVERLAP, tokenTime } from "../plan/time-model.js";
import { shippedFile } from "../util/package-files.js";
import { createTokenizer } from "../tokenizer/index.js";
import { vocabFromGGUF } from "../model/vocab.js";

const DECODERS = ["inline", "pipeline", "blocking"] as const;
const CONTEXT = 256;
const PROMPT = "The whale";
/** Tokens timed per generation. */
const TOKENS = 64;

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

/** µs per decode token: the median of 5 sampled generations of `tokens` (seeded; greedy decoding of a small model falls into loops that read nothing) after a 64-token warm-up. */
async function decodeUs(path: string, o: DecodeOptions, tokens: number): Promise<number> {
  const model = await loadModel(path, { ...o, contextSize: CONTEXT, plan: false });
  const s = model.createSession({ contextSize: CONTEXT });
  const runs: number[] = [];
  try {
    for (let rep = -1; rep < 5; rep++) {
      s.reset();
      let n = 0;
      let t0 = 0;
      let t1 = 0;
      for await (const _ of s.generate(PROMPT, { maxTokens: rep < 0 ? 64 : tokens, seed: rep + 1 })) {
        t1 = performance.now();
        if (++n === 1) t0 = t1;
      }
      if (rep >= 0) runs.push(((t1 - t0) * 1000) / (n - 1));
    }
  } finally {
    s.dispose();
    model.dispose();
  }
  return runs.sort((a, b) => a - b)[2]!;
}

/** Rounds of every calibration run, interleaved (after one round not counted): this machine's speed drifts for seconds at a time, so each run's median comes from several moments. */
const ROUNDS = 3;

/**
 * Fit each decoder's costs on the shipped pack (about a minute); `onStep` hears each decode
 * measured, and how many there are; `afterRound` runs after each counted round, before the fit
 * (the probe measures its kernels again there, into `m.kernels`, which the fit then uses).
 */
export async function calibrateDecoders(
  m: MachineBounds,
  cacheDir: string,
  onStep?: (what: string, done: number, total: number) => void,
  afterRound?: () => void,
): Promise<NonNullable<MachineBounds["decoders"]>> {
  const path = await calibrationPack(cacheDir);
  // first pass: list the runs the fit needs; then measure them in interleaved rounds; then fit
  const wanted = new Map<string, { o: DecodeOptions; what: string }>();
  await fitDecoders(m, path, async (o, what) => (wanted.set(JSON.stringify(o), { o, what }), 1));
  const times = new Map<string, number[]>();
  const total = wanted.size * (ROUNDS + 1);
  let done = 0;
  for (let round = 0; round <= ROUNDS; round++) {
    for (const [key, { o, what }] of wanted) {
      onStep?.(`${what} (round ${round + 1} of ${ROUNDS + 1})`, done++, total);
      const us = await decodeUs(path, o, TOKENS);
      if (round > 0) times.set(key, [...(times.get(key) ?? []), us]);
    }
    if (round > 0) afterRound?.();
  }
  const median = (a: number[]) => [...a].sort((x, y) => x - y)[a.length >> 1]!;
  return fitDecoders(m, path, async (o) => median(times.get(JSON.stringify(o))!));
}

/** The fit from measured µs per token of each run (`measure`). */
async function fitDecoders(m: MachineBounds, path: string, measure: (o: DecodeOptions, what: string) => Promise<number>): Promise<NonNullable<MachineBounds["decoders"]>> {
  const pack = openPack(path);
  const threads = Math.max(...m.memory.map((x) => x.threads));
  // the timed tokens decode at positions prompt … prompt + TOKENS − 2: modelled at their mean
  const position = createTokenizer(vocabFromGGUF(pack.file)).encode(PROMPT).length + (TOKENS - 2) / 2;
  const out: NonNullable<MachineBounds["decoders"]> = {};
  for (const decoder of DECODERS) {
    const runs: NonNullable<DecoderCalibration["runs"]> = [];
    const input = (predictor: "trained" | "oracle") => packPlannerInput(pack, { contextSize: CONTEXT, predictor });
    const uncalibrated = { ...m, decoders: { [decoder]: { layerUs: 0, neuronNs: 0, requestUs: 0 } } };
    for (const predictor of ["trained", "oracle"] as const) {
      const inp = input(predictor);
      const mem = planMemory(pack, Number.MAX_SAFE_INTEGER, sparsePlanOptions(pack, decoder, Number.MAX_SAFE_INTEGER, { contextSize: CONTEXT, predictor }));
      const t = tokenTime(inp.shape, mem, uncalibrated, { decoder, threads, queueDepth: 32, readAhead: false, position, window: 5 });
      const measured = await measure({ decoder, predictor, threads }, `${decoder} decoder, ${predictor} predictor`);
      runs.push({ flagged: t.flagged, measuredUs: measured, modelledUs: t.total });
    }
    // two runs, two unknowns: measured − modelled = n_layer·a + flagged·b
    const [r0, r1] = runs as [(typeof runs)[0], (typeof runs)[0]];
    const e0 = r0.measuredUs - r0.modelledUs;
    const e1 = r1.measuredUs - r1.modelledUs;
    const b = Math.max(0, r1.flagged !== r0.flagged ? (e1 - e0) / (r1.flagged - r0.flagged) : 0);
    const a = Math.max(0, (e0 - r0.flagged * b) / pack.config.nLayer);
    const fit: DecoderCalibration = { layerUs: a, neuronNs: b * 1e3, requestUs: 0, runs };
    // reads: a quarter and a half of the FFN resident, with the memory plan the decoder gets by
    // default there
    const inp = input("trained");
    const withReads: { throughput: number; requests: number; excess: number }[] = [];
    for (const f of [0.25, 0.5]) {
      const budget = budgetForFfnFraction(pack, f, planOptions(pack.config, { contextSize: CONTEXT }));
      const mem = planMemory(pack, budget, sparsePlanOptions(pack, decoder, budget, { contextSize: CONTEXT }));
      const t = tokenTime(inp.shape, mem, { ...m, decoders: { [decoder]: { ...fit, requestUs: 0 } } }, { decoder, threads, queueDepth: 32, readAhead: mem.readAheadBytes > 0, position, window: 5 });
      const measured = await measure({ decoder, threads, memory: budget }, `${decoder} decoder with reads (${100 * f}% resident)`);
      runs.push({ flagged: t.flagged, measuredUs: measured, modelledUs: t.total });
      const compute = t.attention + t.predictor + t.gate + t.upDown + t.output + t.host;
      // the pipeline's reads overlap its compute (they bound the token when they exceed it); the
      // others' reads add to it (less what reads ahead hide)
      // the read time the run implies: the pipeline hides PIPELINE_OVERLAP of the shorter side
      // (here its reads are the longer: t = compute + reads − overlap·compute), the others add
      // their reads less what reads ahead hide
      const excess = decoder === "pipeline" ? measured - compute + PIPELINE_OVERLAP * compute : measured - compute + t.hidden;
      withReads.push({ throughput: t.readThroughputUs, requests: t.readsPerToken, excess });
    }
    // least squares over the two runs: excess = (requests at the probe's rates) + requestUs · requests
    const c = withReads.reduce((q, w) => q + (w.excess - w.throughput) * w.requests, 0) / Math.max(1e-9, withReads.reduce((q, w) => q + w.requests * w.requests, 0));
    fit.requestUs = Math.max(0, c);
    if (decoder === "inline") {
      // reads ahead: the same resident run with gate rows pinned, with and without them (the
      // look-ahead still predicts, computes and chooses when nothing is left to read)
      const withAhead: number[] = [];
      for (const readAhead of [128, 0]) {
        withAhead.push(await measure({ decoder, threads, pinGates: true, readAhead }, `inline decoder, reads ahead ${readAhead ? "on" : "off"}`));
      }
      const inp = input("trained");
      const opts = (readAhead: number) => sparsePlanOptions(pack, decoder, Number.MAX_SAFE_INTEGER, { contextSize: CONTEXT, pinGates: true, readAhead });
      const t = (readAhead: number) =>
        tokenTime(inp.shape, planMemory(pack, Number.MAX_SAFE_INTEGER, opts(readAhead)), { ...m, decoders: { inline: { ...fit, aheadNeuronNs: 0 } } }, { decoder, threads, queueDepth: 32, readAhead: readAhead > 0, position, window: 5 });
      const modelled = t(128).total - t(0).total;
      fit.aheadNeuronNs = Math.max(0, ((withAhead[0]! - withAhead[1]! - modelled) / t(128).flagged) * 1e3);
      runs.push({ flagged: t(128).flagged, measuredUs: withAhead[0]!, modelledUs: t(128).total }, { flagged: t(0).flagged, measuredUs: withAhead[1]!, modelledUs: t(0).total });
    }
    out[decoder] = fit;
  }
  return out;
}
