#!/usr/bin/env node
// Soak: decode ≥ 10,000 tokens on the default model's pack in pipeline mode (worker threads,
// reads under a memory budget) while sampling the process's RSS, and check that after a warm-up
// RSS stays flat (max − min within 5% of min): no leak per token, per generation or per reset.
// The context is the model's 256 tokens, so the run is many generations, each from a reset.
// Writes bench/results/soak.json and docs/img/soak-rss.svg.
//
//   node tools/soak.mjs [--tokens 10000] [--memory 26MiB] [--decoder pipeline] [--warmup 3000]
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { spawnSync } from "node:child_process";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { values: v } = parseArgs({
  options: {
    tokens: { type: "string", default: "10000" },
    memory: { type: "string", default: "26MiB" },
    decoder: { type: "string", default: "pipeline" },
    warmup: { type: "string", default: "3000" },
    out: { type: "string", default: join(root, "bench", "results", "soak.json") },
  },
});
const np = await import(pathToFileURL(join(root, "dist", "src", "index.js")).href);
const pack = join(root, "models", "neuronpipe-default.pack.gguf");
if (!existsSync(pack)) {
  const r = spawnSync(process.execPath, [join(root, "bin", "neuronpipe.js"), "pack"], { stdio: "inherit" });
  if (r.status !== 0) throw new Error("neuronpipe pack failed");
}
const total = Number(v.tokens);
const warmup = Number(v.warmup);
const model = await np.loadModel(pack, { memory: v.memory, decoder: v.decoder, contextSize: 256 });
const session = model.createSession({ contextSize: 256 });
const samples = [];
let tokens = 0;
let generations = 0;
const t0 = performance.now();
const rss = () => process.memoryUsage.rss();
samples.push({ tokens: 0, rss: rss() });
while (tokens < total) {
  session.reset();
  for await (const _ of session.generate("The whale", { maxTokens: 200, seed: generations })) {
    tokens++;
    if (tokens % 250 === 0) samples.push({ tokens, rss: rss(), heapUsed: process.memoryUsage().heapUsed });
  }
  generations++;
  if (generations % 10 === 0) process.stderr.write(`\r[soak] ${tokens} tokens, ${generations} generations, RSS ${(rss() / 2 ** 20).toFixed(1)} MiB`);
}
const seconds = (performance.now() - t0) / 1000;
session.dispose();
await model.close();
process.stderr.write("\n");
const after = samples.filter((s) => s.tokens >= warmup);
const lo = Math.min(...after.map((s) => s.rss));
const hi = Math.max(...after.map((s) => s.rss));
const spread = (hi - lo) / lo;
const result = { date: new Date().toISOString(), pack, memory: v.memory, decoder: v.decoder, tokens, generations, seconds, tokPerSec: tokens / seconds, warmupTokens: warmup, rssMinMiB: lo / 2 ** 20, rssMaxMiB: hi / 2 ** 20, spread, flat: spread <= 0.05, samples };
mkdirSync(dirname(v.out), { recursive: true });
writeFileSync(v.out, JSON.stringify(result, null, 2) + "\n");
writeFileSync(join(root, "docs", "img", "soak-rss.svg"), svg(samples, warmup));
process.stdout.write(
  `soak: ${tokens} tokens in ${generations} generations (${v.decoder}, --memory ${v.memory}), ${(tokens / seconds).toFixed(0)} tok/s; RSS after ${warmup} tokens ${(lo / 2 ** 20).toFixed(1)}–${(hi / 2 ** 20).toFixed(1)} MiB: spread ${(100 * spread).toFixed(2)}% (limit 5%) — ${spread <= 0.05 ? "flat" : "NOT FLAT"}\n`,
);
if (spread > 0.05) process.exitCode = 1;

function svg(points, warm) {
  const W = 640, H = 280, L = 60, R = 16, T = 24, B = 40;
  const xs = points.map((p) => p.tokens), ys = points.map((p) => p.rss / 2 ** 20);
  const x0 = 0, x1 = Math.max(...xs), y0 = Math.floor(Math.min(...ys) * 0.9), y1 = Math.ceil(Math.max(...ys) * 1.05);
  const X = (x) => L + ((x - x0) / (x1 - x0 || 1)) * (W - L - R);
  const Y = (y) => H - B - ((y - y0) / (y1 - y0 || 1)) * (H - T - B);
  const path = points.map((p, i) => `${i ? "L" : "M"}${X(p.tokens).toFixed(1)},${Y(p.rss / 2 ** 20).toFixed(1)}`).join(" ");
  const ticks = [y0, (y0 + y1) / 2, y1].map((y) => `<text x="${L - 6}" y="${Y(y) + 4}" text-anchor="end">${y.toFixed(0)}</text><line x1="${L}" x2="${W - R}" y1="${Y(y)}" y2="${Y(y)}" stroke="#ddd"/>`).join("");
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="${L}" y="16">RSS (MiB) while decoding ${x1} tokens — default pack, ${v.decoder}, --memory ${v.memory}</text>
${ticks}
<line x1="${X(warm)}" x2="${X(warm)}" y1="${T}" y2="${H - B}" stroke="#aaa" stroke-dasharray="4 3"/><text x="${X(warm) + 4}" y="${T + 12}" fill="#777">warm-up</text>
<path d="${path}" fill="none" stroke="#1f77b4" stroke-width="2"/>
<text x="${(L + W - R) / 2}" y="${H - 8}" text-anchor="middle">tokens decoded</text>
<text x="${L}" y="${H - B + 16}" text-anchor="middle">0</text><text x="${W - R}" y="${H - B + 16}" text-anchor="end">${x1}</text>
</svg>
`;
}
