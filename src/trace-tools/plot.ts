// A standalone SVG timeline of a trace window, for docs and for a quick look without Perfetto:
// one row per lane, spans as rectangles coloured by span name, token boundaries, a ms axis.
// Output is a pure function of the input (fixed palette, fixed number formatting), so a
// committed figure only changes when the trace does.
import type { Lane, SpanRecord, TokenRecord, TraceRecord } from "../trace/recorder.js";
import { spanLabel } from "./export.js";
import { traceStats } from "./stats.js";

export interface TraceSvgOptions {
  fromUs?: number; // window start (overrides the token range's)
  toUs?: number; // window end (overrides the token range's)
  tokens?: [number, number]; // inclusive decode-token range; default the first 3 decode tokens
  width?: number; // px, default 1200
  title?: string; // default "neuronpipe <mode> — <model>"
}

/** Layout in px; exported so tests can compute expected positions independently. */
export const SVG_LAYOUT = {
  left: 100, // lane labels live left of this
  right: 20,
  titleY: 20,
  axisLabelY: 44,
  tokenLabelY: 62,
  rowsTop: 70,
  rowHeight: 24,
  spanPad: 4, // between a row's edge and its spans
  minSpanWidth: 0.5, // a 3 µs span in a 10 ms window still shows
  legendItemWidth: 130,
  legendRowHeight: 18,
} as const;

const LANE_ORDER: readonly Lane[] = ["scheduler", "predictor", "compute", "io", "prefill"];

/** Colour by span name; "read" stands out because hiding it is the point of the pipeline. */
const PALETTE: Record<string, string> = {
  attention: "#4e79a7",
  predict: "#b07aa1",
  gate: "#59a14f",
  up: "#8cd17d",
  down: "#2f7d32",
  ffn: "#76b7b2",
  logits: "#9c755f",
  prefill: "#bab0ac",
  read: "#e15759",
  plan: "#f28e2b",
};
const UNKNOWN_COLOUR = "#999999";

export function traceSvg(records: readonly TraceRecord[], opts: TraceSvgOptions = {}): string {
  const L = SVG_LAYOUT;
  const width = opts.width ?? 1200;
  const header = records.find((r) => r.kind === "header");
  const spans = records.filter((r): r is SpanRecord => r.kind === "span");
  const tokens = records.filter((r): r is TokenRecord => r.kind === "token");
  const window = chooseWindow(spans, tokens, opts);
  const { fromUs, toUs } = window;
  const plotWidth = Math.max(1, width - L.left - L.right);
  const x = (t: number) => L.left + ((t - fromUs) / (toUs - fromUs)) * plotWidth;

  // rows for every lane the trace uses, even if idle in this window: an empty io row says something
  const lanes = LANE_ORDER.filter((lane) => spans.some((s) => s.lane === lane));
  const rowY = (lane: Lane) => L.rowsTop + lanes.indexOf(lane) * L.rowHeight;
  const rowsBottom = L.rowsTop + lanes.length * L.rowHeight;

  const body: string[] = [];
  const mode = header?.kind === "header" ? header.mode : "trace";
  const model = header?.kind === "header" ? header.model : "";
  const title = opts.title ?? `neuronpipe ${mode}${model ? ` — ${model}` : ""}`;
  const windowText = `${ms(fromUs)}–${ms(toUs)} ms${window.tokens ? ` (tokens ${window.tokens[0]}..${window.tokens[1]})` : ""}`;
  body.push(`<text x="${L.left}" y="${L.titleY}" font-size="14" font-weight="bold">${esc(`${title} · ${windowText}`)}</text>`);

  // time axis: ticks at round ms values, faint grid through the rows
  const step = niceStep((toUs - fromUs) / 1000 / Math.max(2, Math.floor(plotWidth / 100)));
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  for (let i = Math.ceil(fromUs / 1000 / step - 1e-9); i * step * 1000 <= toUs + 1e-6; i++) {
    const tx = num(x(i * step * 1000));
    body.push(`<line class="grid" x1="${tx}" y1="${L.axisLabelY + 4}" x2="${tx}" y2="${rowsBottom}" stroke="#e4e4e4"/>`);
    body.push(`<text x="${tx}" y="${L.axisLabelY}" font-size="10" text-anchor="middle">${(i * step).toFixed(decimals)}</text>`);
  }
  body.push(`<text x="${L.left - 8}" y="${L.axisLabelY}" font-size="10" text-anchor="end">ms</text>`);

  for (const lane of lanes) {
    const y = rowY(lane);
    body.push(`<rect class="row" x="${L.left}" y="${y}" width="${num(plotWidth)}" height="${L.rowHeight}" fill="${lanes.indexOf(lane) % 2 ? "#ffffff" : "#f6f6f6"}"/>`);
    body.push(`<text class="lane" x="${L.left - 8}" y="${y + L.rowHeight / 2 + 4}" font-size="12" text-anchor="end">${esc(lane)}</text>`);
  }

  const namesShown: string[] = [];
  for (const s of spans) {
    if (!inWindow(s, fromUs, toUs)) continue;
    const x0 = x(Math.max(s.t0, fromUs));
    const w = Math.max(L.minSpanWidth, x(Math.min(s.t1, toUs)) - x0);
    if (!namesShown.includes(s.name)) namesShown.push(s.name);
    const tip = `${spanLabel(s)}: ${ms(s.t0)}–${ms(s.t1)} ms (${num(s.t1 - s.t0)} µs)`;
    body.push(
      `<rect class="span" x="${num(x0)}" y="${rowY(s.lane) + L.spanPad}" width="${num(w)}" height="${L.rowHeight - 2 * L.spanPad}" fill="${colour(s.name)}"><title>${esc(tip)}</title></rect>`,
    );
  }

  // token boundaries: a line where each token starts (labelled) and where it ends
  const drawn = new Set<string>();
  for (const t of tokens) {
    if (!inWindow(t, fromUs, toUs)) continue;
    for (const [at, label] of [[t.t0, t.index < 0 ? "prefill" : `token ${t.index}`], [t.t1, ""]] as const) {
      if (at < fromUs || at > toUs) continue;
      const tx = num(x(at));
      if (!drawn.has(tx)) {
        drawn.add(tx);
        body.push(`<line class="token" x1="${tx}" y1="${L.tokenLabelY - 10}" x2="${tx}" y2="${rowsBottom}" stroke="#333333" stroke-width="0.75"/>`);
      }
      if (label && at < toUs) body.push(`<text x="${num(x(at) + 3)}" y="${L.tokenLabelY}" font-size="10">${esc(label)}</text>`);
    }
  }

  // caption: the pipeline's headline number, over the whole trace (not just this window)
  let y = rowsBottom + 20;
  const stats = traceStats(records);
  if (stats.ioUs > 0) {
    const caption = `I/O hidden behind compute: ${(100 * stats.ioHiddenShare).toFixed(1)}% of ${ms(stats.ioUs)} ms I/O (whole trace)`;
    body.push(`<text class="caption" x="${L.left}" y="${y}" font-size="11">${esc(caption)}</text>`);
    y += 20;
  }

  // legend: span names in palette order, then any unknown names in order of appearance
  const legendNames = [...Object.keys(PALETTE).filter((n) => namesShown.includes(n)), ...namesShown.filter((n) => !(n in PALETTE))];
  const perRow = Math.max(1, Math.floor(plotWidth / L.legendItemWidth));
  legendNames.forEach((name, i) => {
    const lx = L.left + (i % perRow) * L.legendItemWidth;
    const ly = y + Math.floor(i / perRow) * L.legendRowHeight;
    body.push(`<rect class="swatch" x="${lx}" y="${ly - 9}" width="10" height="10" fill="${colour(name)}"/>`);
    body.push(`<text x="${lx + 14}" y="${ly}" font-size="11">${esc(name)}</text>`);
  });
  const height = y + Math.ceil(legendNames.length / perRow) * L.legendRowHeight;

  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif">`,
    `<rect class="background" x="0" y="0" width="${width}" height="${height}" fill="#ffffff"/>`,
    ...body,
    `</svg>`,
    "",
  ].join("\n");
}

interface Window {
  fromUs: number;
  toUs: number;
  tokens?: [number, number]; // the decode tokens the window was chosen from, for the title
}

/** The explicit bounds if given, else the token range, else the whole trace. */
function chooseWindow(spans: readonly SpanRecord[], tokens: readonly TokenRecord[], opts: TraceSvgOptions): Window {
  let win: Window | undefined;
  const decode = tokens.filter((t) => t.index >= 0).sort((a, b) => a.index - b.index);
  const range = opts.tokens ?? (decode.length > 0 ? [decode[0]!.index, decode[Math.min(2, decode.length - 1)]!.index] : undefined);
  if (range) {
    const chosen = decode.filter((t) => t.index >= range[0] && t.index <= range[1]);
    if (chosen.length > 0) win = { ...extent(chosen), tokens: range };
    else if (opts.tokens) {
      const have = decode.length > 0 ? `decode tokens ${decode[0]!.index}..${decode[decode.length - 1]!.index}` : "no decode tokens";
      throw new RangeError(`no decode tokens in ${range[0]}..${range[1]}: the trace has ${have}`);
    }
  }
  if (!win) {
    const all = [...spans, ...tokens];
    win = all.length > 0 ? extent(all) : { fromUs: 0, toUs: 1000 };
  }
  if (opts.fromUs !== undefined || opts.toUs !== undefined) {
    win = { fromUs: opts.fromUs ?? win.fromUs, toUs: opts.toUs ?? win.toUs };
  }
  // a zero-length window would divide by zero; widen it to a microsecond
  if (!(win.toUs > win.fromUs)) win = { ...win, toUs: win.fromUs + 1 };
  return win;
}

/** [min t0, max t1]; a loop, since Math.min(...spans) overflows the stack on long traces. */
function extent(items: readonly { t0: number; t1: number }[]): { fromUs: number; toUs: number } {
  let fromUs = Infinity;
  let toUs = -Infinity;
  for (const it of items) {
    if (it.t0 < fromUs) fromUs = it.t0;
    if (it.t1 > toUs) toUs = it.t1;
  }
  return { fromUs, toUs };
}

/** Overlaps the window by more than a touch (zero-length items count when inside). */
function inWindow(it: { t0: number; t1: number }, fromUs: number, toUs: number): boolean {
  const overlap = Math.min(it.t1, toUs) - Math.max(it.t0, fromUs);
  return overlap > 0 || (overlap === 0 && it.t0 >= fromUs && it.t1 <= toUs);
}

/** The smallest 1, 2 or 5 × 10^k that is ≥ `raw` (raw > 0). */
export function niceStep(raw: number): number {
  if (!(raw > 0) || !Number.isFinite(raw)) return 1;
  const pow = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * pow >= raw * (1 - 1e-9)) return m * pow;
  return 10 * pow;
}

const colour = (name: string): string => PALETTE[name] ?? UNKNOWN_COLOUR;

/** Coordinates to 0.01 px: enough for the eye, and stable text across platforms. */
const num = (v: number): string => String(Math.round(v * 100) / 100);

/** µs → ms with 3 decimals (µs resolution). */
const ms = (us: number): string => (us / 1000).toFixed(3);

function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}
