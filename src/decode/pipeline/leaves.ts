// The actors at the edge of the pipeline's actor system, where the machines (actors/) meet the
// outside: the compute and I/O worker threads (behind direct channels) and the neuron cache's
// tables. Each is an XState callback actor injected into the machines; replay (trace-tools/
// replay.ts) swaps them for stubs and feeds the machines what these sent.
import type { Piscina } from "piscina";
import { fromCallback, type AnyActorRef } from "xstate";
import type { ChannelCommand, ChannelEvent, SpanHint } from "../../../actors/compute-machine.js";
import type { IoChannelCommand, IoChannelEvent } from "../../../actors/io-loader-machine.js";
import { markBatch } from "../../../actors/io-flags.js";
import { PIPELINE_IDS } from "../../../actors/pipeline-machine.js";
import type { ComputeInit, ComputeResult, ComputeTask, IoInit, IoResult, IoTask } from "../../../actors/protocol.js";
import type { CacheReply, CacheRequest, PlannedCluster } from "../../../actors/token-machine.js";
import type { NeuronCache } from "../../sparse/cache/neuron-cache.js";
import type { ReadBatch } from "../../sparse/cache/read-batcher.js";
import type { WindowCache } from "../../sparse/cache/window-cache.js";
import type { FfnSteps } from "../../sparse/ffn/steps.js";
import { nowUs, type SpanName, type TraceRecorder } from "../../trace/recorder.js";
import type { SparseParts } from "../sparse-parts.js";
import { openChannel, type WorkerChannel } from "./worker-channel.js";

/**
 * Read batches handed to the I/O loader and not landed yet, and those that failed — shared by
 * the cache actor (a computation must wait for the batches that fill its slots) and the I/O
 * channel (which sees them land), on the scheduler thread.
 */
export class ReadTracker {
  readonly pending = new Set<number>();
  readonly failed = new Set<number>();
  /** Of the batches that last wrote these slots, those still pending or failed. */
  waitsOf(slotBatch: Int32Array, slots: Int32Array, start: number, count: number): number[] {
    const ids = new Set<number>();
    for (let k = start; k < start + count; k++) {
      const b = slotBatch[slots[k]!]!;
      if (b > 0 && (this.pending.has(b) || this.failed.has(b))) ids.add(b);
    }
    return [...ids];
  }
}

/** The compute worker's thread, behind a direct channel: posts tasks with the session's key, records their spans. */
export function computeChannel(pool: Piscina, role: "big" | "little", trace: () => TraceRecorder | undefined) {
  const what = `compute worker (${role})`;
  return fromCallback<ChannelCommand, unknown, ChannelEvent>(({ sendBack, receive }) => {
    let ch: WorkerChannel<ComputeTask, ComputeResult> | undefined;
    let key = "";
    receive((cmd) => {
      if (cmd.type === "init") {
        ch?.close("replaced by a new session's channel");
        ch = undefined;
        key = cmd.init.key;
        openChannel<ComputeTask, ComputeResult>(pool, what, (port) => ({ ...cmd.init, port }) satisfies ComputeInit).then(
          (c) => {
            ch = c;
            sendBack({ type: "channel.ready", key: cmd.init.key });
          },
          (e: unknown) => sendBack({ type: "channel.initFailed", error: `${what}: ${(e as Error)?.message ?? String(e)}` }),
        );
        return;
      }
      const c = ch;
      if (!c) {
        sendBack({ type: "channel.error", id: cmd.id, error: `${what}: not initialised`, exited: true });
        return;
      }
      c.request({ ...cmd.task, key } as ComputeTask).then(
        (result) => {
          const t = trace();
          if (t) recordSpans(t, cmd.task.op, cmd.hint, result);
          sendBack({ type: "channel.answer", id: cmd.id, result });
        },
        (e: unknown) => sendBack({ type: "channel.error", id: cmd.id, error: (e as Error)?.message ?? String(e), exited: c.closed }),
      );
    });
    return () => ch?.close("compute actor stopped");
  });
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

export interface IoChannelOptions {
  pool: Piscina;
  loader: number; // native loader id
  staging: number; // staging buffer id
  chunkBytes: number; // one batch's staging chunk
  arena: number;
  device: string;
  flags: Int32Array; // read-batch completion flags (io-flags.ts)
  ioDone: SharedArrayBuffer;
  cores?: number[];
  tracker: ReadTracker;
  trace: () => TraceRecorder | undefined;
  token: () => number;
}

/** The I/O worker's thread, behind a direct channel: reads a batch into its staging chunk, then copies into the slots. */
export function ioChannel(o: IoChannelOptions) {
  const what = `I/O loader (${o.device})`;
  return fromCallback<IoChannelCommand, unknown, IoChannelEvent>(({ sendBack, receive }) => {
    let ready: Promise<WorkerChannel<IoTask, IoResult>>;
    const open = () => {
      ready = openChannel<IoTask, IoResult>(o.pool, what, (port): IoInit => ({ op: "init", cores: o.cores, port, ioDone: o.ioDone }));
      ready.catch(() => {}); // a read on it reports the cause
    };
    open();
    receive((cmd) => {
      if (cmd.type === "fail") {
        for (const b of cmd.batches) {
          o.tracker.pending.delete(b);
          o.tracker.failed.add(b);
          markBatch(o.flags, b, false); // a computation waiting on it stops
        }
        return;
      }
      if (cmd.type === "reopen") {
        o.tracker.failed.clear();
        void ready.then(
          (ch) => ch.closed && open(),
          () => open(),
        );
        return;
      }
      const { batch, chunk } = cmd;
      const base = chunk * o.chunkBytes;
      const reqs = Float64Array.from(batch.reqs);
      for (let i = 0; i < reqs.length; i += 4) {
        reqs[i + 2] = o.staging;
        reqs[i + 3]! += base;
      }
      const copies = Float64Array.from(batch.copies);
      for (let i = 1; i < copies.length; i += 3) copies[i]! += base;
      const task: IoTask = { op: "read", loader: o.loader, reqs, arena: o.arena, staging: o.staging, copies, batch: batch.id };
      const token = o.token();
      ready
        .then((ch) => ch.request(task))
        .then(
          (r) => {
            o.tracker.pending.delete(batch.id);
            o.trace()?.span({ lane: "io", name: "read", t0: r.t0, t1: r.t1, token, layer: batch.layer, bytes: batch.bytes, reads: batch.reads, phase: batch.phase });
            sendBack({ type: "channel.read", batch: batch.id, chunk, bytes: batch.bytes });
          },
          (e: unknown) => {
            o.tracker.pending.delete(batch.id);
            o.tracker.failed.add(batch.id);
            markBatch(o.flags, batch.id, false);
            const msg = (e as Error)?.message ?? String(e);
            sendBack({ type: "channel.failed", batch: batch.id, chunk, error: msg.startsWith(what) ? msg : `${what}: ${msg}` });
          },
        );
    });
    return () => void ready.then((ch) => ch.close("I/O loader closed")).catch(() => {});
  });
}

export interface CacheActorOptions {
  parts: SparseParts;
  /** The LLMFlash window cache (blocking decoder), or undefined. */
  window?: WindowCache;
  steps: FfnSteps;
  /** Pack positions per cluster of P. */
  clusterNeurons: number;
  prefetchClusters: number;
  tracker: ReadTracker;
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
  const { parts, window: wc, steps, tracker } = o;
  const cache: NeuronCache = parts.cache;
  const { P, slots, aPos, aSlots } = steps;
  const W = o.clusterNeurons;
  return fromCallback<CacheRequest>(({ receive, system }) => {
    const submit = (batches: ReadBatch[]) => {
      if (batches.length === 0) return;
      for (const b of batches) tracker.pending.add(b.id);
      (system.get(PIPELINE_IDS.io) as AnyActorRef).send({ type: "io.submit", batches });
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
            let waitFor: number[] = [];
            if (req.nA > 0) {
              cache.loadUpDown(req.layer, aPos.subarray(req.start), req.nA, aSlots.subarray(req.start));
              submit(cache.takeBatches());
              waitFor = tracker.waitsOf(cache.slotBatch, aSlots, req.start, req.nA);
            }
            reply(req.replyTo, { type: "cache.updowned", cluster: req.cluster, waitFor });
            break;
          }
          case "cache.fired": {
            parts.ffnStats[req.layer]!.fired += req.nA;
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
        clusters.push({ start: from, count: end - from, waitFor: batches.map((b) => b.id), resident: false });
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
        clusters.push({ start: 0, count: nP, waitFor: tracker.waitsOf(cache.slotBatch, aSlots, 0, req.nA), resident: false });
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
        const waitFor = cache.pinned ? [] : tracker.waitsOf(cache.slotBatch, slots, i, end - i); // pinned gate rows never wait
        clusters.push({ start: i, count: end - i, waitFor, resident: waitFor.length === 0 && cache.allFull(layer, P, i, end) });
        i = end;
      }
      return { type: "cache.planned", layer, clusters, next: i };
    }
  });
}
