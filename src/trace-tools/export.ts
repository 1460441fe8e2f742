// Chrome trace-event JSON (the format chrome://tracing and ui.perfetto.dev open) from a trace:
// one thread row per lane, spans and tokens as complete events, actor events as instants.
// Trace times are already µs, the format's unit, so they pass through unchanged.
import type { ActorRecord, SpanRecord, TokenRecord, TraceRecord } from "../trace/recorder.js";

const PID = 1;

/** Thread ids in display order: the work lanes, then the token and actor rows. */
export const CHROME_LANE_TIDS = {
  scheduler: 1,
  predictor: 2,
  compute: 3,
  io: 4,
  prefill: 5,
  tokens: 6,
  actors: 7,
} as const;

export type ChromeLane = keyof typeof CHROME_LANE_TIDS;

export interface ChromeEvent {
  ph: "X" | "i" | "M";
  pid: number;
  tid: number;
  name: string;
  ts?: number;
  dur?: number;
  cat?: string;
  s?: "t";
  args?: Record<string, unknown>;
}

export interface ChromeTrace {
  traceEvents: ChromeEvent[];
  displayTimeUnit: "ms";
}

export function toChromeTrace(records: readonly TraceRecord[]): ChromeTrace {
  const header = records.find((r) => r.kind === "header");
  const used = new Set<ChromeLane>();
  const events: ChromeEvent[] = [];
  for (const r of records) {
    if (r.kind === "span") {
      used.add(r.lane);
      events.push(spanEvent(r));
    } else if (r.kind === "token") {
      used.add("tokens");
      events.push(tokenEvent(r));
    } else if (r.kind === "actor") {
      used.add("actors");
      events.push(actorEvent(r));
    }
  }
  const metadata: ChromeEvent[] = [{ ph: "M", pid: PID, tid: 0, name: "process_name", args: { name: `neuronpipe ${header?.mode ?? "trace"}` } }];
  // fixed order, whatever order the lanes first appear in, so exports of two runs compare
  for (const lane of Object.keys(CHROME_LANE_TIDS) as ChromeLane[]) {
    if (!used.has(lane)) continue;
    const tid = CHROME_LANE_TIDS[lane];
    metadata.push({ ph: "M", pid: PID, tid, name: "thread_name", args: { name: lane } });
    metadata.push({ ph: "M", pid: PID, tid, name: "thread_sort_index", args: { sort_index: tid } });
  }
  return { traceEvents: [...metadata, ...events], displayTimeUnit: "ms" };
}

/** "gate L3 c5", "read L3 c5 updown", "logits": enough to tell spans apart at a glance. */
export function spanLabel(s: SpanRecord): string {
  let label: string = s.name;
  if (s.layer !== undefined) label += ` L${s.layer}`;
  if (s.cluster !== undefined) label += ` c${s.cluster}`;
  if (s.phase !== undefined) label += ` ${s.phase}`;
  return label;
}

const SPAN_ARG_KEYS = ["token", "layer", "cluster", "bytes", "reads", "neurons", "phase"] as const;

function spanEvent(s: SpanRecord): ChromeEvent {
  const args: Record<string, unknown> = {};
  for (const k of SPAN_ARG_KEYS) if (s[k] !== undefined) args[k] = s[k];
  return { ph: "X", pid: PID, tid: CHROME_LANE_TIDS[s.lane], name: spanLabel(s), cat: s.lane, ts: s.t0, dur: s.t1 - s.t0, args };
}

function tokenEvent(t: TokenRecord): ChromeEvent {
  const args: Record<string, unknown> = { index: t.index };
  if (t.token !== undefined) args.tokenId = t.token;
  const name = t.index < 0 ? "prefill" : `token ${t.index}`;
  return { ph: "X", pid: PID, tid: CHROME_LANE_TIDS.tokens, name, cat: "tokens", ts: t.t0, dur: t.t1 - t.t0, args };
}

function actorEvent(a: ActorRecord): ChromeEvent {
  const args: Record<string, unknown> = { type: a.type, actor: a.actor };
  if (a.event !== undefined) args.event = a.event;
  if (a.source !== undefined) args.source = a.source;
  if (a.state !== undefined) args.state = a.state;
  return { ph: "i", s: "t", pid: PID, tid: CHROME_LANE_TIDS.actors, name: actorLabel(a), cat: "actors", ts: a.t, args };
}

/** "NEXT → session", "snapshot session", "actor session" (the @xstate. prefix says nothing). */
function actorLabel(a: ActorRecord): string {
  switch (a.type) {
    case "@xstate.event":
      return `${a.event ?? "event"} → ${a.actor}`;
    case "@xstate.snapshot":
      return `snapshot ${a.actor}`;
    case "@xstate.actor":
      return `actor ${a.actor}`;
    default:
      return `${String(a.type)} ${a.actor}`;
  }
}
