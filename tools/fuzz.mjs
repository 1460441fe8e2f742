#!/usr/bin/env node
// The long run of the mutation fuzzer (src/tools/fuzz/; npm test runs a bounded smoke of it):
// mutants of small models of every weight type and activation, and of a neuron pack under a
// memory budget, each loaded and run for two tokens in a child process. Prints and writes the
// figures (mutants, refused, loaded and ran, defects by kind: crash, hang, non-finite logits,
// messages over 500 characters or with control characters, internal errors) — a defect's mutant
// number reproduces it (--start K --gguf 1).
//
//   node tools/fuzz.mjs [--gguf 100000] [--pack 10000] [--workers 2] [--start 0]
//                       [--dir /tmp/neuronpipe-fuzz] [--out bench/results/fuzz.json]
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { values: v } = parseArgs({
  options: {
    gguf: { type: "string", default: "100000" },
    pack: { type: "string", default: "10000" },
    workers: { type: "string", default: "2" },
    start: { type: "string", default: "0" },
    dir: { type: "string", default: "/tmp/neuronpipe-fuzz" },
    out: { type: "string", default: join(root, "bench", "results", "fuzz.json") },
  },
});
const load = (p) => import(pathToFileURL(join(root, "dist", "src", "tools", "fuzz", p)).href);
const { fuzz } = await load("run.js");
const { modelSeeds, packSeed } = await load("seeds.js");
const { progressBar } = await import(pathToFileURL(join(root, "dist", "src", "cli", "progress.js")).href);

mkdirSync(v.dir, { recursive: true });
const models = await modelSeeds(v.dir);
const pack = await packSeed(v.dir);
const workers = Number(v.workers);
const start = Number(v.start);
const runs = [];
const gguf = Number(v.gguf);
if (gguf > 0) {
  const bar = progressBar(`GGUF mutants (${models.length} seeds)`);
  runs.push({ kind: "gguf", ...(await fuzz({ seeds: models, count: Math.ceil(gguf / models.length), start, workers, dir: v.dir, onProgress: bar })) });
}
const packs = Number(v.pack);
if (packs > 0) {
  const bar = progressBar("pack mutants");
  runs.push({ kind: "pack", ...(await fuzz({ seeds: [pack], count: packs, start, workers, dir: v.dir, onProgress: bar })) });
}
for (const r of runs) {
  const by = {};
  for (const d of r.defects) by[d.defect] = (by[d.defect] ?? 0) + 1;
  process.stdout.write(
    `${r.kind}: ${r.mutants} mutants in ${r.seconds.toFixed(0)} s — refused ${r.refused}, loaded and ran ${r.ok}, defects ${r.defects.length} ${JSON.stringify(by)}; longest message ${r.longestMessage} characters\n`,
  );
  for (const d of r.defects.slice(0, 20)) process.stdout.write(`  ${d.defect}: ${d.seed} mutant ${d.mutant} (${d.what}): ${d.message.split("\n")[0]}\n`);
}
mkdirSync(dirname(v.out), { recursive: true });
writeFileSync(v.out, JSON.stringify({ date: new Date().toISOString(), runs }, null, 2) + "\n");
process.stdout.write(`wrote ${v.out}\n`);
if (runs.some((r) => r.defects.length > 0)) process.exitCode = 1;
