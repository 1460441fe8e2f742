#!/usr/bin/env node
// Prefill speed (issue 15): prompts of 128 and 512 tokens through neuronpipe's dense engine, the
// streamed dense prefill of a neuron pack (whole FFN resident, and half of it offloaded), the
// token-at-a-time sparse path a prompt took before (each token a decode step: what LLMFlash-style
// engines do), and llama.cpp (node-llama-cpp's prebuilt, in memory) — one run, one engine per
// child process, one after the other, median of `--repeat` runs after a warm-up.
//
//   node bench/prefill.js [--dir DIR] [--lengths 128,512] [--repeat 3] [--only id,id]
//                         [--cofire-group N] [--cofire-share S] [--cold-share 0.5] [--target-recall 0.995]
//
// Needs in --dir (default $NEURONPIPE_BENCH_DIR, else bench/.models, as bench/sparse.js) the 7B
// bench/sparse.js prepares with the same --cofire-group/--cofire-share (bench/lib/seven-b.mjs:
// by default the one with co-firing groups of 8 at share 0.7; 0 for the model without groups):
// the plain GGUF, its pack and the corpus random-tokens-llama2-seed1-16k.txt (prompt text).
// Writes bench/results/prefill.json.
import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { cgroupReport, createCgroup, evictFile, memoryCgroupRoot, removeCgroup, sampleCgroup } from "./lib/measure.mjs";
import { coldShareOf, targetRecallOf, cofireOf, SEVEN_B_OPTIONS, sevenBFiles } from "./lib/seven-b.mjs";
import { benchArgs } from "./lib/usage.mjs";

const benchDir = dirname(fileURLToPath(import.meta.url));
const rootDir = resolve(benchDir, "..");
const log = (...a) => process.stderr.write(`[bench:prefill] ${a.join(" ")}\n`);
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

const { values: v } = benchArgs(import.meta.url, {
  dir: { type: "string" },
  lengths: { type: "string", default: "128,512" },
  repeat: { type: "string", default: "3" },
  threads: { type: "string", default: "2" },
  ffn: { type: "string", default: "0.5" },
  batch: { type: "string", default: "128" },
  only: { type: "string" },
  out: { type: "string", default: join(benchDir, "results", "prefill.json") },
  child: { type: "string" },
  ...SEVEN_B_OPTIONS,
});
v.dir = resolve(v.dir ?? process.env.NEURONPIPE_BENCH_DIR ?? join(benchDir, ".models"));
const sevenB = sevenBFiles(v.dir, cofireOf(v), coldShareOf(v), targetRecallOf(v));
const lengths = v.lengths.split(",").map(Number);
const repeat = Number(v.repeat);
const threads = Number(v.threads);

async function np() {
  return import(pathToFileURL(join(rootDir, "dist", "src", "index.js")).href);
}

/** Prompt ids of each length from the corpus (tokenised by `encode`). */
function prompts(encode) {
  const text = readFileSync(sevenB.corpus, "utf8");
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
  // the execution plan a pack was opened with (knobs, what the options overrode, predicted decode speed)
  const out = { loadSeconds, lengths: {}, ...(model.plan ? { executionPlan: { knobs: model.plan.knobs, overrides: model.plan.overrides, predictedTokPerSec: model.plan.predicted.tokPerSec } } : {}) };
  const s = model.createSession({ contextSize: 1024 });
  const run = (ids) => {
    s.reset();
    const t = performance.now();
    if (spec.tokenAtATime) for (const id of ids) s.evaluate([id]);
    else s.evaluate(ids);
    return ids.length / ((performance.now() - t) / 1000);
  };
  run(ps[lengths[0]].slice(0, 16)); // warm-up: mapping paged in, workers started
  const streamed = () => model.decoder.streamed;
  for (const n of lengths) {
    const runs = [];
    const reps = spec.tokenAtATime ? 1 : repeat; // the slow path: one run
    streamed()?.resetStats();
    for (let r = 0; r < reps; r++) {
      runs.push(run(ps[n]));
      log(`${spec.id}: ${n} tokens: ${runs.at(-1).toFixed(2)} tok/s`);
    }
    out.lengths[n] = { tokensPerSecond: median(runs), runs };
    const st = streamed()?.stats;
    if (st && !spec.tokenAtATime) {
      // per layer, per prompt (mean over the runs): the GEMMs' time and the time its chunks' reads took
      out.lengths[n].layers = { computeMs: st.computeUs.map((u) => u / 1000 / reps), readMs: st.readUs.map((u) => u / 1000 / reps), waitMs: st.waitUs / 1000 / reps, readBytes: st.bytes / reps };
    }
  }
  if (!spec.tokenAtATime) {
    // issue 15: the first decode token after a prompt against the ones after it (no gap); the
    // second time, so that the decode path's one-time costs (JIT, first touches) are not counted
    const next = ps[lengths.at(-1)];
    let ms = [];
    for (let round = 0; round < 2; round++) {
      s.reset();
      s.evaluate(ps[lengths[0]]);
      ms = [];
      for (let i = 0; i < 9; i++) {
        const t = performance.now();
        s.evaluate([next[i]]);
        ms.push(performance.now() - t);
      }
    }
    out.firstDecode = { firstMs: ms[0], nextMedianMs: median(ms.slice(1)) };
    log(`${spec.id}: first decode token after ${lengths[0]} prompt tokens ${ms[0].toFixed(1)} ms, the next 8: median ${out.firstDecode.nextMedianMs.toFixed(1)} ms`);
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
  const peer = await openPeer(spec.model, { threads, contextSize: 1024, peer: spec.peer });
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

const { model, pack } = sevenB;
for (const f of [model, pack, sevenB.corpus])
  if (!existsSync(f)) {
    log(`${f} is missing: node bench/sparse.js --prepare --dir ${v.dir} (with the same --cofire-group/--cofire-share) builds it`);
    process.exit(1);
  }
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
  // the limit of bench/sparse.js: the budget + 256 MiB for node and llama.cpp's own buffers; the
  // norepack build keeps its weights in the page cache, which the cgroup then limits
  { id: "llama-norepack-limited", what: `llama.cpp norepack (mmap) in a memory cgroup of ${((budget + 2 ** 28) / 2 ** 30).toFixed(2)} GiB`, engine: "llama.cpp", peer: "norepack", model, limit: budget + 2 ** 28 },
];
const only = v.only?.split(",");
const results = [];
for (const spec of specs.filter((s) => !only || only.includes(s.id))) {
  log(`--- ${spec.id}: ${spec.what}`);
  const args = [fileURLToPath(import.meta.url), "--dir", v.dir, "--lengths", v.lengths, "--repeat", v.repeat, "--threads", v.threads, "--batch", v.batch, "--child", JSON.stringify(spec)];
  let cmd = process.execPath;
  let argv = args;
  let cg, sampler, eviction;
  if (spec.limit) {
    // as bench/sparse.js: evict the file's pages, then run the child inside a fresh cgroup
    const root = memoryCgroupRoot();
    if (!root) {
      log(`${spec.id}: no writable memory cgroup (v1) here; skipped`);
      continue;
    }
    eviction = evictFile(spec.model);
    cg = createCgroup(root, `np-prefill-${process.pid}-${spec.id}`, spec.limit);
    sampler = sampleCgroup(cg);
    cmd = "/bin/sh";
    // the shell joins the cgroup, then becomes node: everything the engine maps or caches is charged to it
    argv = ["-c", `echo $$ > ${join(cg, "cgroup.procs")} && exec "$0" "$@"`, process.execPath, ...args];
  }
  const out = await new Promise((res, rej) => {
    const c = spawn(cmd, argv, { stdio: ["ignore", "pipe", "inherit"] });
    let buf = "";
    c.stdout.on("data", (d) => (buf += d));
    c.on("exit", (code) => (code === 0 ? res(JSON.parse(buf)) : rej(new Error(`${spec.id}: child exited with ${code}`))));
  });
  if (cg) {
    out.cgroupPeak = sampler.stop();
    out.cgroup = cgroupReport(cg, spec.limit);
    out.eviction = eviction;
    out.limited = out.cgroup.limited && eviction.ok;
    removeCgroup(cg);
    log(`${spec.id}: cgroup peak ${(out.cgroup.maxUsage / 2 ** 30).toFixed(2)} GiB of ${(spec.limit / 2 ** 30).toFixed(2)}, ${out.cgroup.failcnt} limit hits${out.limited ? "" : " — NOT LIMITED: this run does not measure prefill under the limit"}`);
  }
  results.push({ ...spec, ...out });
}
const get = (id, n) => results.find((r) => r.id === id)?.lengths[n]?.tokensPerSecond;
const rows = [];
for (const n of lengths) {
  const r = (a, b) => (get(a, n) && get(b, n) ? (get(a, n) / get(b, n)).toFixed(2) + "×" : "—");
  rows.push(`| ${n} | ${results.map((x) => (x.lengths[n]?.tokensPerSecond ?? 0).toFixed(2)).join(" | ")} | ${r("dense", "llama-prebuilt")} | ${r("streamed", "streamed-resident")} | ${r("streamed", "dense")} | ${r("streamed", "token-at-a-time")} | ${r("streamed", "llama-norepack-limited")} |`);
}
const table = [
  `| prompt tokens | ${results.map((x) => x.id).join(" | ")} | dense ÷ llama.cpp | streamed 50% ÷ resident | streamed 50% ÷ dense | streamed 50% ÷ token at a time | streamed 50% ÷ llama.cpp in the cgroup |`,
  `|---:|${results.map(() => "---:").join("|")}|---:|---:|---:|---:|---:|`,
  ...rows,
].join("\n");
// ---- Fig. 8: per-layer compute vs read time of the offloaded run, one panel per prompt length --
const off = results.find((r) => r.id === "streamed");
if (off && lengths.every((n) => off.lengths[n]?.layers)) {
  const W = 760, panelH = 230, m = { l: 56, r: 16, t: 40, b: 40 };
  const H = m.t + lengths.length * (panelH + m.b) + 10;
  const el = [`<rect width="${W}" height="${H}" fill="white"/>`, `<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-family="sans-serif">Streamed prefill, 7B Q4_0, ${Math.round(100 * (1 - Number(v.ffn)))}% of the FFN on disk: per-layer FFN compute vs sequential read time</text>`];
  lengths.forEach((n, i) => {
    const L = off.lengths[n].layers;
    const nL = L.computeMs.length;
    const top = m.t + i * (panelH + m.b);
    const pw = W - m.l - m.r;
    const max = Math.max(...L.computeMs, ...L.readMs) * 1.1;
    const bw = pw / nL / 2.5;
    const y = (ms) => top + panelH - (ms / max) * panelH;
    for (let l = 0; l < nL; l++) {
      const x0 = m.l + (l + 0.5) * (pw / nL) - bw;
      el.push(`<rect x="${x0.toFixed(1)}" y="${y(L.computeMs[l]).toFixed(1)}" width="${bw.toFixed(1)}" height="${(top + panelH - y(L.computeMs[l])).toFixed(1)}" fill="#1d3557"/>`);
      el.push(`<rect x="${(x0 + bw).toFixed(1)}" y="${y(L.readMs[l]).toFixed(1)}" width="${bw.toFixed(1)}" height="${(top + panelH - y(L.readMs[l])).toFixed(1)}" fill="#f4a261"/>`);
      if (l % 4 === 0) el.push(`<text x="${(x0 + bw).toFixed(1)}" y="${top + panelH + 14}" text-anchor="middle" font-size="10" font-family="sans-serif">${l}</text>`);
    }
    const sum = (a) => a.reduce((x, y) => x + y, 0);
    const ratio = sum(L.computeMs) / sum(L.readMs);
    const hidden = 1 - L.waitMs / sum(L.readMs);
    el.push(`<line x1="${m.l}" y1="${top + panelH}" x2="${m.l + pw}" y2="${top + panelH}" stroke="black"/><line x1="${m.l}" y1="${top}" x2="${m.l}" y2="${top + panelH}" stroke="black"/>`);
    for (let k = 0; k <= 4; k++) el.push(`<text x="${m.l - 6}" y="${(y((max * k) / 4) + 4).toFixed(1)}" text-anchor="end" font-size="10" font-family="sans-serif">${((max * k) / 4).toFixed(0)}</text>`);
    el.push(`<text x="${m.l + 8}" y="${top + 14}" font-size="12" font-family="sans-serif">${n}-token prompt: compute ${sum(L.computeMs).toFixed(0)} ms = ${ratio.toFixed(2)}× the reads' ${sum(L.readMs).toFixed(0)} ms; ${(100 * hidden).toFixed(1)}% of read time hidden (waited ${L.waitMs.toFixed(0)} ms)</text>`);
    el.push(`<text transform="translate(14 ${top + panelH / 2}) rotate(-90)" text-anchor="middle" font-size="11" font-family="sans-serif">ms per layer</text>`);
    el.push(`<text x="${m.l + pw / 2}" y="${top + panelH + 30}" text-anchor="middle" font-size="11" font-family="sans-serif">layer (dark: GEMMs of its FFN; light: its bundles' sequential reads)</text>`);
  });
  const svgPath = join(rootDir, "docs", "img", "prefill-layers.svg");
  writeFileSync(svgPath, `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">\n${el.join("\n")}\n</svg>\n`);
  log(`wrote ${svgPath}`);
}
writeFileSync(v.out, JSON.stringify({ date: new Date().toISOString(), model, pack, threads, batch: Number(v.batch), budget, results }, null, 2));
console.log(table);
log(`wrote ${v.out}`);
