// The per-token time budget: where a decode token's time went, step by step, beside the time
// this machine needs to move the bytes each step touched (its bound). A step far above its bound
// is where work is lost; "reads waited for" and "orchestration" are time no kernel ran.
//
// Times are per decode token, means over the trace: the length of the union of a step's spans
// inside the token's interval (steps on different workers may overlap, so rows need not add up
// to the token). Bytes come from the trace header's costs (the model's tensors) and the token
// records' counts (neurons predicted, fired; the position for the KV cache); bounds from the
// machine's measured bandwidths (src/tools/machine.ts).
import type { SpanName, SpanRecord, TokenRecord, TraceHeader, TraceRecord } from "../trace/recorder.js";
import { CoverageIndex, mergeIntervals, traceStats, type Interval } from "./stats.js";
import { memoryBytesPerUs, type MachineBounds } from "../plan/machine.js";

export interface BudgetRow {
  step: string;
  /** Mean µs per decode token. */
  us: number;
  /** Mean bytes per decode token the step touched (memory) or read (storage); undefined when not attributable. */
  bytes?: number;
  /** Mean µs per token the machine needs for those bytes. */
  boundUs?: number;
  /** Mean read requests per token (reads row). */
  requests?: number;
}

export interface TokenBudget {
  tokens: number;
  rows: BudgetRow[];
  /** Neurons per token, all layers (sparse decoders). */
  predicted?: number;
  fired?: number;
  machine: MachineBounds;
}

const STEPS: { step: string; names: SpanName[] }[] = [
  { step: "attention", names: ["attention"] },
  { step: "predictor", names: ["predict"] },
  { step: "gate", names: ["gate"] },
  { step: "up/down", names: ["up", "down"] },
  { step: "gate+up+down", names: ["ffn"] },
  { step: "FFN total", names: ["gate", "up", "down", "ffn"] },
  { step: "output", names: ["logits"] },
];

/** The budget of the trace's decode tokens, or undefined when it has none or its header has no costs. */
export function tokenBudget(records: readonly TraceRecord[], machine: MachineBounds): TokenBudget | undefined {
  const header = records.find((r): r is TraceHeader => r.kind === "header");
  const costs = header?.costs;
  const tokens = records.filter((r): r is TokenRecord => r.kind === "token" && r.index >= 0);
  if (!costs || tokens.length === 0) return undefined;
  const spans = records.filter((r): r is SpanRecord => r.kind === "span");
  const coverage = new Map<string, CoverageIndex>();
  for (const { step, names } of STEPS) coverage.set(step, new CoverageIndex(mergeIntervals(spans.filter((s) => names.includes(s.name)).map((s): Interval => [s.t0, s.t1]))));
  const reads = spans.filter((s) => s.lane === "io" && s.name === "read").sort((a, b) => a.t0 - b.t0);
  const stats = traceStats(records);
  const perToken = new Map(stats.tokens.filter((t) => t.index >= 0).map((t) => [t.index, t]));
  const memBw = memoryBytesPerUs(machine);
  const sparse = costs.gateRowBytes !== undefined;
  const fused = spans.some((s) => s.name === "ffn") && sparse;

  const sum: Record<string, { us: number; bytes: number }> = {};
  const add = (step: string, us: number, bytes = 0) => {
    const s = (sum[step] ??= { us: 0, bytes: 0 });
    s.us += us;
    s.bytes += bytes;
  };
  let predicted = 0;
  let fired = 0;
  let readBytes = 0;
  let readReqs = 0;
  let r = 0;
  for (const t of tokens) {
    const within = (step: string) => coverage.get(step)!.within(t.t0, t.t1);
    const p = t.predicted ?? 0;
    const f = t.fired ?? 0;
    predicted += p;
    fired += f;
    const ffnBytes = sparse ? p * costs.gateRowBytes! + f * costs.upDownRowBytes! : costs.nLayer * costs.denseFfnBytes;
    add("attention", within("attention"), costs.nLayer * (costs.attentionBytes + costs.kvBytesPerPosition * ((t.pos ?? 0) + 1)));
    add("predictor", within("predictor"), costs.predictorBytes ?? 0);
    add("gate", within("gate"), sparse && !fused ? p * costs.gateRowBytes! : 0);
    add("up/down", within("up/down"), sparse && !fused ? f * costs.upDownRowBytes! : 0);
    add("gate+up+down", within("gate+up+down"), sparse ? 0 : ffnBytes);
    add("FFN total", within("FFN total"), ffnBytes);
    add("output", within("output"), costs.outputBytes);
    // read batches that started during the token
    while (r < reads.length && reads[r]!.t0 < t.t0) r++;
    for (let k = r; k < reads.length && reads[k]!.t0 < t.t1; k++) {
      readBytes += reads[k]!.bytes ?? 0;
      readReqs += reads[k]!.reads ?? 0;
    }
    const st = perToken.get(t.index);
    add("reads waited for", st?.ioWaitUs ?? 0);
    add("orchestration", st?.orchestrationUs ?? 0);
    add("token", t.t1 - t.t0);
  }
  const n = tokens.length;
  const rows: BudgetRow[] = [];
  const memRow = (step: string, attributable = true) => {
    const s = sum[step]!;
    rows.push({ step, us: s.us / n, ...(attributable ? { bytes: s.bytes / n, boundUs: s.bytes / n / memBw } : {}) });
  };
  memRow("attention");
  if (costs.predictorBytes !== undefined) memRow("predictor");
  if (sparse) {
    memRow("gate", !fused);
    memRow("up/down", !fused);
  }
  if (fused || !sparse) memRow("gate+up+down", !sparse);
  if (sparse) memRow("FFN total");
  memRow("output");
  // storage: bytes at the sequential rate or requests at the random-read rate, whichever is slower
  const disk = machine.disk;
  const readBound = disk ? Math.max(readBytes / n / (disk.sequentialGBps * 1e3), ((readReqs / n) * 1e6) / disk.random4kIops) : undefined;
  rows.push({ step: "reads waited for", us: sum["reads waited for"]!.us / n, ...(readBytes > 0 ? { bytes: readBytes / n, requests: readReqs / n, boundUs: readBound } : {}) });
  rows.push({ step: "orchestration", us: sum["orchestration"]!.us / n, boundUs: 0 });
  // the token: memory traffic of every step, overlapped at best with its reads
  const memBytes = rows.filter((x) => ["attention", "predictor", "FFN total", "output"].includes(x.step) || (!sparse && x.step === "gate+up+down")).reduce((a, x) => a + (x.bytes ?? 0), 0);
  rows.push({ step: "token", us: sum["token"]!.us / n, bytes: memBytes, boundUs: Math.max(memBytes / memBw, readBytes > 0 ? (readBound ?? 0) : 0) });
  return { tokens: n, rows, predicted: sparse ? predicted / n : undefined, fired: sparse ? fired / n : undefined, machine };
}

/** The budget as a text table. */
export function formatBudget(b: TokenBudget): string {
  const mem = b.machine.memory.map((m) => `${m.readGBps.toFixed(1)} GB/s on ${m.threads} thread${m.threads > 1 ? "s" : ""}`).join(", ");
  const disk = b.machine.disk ? `; storage ${b.machine.disk.sequentialGBps.toFixed(2)} GB/s sequential, ${(b.machine.disk.random4kIops / 1000).toFixed(0)}K reads/s of 4 KiB at depth ${b.machine.disk.queueDepth}` : "; storage not measured (neuronpipe machine --file PACK)";
  const lines = [
    `per-token time budget (${b.tokens} decode tokens, means; memory ${mem}${disk}):`,
    `  ${"step".padEnd(18)} ${"ms/token".padStart(9)} ${"share".padStart(6)} ${"MB/token".padStart(9)} ${"bound ms".padStart(9)} ${"× bound".padStart(8)}`,
  ];
  const token = b.rows.find((r) => r.step === "token")!;
  for (const r of b.rows) {
    const ms = r.us / 1000;
    const share = r.step === "token" ? "" : `${((100 * r.us) / token.us).toFixed(0)}%`;
    const mb = r.bytes === undefined ? "—" : (r.bytes / 1e6).toFixed(r.bytes < 1e7 ? 2 : 1);
    const bound = r.boundUs === undefined ? "—" : (r.boundUs / 1000).toFixed(2);
    const ratio = r.boundUs ? `${(r.us / r.boundUs).toFixed(1)}×` : "";
    const extra = r.requests !== undefined ? `  (${r.requests.toFixed(0)} reads)` : "";
    lines.push(`  ${r.step.padEnd(18)} ${ms.toFixed(2).padStart(9)} ${share.padStart(6)} ${mb.padStart(9)} ${bound.padStart(9)} ${ratio.padStart(8)}${extra}`);
  }
  if (b.predicted !== undefined) lines.push(`  neurons per token: ${b.predicted.toFixed(0)} predicted (gate rows), ${b.fired!.toFixed(0)} fired (up and down rows)`);
  lines.push("  (steps on different workers may overlap; bound = bytes ÷ bandwidth; reads: bytes at the sequential rate or requests at the 4 KiB rate, the slower)");
  return lines.join("\n") + "\n";
}
