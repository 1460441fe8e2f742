// Trace records of a pipelined generation, one JSON object per line (docs/pipeline.md, "Trace
// format"). Times are microseconds since the trace started, taken from the process-wide
// monotonic clock (process.hrtime), so spans recorded on worker threads line up with the
// scheduler's.
import { closeSync, openSync, writeSync } from "node:fs";
import type { InspectionEvent } from "xstate";

/** Threads a span can run on; each is one lane in the exported timeline. */
export type Lane = "scheduler" | "predictor" | "compute" | "io" | "prefill";

/** What a span did. */
export type SpanName =
  | "attention" // attention block + residual + ffn_norm of one layer
  | "predict" // predictor scores → predicted set P of one layer
  | "gate" // gate rows of one cluster (phase 1 compute)
  | "up" // up rows + activation of one cluster's fired neurons (phase 2)
  | "down" // down columns of one cluster accumulated into the layer output, in cluster order
  | "ffn" // gate, up and down at once: a resident cluster (pipeline mode) or a layer's loaded neurons (blocking mode)
  | "logits" // final norm + classifier
  | "prefill" // dense batched prompt evaluation
  | "read" // one I/O batch: reads into staging + copies into cache slots
  | "plan"; // scheduler bookkeeping (cache tables) for one cluster or layer

/** A closed interval of work on one lane. */
export interface SpanRecord {
  kind: "span";
  lane: Lane;
  name: SpanName;
  t0: number; // µs since trace start
  t1: number; // µs since trace start, ≥ t0
  token?: number; // decode step index (0 = first generated token's forward pass)
  layer?: number;
  cluster?: number; // cluster index within the layer
  bytes?: number; // bytes read (read spans)
  reads?: number; // read requests (read spans)
  neurons?: number; // rows computed (gate/up/down/ffn spans)
  phase?: "gate" | "updown" | "bundle" | "prefetch"; // read spans: what the batch loads
}

/** One forward pass of the decode loop (or the prefill), start to logits. */
export interface TokenRecord {
  kind: "token";
  index: number; // decode step; -1 for the prefill pass
  t0: number;
  t1: number;
  token?: number; // token id produced by sampling after this pass, when known
}

/** An XState inspection event (actor created, event delivered, snapshot changed). */
export interface ActorRecord {
  kind: "actor";
  t: number; // µs since trace start
  type: "@xstate.actor" | "@xstate.event" | "@xstate.snapshot";
  actor: string; // actor id (system id or session id)
  event?: string; // event type, for @xstate.event
  source?: string; // sending actor id, for @xstate.event
  state?: unknown; // state value, for @xstate.snapshot
}

/** First line of every trace file. */
export interface TraceHeader {
  kind: "header";
  version: 1;
  mode: string; // "pipeline" | "blocking" | …
  model: string;
  startedAt: string; // ISO date
  threads: Record<string, number>; // lane → OS thread id (for the exported lanes)
}

export type TraceRecord = TraceHeader | SpanRecord | TokenRecord | ActorRecord;

/**
 * An XState `inspect` callback that records events and the root actor's snapshots. `actor`
 * names the machine in the records (default: the actor's id).
 */
export function inspectInto(trace: TraceRecorder, actor?: string): (ev: InspectionEvent) => void {
  const id = (a?: { sessionId: string }) => (a as { id?: string } | undefined)?.id ?? a?.sessionId;
  return (ev) => {
    if (ev.type === "@xstate.event") trace.actor({ type: ev.type, actor: actor ?? id(ev.actorRef)!, event: ev.event.type, source: id(ev.sourceRef) });
    else if (ev.type === "@xstate.snapshot" && ev.actorRef.sessionId === ev.rootId) {
      trace.actor({ type: ev.type, actor: actor ?? id(ev.actorRef)!, state: (ev.snapshot as { value?: unknown }).value });
    }
  };
}

/** Microseconds on the process-wide monotonic clock (same on every worker thread). */
export function nowUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

/**
 * Collects records in memory (tests read them back) and, with a path, appends them as JSON
 * lines. Spans arrive with absolute nowUs() times and are stored relative to the origin.
 */
export class TraceRecorder {
  readonly records: TraceRecord[] = [];
  readonly origin = nowUs();
  private fd?: number;
  private pending: string[] = []; // lines not yet written: one write per ~256 KiB, not per record
  private pendingChars = 0;

  constructor(
    header: Omit<TraceHeader, "kind" | "version" | "startedAt">,
    readonly path?: string,
  ) {
    if (path) this.fd = openSync(path, "w");
    this.push({ kind: "header", version: 1, startedAt: new Date().toISOString(), ...header });
  }

  /** A span whose t0/t1 are absolute nowUs() values. */
  span(s: Omit<SpanRecord, "kind">): void {
    this.push({ kind: "span", ...s, t0: s.t0 - this.origin, t1: s.t1 - this.origin });
  }

  token(t: Omit<TokenRecord, "kind">): void {
    this.push({ kind: "token", ...t, t0: t.t0 - this.origin, t1: t.t1 - this.origin });
  }

  actor(a: Omit<ActorRecord, "kind" | "t">, at = nowUs()): void {
    this.push({ kind: "actor", t: at - this.origin, ...a });
  }

  private push(r: TraceRecord): void {
    this.records.push(r);
    if (this.fd === undefined) return;
    const line = JSON.stringify(r);
    this.pending.push(line);
    this.pendingChars += line.length + 1;
    if (this.pendingChars >= 1 << 18) this.flush();
  }

  /** Write the buffered lines (close does; a reader of a live trace may call it). */
  flush(): void {
    if (this.fd === undefined || this.pending.length === 0) return;
    writeSync(this.fd, this.pending.join("\n") + "\n");
    this.pending = [];
    this.pendingChars = 0;
  }

  close(): void {
    this.flush();
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}
