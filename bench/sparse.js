#!/usr/bin/env node
// Sparse decode under a memory budget (`npm run bench`, second part): a llama2-7b-shaped
// synthetic ReGLU model (Q4_0, planted sparsity ~10% active, predictable gates) with half of its
// FFN offloaded to storage. neuronpipe's modes on the same pack — pipeline (the actor pipeline,
// traced: latency percentiles, I/O hidden under compute, orchestration share, a timeline SVG in
// docs/img/), blocking (LLMFlash), sync (issue 4), the whole FFN resident — its dense decode of
// the plain GGUF, and llama.cpp (node-llama-cpp) in memory in both builds (the repacking prebuilt
// and the source-built "norepack"); then, each in a memory cgroup of the budget + node's own
// share, neuronpipe's mmap mode and llama.cpp norepack. Each engine in its own child process,
// one after the other: a warm-up generation, then N measured ones (median, min–max), with the
// child's CPU time and the other processes' load. Before each limited run the mapped file's
// pages are evicted from the page cache, and afterwards the cgroup's peak usage must have reached
// its limit (`limited: true`), else the run is flagged loudly.
//
//   node bench/sparse.js --dir /work/models7b --lock /tmp/neuronpipe-cpu.lock
//   options: --ffn F (0.5: share of FFN neurons the cache holds) --decode N (32) --threads N (2)
//            --ctx N (512) --dir DIR --out FILE (bench/results/sparse-latest.json)
//            --repeat N (3: measured generations per in-memory engine, after one warm-up)
//            --rounds N (3: the in-memory engines — resident, dense, llama.cpp — and the offloaded
//            inline decoder run N times in turn, each engine's figure the median round: this
//            machine's memory bandwidth moves by a quarter for seconds at a time, and one engine
//            after the other caught different phases)
//            --warmup N (4: tokens of the warm-up generation)
//            --limited-repeat N (2) --limited-decode N (16): the same for runs in a cgroup
//            --peer-limit-extra BYTES (268435456: the cgroup = our budget + this, for node's
//            own runtime, which our budget does not count either)
//            --peer-timeout S (600: a limited run is stopped after S seconds and its speed taken
//            from the tokens it produced by then)
//            --prebuilt-limited (also run the repacking prebuilt in the cgroup: it is known to
//            produce no token there, so it is off by default)
//            --only ID,ID (run only these: pipeline blocking sync pipeline-cached-gates sync-no-ahead
//            sync-pinned-gates sync-lru pipeline-resident sync-resident dense llama-prebuilt llama-norepack mmap-limited
//            llama-norepack-limited llama-prebuilt-limited; writes to --out only if given)
//            --no-evict (skip the eviction: shows how cached pages escape the limit; flagged)
//            --lock FILE (hold an flock on FILE during each child and its eviction, so other
//            heavy jobs that take the same lock never overlap a measurement; $NEURONPIPE_CPU_LOCK)
//            --prepare (build the model, profile, predictors and pack, then stop)
//            --cofire-group N [--cofire-share S] (the model with co-firing groups of N planted,
//            `synth --cofire-group N --cofire-share S`; its files are named …-cofireN… or
//            …-cofireN-shareS…, so one DIR holds them all). Default: groups of 8 at share 0.7,
//            whose co-activation gain matches the real default model's (docs/benchmarks.md,
//            2026-11-28 noon); --cofire-group 8 alone takes synth's share (0.9); 0: no groups
//            --cold-share S (0.5: the predictors' cold share, `train-predictor --cold-share`; the
//            files are named …-linear-coldS…; 0: one margin for every neuron, …-linear…)
//            --target-recall R (0.995: `train-predictor --target-recall`; the files are named
//            …-recallR… unless R is the trainer's default, 0.998)
//
// Building the model once: synth (~2 min), profile 1024 tokens (dense, ~2 min), fit the linear
// predictors on 7,000 tokens (~15 min), pack (~3 min). Progress goes to stderr.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import {
  acquireLock,
  cgroupReport,
  cpuTimes,
  createCgroup,
  evictFile,
  memoryCgroupRoot,
  otherLoad,
  ownCpuSeconds,
  removeCgroup,
  residentBytes,
  sampleCgroup,
  stealCores,
  spread,
} from "./lib/measure.mjs";
import { coldShareOf, targetRecallOf, cofireOf, cofireSynthArgs, SEVEN_B_OPTIONS, sevenBFiles } from "./lib/seven-b.mjs";
import { benchArgs } from "./lib/usage.mjs";

const benchDir = dirname(fileURLToPath(import.meta.url));
const rootDir = resolve(benchDir, "..");
const cli = join(rootDir, "bin", "neuronpipe.js");
const PROMPT = "Once upon a time, in a small village by the sea, there lived";
const log = (...a) => process.stderr.write(`[bench:sparse] ${a.join(" ")}\n`);

const { values: v } = benchArgs(import.meta.url, {
  ffn: { type: "string", default: "0.5" },
  decode: { type: "string", default: "32" },
  threads: { type: "string", default: "2" },
  ctx: { type: "string", default: "512" },
  dir: { type: "string" },
  out: { type: "string" },
  repeat: { type: "string", default: "3" },
  rounds: { type: "string", default: "3" },
  warmup: { type: "string", default: "4" },
  "limited-repeat": { type: "string", default: "2" },
  "limited-decode": { type: "string", default: "16" },
  "peer-limit-extra": { type: "string", default: String(256 * 2 ** 20) },
  "peer-timeout": { type: "string", default: "600" },
  "prebuilt-limited": { type: "boolean", default: false },
  "no-evict": { type: "boolean", default: false },
  only: { type: "string" },
  lock: { type: "string" },
  child: { type: "string" },
  model: { type: "string" },
  budget: { type: "string" },
  result: { type: "string" },
  engine: { type: "string" },
  peer: { type: "string" },
  "pin-gates": { type: "string" },
  "read-ahead": { type: "string" },
  "cold-keep": { type: "string" },
  svg: { type: "string" },
  prepare: { type: "boolean", default: false },
  ...SEVEN_B_OPTIONS,
});
const threads = Number(v.threads);
// the 7B with co-firing groups (synth --cofire-group/--cofire-share), or without (0); by default
// groups of 8 at share 0.7, the benchmark model that co-activates as the real default model does
const cofire = cofireOf(v);
const coldShare = coldShareOf(v);
const targetRecall = targetRecallOf(v);
const decode = Number(v.decode);
const ctx = Number(v.ctx);
const reps = Number(v.repeat);
const warmup = Number(v.warmup);

function run(args, what) {
  log(`${what}: node ${args.join(" ")}`);
  const r = spawnSync(process.execPath, args, { stdio: ["ignore", "inherit", "inherit"], env: { ...process.env, NEURONPIPE_PROGRESS: "1" } });
  if (r.status !== 0) throw new Error(`${what} failed (exit ${r.status})`);
}

/** Build (or reuse) the model, its profile, predictors and pack. */
async function prepare(dir) {
  mkdirSync(dir, { recursive: true });
  const { model, profile, predictor, predictorArgs, pack, corpus } = sevenBFiles(dir, cofire, coldShare, targetRecall);
  if (!existsSync(model))
    run([cli, "synth", "--shape", "llama2-7b", "--type", "q4_0", "--activation", "reglu", "--active-fraction", "0.1", "--gate-rank", "64", ...cofireSynthArgs(cofire), "--seed", "1", "--out", model], "synth");
  // A random-weight model writes random tokens, so its activations are profiled and its
  // predictors trained on text of uniformly random tokens (seeded) — the distribution it decodes.
  if (!existsSync(corpus)) writeFileSync(corpus, await randomTokenTextAsync(model, 16000));
  if (!existsSync(profile)) run([cli, "profile", "--model", model, "--corpus", corpus, "--max-tokens", "1024", "--ctx", "256", "--threads", String(threads)], "profile");
  if (!existsSync(predictor))
    run(
      // train-predictor's defaults (linear form) but the cold share; 7,000 tokens: 4,760 fitted
      // (more than the 4,096 input dimensions), 840 calibrate the margins, 1,400 held out — the
      // activations of 7,000 tokens × 32 layers are 3.7 GB of memory while they are collected
      [cli, "train-predictor", "--model", model, "--corpus", corpus, "--max-tokens", "7000", "--out", predictor, "--threads", String(threads), ...predictorArgs],
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


// ---- children -------------------------------------------------------------------------------
//
// Every child: load, one warm-up generation of --warmup tokens, then --repeat measured greedy
// generations of --decode tokens from the same prompt. A generation's speed counts from its
// first token (which follows the prompt's prefill) to its last: n - 1 single-token passes. Per
// generation the child records its own CPU time (user + system, all threads) and the machine's
// busy time from /proc/stat over the same interval, so the other processes' load is the
// difference. Progress is written to RESULT.partial after each token: a run stopped at its time
// limit still says how fast it went.

const fmtGiB = (b) => `${(b / 2 ** 30).toFixed(2)} GiB`;

/**
 * Run the warm-up and the measured generations. `generate(maxTokens, onToken)` runs one greedy
 * generation from the prompt (fresh context) and calls onToken(id) as each token comes out.
 */
async function measure(generate, { loadSeconds, hooks = {} }) {
  const partial = { loadSeconds, reps: [], current: undefined };
  const save = () => writeFileSync(`${v.result}.partial`, JSON.stringify(partial));
  save();
  if (warmup > 0) {
    const t0 = performance.now();
    const toks = await generate(warmup, () => {});
    partial.warmup = { tokens: toks.length, seconds: (performance.now() - t0) / 1000 };
    log(`${v.child}: warm-up, ${toks.length} tokens in ${partial.warmup.seconds.toFixed(1)} s`);
    save();
  }
  for (let i = 0; i < reps; i++) {
    const cur = { tokens: [], times: [] };
    partial.current = cur;
    hooks.start?.(i);
    await generate(decode, (tok) => {
      cur.tokens.push(tok);
      cur.times.push(performance.now());
      const cpu = ownCpuSeconds();
      const stat = cpuTimes();
      if (cur.tokens.length === 1) {
        cur.cpu0 = cpu;
        cur.stat0 = stat;
        hooks.first?.(i);
      }
      cur.cpu1 = cpu;
      cur.stat1 = stat;
      save();
    });
    const rep = repSummary(cur);
    Object.assign(rep, hooks.end?.(i, rep));
    partial.reps.push(rep);
    partial.current = undefined;
    save();
    log(`${v.child}: run ${i + 1}/${reps}: ${rep.tokensPerSecond.toFixed(3)} tok/s, CPU ${rep.cpuSecondsPerToken.toFixed(2)} s/token, other processes ${rep.otherLoadCores?.toFixed(2) ?? "?"} cores, steal ${rep.stealCores?.toFixed(2) ?? "?"} cores`);
  }
  return partial;
}

/** One measured generation from its token times and CPU readings. */
function repSummary(cur) {
  const n = cur.tokens.length;
  const seconds = n > 1 ? (cur.times[n - 1] - cur.times[0]) / 1000 : 0;
  const cpuSeconds = n > 1 ? cur.cpu1 - cur.cpu0 : 0;
  return {
    tokens: cur.tokens,
    decodePasses: Math.max(0, n - 1),
    seconds,
    tokensPerSecond: n > 1 && seconds > 0 ? (n - 1) / seconds : 0,
    cpuSeconds,
    cpuSecondsPerToken: n > 1 ? cpuSeconds / (n - 1) : undefined,
    // cores this child kept busy while decoding (2 = both cores computing; less = waiting on I/O)
    cpuCores: seconds > 0 ? cpuSeconds / seconds : undefined,
    otherLoadCores: n > 1 ? otherLoad(cur.stat0, cur.stat1, seconds, cpuSeconds) : undefined,
    stealCores: n > 1 ? stealCores(cur.stat0, cur.stat1, seconds) : undefined,
  };
}

/** Index of the generation whose speed is the median (for an even count, the lower middle one). */
function medianRun(m) {
  const order = m.reps.map((r, i) => [r.tokensPerSecond, i]).sort((a, b) => a[0] - b[0]);
  return order[(order.length - 1) >> 1]?.[1] ?? 0;
}

/** The child's result: the measured generations and their median / spread. */
function summary(engine, m, extra = {}) {
  const s = spread(m.reps.map((r) => r.tokensPerSecond));
  const same = m.reps.every((r) => r.tokens.length === m.reps[0].tokens.length && r.tokens.every((t, j) => t === m.reps[0].tokens[j]));
  return {
    engine,
    loadSeconds: m.loadSeconds,
    warmup: m.warmup,
    decodeTokensPerSecond: s?.median ?? 0,
    tokensPerSecond: s,
    cpuSecondsPerToken: spread(m.reps.map((r) => r.cpuSecondsPerToken))?.median,
    cpuCores: spread(m.reps.map((r) => r.cpuCores))?.median,
    otherLoadCores: spread(m.reps.map((r) => r.otherLoadCores))?.max,
    stealCores: spread(m.reps.map((r) => r.stealCores))?.max,
    sameTokensEveryRun: same,
    generated: m.reps[0]?.tokens,
    runs: m.reps.map(({ tokens, ...r }) => r),
    cpuSeconds: ownCpuSeconds(),
    processPeakRssBytes: process.resourceUsage().maxRSS * 1024,
    ...extra,
  };
}

/** One greedy generation of n tokens from PROMPT on a fresh context of session `s`, traced into `trace` if given; onToken(id) per token. */
async function generateTokens(s, n, onToken, trace) {
  s.reset();
  const it = s.generate(PROMPT, { maxTokens: n, temperature: 0, trace });
  const toks = [];
  let r;
  while (!(r = await it.next()).done) {
    toks.push(r.value.token);
    onToken(r.value.token);
  }
  return toks;
}

/** neuronpipe on the pack with a memory budget: pipeline, blocking or sync (inline). */
async function childNeuronpipe() {
  const np = await import(pathToFileURL(join(rootDir, "dist", "src", "index.js")).href);
  const { traceStats } = await import(pathToFileURL(join(rootDir, "dist", "src", "trace-tools", "stats.js")).href);
  const { tokenBudget, formatBudget } = await import(pathToFileURL(join(rootDir, "dist", "src", "trace-tools", "budget.js")).href);
  const { cachedMachine } = await import(pathToFileURL(join(rootDir, "dist", "src", "plan", "machine.js")).href);
  const { traceSvg } = await import(pathToFileURL(join(rootDir, "dist", "src", "trace-tools", "plot.js")).href);
  const engine = v.engine ?? "pipeline";
  const t0 = performance.now();
  const pinGates = v["pin-gates"] === undefined ? undefined : v["pin-gates"] === "true" ? true : v["pin-gates"] === "false" ? false : "auto";
  const readAhead = v["read-ahead"] === undefined ? undefined : Number(v["read-ahead"]);
  const coldKeep = v["cold-keep"] === undefined ? undefined : Number(v["cold-keep"]);
  // no --budget: the whole pack resident, as `generate` without --memory
  const budget = v.budget === undefined ? undefined : Number(v.budget);
  const model = await np.loadSparseModel(v.model, { ...(budget !== undefined && { memory: budget }), threads, contextSize: ctx, decoder: engine === "sync" ? "inline" : engine, pinGates, readAhead, coldKeep });
  const loadSeconds = (performance.now() - t0) / 1000;
  log(`neuronpipe (${engine}): loaded in ${loadSeconds.toFixed(1)} s\n${model.sparse.describe()}\n${model.decoder.describe()}`);
  const s = model.createSession();
  let trace;
  const traces = [];
  const generate = (n, onToken) => generateTokens(s, n, onToken, trace);
  const sum = (rep, f) => rep.reduce((a, x) => a + f(x), 0);
  const m = await measure(generate, {
    loadSeconds,
    hooks: {
      start: () => {
        trace = model.createTrace();
      },
      first: () => model.sparse.resetStats(), // count decode passes only, not the prompt's
      end: (i) => {
        const rep = model.sparse.report();
        const tokens = rep[0].tokens;
        traces[i] = trace;
        let pipeline;
        if (trace) {
          // decode steps only: a prompt's streamed prefill reads in the background too
          const st = traceStats(trace.records.filter((x) => x.kind !== "span" || x.token !== -1));
          pipeline = { latencyMs: st.latencyMs, ioHiddenShare: st.ioHiddenShare, orchestrationShare: st.orchestrationShare, ioMs: st.ioUs / 1000, computeMs: st.computeUs / 1000 };
          const machine = cachedMachine();
          const budget = machine && tokenBudget(trace.records, machine);
          if (budget) {
            pipeline.timeBudget = budget.rows;
            if (i === 0) log(formatBudget(budget));
          }
        }
        return {
          pipeline,
          hitRate: sum(rep, (x) => x.gateHits + x.upDownHits) / sum(rep, (x) => x.gateAccesses + x.upDownAccesses),
          bytesReadPerToken: sum(rep, (x) => x.bytesRead) / tokens,
          readsPerToken: sum(rep, (x) => x.reads) / tokens,
          predictedPerToken: sum(rep, (x) => x.predicted) / tokens,
          firedPerToken: sum(rep, (x) => x.fired) / tokens,
          layers: rep,
        };
      },
    },
  });
  // the figures of the run whose speed is the median (for an even count, the lower middle one)
  const mid = medianRun(m);
  const med = m.reps[mid];
  if (v.svg && traces[mid]) {
    // decode steps 2–3 of that run (a session numbers its steps on across generations)
    const first = Math.min(...traces[mid].records.filter((r) => r.kind === "token" && r.index >= 0).map((r) => r.index));
    try {
      writeFileSync(v.svg, traceSvg(traces[mid].records, { tokens: [first + 2, first + 3], width: 1400, title: `neuronpipe ${engine} — llama2-7b-shaped Q4_0, ${budget === undefined ? "no" : fmtGiB(budget)} budget, decode steps 2–3` }));
      log(`wrote ${v.svg}`);
    } catch (e) {
      log(`WARNING: no timeline written to ${v.svg}: ${e?.message ?? e}`);
    }
  }
  const layers = med.layers;
  for (const r of m.reps) delete r.layers;
  const out = summary(`neuronpipe ${engine}`, m, {
    medianRun: mid,
    pipeline: med.pipeline && { knobs: model.decoder.knobs, ...med.pipeline },
    budget: budget ?? null,
    plan: model.sparse.plan, // the memory plan
    executionPlan: model.plan, // the planner's knobs (explicit ones listed as overrides) and predicted speed
    io: model.sparse.io,
    hitRate: med.hitRate,
    bytesReadPerToken: med.bytesReadPerToken,
    readsPerToken: med.readsPerToken,
    predictedPerToken: med.predictedPerToken,
    firedPerToken: med.firedPerToken,
    layers,
    peakResidentBytes: model.sparse.peakResidentBytes,
  });
  s.dispose();
  await model[Symbol.asyncDispose]();
  return out;
}

/** neuronpipe without a budget: `dense` on the plain GGUF, or `mmap` (llama.cpp's way) on the pack. */
async function childDense() {
  const np = await import(pathToFileURL(join(rootDir, "dist", "src", "index.js")).href);
  const decoder = v.engine ?? "dense";
  const t0 = performance.now();
  const model = await np.loadModel(v.model, { threads, decoder });
  const loadSeconds = (performance.now() - t0) / 1000;
  log(`neuronpipe (${decoder}): loaded in ${loadSeconds.toFixed(1)} s`);
  const s = model.createSession({ contextSize: ctx });
  const { tokenBudget, formatBudget } = await import(pathToFileURL(join(rootDir, "dist", "src", "trace-tools", "budget.js")).href);
  const { cachedMachine } = await import(pathToFileURL(join(rootDir, "dist", "src", "plan", "machine.js")).href);
  let trace;
  const generate = (n, onToken) => generateTokens(s, n, onToken, trace);
  const budgets = [];
  const m = await measure(generate, {
    loadSeconds,
    hooks: {
      start: () => (trace = model.createTrace()),
      end: (i) => {
        const machine = cachedMachine();
        const b = machine && tokenBudget(trace.records, machine);
        if (b && i === 0) log(formatBudget(b));
        budgets[i] = b?.rows;
      },
    },
  });
  const out = summary(`neuronpipe ${decoder}`, m, { timeBudget: budgets[medianRun(m)] });
  s.dispose();
  model.dispose();
  return out;
}

/** llama.cpp through node-llama-cpp, mmap, in the build --peer names (bench/peer/llama-peer.mjs). */
async function childPeer() {
  const { openPeer, peerInfo } = await import(pathToFileURL(join(benchDir, "peer", "llama-peer.mjs")).href);
  const info = await peerInfo(v.peer);
  const t0 = performance.now();
  const peer = await openPeer(v.model, { peer: v.peer, threads, contextSize: ctx, useMmap: true });
  const loadSeconds = (performance.now() - t0) / 1000;
  log(`llama.cpp (${info.peer}, ${info.buildType}, repack ${info.repack ? "on" : "off"}): loaded in ${loadSeconds.toFixed(1)} s`);
  const ids = peer.tokenize(PROMPT, { addBos: true });
  const generate = async (n, onToken) => {
    await peer.sequence.clearHistory();
    const toks = [];
    for await (const t of peer.sequence.evaluate(ids, { temperature: 0 })) {
      toks.push(t);
      onToken(t);
      if (toks.length >= n) break;
    }
    return toks;
  };
  const m = await measure(generate, { loadSeconds });
  const out = summary(`llama.cpp ${info.peer}`, m, { peer: info });
  await peer.dispose();
  return out;
}

if (v.child) {
  const res = v.child === "neuronpipe" ? await childNeuronpipe() : v.child === "dense" ? await childDense() : v.child === "llama.cpp" ? await childPeer() : undefined;
  if (!res) throw new Error(`--child ${v.child}: unknown`);
  writeFileSync(v.result, JSON.stringify(res));
  process.exit(0);
}

// ---- parent ---------------------------------------------------------------------------------

/**
 * Run one child (an engine) to completion or its time limit. With `limit.bytes`, inside a fresh
 * memory cgroup of that size, after evicting `limit.evict` (the file it maps) from the page
 * cache; the result then says whether the cgroup reached its limit. With --lock, the lock is
 * held from before the eviction until the child has exited.
 */
async function child(id, kind, args, { limit, timeoutSeconds = 1800, repeat = reps, decodeTokens = decode } = {}) {
  const lock = v.lock ?? process.env.NEURONPIPE_CPU_LOCK;
  const held = lock ? await acquireLock(lock) : undefined;
  if (held && held.waitedSeconds > 1) log(`${id}: waited ${held.waitedSeconds.toFixed(0)} s for ${lock}`);
  try {
    return await runChild(id, kind, args, { limit, timeoutSeconds, repeat, decodeTokens });
  } finally {
    held?.release();
  }
}

function runChild(id, kind, args, { limit, timeoutSeconds, repeat, decodeTokens }) {
  return new Promise((resolvePromise) => {
    const resultFile = join(os.tmpdir(), `np-sparse-${process.pid}-${id}-${Date.now()}.json`);
    const nodeArgs = [fileURLToPath(import.meta.url), "--child", kind, "--result", resultFile, "--threads", String(threads), "--decode", String(decodeTokens), "--repeat", String(repeat), "--warmup", String(warmup), "--ctx", String(ctx), ...args];
    const machine = { loadavgBefore: os.loadavg() };
    let cg;
    let eviction;
    let sampler;
    let cmd = process.execPath;
    let argv = nodeArgs;
    if (limit) {
      const root = memoryCgroupRoot();
      if (!root) return resolvePromise({ id, engine: kind, error: "no writable memory cgroup (v1) here" });
      // drop the file's cached pages, so that every page the engine touches is charged to its cgroup
      eviction = v["no-evict"] ? { skipped: true, ok: false, file: limit.evict, residentBefore: residentBytes(limit.evict), residentAfter: residentBytes(limit.evict) } : evictFile(limit.evict);
      if (!eviction.skipped) log(`${id}: evicted ${limit.evict} from the page cache: ${((eviction.residentBefore ?? NaN) / 2 ** 20).toFixed(0)} → ${((eviction.residentAfter ?? NaN) / 2 ** 20).toFixed(0)} MiB cached`);
      if (eviction.skipped) log(`WARNING ${id}: --no-evict: pages already cached stay charged to another cgroup and escape the limit`);
      else if (!eviction.ok) log(`WARNING ${id}: the eviction left ${((eviction.residentAfter ?? NaN) / 2 ** 20).toFixed(0)} MiB of the file cached (${eviction.error ?? "mapped by another process?"}): pages charged elsewhere escape the limit`);
      cg = createCgroup(root, `np-bench-${process.pid}-${id}`, limit.bytes);
      sampler = sampleCgroup(cg);
      // the shell joins the cgroup, then becomes node: everything the engine maps or caches is charged to it
      cmd = "/bin/sh";
      argv = ["-c", `echo $$ > ${join(cg, "cgroup.procs")} && exec "$0" "$@"`, process.execPath, ...nodeArgs];
    }
    const t0 = performance.now();
    const stat0 = cpuTimes();
    const cpu0 = process.cpuUsage();
    const p = spawn(cmd, argv, { stdio: ["ignore", "inherit", "inherit"], detached: true });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      log(`${id}: not done after ${timeoutSeconds} s; stopping it`);
      try {
        process.kill(-p.pid, "SIGKILL");
      } catch {}
    }, timeoutSeconds * 1000);
    // an interrupted benchmark must not leave a child holding gigabytes and both cores
    const stop = () => {
      try {
        process.kill(-p.pid, "SIGKILL");
      } catch {}
      process.exit(130);
    };
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
    p.on("exit", (code, signal) => {
      clearTimeout(timer);
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
      const wallSeconds = (performance.now() - t0) / 1000;
      let res;
      if (existsSync(resultFile)) res = JSON.parse(readFileSync(resultFile, "utf8"));
      else if (existsSync(`${resultFile}.partial`)) res = partialResult(kind, JSON.parse(readFileSync(`${resultFile}.partial`, "utf8")), timedOut ? `stopped after ${timeoutSeconds} s` : `exited with ${signal ?? `code ${code}`}`);
      else res = { engine: kind, error: timedOut ? `nothing within ${timeoutSeconds} s` : `exited with ${signal ?? `code ${code}`}${signal === "SIGKILL" ? " (killed: out of memory in the cgroup?)" : ""}` };
      rmSync(resultFile, { force: true });
      rmSync(`${resultFile}.partial`, { force: true });
      const parentCpu = (process.cpuUsage(cpu0).user + process.cpuUsage(cpu0).system) / 1e6;
      machine.loadavgAfter = os.loadavg();
      machine.wallSeconds = wallSeconds;
      // over the child's whole life (load, warm-up, runs): needs the child's own CPU time
      const stat1 = cpuTimes();
      if (res.cpuSeconds !== undefined) machine.otherLoadCores = otherLoad(stat0, stat1, wallSeconds, res.cpuSeconds + parentCpu);
      machine.stealCores = stealCores(stat0, stat1, wallSeconds);
      res = { id, ...res, machine };
      if (cg) {
        res.eviction = eviction;
        res.cgroupPeak = sampler.stop();
        try {
          res.cgroup = cgroupReport(cg, limit.bytes);
          res.limited = res.cgroup.limited && eviction.ok;
          removeCgroup(cg);
        } catch (e) {
          res.cgroupError = String(e);
          res.limited = false;
        }
        const c = res.cgroup;
        if (c) log(`${id}: cgroup limit ${fmt(c.limit)}, peak usage ${fmt(c.maxUsage)}, ${c.failcnt} limit hits, ${c.oomKills} OOM kills; anonymous ≤ ${(res.cgroupPeak.rss / 2 ** 20).toFixed(0)} MiB, page cache ≤ ${fmt(res.cgroupPeak.cache)}`);
        if (!res.limited) log(`WARNING ${id}: NOT LIMITED — ${c ? `the cgroup's usage peaked at ${fmt(c.maxUsage)}, short of its ${fmt(c.limit)} limit` : res.cgroupError}${eviction.ok ? "" : eviction.skipped ? "; the file was not evicted (--no-evict)" : "; the eviction failed"}: this run does not measure decoding under the limit`);
      }
      if (res.error) log(`${id}: ${res.error}`);
      log(`${id}: ${res.decodeTokensPerSecond ? `${res.decodeTokensPerSecond.toFixed(3)} tok/s median` : "no speed"}; child CPU ${res.cpuSeconds?.toFixed(0) ?? "?"} s over ${wallSeconds.toFixed(0)} s; other processes ${machine.otherLoadCores?.toFixed(2) ?? "?"} cores, steal ${machine.stealCores?.toFixed(2) ?? "?"}; load average ${machine.loadavgBefore[0].toFixed(2)} → ${machine.loadavgAfter[0].toFixed(2)}`);
      resolvePromise(res);
    });
  });
}

/** What a child that did not finish measured: its completed runs, else its run in progress. */
function partialResult(kind, part, why) {
  const runs = [...part.reps];
  let inProgress = false;
  if (part.current && part.current.tokens.length > 1) {
    runs.push(repSummary(part.current));
    inProgress = true;
  }
  const s = spread(runs.map((r) => r.tokensPerSecond));
  const last = part.current?.cpu1 ?? undefined;
  return {
    engine: kind,
    partial: true,
    error: `${why} after ${runs.length - (inProgress ? 1 : 0)} complete runs${inProgress ? ` and ${part.current.tokens.length} tokens of another` : ""}${part.warmup ? "" : " (during load or warm-up)"}`,
    loadSeconds: part.loadSeconds,
    warmup: part.warmup,
    decodeTokensPerSecond: s?.median ?? 0,
    tokensPerSecond: s,
    cpuSecondsPerToken: spread(runs.map((r) => r.cpuSecondsPerToken))?.median,
    cpuCores: spread(runs.map((r) => r.cpuCores))?.median,
    otherLoadCores: spread(runs.map((r) => r.otherLoadCores))?.max,
    stealCores: spread(runs.map((r) => r.stealCores))?.max,
    generated: runs[0]?.tokens,
    runs: runs.map(({ tokens, ...r }) => r),
    cpuSecondsAtLastToken: last,
  };
}

const fmt = (b) => `${(b / 2 ** 30).toFixed(2)} GiB`;

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
log(`budget for ${(100 * ffn).toFixed(0)}% of the FFN resident: ${fmt(budget)}; model file ${fmt(np.readGGUF(model).fileSize)}; cgroup limit ${fmt(peerLimit)}`);

const off = `${(100 * (1 - ffn)).toFixed(0)}% of FFN offloaded`;
const img = join(rootDir, "docs", "img");
const limited = (file) => ({
  limit: { bytes: peerLimit, evict: file },
  timeoutSeconds: Number(v["peer-timeout"]),
  repeat: Number(v["limited-repeat"]),
  decodeTokens: Number(v["limited-decode"]),
});
const budgetArgs = ["--model", pack, "--budget", String(budget)];
// in this order: the sparse modes on the pack, then everything in memory, then the limited runs
const plan = [
  ["pipeline", `neuronpipe pipeline, --memory ${fmt(budget)} (${off})`, "neuronpipe", [...budgetArgs, "--engine", "pipeline", "--svg", join(img, "pipeline-timeline.svg")]],
  ["blocking", `neuronpipe blocking (LLMFlash: window cache of 5 tokens, reads before compute), --memory ${fmt(budget)}`, "neuronpipe", [...budgetArgs, "--engine", "blocking", "--svg", join(img, "blocking-timeline.svg")]],
  ["sync", `neuronpipe sync (sparse FFN inline, one thread), --memory ${fmt(budget)}`, "neuronpipe", [...budgetArgs, "--engine", "sync"]],
  // ablation: the same pipeline with gate rows cached, not pinned (what the pinned rows are worth)
  ["pipeline-cached-gates", `neuronpipe pipeline, gate rows cached (pinGates false), --memory ${fmt(budget)}`, "neuronpipe", [...budgetArgs, "--engine", "pipeline", "--pin-gates", "false"]],
  ["sync-no-ahead", `neuronpipe sync without reads ahead (--read-ahead 0), --memory ${fmt(budget)}`, "neuronpipe", [...budgetArgs, "--engine", "sync", "--read-ahead", "0"]],
  // ablations of the inline decoder's plan: gate rows pinned (what the plan chose before whole
  // bundles could be read ahead), and the cold region all LRU (nothing kept)
  ["sync-pinned-gates", `neuronpipe sync, gate rows pinned (pinGates true), --memory ${fmt(budget)}`, "neuronpipe", [...budgetArgs, "--engine", "sync", "--pin-gates", "true"]],
  ["sync-lru", `neuronpipe sync, the cold region all LRU (coldKeep 0), --memory ${fmt(budget)}`, "neuronpipe", [...budgetArgs, "--engine", "sync", "--cold-keep", "0"]],
  // no budget: the whole pack resident (a budget sized for the whole FFN in bundles held 99.1% of
  // it with pinned gate rows, and the missing 0.9% cost 14 synchronous reads, 2.5 ms, a token)
  ["pipeline-resident", "neuronpipe pipeline, whole FFN resident (sparse, no I/O)", "neuronpipe", ["--model", pack, "--engine", "pipeline"]],
  ["sync-resident", "neuronpipe sync (inline, the default decoder), whole FFN resident (sparse, no I/O)", "neuronpipe", ["--model", pack, "--engine", "sync"]],
  ["dense", "neuronpipe dense (the plain GGUF, mapped, in memory, no limit)", "dense", ["--model", model, "--engine", "dense"]],
  ["llama-prebuilt", "llama.cpp prebuilt (repacks Q4_0), in memory, no limit", "llama.cpp", ["--model", model, "--peer", "prebuilt"]],
  ["llama-norepack", "llama.cpp norepack (source build, GGML_CPU_REPACK=OFF), in memory, no limit", "llama.cpp", ["--model", model, "--peer", "norepack"]],
  ["mmap-limited", `neuronpipe mmap (dense over a mapped pack, as llama.cpp), memory cgroup ${fmt(peerLimit)}`, "dense", ["--model", pack, "--engine", "mmap"], limited(pack)],
  ["llama-norepack-limited", `llama.cpp norepack (mmap, weights in the page cache), memory cgroup ${fmt(peerLimit)}`, "llama.cpp", ["--model", model, "--peer", "norepack"], limited(model)],
  ...(v["prebuilt-limited"]
    ? [["llama-prebuilt-limited", `llama.cpp prebuilt (repacked weights are anonymous memory), memory cgroup ${fmt(peerLimit)}`, "llama.cpp", ["--model", model, "--peer", "prebuilt"], limited(model)]]
    : []),
];
const only = v.only?.split(",").map((x) => x.trim());
if (only) for (const id of only) if (!plan.some((p) => p[0] === id) && id !== "llama-prebuilt-limited") throw new Error(`--only ${id}: no such run (${plan.map((p) => p[0]).join(", ")})`);
if (only?.includes("llama-prebuilt-limited") && !v["prebuilt-limited"])
  plan.push(["llama-prebuilt-limited", `llama.cpp prebuilt (repacked weights are anonymous memory), memory cgroup ${fmt(peerLimit)}`, "llama.cpp", ["--model", model, "--peer", "prebuilt"], limited(model)]);

// the bounds of the per-token time budget: this machine's memory and storage, measured once
// (the children read them from the cache), on the pack's storage, under the lock
const { cachedMachine, measureMachine } = await import(pathToFileURL(join(rootDir, "dist", "src", "plan", "machine.js")).href);
let machineBounds = cachedMachine();
if (!machineBounds?.disk) {
  const lockFile = v.lock ?? process.env.NEURONPIPE_CPU_LOCK;
  const held = lockFile ? await acquireLock(lockFile) : undefined;
  try {
    log("measuring this machine's memory and storage bandwidth (neuronpipe machine) …");
    machineBounds = measureMachine({ diskFile: pack });
  } finally {
    held?.release();
  }
}

const t0 = performance.now();
const results = [];
// the runs under a budget and in a cgroup once each, in order; the in-memory ones (no budget
// below the whole FFN, no cgroup) and the plan's offloaded decoder (`sync`, the figure divided by
// the resident one) in `rounds` turns, each engine's result its median round
const inRounds = new Set(["sync", "pipeline-resident", "sync-resident", "dense", "llama-prebuilt", "llama-norepack"]);
const rounds = Math.max(1, Number(v.rounds));
const roundsOf = new Map();
for (let round = 0; round < rounds; round++) {
  for (const [id, setting, kind, args, opts] of plan) {
    if (only && !only.includes(id)) continue;
    if (round > 0 && !inRounds.has(id)) continue;
    log(`--- ${id}: ${setting}${inRounds.has(id) && rounds > 1 ? ` (round ${round + 1} of ${rounds})` : ""} ---`);
    const r = { setting, ...(await child(id, kind, args, opts)) };
    if (!inRounds.has(id)) results.push(r);
    else roundsOf.set(id, [...(roundsOf.get(id) ?? []), r]);
  }
}
for (const [id] of plan) {
  const rs = roundsOf.get(id);
  if (!rs) continue;
  const sorted = [...rs].sort((a, b) => (a.decodeTokensPerSecond ?? 0) - (b.decodeTokensPerSecond ?? 0));
  results.push({ ...sorted[(sorted.length - 1) >> 1], rounds: rs.map((r) => r.decodeTokensPerSecond ?? null) });
}
results.sort((a, b) => plan.findIndex((p) => p[0] === a.id) - plan.findIndex((p) => p[0] === b.id));

const record = {
  date: new Date().toISOString(),
  machine: { cpus: os.cpus().length, cpu: os.cpus()[0]?.model, memory: os.totalmem(), node: process.version, bounds: machineBounds },
  model: { file: model, pack, shape: "llama2-7b", type: "Q4_0", planted: `active 10%, hot 20% → 80%, gate rank 64${cofire.group > 0 ? `, co-firing groups of ${cofire.group} (share ${cofire.share ?? "0.9, synth's default"})` : ""}` },
  threads,
  decodeTokens: decode,
  repeat: reps,
  rounds,
  warmupTokens: warmup,
  limitedRepeat: Number(v["limited-repeat"]),
  limitedDecodeTokens: Number(v["limited-decode"]),
  contextSize: ctx,
  ffnResident: ffn,
  budget,
  peerLimit,
  wallSeconds: (performance.now() - t0) / 1000,
  // every run in a cgroup reached its limit (undefined when there was none)
  limitedRunsReachedLimit: results.some((r) => r.limited !== undefined) ? results.filter((r) => r.limited !== undefined).every((r) => r.limited === true) : undefined,
  results,
};
const outFile = v.out ?? (only ? undefined : join(benchDir, "results", "sparse-latest.json"));
if (outFile) {
  mkdirSync(dirname(outFile), { recursive: true });
  writeFileSync(outFile, JSON.stringify(record, null, 2) + "\n");
}

const ours = results.find((r) => r.id === "pipeline")?.decodeTokensPerSecond;
const lines = [
  `| run | decode tok/s, median (min–max, runs) | pipeline ÷ this | CPU s / token (cores busy) | other load, cores | steal, cores | hit rate | read/token | memory |`,
  `|---|---:|---:|---:|---:|---:|---:|---:|---|`,
];
for (const r of results) {
  const tps = r.decodeTokensPerSecond;
  const sp = r.tokensPerSecond;
  const speed = tps ? `${tps.toFixed(2)} (${sp.min.toFixed(2)}–${sp.max.toFixed(2)}, ${sp.n})${r.rounds?.length > 1 ? ` [rounds ${r.rounds.map((x) => x?.toFixed(2) ?? "—").join(", ")}]` : ""}${r.partial ? " partial" : ""}` : r.error ?? "—";
  let mem = r.peakResidentBytes ? `${fmt(r.peakResidentBytes)} model data (process ${fmt(r.processPeakRssBytes)})` : r.processPeakRssBytes ? `process ${fmt(r.processPeakRssBytes)}` : "";
  if (r.cgroup)
    mem = `${r.limited ? "limited" : "**NOT LIMITED**"}: cgroup peak ${fmt(r.cgroup.maxUsage)} of ${fmt(r.cgroup.limit)}, ${r.cgroup.failcnt} limit hits, ${r.cgroup.oomKills} OOM kills; anonymous ≤ ${(r.cgroupPeak.rss / 2 ** 20).toFixed(0)} MiB; ${r.eviction.skipped ? "not evicted" : "evicted"} ${((r.eviction.residentBefore ?? NaN) / 2 ** 20).toFixed(0)} → ${((r.eviction.residentAfter ?? NaN) / 2 ** 20).toFixed(0)} MiB cached`;
  else if (r.limited === false) mem = `**NOT LIMITED** (${r.cgroupError ?? r.error})`;
  lines.push(
    `| ${r.id}: ${r.setting} | ${speed} | ${tps && ours ? (ours / tps).toFixed(2) + "×" : "—"} | ${r.cpuSecondsPerToken !== undefined ? `${r.cpuSecondsPerToken.toFixed(2)} (${r.cpuCores?.toFixed(2)})` : "—"} | ${r.otherLoadCores !== undefined ? r.otherLoadCores.toFixed(2) : "—"} | ${r.stealCores !== undefined ? r.stealCores.toFixed(2) : "—"} | ${r.hitRate !== undefined ? (100 * r.hitRate).toFixed(1) + "%" : "—"} | ${r.bytesReadPerToken !== undefined ? (r.bytesReadPerToken / 2 ** 20).toFixed(1) + " MiB" : "—"} | ${mem} |`,
  );
}
const pl = results.find((r) => r.id === "pipeline")?.pipeline;
if (pl) {
  const L = pl.latencyMs;
  lines.push(
    "",
    `pipeline per-token latency (median run): mean ${L.mean.toFixed(0)} ms, P50 ${L.p50.toFixed(0)}, P90 ${L.p90.toFixed(0)}, P99 ${L.p99.toFixed(0)} (P99/mean ${(L.p99 / L.mean).toFixed(2)}); ` +
      `I/O hidden under compute ${(100 * pl.ioHiddenShare).toFixed(1)}% (blocking: ${(100 * (results.find((r) => r.id === "blocking")?.pipeline?.ioHiddenShare ?? 0)).toFixed(1)}%); orchestration ${(100 * pl.orchestrationShare).toFixed(1)}% of token time`,
  );
}
const notLimited = results.filter((r) => r.limited === false);
if (notLimited.length) lines.push("", `WARNING: ${notLimited.map((r) => r.id).join(", ")} did not reach the cgroup's limit: not measured under the limit.`);
lines.push("", `other load: the largest average core use by other processes during a measured run (> 0.15 of 2 cores makes a figure unreliable). steal: the largest average core time the hypervisor took from this VM in a run, not counted as other load (here it follows the engine's own reads: the host emulates the disk on the same cores). Bench wall time ${(record.wallSeconds / 60).toFixed(1)} min.`);
process.stdout.write(lines.join("\n") + "\n");
if (outFile) log(`wrote ${outFile}`);
