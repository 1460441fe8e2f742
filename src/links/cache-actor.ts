// The neuron cache as an actor of the pipeline's system (system id "neuron-cache"): the token
// machine asks it to plan a layer's reads. Replay stubs it.
import { fromCallback, type AnyActorRef } from "xstate";
import { PIPELINE_IDS } from "../protocol/events.js";
import type { CacheReply, CacheRequest, PlannedCluster } from "../protocol/events.js";
import type { NeuronCache } from "../sparse/cache/neuron-cache.js";
import type { ReadBatch } from "../sparse/cache/read-batcher.js";
import { slotReady } from "../sparse/cache/slot-flags.js";
import type { WindowCache } from "../sparse/cache/window-cache.js";
import type { FfnSteps } from "../sparse/ffn/steps.js";
import { nowUs, type TraceRecorder } from "../trace/recorder.js";
import type { SparseParts } from "../sparse/parts.js";


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
 * each cluster must wait for. Its bookkeeping (LRU, leases, statistics) runs on the scheduler
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
          case "cache.lease":
            if (!wc) cache.beginLease();
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
        // a request without a reply address came from the token machine too: it fails the token
        // (thrown, it would escape the actor system as an uncaught error)
        const msg = (e as Error)?.message ?? String(e);
        reply("replyTo" in req ? req.replyTo : PIPELINE_IDS.token, { type: "cache.error", error: msg.startsWith("neuron cache") ? msg : `neuron cache: ${msg}` });
      }
    });

    /** A lease of the layer's clusters: gate rows resident or read, from P[from] on. */
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
      if (from === 0) cache.beginLease();
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
