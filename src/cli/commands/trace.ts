// `neuronpipe trace export|plot|stats TRACE.jsonl`: turn a generation trace into a Perfetto /
// chrome://tracing file, an SVG timeline, or the numbers that say whether I/O was hidden.
import { existsSync, realpathSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import type { ParseArgsConfig } from "node:util";
import { toChromeTrace } from "../../trace-tools/export.js";
import { traceSvg } from "../../trace-tools/plot.js";
import { readTrace } from "../../trace/read.js";
import { traceStats } from "../../trace-tools/stats.js";
import { formatBudget, tokenBudget } from "../../trace-tools/budget.js";
import { cachedMachine, machineCachePath, measureMachine, type MachineBounds } from "../../plan/machine.js";
import { formatBytes } from "../../util/bytes.js";
import { startInspector } from "../../inspect/server.js";
import { replayTrace, type ReplayStop } from "../../trace-tools/replay.js";

const USAGE = "neuronpipe trace export|plot|stats|replay TRACE.jsonl [--out FILE] [--tokens A..B] [--width PX] [--until token:N[/layer:L]] [--inspect [PORT]] [--step-ms MS]";

type Values = Record<string, string | boolean | undefined>;

const SUBCOMMANDS = ["export", "plot", "stats", "replay"] as const;
type Subcommand = (typeof SUBCOMMANDS)[number];

/** Options each subcommand reads; any other one given is a mistake worth reporting. */
const OPTIONS_OF: Record<Subcommand, readonly string[]> = { export: ["out"], plot: ["out", "tokens", "width"], stats: [], replay: ["until", "inspect", "step-ms", "json"] };

export const traceCommand: {
  summary: string;
  usage: string;
  options: NonNullable<ParseArgsConfig["options"]>;
  help: Record<string, string>;
  run(values: Values, positionals: string[]): Promise<void>;
} = {
  summary: "export, plot, summarise or replay a generation trace (JSON lines)",
  usage: USAGE,
  options: {
    out: { type: "string", short: "o" },
    tokens: { type: "string" },
    width: { type: "string" },
    until: { type: "string" },
    inspect: { type: "string" },
    "step-ms": { type: "string" },
    json: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  },
  help: {
    out: "export/plot: output file (default: TRACE.json or TRACE.svg next to the input)",
    tokens: "plot: inclusive decode-token range A..B, or one token N (default: the first 3 decode tokens)",
    width: "plot: image width in px (default 1200)",
    until: "replay: stop when decode step N reaches layer L (token:N or token:N/layer:L)",
    inspect: "replay: serve the live inspector page on 127.0.0.1:PORT (default 4000) and replay slowly while it watches",
    "step-ms": "replay: wait this long after each delivered event (default 0; 20 with --inspect)",
    json: "replay: print the result as JSON (states replayed and recorded)",
  },
  async run(values, positionals) {
    const [sub, input, ...extra] = positionals;
    if (!sub) throw new Error(`trace needs a subcommand: ${SUBCOMMANDS.join(", ")} (usage: ${USAGE})`);
    if (!(SUBCOMMANDS as readonly string[]).includes(sub)) throw new Error(`unknown trace subcommand "${sub}" (known: ${SUBCOMMANDS.join(", ")})`);
    const subcommand = sub as Subcommand;
    if (!input) throw new Error(`trace ${subcommand} needs a trace file: neuronpipe trace ${subcommand} TRACE.jsonl`);
    if (extra.length > 0) throw new Error(`trace ${subcommand} takes one trace file, got also: ${extra.join(" ")}`);
    for (const name of ["out", "tokens", "width", "until", "inspect", "step-ms", "json"]) {
      if (values[name] !== undefined && !OPTIONS_OF[subcommand].includes(name)) throw new Error(`--${name} does not apply to trace ${subcommand}`);
    }
    if (!existsSync(input)) throw new Error(`trace file ${input} does not exist`);
    // read options before the (possibly large) trace, so a typo fails fast
    const tokens = values.tokens === undefined ? undefined : parseTokenRange(String(values.tokens));
    const width = values.width === undefined ? undefined : parseWidth(String(values.width));
    const records = readTrace(input);

    if (subcommand === "stats") {
      process.stdout.write(formatStats(input, records));
      return;
    }
    if (subcommand === "replay") {
      await replayCommand(input, records, values);
      return;
    }
    const out = (values.out as string | undefined) ?? withExtension(input, subcommand === "export" ? ".json" : ".svg");
    if (sameFile(out, input)) throw new Error(`--out ${out} is the input trace; choose another output path`);
    if (subcommand === "export") {
      const chrome = toChromeTrace(records);
      const text = JSON.stringify(chrome);
      writeFileSync(out, text);
      process.stdout.write(`wrote ${out} (${chrome.traceEvents.length} events, ${formatBytes(Buffer.byteLength(text))}); open it in ui.perfetto.dev or chrome://tracing\n`);
    } else {
      const svg = traceSvg(records, { tokens, width });
      writeFileSync(out, svg);
      const spans = svg.match(/<rect class="span"/g)?.length ?? 0;
      process.stdout.write(`wrote ${out} (${tokens ? `tokens ${tokens[0]}..${tokens[1]}` : "first decode tokens"}, ${spans} spans, ${formatBytes(Buffer.byteLength(svg))})\n`);
    }
  },
};

/** "token:3" → {token 3}; "token:3/layer:2" → {token 3, layer 2}. */
export function parseUntil(s: string): ReplayStop {
  const m = /^\s*token:(\d+)(?:\/layer:(\d+))?\s*$/.exec(s);
  if (!m) throw new Error(`--until must be token:N or token:N/layer:L (e.g. token:3/layer:2), got "${s}"`);
  return { token: Number(m[1]), layer: m[2] === undefined ? undefined : Number(m[2]) };
}

async function replayCommand(input: string, records: ReturnType<typeof readTrace>, values: Values): Promise<void> {
  const until = values.until === undefined ? undefined : parseUntil(String(values.until));
  const port = values.inspect === undefined ? undefined : Number(values.inspect === "" ? 4000 : values.inspect);
  if (port !== undefined && !(Number.isInteger(port) && port >= 0 && port < 65536)) throw new Error(`--inspect takes a port number (0..65535), got "${values.inspect}"`);
  const stepMs = values["step-ms"] === undefined ? (port !== undefined ? 20 : 0) : Number(values["step-ms"]);
  if (!(Number.isFinite(stepMs) && stepMs >= 0)) throw new Error(`--step-ms must be a number ≥ 0, got "${values["step-ms"]}"`);
  const inspector = port === undefined ? undefined : await startInspector({ port, title: `neuronpipe replay — ${input}` });
  if (inspector) process.stderr.write(`inspector: ${inspector.url} (replaying at ${stepMs} ms per event)\n`);
  try {
    const r = await replayTrace(records, {
      until,
      inspect: inspector?.inspect,
      onStep: stepMs > 0 ? () => new Promise((res) => setTimeout(res, stepMs)) : undefined,
    });
    if (values.json) {
      process.stdout.write(JSON.stringify(r) + "\n");
    } else {
      const lines = [
        `${input}: replayed ${r.delivered} events into the machines${r.stoppedAt !== undefined ? ` (stopped at record ${r.stoppedAt}: ${values.until})` : ""}`,
        `states: ${r.states.length} replayed, ${r.recorded.length} recorded — ${r.firstDifference ? `${r.firstDifference.actor} parts at its snapshot ${r.firstDifference.index}: replayed ${fmtState(r.firstDifference.replayed)}, recorded ${fmtState(r.firstDifference.recorded)}` : r.stoppedAt !== undefined ? "every actor's the same up to the stop" : "every actor's identical"}`,
        `session: ${fmtState(r.session)}${r.session?.context?.error ? ` — ${r.session.context.error}` : ""}`,
      ];
      if (r.pipeline) lines.push(`pipeline: ${fmtState(r.pipeline)}`);
      process.stdout.write(lines.join("\n") + "\n");
    }
    if (inspector) {
      process.stderr.write("replay done; the inspector keeps serving — Ctrl-C to stop\n");
      await new Promise<void>((res) => process.once("SIGINT", () => res()));
    }
    if (r.firstDifference && r.stoppedAt === undefined) process.exitCode = 3;
  } finally {
    await inspector?.close();
  }
}

function fmtState(s?: { actor: string; state: string; status?: string }): string {
  return s ? `${s.actor} ${s.state}${s.status && s.status !== "active" ? ` (${s.status})` : ""}` : "—";
}

/** "3..7" → [3, 7]; "4" → [4, 4]. */
export function parseTokenRange(s: string): [number, number] {
  const m = /^\s*(\d+)\s*(?:\.\.\s*(\d+)\s*)?$/.exec(s);
  if (!m) throw new Error(`--tokens must be a decode-token range A..B (e.g. 0..2) or one token N, got "${s}"`);
  const a = Number(m[1]);
  const b = m[2] === undefined ? a : Number(m[2]);
  if (b < a) throw new Error(`--tokens ${s}: the range ends before it starts`);
  return [a, b];
}

function parseWidth(s: string): number {
  const w = Number(s);
  if (!Number.isInteger(w) || w < 200 || w > 100_000) throw new Error(`--width must be a whole number of px from 200 to 100000, got "${s}"`);
  return w;
}

/** trace.jsonl → trace.json; a name without .jsonl just gets the extension swapped or added. */
function withExtension(path: string, ext: string): string {
  const m = /\.[^./\\]*$/.exec(path);
  return (m ? path.slice(0, m.index) : path) + ext;
}

function sameFile(a: string, b: string): boolean {
  if (resolve(a) === resolve(b)) return true;
  // through symlinks too, when both exist
  return existsSync(a) && existsSync(b) && realpathSync(a) === realpathSync(b);
}

function formatStats(path: string, records: ReturnType<typeof readTrace>): string {
  const s = traceStats(records);
  const header = records[0]?.kind === "header" ? records[0] : undefined;
  const msText = (us: number) => `${(us / 1000).toFixed(3)} ms`;
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  const l = s.latencyMs;
  const lines = [
    `${path}: ${header ? `mode ${header.mode}, model ${header.model}, ` : ""}${l.count} decode tokens`,
    `I/O time            ${msText(s.ioUs)}`,
    `compute time        ${msText(s.computeUs)}`,
    `I/O hidden          ${pct(s.ioHiddenShare)} of I/O time overlapped compute (${msText(s.ioHiddenUs)})`,
    `orchestration       ${pct(s.orchestrationShare)} of decode time (neither compute nor I/O)`,
    l.count > 0
      ? `latency per token   mean ${l.mean.toFixed(3)} ms, P50 ${l.p50.toFixed(3)} ms, P90 ${l.p90.toFixed(3)} ms, P99 ${l.p99.toFixed(3)} ms`
      : `latency per token   no decode tokens in this trace`,
  ];
  let text = lines.join("\n") + "\n";
  if (header?.costs && l.count > 0) {
    const budget = tokenBudget(records, machineBounds(header.model));
    if (budget) text += formatBudget(budget);
  } else if (l.count > 0) text += "per-token time budget: this trace's header has no step costs (written before neuronpipe recorded them)\n";
  return text;
}

/** This host's measured bounds: cached, else measured now (memory, and the disk on the traced model's file when it is here). */
function machineBounds(modelPath: string): MachineBounds {
  const cached = cachedMachine();
  if (cached && (cached.disk || !existsSync(modelPath))) return cached;
  process.stderr.write(`measuring this machine's memory and disk bandwidth (once; kept in ${machineCachePath()}) …\n`);
  return measureMachine({ diskFile: existsSync(modelPath) ? modelPath : undefined });
}
