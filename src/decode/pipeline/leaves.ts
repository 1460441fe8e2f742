// The edge of the pipeline's actor system, where the machines (actors/) meet the outside: the
// compute and I/O worker threads (behind direct channels), reached through actions injected
// into the compute and I/O loader machines, and the neuron cache's tables, an injected callback
// actor. Replay (trace-tools/replay.ts) leaves them out and feeds the machines what they sent.
import type { Piscina } from "piscina";
import { fromCallback, type AnyActorRef } from "xstate";
import type { ChannelEvent, ComputeReply, PostParams, SpanHint } from "../../../actors/compute-machine.js";
import type { IoChannelEvent, IoLoaderContext } from "../../../actors/io-loader-machine.js";
import { PIPELINE_IDS } from "../../../actors/pipeline-machine.js";
import type { ComputeInit, ComputeResult, ComputeTask, IoInit, IoResult, IoTask } from "../../../actors/protocol.js";
import type { CacheReply, CacheRequest, PlannedCluster } from "../../../actors/token-machine.js";
import type { NeuronCache } from "../../sparse/cache/neuron-cache.js";
import type { ReadBatch } from "../../sparse/cache/read-batcher.js";
import { markSlots, slotReady } from "../../sparse/cache/slot-flags.js";
import type { WindowCache } from "../../sparse/cache/window-cache.js";
import type { FfnSteps } from "../../sparse/ffn/steps.js";
import { nowUs, type SpanName, type TraceRecorder } from "../../trace/recorder.js";
import type { SparseParts } from "../sparse-parts.js";
import { openChannel, type WorkerChannel } from "./worker-channel.js";

/**
 * The compute worker's thread, behind a direct channel: the compute actor's injected actions
 * (postToWorker, initWorker) post tasks with the session's key and record their spans; answers
 * come back to the actor as channel.* events.
 */
export function computeWorkerActions(pool: Piscina, role: "big" | "little", trace: () => TraceRecorder | undefined) {
  const what = `compute worker (${role})`;
  let ch: WorkerChannel<ComputeTask, ComputeResult> | undefined;
  let key = "";
  let outstanding = 0; // posted, not answered
  let answered = 0; // since the worker last drained
  type Args = { self: { send(ev: ChannelEvent): void }; system: { get(id: string): unknown } };
  const reply = (system: Args["system"], to: string, ev: ComputeReply) => (system.get(to) as AnyActorRef | undefined)?.send(ev);
  const settle = (self: Args["self"]) => {
    outstanding--;
    answered++;
    if (outstanding === 0) {
      self.send({ type: "channel.drained", answered });
      answered = 0;
    }
  };
  return {
    initWorker({ self }: Args, { init }: { init: Omit<ComputeInit, "port"> }): void {
      ch?.close("replaced by a new session's channel");
      ch = undefined;
      key = init.key;
      openChannel<ComputeTask, ComputeResult>(pool, what, (port) => ({ ...init, port }) satisfies ComputeInit).then(
        (c) => {
          ch = c;
          self.send({ type: "channel.ready", key: init.key });
        },
        (e: unknown) => self.send({ type: "channel.initFailed", error: `${what}: ${(e as Error)?.message ?? String(e)}` }),
      );
    },
    postToWorker({ self, system }: Args, p: PostParams): void {
      outstanding++;
      const c = ch;
      const failed = (error: string, exited: boolean) => {
        // the answer first (the asker's cause), then the actor learns the thread is gone
        reply(system, p.replyTo, { type: "compute.failed", id: p.id, op: p.task.op, error });
        if (exited) self.send({ type: "channel.exited", error });
        settle(self);
      };
      if (!c) {
        queueMicrotask(() => failed(`${what}: not initialised`, true));
        return;
      }
      c.request({ ...p.task, key } as ComputeTask).then(
        (result) => {
          const t = trace();
          if (t) recordSpans(t, p.task.op, p.hint, result);
          reply(system, p.replyTo, { type: "compute.done", id: p.id, op: p.task.op, result });
          settle(self);
        },
        (e: unknown) => failed((e as Error)?.message ?? String(e), c.closed),
      );
    },
    close(): void {
      ch?.close("compute actor stopped");
    },
  };
}

/** A task's answer as trace spans: one per step it ran (result.cuts), a chained front's too. */
function recordSpans(t: TraceRecorder, op: string, hint: SpanHint, r: ComputeResult): void {
  const span = (lane: SpanHint["lane"], name: SpanName, t0: number, t1: number, layer?: number, extra: { cluster?: number; neurons?: number } = {}) =>
    t.span({ lane, name, t0, t1, token: hint.token, layer, ...extra });
  const front = (fr: ComputeResult, layer: number) => {
    const c = fr.cuts ?? [fr.t0, fr.t1];
    span("compute", "attention", c[0]!, c[1]!, layer, { neurons: fr.nP });
    if (c.length >= 4) span("predictor", "predict", c[2]!, c[3]!, layer, { neurons: fr.nP });
    if (c.length >= 6) span("compute", "gate", c[4]!, c[5]!, layer, { cluster: 0, neurons: fr.nP });
  };
  const L = hint.layer;
  switch (op) {
    case "front":
      front(r, L!);
      break;
    case "gate":
      span("compute", "gate", r.t0, r.t1, L, { cluster: hint.cluster, neurons: (r.nA ?? 0) + (r.nSilent ?? 0) });
      break;
    case "back": {
      const c = r.cuts ?? [];
      for (let i = 0; i + 1 < c.length; i += 2) span("compute", i % 4 === 0 ? "up" : "down", c[i]!, c[i + 1]!, L, { cluster: hint.cluster });
      break;
    }
    case "ffn":
      span("compute", "ffn", r.t0, r.t1, L, { cluster: hint.cluster, neurons: r.nA });
      break;
    case "logits":
      span("compute", "logits", r.t0, r.t1);
      break;
    case "prefill":
      span("prefill", "prefill", r.t0, r.t1);
      break;
  }
  if (r.front) front(r.front, L! + 1);
}

export interface IoWorkerOptions {
  pool: Piscina;
  loader: number; // native loader id
  staging: number; // staging buffer id
  chunkBytes: number; // one batch's staging chunk
  arena: number;
  slotBytes: number;
  device: string;
  /** The slot flags' `ready` (slot-flags.ts): the worker marks a batch's slots when its copies land. */
  ready: SharedArrayBuffer;
  cores?: number[];
  trace: () => TraceRecorder | undefined;
  token: () => number;
}

/**
 * The I/O worker's thread, behind a direct channel: the I/O loader's injected actions. A batch
 * is read into its staging chunk, then copied into the slots; the worker marks the slots ready.
 */
export function ioWorkerActions(o: IoWorkerOptions) {
  const what = `I/O loader (${o.device})`;
  const ready = new Int32Array(o.ready);
  let channel: Promise<WorkerChannel<IoTask, IoResult>>;
  let open_: WorkerChannel<IoTask, IoResult> | undefined; // the channel once open: reads are posted at once, not a microtask later
  const open = () => {
    open_ = undefined;
    channel = openChannel<IoTask, IoResult>(o.pool, what, (port): IoInit => ({ op: "init", cores: o.cores, port, ready: o.ready }));
    channel.then((ch) => (open_ = ch)).catch(() => {}); // a read on it reports the cause
  };
  open();
  type Self = { self: { send(ev: IoChannelEvent): void } };
  type Ctx = { context: IoLoaderContext };
  const read = (self: Self["self"], batch: ReadBatch, chunk: number) => {
    // the batch is handed out once: its offsets are moved into its staging chunk in place
    const base = chunk * o.chunkBytes;
    const { reqs, copies } = batch;
    for (let i = 0; i < reqs.length; i += 4) {
      reqs[i + 2] = o.staging;
      reqs[i + 3]! += base;
    }
    for (let i = 1; i < copies.length; i += 3) copies[i]! += base;
    const task: IoTask = { op: "read", loader: o.loader, reqs, arena: o.arena, staging: o.staging, copies, batch: batch.id, slotBytes: o.slotBytes };
    const token = o.token();
    (open_ && !open_.closed ? open_.request(task) : channel.then((ch) => ch.request(task))).then(
        (r) => {
          o.trace()?.span({ lane: "io", name: "read", t0: r.t0, t1: r.t1, token, layer: batch.layer, bytes: batch.bytes, reads: batch.reads, phase: batch.phase });
          self.send({ type: "channel.read", batch: batch.id, chunk, bytes: batch.bytes });
        },
        (e: unknown) => {
          markSlots(ready, batch.copies, o.slotBytes, batch.id, false); // the worker may not have: a computation waiting on it stops
          const msg = (e as Error)?.message ?? String(e);
          self.send({ type: "channel.failed", batch: batch.id, chunk, error: msg.startsWith(what) ? msg : `${what}: ${msg}` });
        },
      );
  };
  return {
    readBatches({ self, context }: Self & Ctx): void {
      for (const { batch, chunk } of context.starting) read(self, batch, chunk);
    },
    failBatches({ context }: Ctx): void {
      for (const b of context.failing) markSlots(ready, b.copies, o.slotBytes, b.id, false);
    },
    reopen(): void {
      void channel.then(
        (ch) => ch.closed && open(),
        () => open(),
      );
    },
    close(): void {
      void channel.then((ch) => ch.close("I/O loader closed")).catch(() => {});
    },
  };
}

export interface CacheActorOptions {
  parts: SparseParts;
  /** The LLMFlash window cache (blocking decoder), or undefined. */
  window?: WindowCache;
  steps: FfnSteps;
  /** Pack positions per cluster of P. */
  clusterNeurons: number;
  prefetchClusters: number;
  trace: () => TraceRecorder | undefined;
  token: () => number;
}

/**
 * The neuron cache as an actor: plans a layer's reads for the token machine (which slots hold
 * which rows, what to read), hands the read batches to the I/O loader and answers which batches
 * each cluster must wait for. Its bookkeeping (LRU, windows, statistics) runs on the scheduler
 * thread, between messages.
 */
export function cacheActor(o: CacheActorOptions) {
  const { parts, window: wc, steps } = o;
  const cache: NeuronCache = parts.cache;
  const { P, slots, aPos, aSlots } = steps;
  const W = o.clusterNeurons;
  return fromCallback<CacheRequest>(({ receive, system }) => {
    const submit = (batches: ReadBatch[]) => {
      if (batches.length > 0) (system.get(PIPELINE_IDS.io) as AnyActorRef).send({ type: "io.submit", batches });
    };
    const { want, ready } = { want: cache.slotBatch, ready: new Int32Array(cache.reads.flags.ready) };
    /** Pinned gate rows: are the up+down rows of P[i, end) landed? */
    const upDownLanded = (layer: number, i: number, end: number) => {
      const base = layer * parts.pack.config.nFF;
      for (let k = i; k < end; k++) if (!slotReady(want, ready, cache.slotOfNeuron(base + P[k]!))) return false;
      return true;
    };
    /** Are the gate, up and down rows of P[i, end) resident and landed (no read in flight)? */
    const landed = (layer: number, i: number, end: number) => {
      if (!cache.allFull(layer, P, i, end)) return false;
      for (let k = i; k < end; k++) if (!slotReady(want, ready, slots[k]!)) return false;
      return true;
    };
    const reply = (to: string, ev: CacheReply) => (system.get(to) as AnyActorRef | undefined)?.send(ev);
    receive((req) => {
      const t = o.trace();
      const t0 = t ? nowUs() : 0;
      try {
        switch (req.type) {
          case "cache.plan":
            reply(req.replyTo, plan(req));
            break;
          case "cache.updown": {
            const st = parts.ffnStats[req.layer]!;
            st.fired += req.nA;
            cache.demoteSilent(req.layer, slots.subarray(req.start), req.nSilent);
            if (req.nA > 0) {
              cache.loadUpDown(req.layer, aPos.subarray(req.start), req.nA, aSlots.subarray(req.start));
              submit(cache.takeBatches());
            }
            break;
          }
          case "cache.fired": {
            const st = parts.ffnStats[req.layer]!;
            if (req.nP !== undefined) {
              // the whole FFN resident: the layer ran without planning
              st.tokens++;
              st.predicted += req.nP;
              cache.countResidentGates(req.layer, req.nP);
            }
            st.fired += req.nA;
            if (wc) break; // the window cache counted its loads
            cache.demoteSilent(req.layer, slots.subarray(req.start), req.nSilent);
            if (req.nA > 0) {
              cache.loadUpDown(req.layer, aPos.subarray(req.start), req.nA, aSlots.subarray(req.start)); // all hits: counts only
              if (cache.takeBatches().length > 0) throw new Error(`layer ${req.layer}: a resident cluster needs reads (internal accounting error)`);
            }
            break;
          }
          case "cache.window":
            if (!wc) cache.beginWindow();
            break;
          case "cache.prefetch":
            cache.prefetchHot(req.layer, o.prefetchClusters);
            submit(cache.takeBatches());
            break;
          case "cache.forget": {
            const failed = new Set(req.failed);
            cache.forget((b) => failed.has(b));
            wc?.forget((b) => failed.has(b));
            break;
          }
        }
        // the scheduler's bookkeeping, on the timeline (it is the orchestration between kernels and reads)
        if (t && (req.type === "cache.plan" || req.type === "cache.updown")) t.span({ lane: "scheduler", name: "plan", t0, t1: nowUs(), token: o.token(), layer: req.layer, ...(req.type === "cache.updown" ? { cluster: req.cluster, neurons: req.nA } : { neurons: req.nP }) });
      } catch (e) {
        if ("replyTo" in req) reply(req.replyTo, { type: "cache.error", error: `neuron cache: ${(e as Error)?.message ?? String(e)}` });
        else throw e;
      }
    });

    /** A window of the layer's clusters: gate rows resident or read, from P[from] on. */
    function plan(req: Extract<CacheRequest, { type: "cache.plan" }>): CacheReply {
      const { layer, nP, from } = req;
      const st = parts.ffnStats[layer]!;
      if (from === 0) {
        st.tokens++;
        st.predicted += nP;
      }
      const clusters: PlannedCluster[] = [];
      if (req.path === "blocking") {
        if (layer === 0 && from === 0) wc!.beginToken();
        if (from >= nP) return { type: "cache.planned", layer, clusters, next: nP };
        const end = wc!.load(layer, P, from, nP, slots.subarray(from));
        if (end === from) throw new Error(`the window cache cannot hold one neuron of layer ${layer}`);
        const batches = wc!.takeBatches();
        submit(batches);
        clusters.push({ start: from, count: end - from, resident: false });
        return { type: "cache.planned", layer, clusters, next: end };
      }
      if (from === 0) cache.beginWindow();
      if (req.path === "fused") {
        if (cache.loadGates(layer, P, 0, nP, slots) !== nP) throw new Error(`layer ${layer}'s predicted neurons do not fit the cold region (internal accounting error)`);
        st.fired += req.nA;
        if (req.nA > 0) {
          cache.loadUpDown(layer, aPos, req.nA, aSlots);
          submit(cache.takeBatches());
        }
        clusters.push({ start: 0, count: nP, resident: false });
        return { type: "cache.planned", layer, clusters, next: nP };
      }
      let i = from;
      while (i < nP) {
        const c = Math.floor(P[i]! / W);
        let e = i;
        while (e < nP && Math.floor(P[e]! / W) === c) e++;
        const end = cache.loadGates(layer, P, i, e, slots.subarray(i));
        if (end === i) break; // the cache holds no more at once: the token machine lets these finish first
        submit(cache.takeBatches());
        // pinned: slots[] index gate rows, every neuron's up+down must be landed to run whole
        clusters.push({ start: i, count: end - i, resident: cache.pinned ? cache.allFull(layer, P, i, end) && upDownLanded(layer, i, end) : landed(layer, i, end) });
        i = end;
      }
      return { type: "cache.planned", layer, clusters, next: i };
    }
  });
}
