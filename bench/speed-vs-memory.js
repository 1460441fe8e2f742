#!/usr/bin/env node
// Decode speed, hit rate and bytes read per token of the default model's pack as the memory
// budget shrinks from the whole FFN to a fifth of it (`npm run bench`, third part), then the
// default (no decoder given: the plan made at load) and every decoder (inline, pipeline,
// blocking; median of 3) at 25%, 50% and 100% of the FFN beside mmap and dense: is the default
// the fast one? Writes bench/results/speed-vs-memory.json and
// the picture docs/img/speed-vs-memory.svg.
//
//   node bench/speed-vs-memory.js [--tokens 64] [--threads 2]
// Builds the pack first if models/neuronpipe-default.pack.gguf is missing (`neuronpipe pack`).
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { decodeSpeed } from "./lib/decode-speed.mjs";
import { benchArgs } from "./lib/usage.mjs";

const benchDir = dirname(fileURLToPath(import.meta.url));
const rootDir = resolve(benchDir, "..");
const { values: v } = benchArgs(import.meta.url, { tokens: { type: "string", default: "64" }, threads: { type: "string", default: "2" } });
const tokens = Number(v.tokens);
const np = await import(pathToFileURL(join(rootDir, "dist", "src", "index.js")).href);
const pack = join(rootDir, "models", "neuronpipe-default.pack.gguf");
if (!existsSync(pack)) {
  const r = spawnSync(process.execPath, [join(rootDir, "bin", "neuronpipe.js"), "pack"], { stdio: "inherit" });
  if (r.status !== 0) throw new Error("neuronpipe pack failed");
}
const info = np.openPack(pack);
const ctx = 256;
const planOpts = np.planOptions(info.config, { contextSize: ctx }); // loadSparseModel's defaults
const fractions = [0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1];
const points = [];
for (const f of fractions) {
  const budget = np.budgetForFfnFraction(info, f, planOpts);
  const model = await np.loadSparseModel(pack, { memory: budget, contextSize: ctx, threads: Number(v.threads) });
  // one generation; statistics of its decode passes only
  const speed = await decodeSpeed(model, { prompt: "The whale", tokens, reps: 1, contextSize: ctx, onFirstToken: () => model.sparse.resetStats() });
  const rep = model.sparse.report();
  const sum = (g) => rep.reduce((a, x) => a + g(x), 0);
  const p = {
    ffnResident: model.sparse.plan.ffnResident,
    budget,
    tokPerSec: speed.median,
    hitRate: sum((x) => x.gateHits + x.upDownHits) / Math.max(1, sum((x) => x.gateAccesses + x.upDownAccesses)),
    bytesPerToken: sum((x) => x.bytesRead) / Math.max(1, rep[0].tokens),
    peakResidentBytes: model.sparse.peakResidentBytes,
    plan: model.plan && { knobs: model.plan.knobs, predictedTokPerSec: model.plan.predicted.tokPerSec },
  };
  points.push(p);
  process.stderr.write(
    `[speed-vs-memory] ${(100 * f).toFixed(0)}% of the FFN (budget ${(budget / 2 ** 20).toFixed(1)} MiB): ${p.tokPerSec.toFixed(1)} tok/s, hit rate ${(100 * p.hitRate).toFixed(1)}%, ${(p.bytesPerToken / 2 ** 20).toFixed(2)} MiB read/token\n`,
  );
  model.dispose();
}
const dense = await np.loadModel(join(rootDir, "models", "neuronpipe-default.gguf"), { threads: Number(v.threads) });
const denseTps = (await decodeSpeed(dense, { prompt: "The whale", tokens, reps: 1, contextSize: ctx })).median;
dense.dispose();

// ---- every decoder at 25%, 50% and 100% of the FFN: is the default (the plan) the fast one? -----
const modes = [];
for (const f of [0.25, 0.5, 1]) {
  const budget = np.budgetForFfnFraction(info, f, planOpts);
  const row = { ffnShare: f, budget, tokPerSec: {} };
  // "default": no decoder given, the plan made at load chooses (bench/planner.js measures this in alternating rounds)
  for (const decoder of ["default", "inline", "pipeline", "blocking"]) {
    const model = await np.loadSparseModel(pack, { memory: budget, contextSize: ctx, threads: Number(v.threads), ...(decoder === "default" ? {} : { decoder }) });
    try {
      row.tokPerSec[decoder] = (await decodeSpeed(model, { prompt: "The whale", tokens, contextSize: ctx })).median;
    } finally {
      await model[Symbol.asyncDispose]();
    }
  }
  const fastest = Math.max(row.tokPerSec.inline, row.tokPerSec.pipeline, row.tokPerSec.blocking);
  row.defaultShareOfFastest = row.tokPerSec.default / fastest;
  modes.push(row);
  process.stderr.write(`[speed-vs-memory] ${(100 * f).toFixed(0)}% of the FFN: ${Object.entries(row.tokPerSec).map(([k, x]) => `${k} ${x.toFixed(1)}`).join(", ")} tok/s; default (the plan) ${(100 * row.defaultShareOfFastest).toFixed(0)}% of the fastest explicit decoder\n`);
}
const mm = await np.loadModel(pack, { decoder: "mmap", threads: Number(v.threads) });
const mmapTps = (await decodeSpeed(mm, { prompt: "The whale", tokens, contextSize: ctx })).median;
mm.dispose();
process.stderr.write(`[speed-vs-memory] mmap (dense over the mapped pack, no budget): ${mmapTps.toFixed(1)} tok/s; dense: ${denseTps.toFixed(1)}\n`);

mkdirSync(join(benchDir, "results"), { recursive: true });
writeFileSync(join(benchDir, "results", "speed-vs-memory.json"), JSON.stringify({ date: new Date().toISOString(), model: pack, tokens, threads: Number(v.threads), denseTokPerSec: denseTps, points, modes, mmapTokPerSec: mmapTps }, null, 2) + "\n");

// ---- the picture: tok/s (left axis, line) and MiB read per token (right axis, bars) -------------
const W = 720;
const H = 400;
const m = { l: 64, r: 72, t: 48, b: 56 };
const pw = W - m.l - m.r;
const ph = H - m.t - m.b;
const maxT = Math.max(denseTps, ...points.map((p) => p.tokPerSec)) * 1.1;
const maxB = Math.max(...points.map((p) => p.bytesPerToken / 2 ** 20), 1) * 1.1;
const x = (f) => m.l + ((f - 0.15) / 0.9) * pw;
const yT = (t) => m.t + ph - (t / maxT) * ph;
const yB = (b) => m.t + ph - (b / maxB) * ph;
const el = [];
el.push(`<rect width="${W}" height="${H}" fill="white"/>`);
el.push(`<text x="${W / 2}" y="24" text-anchor="middle" font-size="15" font-family="sans-serif">neuronpipe default model: decode speed vs memory budget (${Number(v.threads)} threads)</text>`);
for (const p of points) {
  const bw = 18;
  const h = m.t + ph - yB(p.bytesPerToken / 2 ** 20);
  el.push(`<rect x="${x(p.ffnResident) - bw / 2}" y="${yB(p.bytesPerToken / 2 ** 20)}" width="${bw}" height="${h}" fill="#f4a261" opacity="0.8"/>`);
}
el.push(`<line x1="${m.l}" x2="${m.l + pw}" y1="${yT(denseTps)}" y2="${yT(denseTps)}" stroke="#888" stroke-dasharray="6 4"/>`);
el.push(`<text x="${m.l + pw - 4}" y="${yT(denseTps) - 6}" text-anchor="end" font-size="12" font-family="sans-serif" fill="#555">dense, whole model mapped: ${denseTps.toFixed(0)} tok/s</text>`);
el.push(`<polyline fill="none" stroke="#1d3557" stroke-width="2.5" points="${points.map((p) => `${x(p.ffnResident)},${yT(p.tokPerSec)}`).join(" ")}"/>`);
for (const p of points) el.push(`<circle cx="${x(p.ffnResident)}" cy="${yT(p.tokPerSec)}" r="4" fill="#1d3557"/>`);
el.push(`<line x1="${m.l}" y1="${m.t + ph}" x2="${m.l + pw}" y2="${m.t + ph}" stroke="black"/>`);
el.push(`<line x1="${m.l}" y1="${m.t}" x2="${m.l}" y2="${m.t + ph}" stroke="black"/>`);
el.push(`<line x1="${m.l + pw}" y1="${m.t}" x2="${m.l + pw}" y2="${m.t + ph}" stroke="black"/>`);
for (const f of fractions) {
  el.push(`<text x="${x(f)}" y="${m.t + ph + 18}" text-anchor="middle" font-size="11" font-family="sans-serif">${(100 * f).toFixed(0)}%</text>`);
}
el.push(`<text x="${m.l + pw / 2}" y="${H - 14}" text-anchor="middle" font-size="12" font-family="sans-serif">share of FFN neurons the --memory budget holds (fixed region always resident)</text>`);
for (let i = 0; i <= 4; i++) {
  const t = (maxT * i) / 4;
  const b = (maxB * i) / 4;
  el.push(`<text x="${m.l - 6}" y="${yT(t) + 4}" text-anchor="end" font-size="11" font-family="sans-serif" fill="#1d3557">${t.toFixed(0)}</text>`);
  el.push(`<text x="${m.l + pw + 6}" y="${yB(b) + 4}" font-size="11" font-family="sans-serif" fill="#c4661f">${b.toFixed(1)}</text>`);
}
el.push(`<text transform="translate(16 ${m.t + ph / 2}) rotate(-90)" text-anchor="middle" font-size="12" font-family="sans-serif" fill="#1d3557">decode tokens / s (line)</text>`);
el.push(`<text transform="translate(${W - 14} ${m.t + ph / 2}) rotate(90)" text-anchor="middle" font-size="12" font-family="sans-serif" fill="#c4661f">MiB read from storage per token (bars)</text>`);
const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">\n${el.join("\n")}\n</svg>\n`;
mkdirSync(join(rootDir, "docs", "img"), { recursive: true });
writeFileSync(join(rootDir, "docs", "img", "speed-vs-memory.svg"), svg);
process.stderr.write(`[speed-vs-memory] wrote docs/img/speed-vs-memory.svg and bench/results/speed-vs-memory.json\n`);
