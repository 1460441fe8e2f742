#!/usr/bin/env node
// Prefill speed (issue 15): prompts of 128 and 512 tokens through neuronpipe's dense engine, the
// streamed dense prefill of a neuron pack (whole FFN resident, and half of it offloaded), the
// token-at-a-time sparse path a prompt took before (each token a decode step: what LLMFlash-style
// engines do), and llama.cpp (node-llama-cpp's prebuilt, in memory) — one run, one engine per
// child process, one after the other, median of `--repeat` runs after a warm-up.
//
//   node bench/prefill.js [--dir DIR] [--lengths 128,512] [--repeat 3] [--only id,id]
//
// Needs in --dir (default $NEURONPIPE_BENCH_DIR, else bench/.models, as bench/sparse.js): llama2-7b-sparse-q4_0-seed1.gguf and its pack
// llama2-7b-sparse-q4_0-seed1-linear.pack.gguf (bench/sparse.js prepares both), and the corpus
// random-tokens-llama2-seed1-16k.txt (prompt text). Writes bench/results/prefill.json.
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const benchDir = dirname(fileURLToPath(import.meta.url));
const rootDir = resolve(benchDir, "..");
const log = (...a) => process.stderr.write(`[bench:prefill] ${a.join(" ")}\n`);
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

const { values: v } = parseArgs({
  options: {
    dir: { type: "string" },
    lengths: { type: "string", default: "128,512" },
    repeat: { type: "string", default: "3" },
    threads: { type: "string", default: "2" },
    ffn: { type: "string", default: "0.5" },
    batch: { type: "string", default: "128" },
    only: { type: "string" },
    out: { type: "string", default: join(benchDir, "results", "prefill.json") },
    child: { type: "string" },
  },
});
v.dir = resolve(v.dir ?? process.env.NEURONPIPE_BENCH_DIR ?? join(benchDir, ".models"));
const lengths = v.lengths.split(",").map(Number);
const repeat = Number(v.repeat);
const threads = Number(v.threads);

async function np() {
  return import(pathToFileURL(join(rootDir, "dist", "src", "index.js")).href);
}

/** Prompt ids of each length from the corpus (tokenised by `encode`). */
function prompts(encode) {
  const text = readFileSync(join(v.dir, "random-tokens-llama2-seed1-16k.txt"), "utf8");
  const ids = encode(text);
  return Object.fromEntries(lengths.map((n) => [n, ids.slice(0, n)]));
}

// ---- children ---------------------------------------------------------------------------

async function childNeuronpipe(spec) {
  const lib = await np();
  const t0 = performance.now();
  const model = await lib.loadModel(spec.model, { threads, contextSize: 1024, batchSize: Number(v.batch), ...(spec.memory ? { memory: spec.memory } : {}), ...(spec.decoder ? { decoder: spec.decoder } : {}) });
  const loadSeconds = (performance.now() - t0) / 1000;
  const ps = prompts((t) => model.tokenizer.encode(t));
  const out = { loadSeconds, lengths: {} };
  const s = model.createSession({ contextSize: 1024 });
  const run = (ids) => {
    s.reset();
    const t = performance.now();
    if (spec.tokenAtATime) for (const id of ids) s.evaluate([id]);
    else s.evaluate(ids);
    return ids.length / ((performance.now() - t) / 1000);
  };
  run(ps[lengths[0]].slice(0, 16)); // warm-up: mapping paged in, workers started
  for (const n of lengths) {
    const runs = [];
    const reps = spec.tokenAtATime ? 1 : repeat; // the slow path: one run
    for (let r = 0; r < reps; r++) {
      runs.push(run(ps[n]));
      log(`${spec.id}: ${n} tokens: ${runs.at(-1).toFixed(2)} tok/s`);
    }
    out.lengths[n] = { tokensPerSecond: median(runs), runs };
  }
  const sp = model.sparse;
  if (sp) {
    sp.sample();
    out.peakResidentBytes = sp.peakResidentBytes;
    out.budget = sp.plan.budget;
    out.streamed = model.decoder.streamed?.stats ? { bytes: model.decoder.streamed.stats.bytes, reads: model.decoder.streamed.stats.reads, waitSeconds: model.decoder.streamed.stats.waitUs / 1e6 } : undefined;
  }
  s.dispose();
  await model[Symbol.asyncDispose]();
  return out;
}

async function childPeer(spec) {
  const { openPeer, peerInfo } = await import("./peer/llama-peer.mjs");
  const t0 = performance.now();
  const peer = await openPeer(spec.model, { threads, contextSize: 1024 });
  const loadSeconds = (performance.now() - t0) / 1000;
  const ps = prompts((t) => peer.tokenize(t, { addBos: true }));
  await peer.timePrefill(ps[lengths[0]].slice(0, 16));
  const out = { loadSeconds, lengths: {}, peer: await peerInfo() };
  for (const n of lengths) {
    const runs = [];
    for (let r = 0; r < repeat; r++) {
      runs.push((await peer.timePrefill(ps[n])).tokensPerSecond);
      log(`${spec.id}: ${n} tokens: ${runs.at(-1).toFixed(2)} tok/s`);
    }
    out.lengths[n] = { tokensPerSecond: median(runs), runs };
  }
  await peer.dispose();
  return out;
}

if (v.child) {
  const spec = JSON.parse(v.child);
  const r = spec.engine === "llama.cpp" ? await childPeer(spec) : await childNeuronpipe(spec);
  process.stdout.write(JSON.stringify(r));
  process.exit(0);
}

// ---- parent -----------------------------------------------------------------------------

const model = join(v.dir, "llama2-7b-sparse-q4_0-seed1.gguf");
const pack = join(v.dir, "llama2-7b-sparse-q4_0-seed1-linear.pack.gguf");
const lib = await np();
const packInfo = lib.openPack(pack);
const planOpts = lib.planOptions(packInfo.config, { contextSize: 1024, batchSize: Number(v.batch) });
const budget = lib.budgetForFfnFraction(packInfo, Number(v.ffn), planOpts);
const specs = [
  { id: "dense", what: "neuronpipe dense (plain GGUF, mapped, in memory)", engine: "neuronpipe", model },
  { id: "streamed-resident", what: "neuronpipe pack, whole FFN resident (streamed dense prefill)", engine: "neuronpipe", model: pack, memory: lib.budgetForFfnFraction(packInfo, 1, planOpts) },
  { id: "streamed", what: `neuronpipe pack, ${Math.round(100 * (1 - Number(v.ffn)))}% of the FFN offloaded (--memory ${(budget / 2 ** 30).toFixed(2)} GiB, streamed dense prefill)`, engine: "neuronpipe", model: pack, memory: budget },
  { id: "token-at-a-time", what: "the same budget, each prompt token a sparse decode step of the default decoder (how a prompt went through a pack before)", engine: "neuronpipe", model: pack, memory: budget, tokenAtATime: true },
  { id: "llama-prebuilt", what: "llama.cpp prebuilt (node-llama-cpp, repacked Q4_0), in memory", engine: "llama.cpp", model },
];
const only = v.only?.split(",");
const results = [];
for (const spec of specs.filter((s) => !only || only.includes(s.id))) {
  log(`--- ${spec.id}: ${spec.what}`);
  const out = await new Promise((res, rej) => {
    const c = spawn(process.execPath, [fileURLToPath(import.meta.url), "--dir", v.dir, "--lengths", v.lengths, "--repeat", v.repeat, "--threads", v.threads, "--batch", v.batch, "--child", JSON.stringify(spec)], { stdio: ["ignore", "pipe", "inherit"] });
    let buf = "";
    c.stdout.on("data", (d) => (buf += d));
    c.on("exit", (code) => (code === 0 ? res(JSON.parse(buf)) : rej(new Error(`${spec.id}: child exited with ${code}`))));
  });
  results.push({ ...spec, ...out });
}
const get = (id, n) => results.find((r) => r.id === id)?.lengths[n]?.tokensPerSecond;
const rows = [];
for (const n of lengths) {
  const r = (a, b) => (get(a, n) && get(b, n) ? (get(a, n) / get(b, n)).toFixed(2) + "×" : "—");
  rows.push(`| ${n} | ${lengths.length ? results.map((x) => (x.lengths[n]?.tokensPerSecond ?? 0).toFixed(2)).join(" | ") : ""} | ${r("dense", "llama-prebuilt")} | ${r("streamed", "streamed-resident")} | ${r("streamed", "dense")} | ${r("streamed", "token-at-a-time")} |`);
}
const table = [
  `| prompt tokens | ${results.map((x) => x.id).join(" | ")} | dense ÷ llama.cpp | streamed 50% ÷ resident | streamed 50% ÷ dense | streamed 50% ÷ token at a time |`,
  `|---:|${results.map(() => "---:").join("|")}|---:|---:|---:|---:|`,
  ...rows,
].join("\n");
writeFileSync(v.out, JSON.stringify({ date: new Date().toISOString(), threads, batch: Number(v.batch), budget, results }, null, 2));
console.log(table);
log(`wrote ${v.out}`);
