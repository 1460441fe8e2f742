#!/usr/bin/env node
// `npm run bench`: neuronpipe against llama.cpp (node-llama-cpp) on the same machine, the same
// GGUF and the same thread count, in one run. Decode tok/s (greedy generation after a short
// prompt) and prefill tok/s (exactly 128 tokens) for each engine, the ratios, a JSON record in
// bench/results/latest.json and a markdown snippet for docs/benchmarks.md.
//
// Each engine runs in its own child process, one after the other (never concurrently), so
// that memory, page-cache warm-up and peak RSS are its own. Progress goes to stderr; the table
// and the snippet to stdout.
//
//   node bench/run.js                    # llama2-7b-shaped Q4_0 (synthesised once, ~3.8 GB)
//   node bench/run.js --quick            # tiny model, seconds: smoke test of the harness
//   node bench/run.js --model x.gguf     # any GGUF both engines can run
//   options: --shape NAME (synthShapes key) --type q4_0|q8_0|f16|f32 --threads N (2)
//            --decode N (64) --prefill N (128) --repeat N (3) --engine both|neuronpipe|llama.cpp
//            --out FILE (bench/results/latest.json) --dir DIR (model cache; $NEURONPIPE_BENCH_DIR)
//            --peer-flash-attention (llama.cpp's flash attention on; off by default)
//   env: NEURONPIPE_BENCH_MODEL, NEURONPIPE_BENCH_DIR, NEURONPIPE_BENCH_THREADS
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { cpuTimes, otherLoad, stealCores } from "./lib/measure.mjs";
import { benchArgs } from "./lib/usage.mjs";

const benchDir = dirname(fileURLToPath(import.meta.url));
const rootDir = resolve(benchDir, "..");
const distIndex = join(rootDir, "dist", "src", "index.js");

// A prompt long enough for 128 tokens with either vocabulary (plain English prose).
const LONG_TEXT =
  "The history of computing is a story of machines that grew smaller and faster while the problems " +
  "they were asked to solve grew larger. Early computers filled rooms and were programmed by wiring " +
  "panels; later machines read punched cards, then magnetic tape, then disks. Each generation " +
  "brought new ideas about how memory should be organised, how instructions should be scheduled, " +
  "and how people should talk to the machine. Today a phone holds more memory than the largest " +
  "installations of the nineteen seventies, and yet the models we would like to run on it are " +
  "larger still. Language models with billions of parameters need gigabytes of weights, and every " +
  "generated word touches most of them. The speed of generation is therefore bounded by how fast " +
  "the weights can be streamed from memory, and when they do not fit in memory, by how fast they " +
  "can be read from storage. This benchmark measures both engines on the same file, the same " +
  "prompt and the same number of threads, one after the other, on the same machine.";
const DECODE_PROMPT = "Once upon a time, in a small village by the sea, there lived";

const log = (...a) => process.stderr.write(`[bench] ${a.join(" ")}\n`);

function parse() {
  const { values } = benchArgs(import.meta.url, {
    model: { type: "string" },
    shape: { type: "string" },
    type: { type: "string" },
    quick: { type: "boolean", default: false },
    threads: { type: "string" },
    decode: { type: "string" },
    prefill: { type: "string" },
    repeat: { type: "string" },
    engine: { type: "string", default: "both" },
    out: { type: "string" },
    dir: { type: "string" },
    seed: { type: "string" },
    "peer-flash-attention": { type: "boolean", default: false },
    child: { type: "string" },
    result: { type: "string" },
  });
  const int = (v, d, name) => {
    if (v === undefined) return d;
    const n = Number(v);
    if (!(Number.isInteger(n) && n >= 1)) throw new Error(`--${name} must be a whole number ≥ 1, got ${v}`);
    return n;
  };
  const quick = values.quick;
  return {
    child: values.child,
    result: values.result,
    quick,
    model: values.model ?? process.env.NEURONPIPE_BENCH_MODEL,
    shape: values.shape ?? (quick ? "tiny" : "llama2-7b"),
    type: values.type ?? "q4_0",
    seed: int(values.seed, 1, "seed"),
    threads: int(values.threads ?? process.env.NEURONPIPE_BENCH_THREADS, 2, "threads"),
    decode: int(values.decode, quick ? 32 : 64, "decode"),
    prefill: int(values.prefill, 128, "prefill"),
    repeat: int(values.repeat, quick ? 2 : 3, "repeat"),
    engine: values.engine,
    peerFlashAttention: values["peer-flash-attention"],
    out: values.out ?? join(benchDir, "results", quick ? "quick.json" : "latest.json"),
    dir: values.dir ?? process.env.NEURONPIPE_BENCH_DIR ?? join(benchDir, ".models"),
  };
}

async function importOurs() {
  if (!existsSync(distIndex)) {
    throw new Error(`${relative(process.cwd(), distIndex)} is missing: build the library first (npm run build:ts)`);
  }
  return import(pathToFileURL(distIndex).href);
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

// ---- children: one engine each ----------------------------------------------------------

async function childOurs(o) {
  const np = await importOurs();
  const t0 = performance.now();
  const model = await np.loadModel(o.model, { threads: o.threads });
  const loadSeconds = (performance.now() - t0) / 1000;
  const tok = model.tokenizer;
  const ids = tok.encode(LONG_TEXT, { addBos: true }).slice(0, o.prefill);
  if (ids.length < o.prefill) throw new Error(`prefill text gives only ${ids.length} tokens`);
  const s = model.createSession({ contextSize: 512 });
  log(`neuronpipe: loaded in ${loadSeconds.toFixed(2)} s; warm-up`);
  s.evaluate(ids.slice(0, 8)); // touch every weight once (page-in of the mapping)
  const prefill = [];
  for (let r = 0; r < o.repeat; r++) {
    s.reset();
    const t = performance.now();
    s.evaluate(ids);
    const sec = (performance.now() - t) / 1000;
    prefill.push(ids.length / sec);
    log(`neuronpipe: prefill ${ids.length} tokens: ${(ids.length / sec).toFixed(2)} tok/s`);
  }
  const decode = [];
  const decodeReported = [];
  let generated = [];
  let stopReason;
  for (let r = 0; r < o.repeat; r++) {
    s.reset();
    const it = s.generate(DECODE_PROMPT, { maxTokens: o.decode, temperature: 0 });
    const toks = [];
    let res;
    let tFirst = 0;
    let tLast = 0;
    while (!(res = await it.next()).done) {
      if (res.value.token < 0) continue;
      toks.push(res.value.token);
      tLast = performance.now();
      if (toks.length === 1) tFirst = tLast;
    }
    const st = res.value;
    // Wall clock from the first to the last generated token (n − 1 forward passes plus
    // sampling and streaming): the same definition as the peer's timeDecode. The engine's own
    // figure (forward passes only) is kept beside it.
    const wall = toks.length > 1 ? (toks.length - 1) / ((tLast - tFirst) / 1000) : 0;
    decode.push(wall);
    decodeReported.push(st.decodeTokensPerSecond);
    generated = toks;
    stopReason = st.stopReason;
    log(
      `neuronpipe: decode ${st.generatedTokens} tokens: ${wall.toFixed(2)} tok/s ` +
        `(engine stats: ${st.decodeTokensPerSecond.toFixed(2)}; ${st.stopReason})`,
    );
  }
  const out = {
    engine: "neuronpipe",
    loadSeconds,
    prefillTokens: ids.length,
    prefillTokensPerSecond: median(prefill),
    prefillSamples: prefill,
    decodeTokens: generated.length,
    decodeTokensPerSecond: median(decode),
    decodeSamples: decode,
    decodeTokensPerSecondEngineStats: median(decodeReported),
    decodeStopReason: stopReason,
    generated,
    prefillIds: ids,
    threads: o.threads,
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
  };
  s.dispose();
  model.dispose();
  return out;
}

async function childPeer(o) {
  const { openPeer, peerInfo } = await import("./peer/llama-peer.mjs");
  const t0 = performance.now();
  // llama.cpp's defaults (mmap, Q4_0 repacking to its interleaved layout, f16 KV cache) except
  // flash attention, off unless --peer-flash-attention: node-llama-cpp's "auto" turns it on for
  // CPU, where it accumulates V in f16 and changes logits by a few % of their spread (greedy
  // tokens then differ from ours and from llama.cpp's own plain path); at these context sizes
  // it does not change the speed measurably.
  const peer = await openPeer(o.model, { threads: o.threads, contextSize: 512, flashAttention: o.peerFlashAttention });
  const loadSeconds = (performance.now() - t0) / 1000;
  const info = await peerInfo();
  const ids = peer.tokenize(LONG_TEXT, { addBos: true }).slice(0, o.prefill);
  if (ids.length < o.prefill) throw new Error(`prefill text gives only ${ids.length} tokens`);
  log(`llama.cpp: loaded in ${loadSeconds.toFixed(2)} s; warm-up`);
  await peer.timePrefill(ids.slice(0, 8));
  const prefill = [];
  for (let r = 0; r < o.repeat; r++) {
    const p = await peer.timePrefill(ids);
    prefill.push(p.tokensPerSecond);
    log(`llama.cpp: prefill ${ids.length} tokens: ${p.tokensPerSecond.toFixed(2)} tok/s`);
  }
  const decode = [];
  let generated = [];
  const promptIds = peer.tokenize(DECODE_PROMPT, { addBos: true });
  for (let r = 0; r < o.repeat; r++) {
    const d = await peer.timeDecode(promptIds, o.decode);
    decode.push(d.tokensPerSecond);
    generated = d.tokens;
    log(`llama.cpp: decode ${d.tokens.length} tokens: ${d.tokensPerSecond.toFixed(2)} tok/s`);
  }
  const out = {
    engine: "llama.cpp",
    loadSeconds,
    prefillTokens: ids.length,
    prefillTokensPerSecond: median(prefill),
    prefillSamples: prefill,
    decodeTokens: generated.length,
    decodeTokensPerSecond: median(decode),
    decodeSamples: decode,
    generated,
    prefillIds: ids,
    threads: o.threads,
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
    peer: info,
  };
  await peer.dispose();
  return out;
}

// ---- parent ------------------------------------------------------------------------------

function machineInfo() {
  let cpu = os.cpus()[0]?.model ?? "unknown";
  let flags = "";
  try {
    const ci = readFileSync("/proc/cpuinfo", "utf8");
    cpu = /^model name\s*:\s*(.+)$/m.exec(ci)?.[1]?.trim() ?? cpu;
    const f = /^flags\s*:\s*(.+)$/m.exec(ci)?.[1]?.split(/\s+/) ?? [];
    flags = ["avx2", "avx512f", "avx512_vnni", "avx512_bf16"].filter((x) => f.includes(x)).join(" ");
  } catch {}
  return {
    cpu,
    simd: flags,
    cores: os.availableParallelism?.() ?? os.cpus().length,
    ramGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
  };
}

function gitCommit() {
  try {
    const head = readFileSync(join(rootDir, ".git", "HEAD"), "utf8").trim();
    if (!head.startsWith("ref: ")) return head.slice(0, 12);
    const ref = head.slice(5);
    const p = join(rootDir, ".git", ref);
    if (existsSync(p)) return readFileSync(p, "utf8").trim().slice(0, 12);
    const packed = readFileSync(join(rootDir, ".git", "packed-refs"), "utf8");
    return packed.split("\n").find((l) => l.endsWith(` ${ref}`))?.slice(0, 12);
  } catch {
    return undefined;
  }
}

async function ensureModel(o) {
  if (o.model) {
    if (!existsSync(o.model)) throw new Error(`--model ${o.model}: no such file`);
    return { path: resolve(o.model), synthesized: false, shape: "custom", type: "as in file" };
  }
  const np = await importOurs();
  const shape = np.synthShapes[o.shape];
  if (!shape) throw new Error(`--shape ${o.shape}: unknown (known: ${Object.keys(np.synthShapes).join(", ")})`);
  mkdirSync(o.dir, { recursive: true });
  const path = join(o.dir, `${o.shape}-${o.type}-seed${o.seed}.gguf`);
  if (existsSync(path)) {
    log(`model: ${path} (cached)`);
    return { path, synthesized: false, shape: o.shape, dims: shape, type: o.type };
  }
  log(`model: synthesising ${o.shape} ${o.type} (seed ${o.seed}) into ${path} — once; cached for later runs`);
  const t0 = performance.now();
  let lastPct = -1;
  const w = np.synthModel({ shape, type: o.type, seed: o.seed, tokenizer: "llama2", name: `neuronpipe-bench-${o.shape}-${o.type}` });
  await w.write(path, {
    onProgress: (done, total) => {
      const pct = Math.floor((100 * done) / total);
      if (pct >= lastPct + 5 || done === total) {
        lastPct = pct;
        process.stderr.write(`\r[bench] synth ${pct}% (${(done / 2 ** 30).toFixed(2)} / ${(total / 2 ** 30).toFixed(2)} GiB)`);
      }
    },
  });
  process.stderr.write("\n");
  log(`model: written in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  return { path, synthesized: true, shape: o.shape, dims: shape, type: o.type };
}

function runChild(engine, o, modelPath) {
  const resultFile = join(os.tmpdir(), `neuronpipe-bench-${process.pid}-${engine.replace(/\W/g, "")}.json`);
  const args = [
    fileURLToPath(import.meta.url),
    "--child", engine,
    "--result", resultFile,
    "--model", modelPath,
    "--threads", String(o.threads),
    "--decode", String(o.decode),
    "--prefill", String(o.prefill),
    "--repeat", String(o.repeat),
    ...(o.peerFlashAttention ? ["--peer-flash-attention"] : []),
  ];
  return new Promise((resolvePromise, reject) => {
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    const stat0 = cpuTimes();
    const child = spawn(process.execPath, args, { stdio: ["ignore", "inherit", "inherit"] });
    // an interrupted benchmark must not leave a child holding gigabytes and both cores
    const stop = (sig) => {
      child.kill(sig);
      process.exit(130);
    };
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
    child.on("error", reject);
    child.on("exit", (code, signal) => {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
      if (code !== 0) {
        reject(new Error(`${engine} run failed (${signal ?? `exit ${code}`})`));
        return;
      }
      try {
        const r = JSON.parse(readFileSync(resultFile, "utf8"));
        rmSync(resultFile, { force: true });
        const wall = (performance.now() - t0) / 1000;
        const own = r.cpuSeconds + (process.cpuUsage(cpu0).user + process.cpuUsage(cpu0).system) / 1e6;
        r.wallSeconds = wall;
        const stat1 = cpuTimes();
        r.otherLoadCores = otherLoad(stat0, stat1, wall, own);
        r.stealCores = stealCores(stat0, stat1, wall);
        if (r.otherLoadCores !== undefined) {
          log(`${engine}: other processes used ${r.otherLoadCores.toFixed(2)} cores on average during the run, the hypervisor ${r.stealCores?.toFixed(2) ?? "?"} (steal)`);
        }
        resolvePromise(r);
      } catch (e) {
        reject(e);
      }
    });
  });
}

const commonPrefix = (a, b) => {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
};
/** Other processes' average core use above which a run is flagged as unreliable. */
const BUSY_CORES = 0.15;
const fmt = (x, d = 2) => (typeof x === "number" && Number.isFinite(x) ? x.toFixed(d) : "—");
const gib = (b) => (b / 2 ** 30).toFixed(2);

function report(o, model, machine, results) {
  const ours = results.neuronpipe;
  const peer = results["llama.cpp"];
  const ratios =
    ours && peer
      ? {
          decode: ours.decodeTokensPerSecond / peer.decodeTokensPerSecond,
          prefill: ours.prefillTokensPerSecond / peer.prefillTokensPerSecond,
        }
      : undefined;
  const fileBytes = statSync(model.path).size;
  const record = {
    date: new Date().toISOString(),
    command: `node bench/run.js ${process.argv.slice(2).join(" ")}`.trim(),
    machine,
    model: { path: model.path.startsWith(rootDir + "/") ? relative(rootDir, model.path) : model.path, shape: model.shape, dims: model.dims, type: model.type, fileBytes },
    settings: {
      threads: o.threads,
      decodeTokens: o.decode,
      prefillTokens: o.prefill,
      repeat: o.repeat,
      statistic: "median",
      peerFlashAttention: o.peerFlashAttention,
    },
    neuronpipeCommit: gitCommit(),
    engines: Object.fromEntries(Object.entries(results).map(([k, v]) => [k, { ...v, prefillIds: undefined }])),
    sameGreedyTokens: ours && peer ? JSON.stringify(ours.generated) === JSON.stringify(peer.generated) : undefined,
    greedyCommonPrefix: ours && peer ? commonPrefix(ours.generated, peer.generated) : undefined,
    samePrefillIds: ours && peer ? JSON.stringify(ours.prefillIds) === JSON.stringify(peer.prefillIds) : undefined,
    ratios,
  };
  mkdirSync(dirname(o.out), { recursive: true });

  const rows = [
    ["engine", "decode tok/s", `prefill tok/s (${o.prefill})`, "load s", "peak RSS GiB"],
    ...Object.values(results).map((r) => [
      r.engine === "llama.cpp" ? `llama.cpp (node-llama-cpp ${r.peer?.nodeLlamaCpp ?? ""})` : "neuronpipe",
      fmt(r.decodeTokensPerSecond),
      fmt(r.prefillTokensPerSecond),
      fmt(r.loadSeconds),
      gib(r.peakRssBytes),
    ]),
  ];
  if (ratios) rows.push(["ratio neuronpipe / llama.cpp", `${fmt(ratios.decode)}×`, `${fmt(ratios.prefill)}×`, "", ""]);
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  const line = (r) => `| ${r.map((c, i) => c.padEnd(widths[i])).join(" | ")} |`;
  const table = [line(rows[0]), `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`, ...rows.slice(1).map(line)].join("\n");

  const modelDesc =
    model.shape === "custom"
      ? `\`${record.model.path}\` (${gib(fileBytes)} GiB)`
      : `synthetic \`${model.shape}\`-shaped ${model.type.toUpperCase()} GGUF, random weights (${gib(fileBytes)} GiB; \`neuronpipe synth\`, seed ${o.seed})`;
  const snippet = [
    `### ${record.date.slice(0, 10)} — ${model.shape === "custom" ? "custom model" : model.shape} ${model.type}, ${o.threads} threads`,
    "",
    `- Machine: ${machine.cpu} (${machine.simd}), ${machine.cores} cores, ${machine.ramGiB} GiB RAM, ${machine.os}, Node ${machine.node}`,
    `- Model: ${modelDesc}`,
    `- Peer: llama.cpp through node-llama-cpp ${peer?.peer?.nodeLlamaCpp ?? "—"} (prebuilt CPU binary, mmap, Q4_0 repacking, flash attention ${o.peerFlashAttention ? "on" : "off"}), same file, same thread count, run separately`,
    `- Decode: greedy, ${o.decode} tokens after a short prompt, wall clock from the first to the last token; prefill: ${o.prefill} tokens in one batch; median of ${o.repeat} runs after a warm-up` +
      (record.neuronpipeCommit ? `; neuronpipe ${record.neuronpipeCommit}` : ""),
    "",
    table,
    "",
    `Command: \`npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(" ")}` : ""}\` (results: \`${relative(rootDir, o.out)}\`).`,
  ].join("\n");

  const busy = Object.values(results).filter((r) => (r.otherLoadCores ?? 0) > BUSY_CORES);
  record.machineBusy = busy.length > 0;
  writeFileSync(o.out, JSON.stringify(record, null, 2) + "\n");
  console.log(table);
  for (const r of busy) {
    console.log(
      `WARNING: other processes used ${r.otherLoadCores.toFixed(2)} cores on average while ${r.engine} ran: ` +
        "these figures are not reliable (rerun on an idle machine)",
    );
  }
  if (ratios) console.log(`\nneuronpipe / llama.cpp: decode ${fmt(ratios.decode)}×, prefill ${fmt(ratios.prefill)}×`);
  if (record.sameGreedyTokens === false) {
    console.log(
      `note: the greedy continuations agree on the first ${record.greedyCommonPrefix} of ${ours.generated.length} tokens ` +
        "(random-weight models have near-ties, where legitimate rounding differences flip the choice; see test/parity)",
    );
  }
  if (record.samePrefillIds === false) console.log("note: the engines tokenised the prefill text differently (see test/parity/tokenizer.test.ts)");
  console.log(`\nresults: ${relative(process.cwd(), o.out)}\n\n--- markdown for docs/benchmarks.md ---\n${snippet}\n---`);
  return record;
}

async function main() {
  const o = parse();
  if (o.child) {
    const r = o.child === "neuronpipe" ? await childOurs(o) : o.child === "llama.cpp" ? await childPeer(o) : undefined;
    if (!r) throw new Error(`--child ${o.child}: unknown engine`);
    const cpu = process.cpuUsage(); // all threads of this process
    r.cpuSeconds = (cpu.user + cpu.system) / 1e6;
    writeFileSync(o.result, JSON.stringify(r));
    return;
  }
  const engines = o.engine === "both" ? ["neuronpipe", "llama.cpp"] : [o.engine];
  for (const e of engines) if (e !== "neuronpipe" && e !== "llama.cpp") throw new Error(`--engine ${e}: use both, neuronpipe or llama.cpp`);
  if (engines.includes("llama.cpp")) {
    const { peerInstalled, PeerNotInstalledError } = await import("./peer/llama-peer.mjs");
    if (!peerInstalled()) throw new PeerNotInstalledError();
  }
  const machine = machineInfo();
  log(`machine: ${machine.cpu}, ${machine.cores} cores, ${machine.ramGiB} GiB, node ${machine.node}`);
  const model = await ensureModel(o);
  const results = {};
  for (const e of engines) {
    log(`--- ${e} (${o.threads} threads) ---`);
    results[e] = await runChild(e, o, model.path);
  }
  report(o, model, machine, results);
}

main().catch((e) => {
  process.stderr.write(`[bench] error: ${e?.message ?? e}\n`);
  process.exit(1);
});
