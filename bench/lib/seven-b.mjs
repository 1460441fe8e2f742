// The 7B-shaped benchmark model's files, named once for every bench script that uses it
// (bench/sparse.js prepares them; prefill.js, planner.js and coactivation.js read them).
//
// `synth --shape llama2-7b --type q4_0 --activation reglu --active-fraction 0.1 --gate-rank 64
// --seed 1`, with co-firing groups of N planted at share S (`--cofire-group N --cofire-share S`)
// unless N is 0. By default groups of 8 at share 0.7: the model whose co-activation matches the
// real default model's (docs/benchmarks.md, 2026-11-28 noon). `--cofire-group 8` alone takes
// synth's share (0.9); `--cofire-group 0` is the model without groups.
//
// Its predictors are trained with `--cold-share 0.5` by default (`--cold-share S`; 0: one margin
// for every neuron): the half of each layer's neurons firing least, those a budget of half the
// FFN leaves on storage, get a margin of their own (docs/benchmarks.md, 2026-11-29 morning).
// Their margins reach recall 0.995 on the calibration tokens (`--target-recall R`; train-predictor's
// default is 0.998): on this model the lower target reads a fifth fewer bundles a token at the
// same perplexity (docs/benchmarks.md, 2026-11-29 noon).
import { join } from "node:path";

/** parseArgs options every script that reads the 7B accepts. */
export const SEVEN_B_OPTIONS = {
  "cofire-group": { type: "string" },
  "cofire-share": { type: "string" },
  "cold-share": { type: "string" },
  "target-recall": { type: "string" },
};

/** train-predictor's own default target recall (DEFAULT_TARGET_RECALL, src/tools/predictor-fit.ts; the bench drives the CLI and imports none of it): files trained with it carry no recall in their names. */
export const TRAINER_RECALL = "0.998";
/** The bench's predictors: cold share and target recall when no option names them. */
const COLD_SHARE = "0.5";
const TARGET_RECALL = "0.995";

/** The co-firing groups asked for by parsed `SEVEN_B_OPTIONS` values: { group, share } (share undefined: synth's default). */
export function cofireOf(v) {
  const group = Number(v["cofire-group"] ?? 8);
  const share = v["cofire-share"] ?? (v["cofire-group"] === undefined ? "0.7" : undefined);
  if (!Number.isInteger(group) || group < 0) throw new Error(`--cofire-group must be a whole number ≥ 0, got ${v["cofire-group"]}`);
  if (share !== undefined && !(group > 0)) throw new Error("--cofire-share needs --cofire-group");
  return { group, share };
}

/** The predictors' cold share asked for by parsed `SEVEN_B_OPTIONS` values (a string as given; "0" for one margin). */
export function coldShareOf(v) {
  const s = v["cold-share"] ?? COLD_SHARE;
  if (!(Number(s) >= 0 && Number(s) < 1)) throw new Error(`--cold-share must be in [0, 1), got ${s}`);
  return s;
}

/** The predictors' target recall asked for by parsed `SEVEN_B_OPTIONS` values (a string as given). */
export function targetRecallOf(v) {
  const r = v["target-recall"] ?? TARGET_RECALL;
  if (!(Number(r) > 0 && Number(r) < 1)) throw new Error(`--target-recall must be in (0, 1), got ${r}`);
  return r;
}

/** synth's flags for the co-firing groups. */
export function cofireSynthArgs({ group, share }) {
  return group > 0 ? ["--cofire-group", String(group), ...(share !== undefined ? ["--cofire-share", share] : [])] : [];
}

/**
 * The files of the 7B with these co-firing groups in `dir`: the plain model (…-cofireN-shareS.gguf,
 * or …-seed1.gguf without groups), its profile and linear predictors beside it (…-linear-coldC
 * with a cold share C > 0, then -recallR with a target recall R other than the trainer's 0.998),
 * its pack (named the same way), and the corpus of random tokens it is profiled, trained and
 * prompted on (one per directory), and train-predictor's flags for them.
 */
export function sevenBFiles(dir, cofire, coldShare = COLD_SHARE, targetRecall = TARGET_RECALL) {
  const { group, share } = cofire;
  const name = `llama2-7b-sparse-q4_0-seed1${group > 0 ? `-cofire${group}${share !== undefined ? `-share${share}` : ""}` : ""}`;
  const model = join(dir, `${name}.gguf`);
  const cold = Number(coldShare) > 0;
  const own = targetRecall !== TRAINER_RECALL;
  const linear = `linear${cold ? `-cold${coldShare}` : ""}${own ? `-recall${targetRecall}` : ""}`;
  return {
    name,
    model,
    profile: `${model}.profile.gguf`,
    /** train-predictor's flags for these predictors */
    predictorArgs: [...(cold ? ["--cold-share", coldShare] : []), ...(own ? ["--target-recall", targetRecall] : [])],
    predictor: `${model}.predictor-${linear}.gguf`,
    pack: join(dir, `${name}-${linear}.pack.gguf`),
    corpus: join(dir, "random-tokens-llama2-seed1-16k.txt"),
  };
}
