#!/usr/bin/env node
// A bounded load test of `neuronpipe serve` (issue 17), on loopback:
//
//   1. autocannon (a maintained HTTP load generator) holds C connections for D seconds, each
//      sending streamed chat completions (max_tokens T) one after another, while a further
//      client sends the same request in a loop with fetch and times each one's first token
//      (time to first token under the load) and its decode speed;
//   2. the same with the waiting line shorter than the connections (--queue-limit 2): the
//      requests beyond it must get the documented 503, nothing else.
//
// Reported: requests answered, non-2xx by status, errors and timeouts (must be 0), P50/P99 of
// the complete answer (autocannon) and of the first token (the timing client), tokens/s
// generated in total (the server's /metrics) — bench/results/server.json.
//
//   node bench/server.js [--model PATH] [--connections 8] [--duration 60] [--max-tokens 64]
//                        [--out bench/results/server.json]
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import { benchArgs } from "./lib/usage.mjs";

const rootDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { values: v } = benchArgs(import.meta.url, {
  model: { type: "string" },
  connections: { type: "string", default: "8" },
  duration: { type: "string", default: "60" },
  "max-tokens": { type: "string", default: "64" },
  out: { type: "string", default: join(rootDir, "bench", "results", "server.json") },
});
const log = (s) => process.stderr.write(`[server] ${s}\n`);
const body = JSON.stringify({
  messages: [
    { role: "system", content: "You are a sailor on the Pequod." },
    { role: "user", content: "Tell me about the white whale." },
  ],
  max_tokens: Number(v["max-tokens"]),
  temperature: 0.8,
  stream: true,
});

/** `neuronpipe serve` as a child process on a free port; resolves with its URL. */
function serve(extra) {
  const args = [join(rootDir, "bin", "neuronpipe.js"), "serve", "--port", "0", ...(v.model ? ["--model", v.model] : []), ...extra];
  const child = spawn(process.execPath, args, { stdio: ["ignore", "ignore", "pipe"] });
  return new Promise((res, rej) => {
    let err = "";
    child.stderr.on("data", (d) => {
      err += d;
      const m = /at (http:\/\/[^\s]+) /.exec(err);
      if (m) res({ child, url: m[1] });
    });
    child.once("exit", (code) => rej(new Error(`serve exited ${code}: ${err}`)));
  });
}

async function stop(child) {
  const gone = new Promise((r) => child.once("exit", r));
  child.kill("SIGINT");
  await gone;
}

const metric = (text, name) => Number(new RegExp(`^${name} ([\\d.e+]+)$`, "m").exec(text)?.[1] ?? NaN);
const pct = (a, p) => {
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};

/** One streamed request timed by its client: first token, tokens, total. */
async function timedRequest(url) {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", body, headers: { "content-type": "application/json" } });
  if (r.status !== 200) return { status: r.status };
  let first = 0;
  let pieces = 0;
  let buf = "";
  const dec = new TextDecoder();
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const j = JSON.parse(ev.slice(6));
      if (j.choices?.[0]?.delta?.content) {
        if (!first) first = performance.now();
        pieces++;
      }
    }
  }
  const t1 = performance.now();
  return { status: 200, ttftMs: first - t0, totalMs: t1 - t0, pieces };
}

async function phase(name, extra, connections, duration) {
  const { child, url } = await serve(extra);
  try {
    const before = await (await fetch(`${url}/metrics`)).text();
    let running = true;
    const timed = [];
    const timer = (async () => {
      while (running) timed.push(await timedRequest(url));
    })();
    const t0 = performance.now();
    const result = await autocannon({
      url: `${url}/v1/chat/completions`,
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
      connections,
      duration,
      timeout: 60,
    });
    running = false;
    await timer;
    const seconds = (performance.now() - t0) / 1000;
    const after = await (await fetch(`${url}/metrics`)).text();
    const generated = metric(after, "neuronpipe_generated_tokens_total") - metric(before, "neuronpipe_generated_tokens_total");
    const ok = timed.filter((t) => t.status === 200);
    const out = {
      name,
      serveFlags: extra,
      connections,
      durationSeconds: duration,
      requests: result.requests.total,
      non2xx: result.non2xx,
      statusCodes: result.statusCodeStats,
      errors: result.errors,
      timeouts: result.timeouts,
      latencyMs: { p50: result.latency.p50, p99: result.latency.p99, mean: result.latency.mean },
      timingClient: {
        requests: timed.length,
        answered: ok.length,
        refused503: timed.filter((t) => t.status === 503).length,
        ttftMs: ok.length ? { p50: pct(ok.map((t) => t.ttftMs), 0.5), p99: pct(ok.map((t) => t.ttftMs), 0.99) } : null,
        decodeTokPerSec: ok.length ? pct(ok.map((t) => (t.pieces - 1) / ((t.totalMs - t.ttftMs) / 1000)), 0.5) : null,
      },
      generatedTokens: generated,
      tokensPerSecond: generated / seconds,
      rejectedByServer: metric(after, "neuronpipe_requests_rejected_total"),
      cancelledByServer: metric(after, "neuronpipe_generations_cancelled_total"),
    };
    log(
      `${name}: ${out.requests} requests by autocannon (non-2xx ${out.non2xx} ${JSON.stringify(out.statusCodes)}, errors ${out.errors}, timeouts ${out.timeouts}); ` +
        `answer P50 ${out.latencyMs.p50} ms P99 ${out.latencyMs.p99} ms; first token (timing client, ${ok.length} requests) ` +
        `P50 ${out.timingClient.ttftMs?.p50.toFixed(1)} ms P99 ${out.timingClient.ttftMs?.p99.toFixed(1)} ms; ${out.tokensPerSecond.toFixed(1)} tok/s generated in total`,
    );
    return out;
  } finally {
    await stop(child);
  }
}

const connections = Number(v.connections);
const duration = Number(v.duration);
const results = { date: new Date().toISOString(), model: v.model ?? "models/neuronpipe-default.gguf", maxTokens: Number(v["max-tokens"]), phases: [] };
results.phases.push(await phase("queued (waiting line 16)", [], connections, duration));
results.phases.push(await phase("overloaded (waiting line 2)", ["--queue-limit", "2"], connections, Math.min(duration, 20)));
mkdirSync(dirname(v.out), { recursive: true });
writeFileSync(v.out, JSON.stringify(results, null, 2) + "\n");
log(`wrote ${v.out}`);
const bad = results.phases.filter((p) => p.errors > 0 || p.timeouts > 0 || Object.keys(p.statusCodes).some((c) => c !== "200" && c !== "503"));
if (bad.length) {
  log(`errors other than 503: ${bad.map((p) => p.name).join(", ")}`);
  process.exitCode = 1;
}
