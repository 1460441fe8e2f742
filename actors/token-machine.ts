// The schedule of one token through a neuron pack's layers (the pipeline and blocking
// decoders). The machine decides what runs next and who waits for whom; the work is done by
// the actors it asks, by system id: the compute worker (compute-machine.ts), the neuron cache
// (the decoder's cache actor: plans reads, hands batches to the I/O loader) and the I/O loader
// (io-loader-machine.ts). Per layer L:
//
//   front    x += o(L−1); attention; xb = ffn_norm(x); o = 0; P = predict(x)  [+ every gate of P]
//   reads    the cache plans the layer's clusters of P (as many as it can hold at once): gate
//            rows resident or read, batches to the I/O loader; answers the clusters
//   ffn      per cluster: gate (the worker waits for its slots' reads) → the cache plans the
//            fired neurons' up+down reads, and at once the back is posted: up, act, down (the
//            worker waits for those reads, src/sparse/cache/slot-flags.ts); backs are posted in
//            cluster order, so o accumulates in pack order, bit-identical to every other
//            decoder. A resident cluster whose turn has come runs as one `ffn` task.
//            The layer's last back carries the next layer's front (look-ahead): no round trip at
//            layer boundaries.
//   logits   x += o(last); logits
//
// Four paths share the states: `fused` (gate rows pinned and a layer's predicted neurons fit
// the cold region: the front computes every gate, one back per layer), `clusters` (gate rows
// cached or the cold region smaller than a layer: clusters of P), `blocking` (LLMFlash: every
// missing neuron read whole, then one ffn task per chunk), `resident` (the whole FFN in memory:
// nothing to plan, one ffn task per layer, the next layer's front chained in it). An `abort` stops at the next
// boundary: clusters in flight finish, nothing new starts; the machine ends in done, cancelled
// or failed.
import type { CacheReply, CacheRequest, PlannedCluster, TokenPath } from "../src/protocol/events.js";
import { assign, enqueueActions, setup, type AnyActorRef } from "xstate";
import type { ComputeReply, ComputeRequest, SpanHint } from "../src/protocol/events.js";
import type { IoReply, IoRequest } from "../src/protocol/events.js";
import type { ComputeTask, FrontTask } from "../src/protocol/tasks.js";

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
  /** The clusters planned in the current lease, and their progress. */
  clusters: PlannedCluster[];
  /** Clusters of the lease run whole (a resident prefix): the rest answer their gates in order after them. */
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
type System = { get(id: string): unknown };

/** Post compute tasks from an action: counts them (the caller assigns seq and outstanding once). */
class Poster {
  posted = 0;
  constructor(
    private readonly enqueue: Enqueue,
    private readonly c: Ctx,
    private readonly system: System,
  ) {}
  task(task: Task, hint: Omit<SpanHint, "token">): void {
    this.posted++;
    const ev: ComputeRequest = { type: "compute.run", id: this.c.seq + this.posted, task, hint: { ...hint, token: this.c.step }, replyTo: this.c.self };
    this.enqueue.sendTo(this.system.get(this.c.compute) as AnyActorRef, ev);
  }
  ask(req: CacheRequest): void {
    this.enqueue.sendTo(this.system.get(this.c.cache) as AnyActorRef, req);
  }
  /** Task ids and the outstanding count after `answered` answers arrived and these posts. */
  counts(answered = 0): Pick<Ctx, "seq" | "outstanding"> {
    return { seq: this.c.seq + this.posted, outstanding: this.c.outstanding - answered + this.posted };
  }
}

type Done = Extract<TokenEvent, { type: "compute.done" }>;

/** After this back or ffn answer, has every cluster of the lease answered? */
const leaseDoneAfter = (c: Ctx) => c.backsAnswered + 1 >= c.clusters.length && c.backsAnswered + 1 >= c.backsPosted;

/** The layer is done: the next one's counts (its front came chained with `front`, or is posted on entry). */
function nextLayer(c: Ctx, front?: { nP?: number; nA?: number }): Partial<Ctx> {
  return { layer: c.layer + 1, next: 0, complete: false, clusters: [], gateBase: 0, gatesAnswered: 0, backsPosted: 0, backsAnswered: 0, lookahead: front !== undefined, nP: front?.nP ?? 0, nA: front?.nA ?? 0 };
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
    /** A layer starts: its front (unless it came chained), and the next layer's hot clusters read while this one computes (when asked to prefetch). */
    startLayer: enqueueActions(({ enqueue, context, system }) => {
      const p = new Poster(enqueue, context, system);
      if (context.prefetch && context.layer + 1 < context.nLayer) p.ask({ type: "cache.prefetch", layer: context.layer + 1 });
      if (!context.lookahead) p.task(frontTask(context, context.layer), { lane: "compute", layer: context.layer });
      enqueue.assign(p.counts());
    }),
    /** After the front's answer: the layer's predicted (and, fused, fired) counts; the cache plans the first lease. */
    fronted: enqueueActions(({ enqueue, context, event, system }) => {
      const r = (event as Done).result;
      const c = { ...context, nP: r.nP ?? 0, nA: r.nA ?? 0 };
      if (c.path !== "resident") new Poster(enqueue, c, system).ask({ type: "cache.plan", layer: c.layer, nP: c.nP, nA: c.nA, from: 0, path: c.path, replyTo: c.self });
      enqueue.assign({ nP: c.nP, nA: c.nA, outstanding: context.outstanding - 1, next: 0, complete: false });
    }),
    /** The resident path: the whole layer as one ffn task, the next layer's front chained in it. */
    runResident: enqueueActions(({ enqueue, context, system }) => {
      const c = { ...context, complete: true }; // nP: from fronted, or from the chained front (layerDone)
      const p = new Poster(enqueue, c, system);
      p.task({ op: "ffn", key: "", layer: c.layer, start: 0, count: c.nP, lookup: true, next: chained(c) }, { lane: "compute", layer: c.layer, cluster: 0 });
      enqueue.assign({ ...p.counts(), complete: true, clusters: [{ start: 0, count: c.nP, resident: true }], next: c.nP, backsPosted: 1, backsAnswered: 0, gateBase: 1, gatesAnswered: 0 });
    }),
    /** Plan the layer's next lease (the front's counts came chained, or the last lease was full). */
    plan: enqueueActions(({ enqueue, context, system }) => {
      new Poster(enqueue, context, system).ask({ type: "cache.plan", layer: context.layer, nP: context.nP, nA: context.nA, from: context.next, path: context.path, replyTo: context.self });
    }),
    /** The cache planned a lease of clusters: post their first tasks. */
    planned: enqueueActions(({ enqueue, context, event, system }) => {
      if (event.type !== "cache.planned") return;
      const p = new Poster(enqueue, context, system);
      const complete = event.next >= context.nP;
      const clusters = event.clusters;
      const c = { ...context, complete };
      let posted = 0;
      let whole = true; // resident clusters run whole while every one before them did
      for (let i = 0; i < clusters.length; i++) {
        const cl = clusters[i]!;
        const next = i === clusters.length - 1 && complete ? chained(c) : undefined;
        const hint = { lane: "compute" as const, layer: context.layer, cluster: i };
        if (context.path === "fused") {
          p.task({ op: "back", key: "", layer: context.layer, start: 0, nA: context.nA, prefixed: context.prefix, next }, hint);
          posted++;
        } else if (context.path === "blocking" || (cl.resident && whole)) {
          p.task({ op: "ffn", key: "", layer: context.layer, start: cl.start, count: cl.count, next }, hint);
          posted++;
        } else {
          whole = false;
          p.task({ op: "gate", key: "", layer: context.layer, start: cl.start, count: cl.count }, hint);
        }
      }
      enqueue.assign({ ...p.counts(), clusters, next: event.next, complete, backsPosted: posted, backsAnswered: 0, gateBase: posted, gatesAnswered: 0 });
    }),
    /**
     * A cluster's gates are known: the cache plans its up+down reads, and its back is posted at
     * once (the cache handles the request first; the worker waits for the reads). Gates answer
     * in posting order, so backs are posted in cluster order.
     */
    gated: enqueueActions(({ enqueue, context, event, system }) => {
      const r = (event as Done).result;
      const cluster = context.gateBase + context.gatesAnswered;
      const cl = context.clusters[cluster]!;
      const nA = r.nA ?? 0;
      const p = new Poster(enqueue, context, system);
      p.ask({ type: "cache.updown", layer: context.layer, cluster, start: cl.start, nA, nSilent: r.nSilent ?? 0 });
      const last = cluster === context.clusters.length - 1 && context.complete;
      p.task({ op: "back", key: "", layer: context.layer, start: cl.start, nA, prefixed: false, next: last ? chained(context) : undefined }, { lane: "compute", layer: context.layer, cluster });
      enqueue.assign({ ...p.counts(1), gatesAnswered: context.gatesAnswered + 1, backsPosted: context.backsPosted + 1 });
    }),
    /** A back or ffn answered: count it; a whole-cluster ffn tells the cache what fired. */
    backed: enqueueActions(({ enqueue, context, event, system }) => {
      const e = event as Done;
      if (e.op === "ffn") {
        const start = context.clusters[context.backsAnswered]?.start ?? 0;
        const nP = context.path === "resident" ? context.nP : undefined;
        new Poster(enqueue, context, system).ask({ type: "cache.fired", layer: context.layer, start, nA: e.result.nA ?? 0, nSilent: e.result.nSilent ?? 0, nP });
      }
      enqueue.assign({ backsAnswered: context.backsAnswered + 1, outstanding: context.outstanding - 1 });
    }),
    /** The lease's last back answered and the layer is not fully planned (the cache was full): a new lease. */
    nextLease: enqueueActions(({ enqueue, context, system }) => {
      const p = new Poster(enqueue, context, system);
      p.ask({ type: "cache.lease" });
      p.ask({ type: "cache.plan", layer: context.layer, nP: context.nP, nA: context.nA, from: context.next, path: context.path, replyTo: context.self });
    }),
    /** The layer's last answer: on to the next layer (its front chained in the answer, if any). */
    layerDone: assign(({ context, event }) => nextLayer(context, event.type === "compute.done" ? event.result.front : undefined)),
    postLogits: enqueueActions(({ enqueue, context, system }) => {
      const p = new Poster(enqueue, context, system);
      p.task({ op: "logits", key: "" }, { lane: "compute" });
      enqueue.assign(p.counts());
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
    isGate: ({ event }) => (event as Done).op === "gate",
    /** More answers of this lease to come after this one. */
    leaseOpen: ({ context }) => !leaseDoneAfter(context),
    leaseFull: ({ context }) => !context.complete,
    lastLayer: ({ context }) => context.layer + 1 >= context.nLayer,
    chainedFront: ({ event }) => (event as Done).result?.front !== undefined,
    nothingOutstanding: ({ context }) => context.outstanding === 0,
    /** The cache planned nothing: the layer's FFN is empty (o = 0), or the cache could not hold one neuron. */
    emptyPlan: ({ event }) => event.type === "cache.planned" && event.clusters.length === 0,
    resident: ({ context }) => context.path === "resident",
    /** Nothing planned and the layer not complete: the cache cannot hold a single neuron now. */
    cacheFull: ({ context, event }) => event.type === "cache.planned" && event.clusters.length === 0 && event.next < context.nP,
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
    // x += o(L−1); attention; xb = ffn_norm(x); o = 0; P = predict(x) [+ gates]: on the worker
    front: {
      entry: "startLayer",
      on: {
        "compute.done": [
          { guard: "aborted", target: "cancelling", actions: "answered" },
          { guard: "resident", target: "ffn", actions: ["fronted", "runResident"] },
          { target: "reads", actions: "fronted" },
        ],
      },
    },
    // the cache plans a lease of the layer's clusters (and hands their reads to the I/O loader)
    reads: {
      on: {
        "cache.planned": [
          { guard: "aborted", target: "cancelling" },
          { guard: "cacheFull", target: "failing", actions: assign({ error: ({ context }) => `the neuron cache cannot hold one neuron of layer ${context.layer} (internal accounting error)` }) },
          { guard: "emptyPlan", target: "nextLayer" },
          { target: "ffn", actions: "planned" },
        ],
      },
    },
    // gates, up+down reads, backs of the lease's clusters in flight
    ffn: {
      on: {
        "compute.done": [
          { guard: "isGate", actions: "gated" },
          { guard: "leaseOpen", actions: "backed" },
          { guard: "aborted", target: "cancelling", actions: "backed" },
          { guard: "leaseFull", target: "reads", actions: ["backed", "nextLease"] },
          { guard: "lastLayer", target: "logits", actions: "backed" },
          { guard: ({ context, event }) => context.path === "resident" && (event as Done).result.front !== undefined, actions: ["backed", "layerDone", "startLayer", "runResident"] },
          { guard: "chainedFront", target: "reads", actions: ["backed", "layerDone", "startLayer", "plan"] },
          { target: "front", actions: ["backed", "layerDone"] },
        ],
      },
    },
    // a layer with nothing to compute (no neuron predicted): straight to the next
    nextLayer: {
      always: [{ guard: "lastLayer", target: "logits" }, { target: "front", actions: "layerDone" }],
    },
    // x += o(last); logits
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
