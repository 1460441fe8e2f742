#!/usr/bin/env node
// A/B speed of two builds of neuronpipe on the same files, in one run: each case is decoded by
// the old build's CLI and the new build's CLI in alternation (old, new, old, new, …), each run
// in its own process, and the median and spread of decode tok/s are reported with the ratio.
// This is how a reshape proves it kept the speed (docs/benchmarks.md, "A/B of a reshape").
//
//   node bench/ab.js --old /path/to/old/checkout [--new .] [--reps 7] [--tokens 200]
//                    [--7b PACK --7b-budget BYTES --7b-tokens 32 --7b-reps 3] [--out FILE]
//
// Both checkouts must be built (dist/ and native/build). Cases: the default model (plain:
// dense; its pack: every decoder at 26 MiB — half of the FFN — and with the whole pack
// resident), and with --7b a 7B-shaped pack in the pipeline decoder at the given budget, traced
// by the new build for its orchestration share.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { benchArgs } from "./lib/usage.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const { values: v } = benchArgs(import.meta.url, {
  old: { type: "string" },
  new: { type: "string", default: resolve(here, "..") },
  reps: { type: "string", default: "7" },
  tokens: { type: "string", default: "200" },
  "7b": { type: "string" },
  "7b-budget": { type: "string" },
  "7b-tokens": { type: "string", default: "32" },
  "7b-reps": { type: "string", default: "3" },
  threads: { type: "string", default: "2" },
  out: { type: "string" },
  "skip-speed": { type: "boolean", default: false },
});
if (!v.old) {
  process.stderr.write("usage: node bench/ab.js --old OLD_CHECKOUT [--new NEW_CHECKOUT] [--reps N] [--7b PACK --7b-budget BYTES]\n");
  process.exit(2);
}
const builds = { old: resolve(v.old), new: resolve(v.new) };
const log = (...a) => process.stderr.write(`[bench:ab] ${a.join(" ")}\n`);
const tmp = mkdtempSync(join(os.tmpdir(), "np-ab-"));
const defaultModel = join(builds.new, "models", "neuronpipe-default.gguf");
const defaultPack = join(tmp, "default.pack.gguf");

function cli(build, args) {
  const r = spawnSync(process.execPath, [join(builds[build], "bin", "neuronpipe.js"), ...args], { encoding: "utf8", maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`${build}: neuronpipe ${args.join(" ")} failed: ${r.stderr.slice(-2000)}`);
  return r.stdout;
}

/** One generation's decode tok/s (the CLI's stats), and its token ids. */
function run(build, args, tokens) {
  const out = cli(build, ["generate", "--prompt", "The whale", "--max-tokens", String(tokens), "--temperature", "0", "--threads", v.threads, "--json", ...args]);
  const j = JSON.parse(out.trim().split("\n").pop());
  return { tps: j.stats.decodeTokensPerSecond, ids: j.tokens };
}

const median = (a) => {
  const s = [...a].sort((x, y) => x - y);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

function abCase(name, args, { reps, tokens }) {
  const got = { old: [], new: [] };
  const ids = {};
  for (let i = 0; i < reps; i++) {
    for (const b of i % 2 ? ["new", "old"] : ["old", "new"]) {
      const r = run(b, args, tokens);
      got[b].push(r.tps);
      ids[b] ??= r.ids;
    }
  }
  const m = { old: median(got.old), new: median(got.new) };
  const row = {
    case: name,
    oldTokS: m.old,
    newTokS: m.new,
    ratio: m.new / m.old,
    oldRange: [Math.min(...got.old), Math.max(...got.old)],
    newRange: [Math.min(...got.new), Math.max(...got.new)],
    sameTokens: JSON.stringify(ids.old) === JSON.stringify(ids.new),
    runs: got,
  };
  log(`${name}: old ${m.old.toFixed(1)} (${row.oldRange.map((x) => x.toFixed(1)).join("–")}), new ${m.new.toFixed(1)} (${row.newRange.map((x) => x.toFixed(1)).join("–")}) tok/s → ${row.ratio.toFixed(3)}×${row.sameTokens ? "" : " TOKENS DIFFER"}`);
  return row;
}

/** A build's trace tools (they moved in the decoder reshape: src/trace*, formerly src/pipeline/trace-*). */
async function traceTools(build) {
  const dist = join(builds[build], "dist", "src");
  const first = async (...paths) => {
    for (const p of paths) {
      try {
        return await import(pathToFileURL(join(dist, ...p)).href);
      } catch {}
    }
    throw new Error(`${build}: no trace tools under ${dist}`);
  };
  const { readTrace } = await first(["trace", "read.js"], ["pipeline", "trace-read.js"]);
  const { traceStats } = await first(["trace-tools", "stats.js"], ["pipeline", "trace-stats.js"]);
  return { readTrace, traceStats };
}

/** Orchestration share and latency of a traced run of each build (its own trace tools), in alternation. */
async function orchestration(args, tokens, reps = 1) {
  const out = { old: [], new: [] };
  for (let i = 0; i < reps; i++) {
    for (const b of ["old", "new"]) {
      const trace = join(tmp, `t-${b}-${Date.now()}.jsonl`);
      run(b, [...args, "--trace", trace], tokens);
      const { readTrace, traceStats } = await traceTools(b);
      const st = traceStats(readTrace(trace));
      rmSync(trace);
      out[b].push({ orchestrationShare: st.orchestrationShare, ioHiddenShare: st.ioHiddenShare, latencyMs: st.latencyMs });
    }
  }
  const med = (b, f) => median(out[b].map(f));
  return {
    new: { orchestrationShare: med("new", (x) => x.orchestrationShare), ioHiddenShare: med("new", (x) => x.ioHiddenShare), p99OverMean: med("new", (x) => x.latencyMs.p99 / x.latencyMs.mean) },
    old: { orchestrationShare: med("old", (x) => x.orchestrationShare), ioHiddenShare: med("old", (x) => x.ioHiddenShare), p99OverMean: med("old", (x) => x.latencyMs.p99 / x.latencyMs.mean) },
    runs: out,
  };
}

const rows = [];
try {
  cli("new", ["pack", "--model", defaultModel, "--out", defaultPack]);
  const reps = Number(v.reps);
  const tokens = Number(v.tokens);
  if (!v["skip-speed"]) {
    rows.push(abCase("default model, dense (plain GGUF)", ["--model", defaultModel], { reps, tokens }));
    for (const mode of ["pipeline", "blocking", "sync", "mmap"]) {
      const mem = mode === "mmap" ? [] : ["--memory", "26MiB"];
      rows.push(abCase(`default pack, --mode ${mode}${mem.length ? " at 26 MiB (half of the FFN)" : ""}`, ["--model", defaultPack, "--mode", mode, ...mem], { reps, tokens }));
    }
    for (const mode of ["pipeline", "sync"]) rows.push(abCase(`default pack, --mode ${mode}, whole pack resident`, ["--model", defaultPack, "--mode", mode], { reps, tokens }));
  }
  const defaultOrch = await orchestration(["--model", defaultPack, "--mode", "pipeline", "--memory", "26MiB"], tokens, 3);
  log(`default pack pipeline at 26 MiB: orchestration old ${(100 * defaultOrch.old.orchestrationShare).toFixed(1)}%, new ${(100 * defaultOrch.new.orchestrationShare).toFixed(1)}% of token time`);
  let orch7b;
  if (v["7b"]) {
    const args = ["--model", v["7b"], "--mode", "pipeline", "--memory", v["7b-budget"], "--ctx", "512"];
    if (!v["skip-speed"]) rows.push(abCase(`7B-shaped Q4_0 pack, --mode pipeline, --memory ${(Number(v["7b-budget"]) / 2 ** 30).toFixed(2)} GiB (half of the FFN's bytes)`, args, { reps: Number(v["7b-reps"]), tokens: Number(v["7b-tokens"]) }));
    orch7b = await orchestration(args, Number(v["7b-tokens"]), Number(v["7b-reps"]));
    const f = (o) => `orchestration ${(100 * o.orchestrationShare).toFixed(1)}%, I/O hidden ${(100 * o.ioHiddenShare).toFixed(1)}%, P99/mean ${o.p99OverMean.toFixed(2)}`;
    log(`7B pipeline (median of ${v["7b-reps"]} traced runs each): old ${f(orch7b.old)}; new ${f(orch7b.new)}`);
  }
  const record = {
    date: new Date().toISOString(),
    machine: { cpus: os.cpus().length, cpu: os.cpus()[0]?.model, memory: os.totalmem() },
    builds,
    threads: Number(v.threads),
    rows,
    defaultPipelineOrchestration: defaultOrch,
    pipeline7bOrchestration: orch7b,
  };
  const out = v.out ?? join(here, "results", "ab-latest.json");
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify(record, null, 2) + "\n");
  const lines = ["| case | old tok/s (range) | new tok/s (range) | new ÷ old | same tokens |", "|---|---:|---:|---:|:-:|"];
  const f = (x) => x.toFixed(x < 10 ? 2 : 1);
  for (const r of rows) lines.push(`| ${r.case} | ${f(r.oldTokS)} (${r.oldRange.map(f).join("–")}) | ${f(r.newTokS)} (${r.newRange.map(f).join("–")}) | ${r.ratio.toFixed(3)}× | ${r.sameTokens ? "yes" : "NO"} |`);
  process.stdout.write(lines.join("\n") + "\n");
  log(`wrote ${out}`);
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
