#!/usr/bin/env node
// Sparse decode under a memory budget (`npm run bench`, second part): a llama2-7b-shaped
// synthetic ReGLU model (Q4_0, planted sparsity ~10% active, predictable gates) with half of its
// FFN offloaded to storage. neuronpipe's modes on the same pack — pipeline (the actor pipeline,
// traced: latency percentiles, I/O hidden under compute, orchestration share, a timeline SVG in
// docs/img/), blocking (LLMFlash), sync (issue 4) and mmap (llama.cpp-style, in a memory cgroup)
// — against llama.cpp (node-llama-cpp) under a memory cgroup of the same size and in memory,
// each in its own child process, one after the other.
//
//   node bench/sparse.js                 # build (once, cached in bench/.models) and run
//   options: --ffn F (0.5: share of FFN neurons the cache holds) --decode N (32) --threads N (2)
//            --ctx N (512) --dir DIR --out FILE (bench/results/sparse-latest.json)
//            --peer-limit-extra BYTES (268435456: the peer's cgroup = our budget + this, for
//            node's own runtime, which our budget does not count either)
//            --prepare (build the model, profile, predictors and pack, then stop)
//            --peer-timeout S (600: the peer under the limit is stopped after S seconds and its
//            speed taken from the tokens it produced by then)
//
// Building the model once: synth (~2 min), profile 1024 tokens (dense, ~2 min), train the
// predictors on 3000 tokens, 8 epochs, thresholds calibrated on held-out rows for recall 0.99
// (~20 min), pack (~1 min). Progress goes to stderr.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import os from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const benchDir = dirname(fileURLToPath(import.meta.url));
const rootDir = resolve(benchDir, "..");
const cli = join(rootDir, "bin", "neuronpipe.js");
const PROMPT = "Once upon a time, in a small village by the sea, there lived";
const log = (...a) => process.stderr.write(`[bench:sparse] ${a.join(" ")}\n`);

const { values: v } = parseArgs({
  options: {
    ffn: { type: "string", default: "0.5" },
    decode: { type: "string", default: "32" },
    threads: { type: "string", default: "2" },
    ctx: { type: "string", default: "512" },
    dir: { type: "string" },
    out: { type: "string" },
    "peer-limit-extra": { type: "string", default: String(256 * 2 ** 20) },
    "peer-timeout": { type: "string", default: "600" },
    child: { type: "string" },
    model: { type: "string" },
    budget: { type: "string" },
    result: { type: "string" },
    engine: { type: "string" },
    "pin-gates": { type: "string" },
    svg: { type: "string" },
    prepare: { type: "boolean", default: false },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (v.help) {
  process.stdout.write(readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n").slice(1, 16).join("\n") + "\n");
  process.exit(0);
}
const threads = Number(v.threads);
const decode = Number(v.decode);
const ctx = Number(v.ctx);

function run(args, what) {
  log(`${what}: node ${args.join(" ")}`);
  const r = spawnSync(process.execPath, args, { stdio: ["ignore", "inherit", "inherit"], env: { ...process.env, NEURONPIPE_PROGRESS: "1" } });
  if (r.status !== 0) throw new Error(`${what} failed (exit ${r.status})`);
}

/** Build (or reuse) the model, its profile, predictors and pack. */
async function prepare(dir) {
  mkdirSync(dir, { recursive: true });
  const model = join(dir, "llama2-7b-sparse-q4_0-seed1.gguf");
  const profile = `${model}.profile.gguf`;
  const predictor = `${model}.predictor-14k.gguf`;
  const pack = join(dir, "llama2-7b-sparse-q4_0-seed1-p14k.pack.gguf");
  if (!existsSync(model))
    run([cli, "synth", "--shape", "llama2-7b", "--type", "q4_0", "--activation", "reglu", "--active-fraction", "0.1", "--gate-rank", "64", "--seed", "1", "--out", model], "synth");
  // A random-weight model writes random tokens, so its activations are profiled and its
  // predictors trained on text of uniformly random tokens (seeded) — the distribution it decodes.
  const corpus = join(dir, "random-tokens-llama2-seed1-16k.txt");
  if (!existsSync(corpus)) writeFileSync(corpus, await randomTokenTextAsync(model, 16000));
  if (!existsSync(profile)) run([cli, "profile", "--model", model, "--corpus", corpus, "--max-tokens", "1024", "--ctx", "256", "--threads", String(threads)], "profile");
  if (!existsSync(predictor))
    run(
      // 14,000 tokens (≈9,500 fitted): a 4096-wide input needs more samples than dimensions to generalise
      [cli, "train-predictor", "--model", model, "--corpus", corpus, "--max-tokens", "14000", "--epochs", "3", "--max-hidden", "128", "--calibration", "0.15", "--target-recall", "0.99", "--out", predictor, "--threads", String(threads)],
      "train-predictor",
    );
  if (!existsSync(pack)) run([cli, "pack", "--model", model, "--profile", profile, "--predictor", predictor, "--out", pack], "pack");
  return { model, pack };
}

/** Text of n uniformly random ordinary tokens of the model's vocabulary (no control or byte tokens), seeded. */
async function randomTokenTextAsync(model, n) {
  log(`writing ${n} random tokens of text for profiling and predictor training`);
  const { readGGUF, createTokenizer } = await import(pathToFileURL(join(rootDir, "dist", "src", "index.js")).href);
  const { vocabFromGGUF } = await import(pathToFileURL(join(rootDir, "dist", "src", "model", "vocab.js")).href);
  const tok = createTokenizer(vocabFromGGUF(readGGUF(model)));
  const V = tok.vocabSize;
  let s = 1;
  const ids = [];
  while (ids.length < n) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0; // LCG: a fixed, documented sequence
    const id = 259 + (s % (V - 259));
    ids.push(id);
  }
  return tok.decode(ids);
}

/** The memory cgroup (v1) this process is in, or undefined. */
function cgroupRoot() {
  try {
    const line = readFileSync("/proc/self/cgroup", "utf8").split("\n").find((l) => /^\d+:([^:]*,)?memory(,[^:]*)?:/.test(l));
    if (!line) return undefined;
    const p = join("/sys/fs/cgroup/memory", line.split(":")[2]);
    return existsSync(join(p, "memory.limit_in_bytes")) ? p : undefined;
  } catch {
    return undefined;
  }
}

/** Run a child of this script (one engine); with `limit`, inside a fresh memory cgroup of that size. */
function child(kind, args, limit, timeoutSeconds = 900) {
  return new Promise((resolvePromise) => {
    const resultFile = join(os.tmpdir(), `np-sparse-${process.pid}-${kind}-${Date.now()}.json`);
    const nodeArgs = [fileURLToPath(import.meta.url), "--child", kind, "--result", resultFile, "--threads", String(threads), "--decode", String(decode), "--ctx", String(ctx), ...args];
    let cg;
    let cmd = process.execPath;
    let argv = nodeArgs;
    if (limit) {
      const root = cgroupRoot();
      if (!root) return resolvePromise({ engine: kind, error: "no writable memory cgroup (v1) here" });
      cg = join(root, `np-bench-${process.pid}-${kind}`);
      mkdirSync(cg);
      writeFileSync(join(cg, "memory.limit_in_bytes"), String(limit));
      // the shell joins the cgroup, then becomes node: everything the engine maps or caches is charged to it
      cmd = "/bin/sh";
      argv = ["-c", `echo $$ > ${join(cg, "cgroup.procs")} && exec "$0" "$@"`, process.execPath, ...nodeArgs];
    }
    const p = spawn(cmd, argv, { stdio: ["ignore", "inherit", "inherit"], detached: true });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      log(`${kind}: no result after ${timeoutSeconds} s; stopping it`);
      try {
        process.kill(-p.pid, "SIGKILL");
      } catch {}
    }, timeoutSeconds * 1000);
    p.on("exit", (code, signal) => {
      clearTimeout(timer);
      let res;
      if (existsSync(resultFile)) res = JSON.parse(readFileSync(resultFile, "utf8"));
      else if (timedOut && existsSync(`${resultFile}.partial`)) {
        // tokens that did come out before the time limit: an upper bound of the speed
        const part = JSON.parse(readFileSync(`${resultFile}.partial`, "utf8"));
        const n = part.times.length;
        res = {
          engine: kind,
          partial: true,
          error: `stopped after ${timeoutSeconds} s with ${n} tokens out`,
          decodeTokensPerSecond: n > 1 ? (n - 1) / ((part.times[n - 1] - part.times[0]) / 1000) : 0,
          tokensOut: n,
          loadSeconds: part.loadSeconds,
        };
      } else res = { engine: kind, error: timedOut ? `no token within ${timeoutSeconds} s` : `exited with ${signal ?? `code ${code}`}${signal === "SIGKILL" ? " (killed: out of memory in the cgroup?)" : ""}` };
      if (cg) {
        try {
          res.cgroup = {
            limit,
            maxUsage: Number(readFileSync(join(cg, "memory.max_usage_in_bytes"), "utf8")),
            failcnt: Number(readFileSync(join(cg, "memory.failcnt"), "utf8")),
            oomKills: /oom_kill (\d+)/.exec(readFileSync(join(cg, "memory.oom_control"), "utf8"))?.[1],
          };
          rmdirSync(cg);
        } catch (e) {
          res.cgroupError = String(e);
        }
      }
      resolvePromise(res);
    });
  });
}

// ---- children -------------------------------------------------------------------------------

async function childNeuronpipe() {
  const np = await import(pathToFileURL(join(rootDir, "dist", "src", "index.js")).href);
  const { TraceRecorder } = np;
  const { traceStats } = await import(pathToFileURL(join(rootDir, "dist", "src", "trace-tools", "stats.js")).href);
  const { traceSvg } = await import(pathToFileURL(join(rootDir, "dist", "src", "trace-tools", "plot.js")).href);
  const engine = v.engine ?? "pipeline";
  const t0 = performance.now();
  const pinGates = v["pin-gates"] === undefined ? undefined : v["pin-gates"] === "true" ? true : v["pin-gates"] === "false" ? false : "auto";
  const model = await np.loadSparseModel(v.model, { memory: Number(v.budget), threads, contextSize: ctx, decoder: engine === "sync" ? "inline" : engine, pinGates });
  const loadSeconds = (performance.now() - t0) / 1000;
  log(`neuronpipe (${engine}): loaded in ${loadSeconds.toFixed(1)} s\n${model.sparse.describe()}\n${model.decoder.describe()}`);
  const s = model.createSession();
  const trace = engine === "sync" ? undefined : new TraceRecorder({ mode: engine, model: v.model, threads: {} });
  // warm-up: a few tokens so the cache holds the working set, then measure
  let it = s.generate(PROMPT, { maxTokens: 4, temperature: 0 });
  while (!(await it.next()).done);
  s.reset();
  model.sparse.resetStats();
  it = s.generate(PROMPT, { maxTokens: decode, temperature: 0, trace });
  const toks = [];
  let tFirst = 0;
  let tLast = 0;
  let r;
  while (!(r = await it.next()).done) {
    toks.push(r.value.token);
    tLast = performance.now();
    if (toks.length === 1) {
      tFirst = tLast;
      model.sparse.resetStats(); // count decode passes only, not the prompt's
    }
  }
  const rep = model.sparse.report();
  const sum = (f) => rep.reduce((a, x) => a + f(x), 0);
  const tokens = rep[0].tokens;
  let pipeline;
  if (trace) {
    const st = traceStats(trace.records);
    pipeline = {
      knobs: model.decoder.knobs,
      latencyMs: st.latencyMs,
      ioHiddenShare: st.ioHiddenShare,
      orchestrationShare: st.orchestrationShare,
      ioMs: st.ioUs / 1000,
      computeMs: st.computeUs / 1000,
    };
    if (v.svg) {
      writeFileSync(v.svg, traceSvg(trace.records, { tokens: [2, 3], width: 1400, title: `neuronpipe ${engine} — llama2-7b-shaped Q4_0, ${fmtGiB(Number(v.budget))} budget, decode steps 2–3` }));
      log(`wrote ${v.svg}`);
    }
  }
  const out = {
    engine: `neuronpipe ${engine}`,
    pipeline,
    loadSeconds,
    decodeTokensPerSecond: (toks.length - 1) / ((tLast - tFirst) / 1000),
    generated: toks,
    budget: Number(v.budget),
    plan: model.sparse.plan,
    io: model.sparse.io,
    hitRate: (sum((x) => x.gateHits + x.upDownHits)) / sum((x) => x.gateAccesses + x.upDownAccesses),
    bytesReadPerToken: sum((x) => x.bytesRead) / tokens,
    readsPerToken: sum((x) => x.reads) / tokens,
    predictedPerToken: sum((x) => x.predicted) / tokens,
    firedPerToken: sum((x) => x.fired) / tokens,
    layers: rep,
    peakResidentBytes: model.sparse.peakResidentBytes,
    processPeakRssBytes: process.resourceUsage().maxRSS * 1024,
  };
  s.dispose();
  await model[Symbol.asyncDispose]();
  return out;
}

const fmtGiB = (b) => `${(b / 2 ** 30).toFixed(2)} GiB`;

/** llama.cpp's way on our file: dense over a memory mapping of the pack (mode mmap). */
async function childMmap() {
  const np = await import(pathToFileURL(join(rootDir, "dist", "src", "index.js")).href);
  const t0 = performance.now();
  const model = await np.loadModel(v.model, { threads, decoder: "mmap" });
  const loadSeconds = (performance.now() - t0) / 1000;
  const s = model.createSession({ contextSize: ctx });
  const it = s.generate(PROMPT, { maxTokens: decode, temperature: 0 });
  const times = [];
  const tokens = [];
  let r;
  while (!(r = await it.next()).done) {
    tokens.push(r.value.token);
    times.push(performance.now());
    writeFileSync(`${v.result}.partial`, JSON.stringify({ times, loadSeconds }));
  }
  s.dispose();
  model.dispose();
  return {
    engine: "neuronpipe mmap",
    loadSeconds,
    decodeTokensPerSecond: (tokens.length - 1) / ((times[times.length - 1] - times[0]) / 1000),
    generated: tokens,
    processPeakRssBytes: process.resourceUsage().maxRSS * 1024,
  };
}

async function childPeer() {
  const { openPeer } = await import(pathToFileURL(join(benchDir, "peer", "llama-peer.mjs")).href);
  const t0 = performance.now();
  const peer = await openPeer(v.model, { threads, contextSize: ctx, useMmap: true });
  const loadSeconds = (performance.now() - t0) / 1000;
  log(`llama.cpp: loaded in ${loadSeconds.toFixed(1)} s`);
  const ids = peer.tokenize(PROMPT, { addBos: true });
  // greedy decode, token times written as they come so that a run stopped at the time limit
  // still says how fast it went (the first token follows the prompt's prefill: times count from it)
  const times = [];
  const tokens = [];
  await peer.sequence.clearHistory();
  for await (const t of peer.sequence.evaluate(ids, { temperature: 0 })) {
    tokens.push(t);
    times.push(performance.now());
    writeFileSync(`${v.result}.partial`, JSON.stringify({ times, loadSeconds }));
    if (tokens.length >= decode) break;
  }
  return {
    engine: "llama.cpp",
    loadSeconds,
    decodeTokensPerSecond: (tokens.length - 1) / ((times[times.length - 1] - times[0]) / 1000),
    generated: tokens,
    processPeakRssBytes: process.resourceUsage().maxRSS * 1024,
  };
}

if (v.child) {
  const res = v.child === "neuronpipe" ? await childNeuronpipe() : v.child === "mmap" ? await childMmap() : await childPeer();
  writeFileSync(v.result, JSON.stringify(res));
  process.exit(0);
}

// ---- parent ---------------------------------------------------------------------------------

const dir = resolve(v.dir ?? process.env.NEURONPIPE_BENCH_DIR ?? join(benchDir, ".models"));
const { model, pack } = await prepare(dir);
if (v.prepare) {
  log(`prepared ${pack}`);
  process.exit(0);
}
const np = await import(pathToFileURL(join(rootDir, "dist", "src", "index.js")).href);
const packInfo = np.openPack(pack);
const ffn = Number(v.ffn);
// loadSparseModel's plan defaults, with the context the children use
const planOpts = np.planOptions(packInfo.config, { contextSize: ctx });
const budget = np.budgetForFfnFraction(packInfo, ffn, planOpts);
const peerLimit = budget + Number(v["peer-limit-extra"]);
const fmt = (b) => `${(b / 2 ** 30).toFixed(2)} GiB`;
log(`budget for ${(100 * ffn).toFixed(0)}% of the FFN resident: ${fmt(budget)}; model file ${fmt(np.readGGUF(model).fileSize)}; peer cgroup limit ${fmt(peerLimit)}`);

const results = [];
const off = `${(100 * (1 - ffn)).toFixed(0)}% of FFN offloaded`;
const img = join(rootDir, "docs", "img");
results.push({ setting: `neuronpipe pipeline, --memory ${fmt(budget)} (${off})`, ...(await child("neuronpipe", ["--model", pack, "--budget", String(budget), "--engine", "pipeline", "--svg", join(img, "pipeline-timeline.svg")])) });
results.push({ setting: `neuronpipe blocking (LLMFlash: window cache of 5 tokens, reads before compute), --memory ${fmt(budget)}`, ...(await child("neuronpipe", ["--model", pack, "--budget", String(budget), "--engine", "blocking", "--svg", join(img, "blocking-timeline.svg")])) });
results.push({ setting: `neuronpipe sync (sparse FFN inline, one thread), --memory ${fmt(budget)}`, ...(await child("neuronpipe", ["--model", pack, "--budget", String(budget), "--engine", "sync"])) });
// ablation: the same pipeline with gate rows cached, not pinned (what the pinned rows are worth)
results.push({ setting: `neuronpipe pipeline, gate rows cached (pinGates false), --memory ${fmt(budget)}`, ...(await child("neuronpipe", ["--model", pack, "--budget", String(budget), "--engine", "pipeline", "--pin-gates", "false"])) });
results.push({ setting: `neuronpipe mmap (dense over a mapped pack, as llama.cpp), memory cgroup ${fmt(peerLimit)}`, ...(await child("mmap", ["--model", pack], peerLimit, Number(v["peer-timeout"]))) });
results.push({
  setting: `llama.cpp, memory cgroup ${fmt(peerLimit)} (mmap; node-llama-cpp cannot turn off Q4_0 repacking, so the repacked weights are anonymous memory inside the limit)`,
  ...(await child("llama.cpp", ["--model", model], peerLimit, Number(v["peer-timeout"]))),
});
results.push({ setting: "llama.cpp, in memory (mmap, no limit)", ...(await child("llama.cpp", ["--model", model])) });
results.push({ setting: "neuronpipe pipeline, whole FFN resident (sparse, no I/O)", ...(await child("neuronpipe", ["--model", pack, "--budget", String(np.budgetForFfnFraction(packInfo, 1, planOpts)), "--engine", "pipeline"])) });

const record = {
  date: new Date().toISOString(),
  machine: { cpus: os.cpus().length, cpu: os.cpus()[0]?.model, memory: os.totalmem() },
  model: { file: model, pack, shape: "llama2-7b", type: "Q4_0", planted: "active 10%, hot 20% → 80%, gate rank 64" },
  threads,
  decodeTokens: decode,
  contextSize: ctx,
  ffnResident: ffn,
  budget,
  peerLimit,
  results,
};
const outFile = v.out ?? join(benchDir, "results", "sparse-latest.json");
mkdirSync(dirname(outFile), { recursive: true });
writeFileSync(outFile, JSON.stringify(record, null, 2) + "\n");

const ours = results[0].decodeTokensPerSecond;
const lines = [
  `| setting | decode tok/s | pipeline ÷ this | hit rate | read/token | peak memory |`,
  `|---|---:|---:|---:|---:|---:|`,
];
for (const r of results) {
  const tps = r.decodeTokensPerSecond;
  const mem = r.peakResidentBytes ? `${fmt(r.peakResidentBytes)} model data (process ${fmt(r.processPeakRssBytes)})` : r.cgroup ? `cgroup max ${fmt(r.cgroup.maxUsage)}` : r.processPeakRssBytes ? `process ${fmt(r.processPeakRssBytes)}` : "";
  lines.push(
    `| ${r.setting} | ${tps ? tps.toFixed(2) : r.error ?? "—"} | ${tps ? (ours / tps).toFixed(2) + "×" : "—"} | ${r.hitRate !== undefined ? (100 * r.hitRate).toFixed(1) + "%" : "—"} | ${r.bytesReadPerToken !== undefined ? (r.bytesReadPerToken / 2 ** 20).toFixed(1) + " MiB" : "—"} | ${mem} |`,
  );
}
const pl = results[0].pipeline;
if (pl) {
  const L = pl.latencyMs;
  lines.push(
    "",
    `pipeline per-token latency: mean ${L.mean.toFixed(0)} ms, P50 ${L.p50.toFixed(0)}, P90 ${L.p90.toFixed(0)}, P99 ${L.p99.toFixed(0)} (P99/mean ${(L.p99 / L.mean).toFixed(2)}); ` +
      `I/O hidden under compute ${(100 * pl.ioHiddenShare).toFixed(1)}% (blocking: ${(100 * (results[1].pipeline?.ioHiddenShare ?? 0)).toFixed(1)}%); orchestration ${(100 * pl.orchestrationShare).toFixed(1)}% of token time`,
  );
}
process.stdout.write(lines.join("\n") + "\n");
log(`wrote ${outFile}`);
