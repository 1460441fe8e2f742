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
  phase?: "gate" | "updown" | "bundle" | "prefetch" | "ahead"; // read spans: what the batch loads ("ahead": the next layer's likely-firing neurons, in the background)
}

/** One forward pass of the decode loop (or the prefill), start to logits. */
export interface TokenRecord {
  kind: "token";
  index: number; // decode step; -1 for the prefill pass
  t0: number;
  t1: number;
  token?: number; // token id produced by sampling after this pass, when known
  pos?: number; // position of the token in the context (attention reads pos + 1 K and V rows per layer)
  predicted?: number; // sparse decoders: neurons predicted over all layers (gate rows computed)
  fired?: number; // sparse decoders: neurons that fired over all layers (up and down rows computed)
}

/** Bytes the steps of one decode token touch (trace header), for the time budget of `trace stats`. */
export interface StepCosts {
  nLayer: number;
  attentionBytes: number; // per layer: attn_norm, attn_q/k/v/output and ffn_norm weights
  kvBytesPerPosition: number; // per layer: K and V of one position
  attentionHeads?: number; // per layer: query heads, each of which scores and sums every position
  attentionRows?: number; // per layer: rows of attn_q, attn_k, attn_v and attn_output (the matvecs' rows)
  outputBytes: number; // output_norm and the classifier
  outputRows?: number; // the classifier's rows (vocabulary)
  denseFfnBytes: number; // per layer: every gate, up and down row
  gateRowBytes?: number; // sparse: one gate row
  upDownRowBytes?: number; // sparse: one up row and one down column
  predictorBytes?: number; // sparse, trained predictor: all layers' predictor weights
}

/**
 * An XState inspection event: an actor created, an event delivered, a machine's snapshot
 * changed. Actors are named by system id, else by their parent's name and their id
 * ("compute:big/channel"); the events carry their payloads (replay re-sends them), with long
 * arrays summarised as { $array, length } and actor references as { $actor: name }.
 */
export interface ActorRecord {
  kind: "actor";
  t: number; // µs since trace start
  type: "@xstate.actor" | "@xstate.event" | "@xstate.snapshot";
  actor: string; // the actor's name
  /** @xstate.actor: the machine's id (a state machine), else absent (a callback or promise actor: a leaf, stubbed in replay). */
  machine?: string;
  parent?: string; // @xstate.actor: the parent's name
  event?: string; // event type, for @xstate.event and @xstate.snapshot (the event that caused it)
  payload?: Record<string, unknown>; // @xstate.event: the event's other fields
  source?: string; // @xstate.event: the sending actor's name (absent: sent from outside the system)
  state?: unknown; // @xstate.snapshot: state value
  status?: string; // @xstate.snapshot: active | done | error | stopped
  /** @xstate.snapshot: the context's scalar fields (numbers, strings, booleans): token, layer, queue depths, an error. */
  context?: Record<string, number | string | boolean>;
  /** @xstate.actor of a root created before the trace began (the pipeline decoder's): the input it was created with, for replay. */
  input?: unknown;
}

/** First line of every trace file. */
export interface TraceHeader {
  kind: "header";
  /** 1: actor records carry event types only; 2: payloads, actor births and every machine's snapshots (replayable). */
  version: 1 | 2;
  mode: string; // "pipeline" | "blocking" | …
  model: string;
  startedAt: string; // ISO date
  threads: Record<string, number>; // lane → OS thread id (for the exported lanes)
  costs?: StepCosts; // bytes per step (absent in traces written before the time budget)
  /** How a pack is read (SparseParts.describeIo): backend, queue depth, where the reads ahead are submitted and reaped; packs only. */
  io?: string;
  /** The execution plan the model was opened with (src/plan/planner.ts ExecutionPlan: knobs, overrides, predicted speed); packs only. */
  plan?: { knobs: Record<string, unknown>; overrides?: Record<string, unknown>; predicted: { tokPerSec: number } } & Record<string, unknown>;
}

export type TraceRecord = TraceHeader | SpanRecord | TokenRecord | ActorRecord;

type Ref = { id: string; sessionId: string; systemId?: string; options?: { systemId?: string }; _parent?: Ref; logic?: { config?: unknown } };

/** Is this actor a state machine (not a callback or promise actor, whose logic's config is a function)? */
export function isMachineRef(ref: unknown): boolean {
  return typeof (ref as Ref | undefined)?.logic?.config === "object";
}

const names = new WeakMap<object, string>();

/** An actor's name in the trace: its system id, else its parent's name and its id. */
export function actorName(ref: Ref): string {
  let n = names.get(ref);
  if (n === undefined) {
    // at its birth event an actor's system id is not registered yet: read the one it was given
    const systemId = ref.systemId ?? ref.options?.systemId;
    n = systemId ? systemId : ref._parent ? `${actorName(ref._parent)}/${ref.id}` : ref.id;
    names.set(ref, n);
  }
  return n;
}

/** An event's payload as JSON: long arrays summarised, actor references by name, no functions. */
export function tracePayload(ev: Record<string, unknown>): Record<string, unknown> | undefined {
  let any = false;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(ev)) {
    if (k === "type") continue;
    out[k] = plain(v, 0);
    any = true;
  }
  return any ? out : undefined;
}

function plain(v: unknown, depth: number): unknown {
  if (v === null || typeof v !== "object") return typeof v === "function" ? undefined : typeof v === "bigint" ? Number(v) : v;
  if (depth > 6) return "[deep]";
  if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer || (typeof SharedArrayBuffer !== "undefined" && v instanceof SharedArrayBuffer)) {
    return { $array: v.constructor.name, length: (v as { length?: number }).length ?? (v as ArrayBuffer).byteLength };
  }
  if (Array.isArray(v)) return v.length > 64 && typeof v[0] === "number" ? { $array: "Array", length: v.length } : v.map((x) => plain(x, depth + 1));
  if ("sessionId" in v && "send" in v) return { $actor: actorName(v as unknown as Ref) };
  if (v instanceof Error) return { name: v.name, message: v.message };
  if (v instanceof Set) return [...v].map((x) => plain(x, depth + 1));
  const o: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) o[k] = plain(x, depth + 1);
  return o;
}

/** The scalar fields of a context (what the inspector page and replay compare). */
export function scalars(ctx: Record<string, unknown> | undefined): Record<string, number | string | boolean> | undefined {
  if (!ctx || typeof ctx !== "object") return undefined;
  const out: Record<string, number | string | boolean> = {};
  for (const [k, v] of Object.entries(ctx)) if (typeof v === "number" || typeof v === "string" || typeof v === "boolean") out[k] = v;
  return out;
}

/** "a.b" of a state value (strings and nested objects). */
export function stateText(v: unknown): string {
  if (typeof v === "string") return v;
  if (v && typeof v === "object") return Object.entries(v as Record<string, unknown>).map(([k, x]) => `${k}.${stateText(x)}`).join(",");
  return String(v);
}

/**
 * An XState inspection observer that records actor births, every event with its payload, and
 * the snapshots of state machines that change their state or status (with their scalar
 * context), for the trace tools and replay. `root` names the root actor in the records
 * (default: its system id or id).
 */
export function recordInspection(trace: TraceRecorder, root?: string): (ev: InspectionEvent) => void {
  const name = (r: unknown) => {
    const ref = r as Ref;
    return root && !ref._parent ? root : actorName(ref);
  };
  const last = new WeakMap<object, string>(); // an actor's last recorded state and status
  return (ev) => {
    const at = nowUs();
    if (ev.type === "@xstate.actor") {
      const ref = ev.actorRef as unknown as Ref;
      // the name now: a system id is looked up from the options, which do not change
      trace.actorLater(at, () => ({ type: ev.type, actor: name(ref), machine: isMachineRef(ref) ? (ref.logic!.config as { id?: string }).id : undefined, parent: ref._parent ? name(ref._parent) : undefined }));
    } else if (ev.type === "@xstate.event") {
      const e = ev.event as Record<string, unknown> & { type: string };
      const { actorRef, sourceRef } = ev;
      trace.actorLater(at, () => ({ type: ev.type, actor: name(actorRef), event: e.type, payload: tracePayload(e), source: sourceRef ? name(sourceRef) : undefined }));
    } else if (ev.type === "@xstate.snapshot") {
      const ref = ev.actorRef as unknown as Ref;
      if (!isMachineRef(ref)) return; // only state machines have states
      const snap = ev.snapshot as { value?: unknown; status?: string; context?: Record<string, unknown> };
      const cause = (ev.event as { type?: string })?.type;
      trace.actorLater(at, () => {
        const key = `${stateText(snap.value)}|${snap.status}`;
        if (last.get(ref) === key) return undefined; // the same state: a context update only
        last.set(ref, key);
        return { type: ev.type, actor: name(ref), state: snap.value, status: snap.status, event: cause, context: scalars(snap.context) };
      });
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
  private readonly all: TraceRecord[] = [];
  readonly origin = nowUs();
  private fd?: number;
  private unwritten: TraceRecord[] = []; // written ~4096 records at a time, not one write per record
  // actor records are taken as thunks while a token runs (a snapshot of the facts, cheap) and made
  // into records between tokens (payloads walked, names looked up), off the token's critical path
  private later: { t: number; make: () => Omit<ActorRecord, "kind" | "t"> | undefined }[] = [];

  constructor(
    header: Omit<TraceHeader, "kind" | "version" | "startedAt">,
    readonly path?: string,
  ) {
    if (path) this.fd = openSync(path, "w");
    this.push({ kind: "header", version: 2, startedAt: new Date().toISOString(), ...header });
  }

  /** Every record so far, in order (actor records taken during a token are made first). */
  get records(): TraceRecord[] {
    this.settle();
    return this.all;
  }

  /** A span whose t0/t1 are absolute nowUs() values. */
  span(s: Omit<SpanRecord, "kind">): void {
    this.push({ kind: "span", ...s, t0: s.t0 - this.origin, t1: s.t1 - this.origin });
  }

  /** A token's interval: the actor records taken during it are made now, then the token's. */
  token(t: Omit<TokenRecord, "kind">): void {
    this.settle();
    this.push({ kind: "token", ...t, t0: t.t0 - this.origin, t1: t.t1 - this.origin });
    if (this.unwritten.length >= 4096) this.flush();
  }

  actor(a: Omit<ActorRecord, "kind" | "t">, at = nowUs()): void {
    this.settle();
    this.push({ kind: "actor", t: at - this.origin, ...a });
  }

  /** An actor record at time `at`, made later by `make` (undefined: none). */
  actorLater(at: number, make: () => Omit<ActorRecord, "kind" | "t"> | undefined): void {
    this.later.push({ t: at, make });
  }

  /** Make the pending actor records. */
  settle(): void {
    if (this.later.length === 0) return;
    const l = this.later;
    this.later = [];
    for (const { t, make } of l) {
      const a = make();
      if (a) this.push({ kind: "actor", t: t - this.origin, ...a });
    }
  }

  private push(r: TraceRecord): void {
    this.all.push(r);
    if (this.fd !== undefined) this.unwritten.push(r);
  }

  /** Write the buffered records (close does; a reader of a live trace may call it). */
  flush(): void {
    this.settle();
    if (this.fd === undefined || this.unwritten.length === 0) return;
    writeSync(this.fd, this.unwritten.map((r) => JSON.stringify(r)).join("\n") + "\n");
    this.unwritten = [];
  }

  close(): void {
    this.flush();
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}
