// neuronpipe train-predictor: per-layer activation predictors, trained in native code.
import { formatReport, trainPredictors } from "../../tools/train-predictor.js";
import { DEFAULT_TARGET_RECALL } from "../../tools/predictor-fit.js";
import { writePredictors } from "../../sparse/predictor-file.js";
import { modelFingerprint } from "../../sparse/pack/fingerprint.js";
import { checkOverwrite, forceHelp, forceOption, num, type Command } from "../command.js";
import { defaultModelPath } from "../model-flags.js";
import { reluModelAndCorpus } from "../corpus.js";
import { progressBar } from "../progress.js";

export const trainPredictor: Command = {
  summary: "fit per-layer activation predictors (low-rank linear, closed form; or PowerInfer's MLP) on collected activations",
  usage: `neuronpipe train-predictor [--model PATH] [--corpus FILE|DIR] [--out PATH] [--form linear|mlp] [--max-rank 256] [--target-recall ${DEFAULT_TARGET_RECALL}]`,
  options: {
    model: { type: "string", short: "m" },
    corpus: { type: "string", short: "c" },
    out: { type: "string", short: "o" },
    ...forceOption,
    form: { type: "string" },
    "max-rank": { type: "string" },
    "size-budget": { type: "string" },
    epochs: { type: "string" },
    "target-recall": { type: "string" },
    "cold-share": { type: "string" },
    "cold-cost": { type: "string" },
    "train-fraction": { type: "string" },
    "max-hidden": { type: "string" },
    calibration: { type: "string" },
    "max-tokens": { type: "string", short: "n" },
    seed: { type: "string" },
    threads: { type: "string" },
    json: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  },
  help: {
    model: "GGUF model (default: the default model)",
    corpus: "text file or directory (default: the bundled held-out text); the first --train-fraction trains, the rest evaluates",
    out: "output file (default: MODEL.predictor.gguf next to the model, e.g. models/neuronpipe-default.gguf.predictor.gguf)",
    ...forceHelp,
    form: "linear (default): fc2·fc1·x̂ estimates the gate pre-activations through a low-rank bottleneck, per-neuron margins, fitted in closed form; mlp: PowerInfer's fc2·relu(fc1·x), trained with Adam",
    "max-rank": "linear: the largest rank tried, a multiple of 32 (default min(256, n_embd)); each layer takes the rank that reads the fewest bytes per token",
    "size-budget": "linear: a layer's predictor bytes ≤ this share of its FFN bytes (default 0.15); mlp: of its FFN parameters (default 0.1)",
    epochs: "mlp: passes over the training activations (default 3)",
    "target-recall": `recall the thresholds reach on the calibration tokens (linear) or the training split (mlp); default ${DEFAULT_TARGET_RECALL}`,
    "cold-share": "linear: share of each layer's neurons, those firing least, whose margin is chosen apart: a false flag of one costs a read when it is offloaded (default 0: one margin for all)",
    "cold-cost": "linear, with --cold-share: what a cold neuron's flag costs in hot ones' (default 32); the two margins are the cheapest reaching --target-recall",
    "train-fraction": "share of the corpus tokens used for training (default 0.8)",
    calibration: "share of the training tokens held out of fitting to choose the thresholds (linear: default 0.15; mlp: default 0, chosen on the fitting tokens)",
    "max-hidden": "mlp: upper bound of a layer's hidden width (default 256; the width is 0.75 × active neurons per token, rounded to 32)",
    "max-tokens": "use at most N corpus tokens",
    seed: "seed of the subspace iteration (linear) or of initialisation and shuffling (mlp), default 1; training is deterministic",
    threads: "compute threads for the collection passes",
    json: "print the report as JSON",
  },
  async run(v) {
    const epochs = num(v.epochs, "epochs", { int: true, min: 1 });
    const targetRecall = num(v["target-recall"], "target-recall", { min: 0 });
    const trainFraction = num(v["train-fraction"], "train-fraction", { min: 0 });
    const seed = num(v.seed, "seed", { int: true });
    const coldShare = num(v["cold-share"], "cold-share", { min: 0, max: 0.99 });
    const coldCost = num(v["cold-cost"], "cold-cost", { min: 1 });
    checkOverwrite((v.out as string | undefined) ?? `${(v.model as string | undefined) ?? defaultModelPath()}.predictor.gguf`, v);
    const { model, path, corpus, tokens } = await reluModelAndCorpus(v, 2);
    const out = (v.out as string | undefined) ?? `${path}.predictor.gguf`;
    try {
      const bars: Record<string, (d: number, t: number) => void> = {};
      const form = v.form as string | undefined;
      if (form !== undefined && form !== "linear" && form !== "mlp") throw new RangeError(`--form must be linear or mlp, got ${form}`);
      const r = trainPredictors(model, tokens, {
        form: form as "linear" | "mlp" | undefined,
        maxRank: num(v["max-rank"], "max-rank", { int: true, min: 32 }),
        sizeBudget: num(v["size-budget"], "size-budget", { min: 0 }),
        epochs,
        targetRecall,
        trainFraction,
        seed,
        maxHidden: num(v["max-hidden"], "max-hidden", { int: true, min: 32 }),
        calibrationFraction: num(v.calibration, "calibration", { min: 0 }),
        coldShare,
        coldCost,
        onProgress: (phase, d, t) => (bars[phase] ??= progressBar(phase))(d, t),
      });
      await writePredictors(out, r, {
        modelName: String(model.file.metadata.get("general.name")?.value ?? path),
        corpus,
        modelFingerprint: modelFingerprint(path, model.file),
        // the knob is stated in the file: the margins differ by group
        ...(r.options.coldShare > 0 ? { notes: { cold_margins: `the ${r.options.coldShare} of each layer's neurons firing least have a margin of their own (blk.N.fc2.threshold), a flag of one costing ${r.options.coldCost} of the others'` } } : {}),
      });
      if (v.json) process.stdout.write(JSON.stringify({ out, form: r.options.form, report: r.report, meanRecall: r.meanRecall, predictorParams: r.predictorParams, ffnParams: r.ffnParams, predictorBytes: r.predictorBytes, ffnBytes: r.ffnBytes }) + "\n");
      else process.stdout.write(`${formatReport(r)}\nwrote ${out}\n`);
    } finally {
      model.dispose();
    }
  },
};
