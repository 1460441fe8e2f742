// The schedule of one token through a neuron pack's layers (the pipeline and blocking
// decoders). The machine decides what runs next and who waits for whom; the work is done by
// the actors it asks, by system id: the compute worker (compute-machine.ts), the neuron cache
// (the decoder's cache actor: plans reads, hands batches to the I/O loader) and the I/O loader
// (io-loader-machine.ts). Per layer L:
//
//   front    x += o(L−1); attention; xb = ffn_norm(x); o = 0; P = predict(x)  [+ every gate of P]
//   reads    the cache plans the layer's clusters of P (as many as it can hold at once): gate
//            rows resident or read, batches to the I/O loader; answers each cluster's batches
//   ffn      per cluster: gate (waits for its gate reads in the worker) → the cache plans the
//            fired neurons' up+down reads → back: up, act, down (waits for those reads); backs
//            are posted in cluster order, so o accumulates in pack order, bit-identical to every
//            other decoder. A resident cluster whose turn has come runs as one `ffn` task.
//            The layer's last back carries the next layer's front (look-ahead): no round trip at
//            layer boundaries.
//   logits   x += o(last); logits
//
// Three paths share the states: `fused` (gate rows pinned and a layer's predicted neurons fit
// the cold region: the front computes every gate, one back per layer), `clusters` (gate rows
// cached or the cold region smaller than a layer: clusters of P), `blocking` (LLMFlash: every
// missing neuron read whole, then one ffn task per chunk). An `abort` stops at the next
// boundary: clusters in flight finish, nothing new starts; the machine ends in done, cancelled
// or failed.
import { assign, enqueueActions, setup, type AnyActorRef } from "xstate";
import type { ComputeReply, ComputeRequest, SpanHint } from "./compute-machine.js";
import type { IoReply, IoRequest } from "./io-loader-machine.js";
import type { ComputeTask, FrontTask } from "./protocol.js";

export type TokenPath = "fused" | "clusters" | "blocking";

export interface TokenInput {
  step: number; // decode step (trace records)
  token: number; // the token being decoded
  pos: number; // its position in the context
  nLayer: number;
  path: TokenPath;
  oracle: boolean;
  /** fused path: the worker computes the resident prefix of the fired neurons right after the front's answer. */
  prefix: boolean;
  /** Ask the cache to prefetch layer L+1's hot clusters when layer L's front is posted. */
  prefetch: boolean;
  /** System ids of the actors it asks, and its own. */
  compute: string;
  cache: string;
  io: string;
  self: string;
}

/** A cluster of P the cache planned: its range, the read batches its gates wait for, and whether every neuron of it is resident. */
export interface PlannedCluster {
  start: number;
  count: number;
  waitFor: number[];
  resident: boolean;
}

/** What the token machine asks the cache actor. */
export type CacheRequest =
  | { type: "cache.plan"; layer: number; nP: number; nA: number; from: number; path: TokenPath; replyTo: string }
  | { type: "cache.updown"; layer: number; cluster: number; start: number; nA: number; nSilent: number; replyTo: string }
  | { type: "cache.fired"; layer: number; start: number; nA: number; nSilent: number }
  | { type: "cache.window" }
  | { type: "cache.prefetch"; layer: number }
  | { type: "cache.forget"; failed: number[] };

/** What the cache actor answers. */
export type CacheReply =
  | { type: "cache.planned"; layer: number; clusters: PlannedCluster[]; next: number }
  | { type: "cache.updowned"; cluster: number; waitFor: number[] }
  | { type: "cache.error"; error: string };

export type TokenEvent = ComputeReply | CacheReply | IoReply | { type: "abort"; reason?: string };

export interface TokenContext extends TokenInput {
  layer: number;
  /** Neurons predicted and (fused path) fired in the current layer. */
  nP: number;
  nA: number;
  /** The current layer's front came with the previous layer's last task. */
  lookahead: boolean;
  /** Planning cursor in P: clusters up to here have been planned; `complete` once it reached nP. */
  next: number;
  complete: boolean;
  /** The clusters planned in the current window, and their progress. */
  clusters: PlannedCluster[];
  /** Up+down counts of the clusters whose gates answered (by cluster index). */
  fired: number[];
  /** Clusters of the window run whole (a resident prefix): the rest answer their gates in order after them. */
  gateBase: number;
  gatesAnswered: number;
  backsPosted: number;
  backsAnswered: number;
  /** Compute tasks posted and not answered, and the last task id. */
  outstanding: number;
  seq: number;
  aborted: boolean;
  abortReason?: string;
  logits: number;
  error?: string;
}

export interface TokenOutput {
  logits: number;
  error?: string;
  cancelled: boolean;
  reason?: string;
}

type Ctx = TokenContext;

function frontTask(c: Ctx, layer: number): FrontTask {
  return {
    op: "front",
    key: "", // the compute channel stamps the session's key
    layer,
    pos0: c.pos,
    nTok: 1,
    tokens: layer === 0 ? [c.token] : undefined,
    residual: layer > 0,
    oracle: c.oracle,
    gates: c.path === "fused",
    prefix: c.prefix,
  };
}

/** The next layer's front, chained into the task that ends this layer — unless aborted or the last layer. */
function chained(c: Ctx): FrontTask | undefined {
  return !c.aborted && c.layer + 1 < c.nLayer ? frontTask(c, c.layer + 1) : undefined;
}

type Task = Exclude<ComputeTask, { op: "init" }>;
type Enqueue = { sendTo: (target: AnyActorRef, event: object) => void };

/** Post compute tasks from an action: `posts` counts them (the caller assigns seq and outstanding once). */
class Poster {
  posted = 0;
  constructor(
    private readonly enqueue: Enqueue,
    private readonly c: Ctx,
    private readonly system: { get(id: string): unknown },
  ) {}
  task(task: Task, hint: Omit<SpanHint, "token">): void {
    this.posted++;
    const ev: ComputeRequest = { type: "compute.run", id: this.c.seq + this.posted, task, hint: { ...hint, token: this.c.step }, replyTo: this.c.self };
    this.enqueue.sendTo(this.system.get(this.c.compute) as AnyActorRef, ev);
  }
  ask(req: CacheRequest): void {
    this.enqueue.sendTo(this.system.get(this.c.cache) as AnyActorRef, req);
  }
  /** What to assign: task ids and outstanding count. */
  get counts(): Pick<Ctx, "seq" | "outstanding"> {
    return { seq: this.c.seq + this.posted, outstanding: this.c.outstanding + this.posted };
  }
}

export const tokenMachine = setup({
  types: {
    input: {} as TokenInput,
    context: {} as TokenContext,
    events: {} as TokenEvent,
    output: {} as TokenOutput,
  },
  actions: {
    answered: assign({ outstanding: ({ context }) => context.outstanding - 1 }),
    /** As a layer starts: read the next layer's hot clusters while this one computes (when asked to prefetch). */
    prefetchNext: enqueueActions(({ enqueue, context, system }) => {
      if (context.prefetch && context.layer + 1 < context.nLayer) new Poster(enqueue, context, system).ask({ type: "cache.prefetch", layer: context.layer + 1 });
    }),
    postFront: enqueueActions(({ enqueue, context, system }) => {
      const p = new Poster(enqueue, context, system);
      p.task(frontTask(context, context.layer), { lane: "compute", layer: context.layer });
      enqueue.assign(p.counts);
    }),
    /** After the front's answer: the layer's predicted (and, fused, fired) counts. */
    fronted: assign(({ context, event }) => {
      if (event.type !== "compute.done") return {};
      const r = event.result;
      return { nP: r.nP ?? 0, nA: r.nA ?? 0, lookahead: false, next: 0, complete: false, layer: context.layer };
    }),
    plan: enqueueActions(({ enqueue, context, system }) => {
      new Poster(enqueue, context, system).ask({ type: "cache.plan", layer: context.layer, nP: context.nP, nA: context.nA, from: context.next, path: context.path, replyTo: context.self });
    }),
    /** The cache planned a window of clusters: post their first tasks. */
    planned: enqueueActions(({ enqueue, context, event, system }) => {
      if (event.type !== "cache.planned") return;
      const p = new Poster(enqueue, context, system);
      const complete = event.next >= context.nP;
      const clusters = event.clusters;
      const c = { ...context, complete };
      let posted = 0;
      let ffnPrefix = true; // resident clusters run whole while every one before them did
      clusters.forEach((cl, i) => {
        const last = i === clusters.length - 1 && complete;
        const next = last ? chained(c) : undefined;
        const hint = { lane: "compute" as const, layer: context.layer, cluster: i };
        if (context.path === "fused") {
          p.task({ op: "back", key: "", layer: context.layer, start: 0, nA: context.nA, waitFor: cl.waitFor, prefixed: context.prefix, next }, hint);
          posted++;
        } else if (context.path === "blocking" || (cl.resident && ffnPrefix)) {
          p.task({ op: "ffn", key: "", layer: context.layer, start: cl.start, count: cl.count, waitFor: cl.waitFor, next }, hint);
          posted++;
        } else {
          ffnPrefix = false;
          p.task({ op: "gate", key: "", layer: context.layer, start: cl.start, count: cl.count, waitFor: cl.waitFor }, hint);
        }
      });
      enqueue.assign({ ...p.counts, clusters, next: event.next, complete, backsPosted: posted, backsAnswered: 0, gateBase: posted, gatesAnswered: 0, fired: [] });
    }),
    /** A cluster's gates are known: the cache plans its up+down reads. */
    gated: enqueueActions(({ enqueue, context, event, system }) => {
      if (event.type !== "compute.done") return;
      const cluster = context.gateBase + context.gatesAnswered; // gates answer in posting order
      const nA = event.result.nA ?? 0;
      new Poster(enqueue, context, system).ask({ type: "cache.updown", layer: context.layer, cluster, start: context.clusters[cluster]!.start, nA, nSilent: event.result.nSilent ?? 0, replyTo: context.self });
      const fired = [...context.fired];
      fired[cluster] = nA;
      enqueue.assign({ fired, gatesAnswered: context.gatesAnswered + 1 });
    }),
    /** A cluster's up+down reads are planned: post its back (in cluster order: the order the gates answered). */
    postBack: enqueueActions(({ enqueue, context, event, system }) => {
      if (event.type !== "cache.updowned") return;
      const cl = context.clusters[event.cluster]!;
      const last = event.cluster === context.clusters.length - 1 && context.complete;
      const p = new Poster(enqueue, context, system);
      p.task(
        { op: "back", key: "", layer: context.layer, start: cl.start, nA: context.fired[event.cluster] ?? 0, waitFor: event.waitFor, prefixed: false, next: last ? chained(context) : undefined },
        { lane: "compute", layer: context.layer, cluster: event.cluster },
      );
      enqueue.assign({ ...p.counts, backsPosted: context.backsPosted + 1 });
    }),
    /** A back or ffn answered: count it; a whole-cluster ffn tells the cache what fired; a chained front is the next layer's. */
    backed: enqueueActions(({ enqueue, context, event, system }) => {
      if (event.type !== "compute.done") return;
      const r = event.result;
      if (event.op === "ffn") {
        const start = context.clusters[context.backsAnswered]?.start ?? 0;
        new Poster(enqueue, context, system).ask({ type: "cache.fired", layer: context.layer, start, nA: r.nA ?? 0, nSilent: r.nSilent ?? 0 });
      }
      const upd: Partial<Ctx> = { backsAnswered: context.backsAnswered + 1 };
      if (r.front) Object.assign(upd, { lookahead: true, nP: r.front.nP ?? 0, nA: r.front.nA ?? 0 });
      enqueue.assign(upd);
    }),
    nextWindow: enqueueActions(({ enqueue, context, system }) => {
      new Poster(enqueue, context, system).ask({ type: "cache.window" });
    }),
    /** The layer is done: on to the next (its front came chained, or is posted on entry). */
    nextLayer: assign(({ context }) => ({ layer: context.layer + 1, next: 0, complete: false, clusters: [], fired: [], gateBase: 0, gatesAnswered: 0, backsPosted: 0, backsAnswered: 0, nP: context.lookahead ? context.nP : 0, nA: context.lookahead ? context.nA : 0 })),
    postLogits: enqueueActions(({ enqueue, context, system }) => {
      const p = new Poster(enqueue, context, system);
      p.task({ op: "logits", key: "" }, { lane: "compute" });
      enqueue.assign(p.counts);
    }),
    abort: assign(({ event }) => (event.type === "abort" ? { aborted: true, abortReason: event.reason } : {})),
    failure: assign(({ context, event }) => ({ error: context.error ?? (event.type === "compute.failed" || event.type === "cache.error" ? event.error : "failed") })),
    drain: enqueueActions(({ enqueue, context, system }) => {
      enqueue.sendTo(system.get(context.io) as AnyActorRef, { type: "io.drain", replyTo: context.self } satisfies IoRequest);
    }),
    /** The I/O loader's failure, if any, is the cause (a worker waiting on a failed read only says it failed). */
    ioCause: assign(({ context, event }) => (event.type === "io.drained" && event.error ? { error: event.error } : { error: context.error })),
  },
  guards: {
    aborted: ({ context }) => context.aborted,
    lookahead: ({ context }) => context.lookahead,
    windowDone: ({ context }) => context.backsAnswered >= context.clusters.length,
    layerPlanned: ({ context }) => context.complete,
    lastLayer: ({ context }) => context.layer + 1 >= context.nLayer,
    nothingOutstanding: ({ context }) => context.outstanding === 0,
    emptyWindow: ({ context }) => context.clusters.length === 0,
  },
}).createMachine({
  id: "token",
  context: ({ input }) => ({
    ...input,
    layer: 0,
    nP: 0,
    nA: 0,
    lookahead: false,
    next: 0,
    complete: false,
    clusters: [],
    fired: [],
    gateBase: 0,
    gatesAnswered: 0,
    backsPosted: 0,
    backsAnswered: 0,
    outstanding: 0,
    seq: 0,
    aborted: false,
    logits: -1,
  }),
  initial: "front",
  on: {
    abort: { actions: "abort" },
    "compute.failed": { target: ".failing", actions: ["answered", "failure"] },
    "cache.error": { target: ".failing", actions: "failure" },
  },
  states: {
    front: {
      entry: ["prefetchNext", "postFront"],
      on: {
        "compute.done": [
          { guard: "aborted", target: "cancelling", actions: "answered" },
          { target: "reads", actions: ["answered", "fronted"] },
        ],
      },
    },
    reads: {
      entry: "plan",
      on: {
        "cache.planned": [
          { guard: "aborted", target: "cancelling" },
          { target: "ffn", actions: "planned" },
        ],
      },
    },
    ffn: {
      always: { guard: "emptyWindow", target: "settle" },
      on: {
        "compute.done": [
          { guard: ({ event }) => event.op === "gate", actions: ["answered", "gated"] },
          { target: "settle", actions: ["answered", "backed"] },
        ],
        "cache.updowned": { actions: "postBack" },
      },
    },
    // a back answered (or nothing was planned): the window, the layer, the token done?
    settle: {
      always: [
        { guard: ({ context }) => context.backsAnswered < context.backsPosted || context.backsAnswered < context.clusters.length, target: "ffn" },
        { guard: "aborted", target: "cancelling" },
        { guard: ({ context }) => !context.complete && context.clusters.length === 0, target: "failing", actions: assign({ error: ({ context }) => `the neuron cache cannot hold one neuron of layer ${context.layer} (internal accounting error)` }) },
        { guard: ({ context }) => !context.complete, target: "reads", actions: "nextWindow" },
        { guard: "lastLayer", target: "logits" },
        { guard: "lookahead", target: "reads", actions: ["nextLayer", "prefetchNext"] },
        { target: "front", actions: "nextLayer" },
      ],
    },
    logits: {
      entry: "postLogits",
      on: { "compute.done": { target: "done", actions: ["answered", assign({ logits: ({ event }) => event.result.logits ?? -1 })] } },
    },
    // stop: wait for the tasks in flight, then for the reads in flight
    cancelling: {
      always: { guard: "nothingOutstanding", target: "drainingForCancel" },
      on: { "compute.done": { actions: "answered", target: "cancelling", reenter: true } },
    },
    drainingForCancel: {
      entry: "drain",
      on: { "io.drained": "cancelled" },
    },
    failing: {
      always: { guard: "nothingOutstanding", target: "drainingForFailure" },
      on: {
        "compute.done": { actions: "answered", target: "failing", reenter: true },
        "compute.failed": { actions: "answered", target: "failing", reenter: true },
      },
    },
    drainingForFailure: {
      entry: "drain",
      on: { "io.drained": { target: "failed", actions: "ioCause" } },
    },
    done: { type: "final" },
    cancelled: { type: "final" },
    failed: { type: "final" },
  },
  output: ({ context, self }) => ({
    logits: context.logits,
    error: context.error,
    cancelled: self.getSnapshot().value === "cancelled",
    reason: context.abortReason,
  }),
});

export type TokenMachine = typeof tokenMachine;
