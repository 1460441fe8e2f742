#!/usr/bin/env node
// Sparse decode with the whole FFN resident against dense decode, on synthetic planted-ReGLU
// Q4_0 models of several sizes (~200 MB to ~1.3 GB): where does sparsity stop paying? Each size
// is built once (synth --gate-rank 64, ~10% active; profile; train-predictor with its defaults;
// pack) in --dir, then measured in this process one after the other: dense on the plain GGUF,
// then the pack at the budget that holds the whole FFN with the default decoder (inline) and the
// pipeline — each the median of --repeat greedy generations of --decode tokens.
//
//   node bench/sizes.js [--dir DIR] [--decode 32] [--repeat 3] [--threads 2] [--out FILE]
// Writes bench/results/sizes.json (or --out) and prints a table.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { decodeSpeed } from "./lib/decode-speed.mjs";
import { buildPlantedModel, PLANTED_SIZES } from "./lib/planted-model.mjs";
import { benchArgs } from "./lib/usage.mjs";

const benchDir = dirname(fileURLToPath(import.meta.url));
const rootDir = resolve(benchDir, "..");
const { values: v } = benchArgs(import.meta.url, {
  dir: { type: "string", default: join(benchDir, ".models", "sizes") },
  decode: { type: "string", default: "32" },
  repeat: { type: "string", default: "3" },
  threads: { type: "string", default: "2" },
  out: { type: "string" },
});
const threads = Number(v.threads);
const decode = Number(v.decode);
const reps = Number(v.repeat);
const ctx = 256;
const log = (s) => process.stderr.write(`[sizes] ${s}\n`);
const np = await import(pathToFileURL(join(rootDir, "dist", "src", "index.js")).href);

/** Median decode tok/s of `reps` greedy generations after a 4-token warm-up. */
const speed = async (m) => {
  const r = await decodeSpeed(m, { prompt: "Once upon a time", tokens: decode, reps, warmup: 4, contextSize: ctx });
  return { median: r.median, min: r.min, max: r.max };
};

const results = [];
for (const size of PLANTED_SIZES) {
  const { model, pack } = await buildPlantedModel(size, { dir: v.dir, threads, log });
  const file = np.readGGUF(model);
  const pred = np.readGGUF(`${model}.predictor.gguf`);
  const arr = (k) => Array.from(pred.metadata.get(`neuronpipe.predictor.${k}`)?.value ?? []);
  const mean = (a) => a.reduce((x, y) => x + y, 0) / Math.max(1, a.length);
  const recall = mean(arr("recall"));
  const flagged = mean(arr("predicted_active"));
  const precision = mean(arr("precision"));
  // flagged / fired = (tp + fp) / (tp + fn) = recall / precision, per layer
  const flaggedPerFired = mean(arr("recall").map((r, l) => r / arr("precision")[l]));
  const dense = await np.loadModel(model, { threads });
  const denseSpeed = await speed(dense);
  const cfg = dense.config;
  dense.dispose();
  const info = np.openPack(pack);
  const budget = np.budgetForFfnFraction(info, 1, np.planOptions(info.config, { contextSize: ctx, predictor: true }));
  const row = { name: size.name, fileBytes: file.fileSize, nEmbd: cfg.nEmbd, nFF: cfg.nFF, nLayer: cfg.nLayer, budget, predictor: { recall, precision, flaggedShare: flagged, flaggedPerFired }, dense: denseSpeed, sparse: {} };
  for (const decoder of ["inline", "pipeline"]) {
    const m = await np.loadSparseModel(pack, { memory: budget, threads, contextSize: ctx, decoder });
    try {
      row.sparse[decoder] = { ...(await speed(m)), plan: m.plan && { knobs: m.plan.knobs, overrides: m.plan.overrides, predictedTokPerSec: m.plan.predicted.tokPerSec } };
    } finally {
      await m[Symbol.asyncDispose]();
    }
  }
  row.inlineOverDense = row.sparse.inline.median / denseSpeed.median;
  row.pipelineOverDense = row.sparse.pipeline.median / denseSpeed.median;
  results.push(row);
  log(`${size.name} (${(file.fileSize / 2 ** 20).toFixed(0)} MiB): dense ${denseSpeed.median.toFixed(1)}, inline ${row.sparse.inline.median.toFixed(1)} (${row.inlineOverDense.toFixed(2)}×), pipeline ${row.sparse.pipeline.median.toFixed(1)} (${row.pipelineOverDense.toFixed(2)}×) tok/s; predictor recall ${recall.toFixed(4)}, flagged ${(100 * flagged).toFixed(1)}% of neurons`);
}
const out = v.out ?? join(benchDir, "results", "sizes.json");
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, JSON.stringify({ date: new Date().toISOString(), threads, decodeTokens: decode, repeat: reps, contextSize: ctx, results }, null, 2) + "\n");
const lines = ["| model | Q4_0 file | dense tok/s | inline (whole FFN resident) | ÷ dense | pipeline | ÷ dense | predictor recall | flagged / fired |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"];
for (const r of results)
  lines.push(
    `| ${r.name} (${r.nLayer}×${r.nEmbd}, ff ${r.nFF}) | ${(r.fileBytes / 2 ** 20).toFixed(0)} MiB | ${r.dense.median.toFixed(1)} | ${r.sparse.inline.median.toFixed(1)} | ${r.inlineOverDense.toFixed(2)}× | ${r.sparse.pipeline.median.toFixed(1)} | ${r.pipelineOverDense.toFixed(2)}× | ${r.predictor.recall.toFixed(4)} | ${r.predictor.flaggedPerFired?.toFixed(2) ?? "—"} |`,
  );
process.stdout.write(lines.join("\n") + "\n");
log(`wrote ${out}`);
