// `neuronpipe trace export|plot|stats TRACE.jsonl`: turn a generation trace into a Perfetto /
// chrome://tracing file, an SVG timeline, or the numbers that say whether I/O was hidden.
import { existsSync, realpathSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import type { ParseArgsConfig } from "node:util";
import { toChromeTrace } from "../../trace-tools/export.js";
import { traceSvg } from "../../trace-tools/plot.js";
import { readTrace } from "../../trace/read.js";
import { traceStats } from "../../trace-tools/stats.js";
import { formatBytes } from "../../util/bytes.js";

const USAGE = "neuronpipe trace export|plot|stats TRACE.jsonl [--out FILE] [--tokens A..B] [--width PX]";

type Values = Record<string, string | boolean | undefined>;

const SUBCOMMANDS = ["export", "plot", "stats"] as const;
type Subcommand = (typeof SUBCOMMANDS)[number];

/** Options each subcommand reads; any other one given is a mistake worth reporting. */
const OPTIONS_OF: Record<Subcommand, readonly string[]> = { export: ["out"], plot: ["out", "tokens", "width"], stats: [] };

export const traceCommand: {
  summary: string;
  usage: string;
  options: NonNullable<ParseArgsConfig["options"]>;
  help: Record<string, string>;
  run(values: Values, positionals: string[]): Promise<void>;
} = {
  summary: "export, plot or summarise a generation trace (JSON lines)",
  usage: USAGE,
  options: {
    out: { type: "string", short: "o" },
    tokens: { type: "string" },
    width: { type: "string" },
    help: { type: "boolean", short: "h" },
  },
  help: {
    out: "export/plot: output file (default: TRACE.json or TRACE.svg next to the input)",
    tokens: "plot: inclusive decode-token range A..B, or one token N (default: the first 3 decode tokens)",
    width: "plot: image width in px (default 1200)",
  },
  async run(values, positionals) {
    const [sub, input, ...extra] = positionals;
    if (!sub) throw new Error(`trace needs a subcommand: ${SUBCOMMANDS.join(", ")} (usage: ${USAGE})`);
    if (!(SUBCOMMANDS as readonly string[]).includes(sub)) throw new Error(`unknown trace subcommand "${sub}" (known: ${SUBCOMMANDS.join(", ")})`);
    const subcommand = sub as Subcommand;
    if (!input) throw new Error(`trace ${subcommand} needs a trace file: neuronpipe trace ${subcommand} TRACE.jsonl`);
    if (extra.length > 0) throw new Error(`trace ${subcommand} takes one trace file, got also: ${extra.join(" ")}`);
    for (const name of ["out", "tokens", "width"]) {
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
  return lines.join("\n") + "\n";
}
