// Reads a JSON-lines trace (trace.ts) back into records, checking each line so that a truncated
// or hand-edited file fails with "FILE:LINE: what is wrong" instead of odd numbers downstream.
import { readFileSync } from "node:fs";
import type { Lane, TraceRecord } from "./recorder.js";

/** The trace format versions this reader understands (TraceHeader.version): 2 adds payloads, births and every machine's snapshots. */
export const SUPPORTED_TRACE_VERSIONS = [1, 2] as const;

const LANES: readonly Lane[] = ["scheduler", "predictor", "compute", "io", "prefill"];
const ACTOR_TYPES = ["@xstate.actor", "@xstate.event", "@xstate.snapshot"];

export class TraceFormatError extends Error {
  constructor(
    readonly path: string,
    readonly line: number,
    problem: string,
  ) {
    super(`${path}:${line}: ${problem}`);
    this.name = "TraceFormatError";
  }
}

/** Every record of the trace at `path`, in file order; the first is the header. */
export function readTrace(path: string): TraceRecord[] {
  const text = readFileSync(path, "utf8");
  const records: TraceRecord[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === "") continue;
    const fail = (problem: string): never => {
      throw new TraceFormatError(path, i + 1, problem);
    };
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (e) {
      fail(`not JSON (${(e as Error).message}): ${clip(line)}`);
    }
    records.push(checkRecord(value, records.length === 0, fail));
  }
  if (records.length === 0) throw new TraceFormatError(path, 1, "empty trace: expected a header line first");
  return records;
}

function checkRecord(value: unknown, isFirst: boolean, fail: (problem: string) => never): TraceRecord {
  if (typeof value !== "object" || value === null || Array.isArray(value)) fail(`expected a JSON object, got ${clip(JSON.stringify(value))}`);
  const r = value as Record<string, unknown>;
  const kind = r.kind;
  if (isFirst && kind !== "header") fail(`first line must be the header record (kind "header"), got kind ${JSON.stringify(kind)}`);
  switch (kind) {
    case "header":
      if (!isFirst) fail("a second header record; a trace has exactly one, on its first line");
      if (!(SUPPORTED_TRACE_VERSIONS as readonly unknown[]).includes(r.version)) fail(`unsupported trace version ${JSON.stringify(r.version)} (this neuronpipe reads versions ${SUPPORTED_TRACE_VERSIONS.join(" and ")})`);
      if (typeof r.mode !== "string") fail(`header: "mode" must be a string`);
      break;
    case "span":
      if (typeof r.lane !== "string" || !LANES.includes(r.lane as Lane)) fail(`span: unknown lane ${JSON.stringify(r.lane)} (known: ${LANES.join(", ")})`);
      if (typeof r.name !== "string") fail(`span: "name" must be a string`);
      checkInterval(r, "span", fail);
      break;
    case "token":
      if (typeof r.index !== "number" || !Number.isInteger(r.index) || r.index < -1) fail(`token: "index" must be a whole number ≥ -1, got ${JSON.stringify(r.index)}`);
      checkInterval(r, "token", fail);
      break;
    case "actor":
      if (!isFiniteNumber(r.t)) fail(`actor: time "t" must be a finite number, got ${JSON.stringify(r.t)}`);
      if (typeof r.type !== "string" || !ACTOR_TYPES.includes(r.type)) fail(`actor: unknown type ${JSON.stringify(r.type)} (known: ${ACTOR_TYPES.join(", ")})`);
      if (typeof r.actor !== "string") fail(`actor: "actor" must be a string`);
      break;
    default:
      fail(`unknown record kind ${JSON.stringify(kind)} (known: header, span, token, actor)`);
  }
  return r as unknown as TraceRecord;
}

function checkInterval(r: Record<string, unknown>, what: string, fail: (problem: string) => never): void {
  if (!isFiniteNumber(r.t0) || !isFiniteNumber(r.t1)) fail(`${what}: t0 and t1 must be finite numbers, got t0=${JSON.stringify(r.t0)} t1=${JSON.stringify(r.t1)}`);
  if ((r.t1 as number) < (r.t0 as number)) fail(`${what}: ends before it starts (t1=${r.t1} < t0=${r.t0})`);
}

const isFiniteNumber = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);

/** Long lines would drown the message; the line number says where to look. */
const clip = (s: string): string => (s.length > 80 ? s.slice(0, 77) + "…" : s);
