// The pipeline and blocking decoders: a neuron pack under a memory budget, run by the XState
// actor system of actors/pipeline-machine.ts on worker threads (docs/pipeline.md). This file is
// wiring: it resolves the knobs, starts the worker threads, injects the actors that touch them
// (leaves.ts) and turns the root machine's requests and results into the Decoder interface.
// `pipeline` overlaps reads with compute; `blocking` is the LLMFlash baseline on the same parts
// (window cache, every read before compute).
import { availableParallelism } from "node:os";
import { Piscina } from "piscina";
import { createActor, toObserver, waitFor, type Actor, type AnyActorRef, type InspectionEvent, type Observer, type Subscription } from "xstate";
import { computeMachine } from "../../../actors/compute-machine.js";
import { ioLoaderMachine } from "../../../actors/io-loader-machine.js";
import { pipelineMachine, type PipelineInput, type PipelineRequest, type PipelineResult } from "../../../actors/pipeline-machine.js";
import type { TokenPath } from "../../protocol/events.js";
import type { ForwardOptions } from "../../model/forward.js";
import { native } from "../../native.js";
import { WindowCache } from "../../sparse/cache/window-cache.js";
import { FfnSteps } from "../../sparse/ffn/steps.js";
import { ffnScratchBytes } from "../../sparse/ffn/layout.js";
import { recordInspection, nowUs, type TraceRecorder } from "../../trace/recorder.js";
import { workerFile } from "../../util/package-files.js";
import { allocContext, freeContext } from "../context.js";
import type { ContextOptions, DecodeContext, Decoder } from "../decoder.js";
import type { SparseParts } from "../../sparse/parts.js";
import { cacheActor } from "../../links/cache-actor.js";
import { computeWorkerActions } from "../../links/compute-link.js";
import { ioWorkerActions } from "../../links/io-link.js";

export type PipelineMode = "pipeline" | "blocking";

export interface PipelineOptions {
  /** Pack positions per pipeline cluster (default: the FFN in 8 clusters, a multiple of the cache's cluster size; one cluster when ≥ 98% of the FFN is resident). */
  clusterNeurons?: number;
  /** Hot clusters of layer L+1 read while layer L's front runs (pipeline mode; default 4, 0 with pinned gate rows). */
  prefetchClusters?: number;
  /** Tokens whose neurons the blocking mode's window cache keeps (default 5, as LLMFlash). */
  window?: number;
  /** Pin the compute worker to the big cores and the I/O worker to the little ones (default true). */
  affinity?: boolean;
  bigCores?: number[];
  littleCores?: number[];
  /** Read batches handed to the I/O worker at once (default: every staging chunk). */
  ioInFlight?: number;
}

/** Every knob the actors run with, resolved (printed at load, recorded in benchmarks). */
export interface PipelineKnobs {
  mode: PipelineMode;
  /** How a layer's FFN is scheduled (actors/token-machine.ts). */
  path: TokenPath;
  clusterNeurons: number;
  prefetchClusters: number;
  window: number;
  bigCores?: number[];
  littleCores?: number[];
  ioInFlight: number;
  stagingChunks: number;
  stagingChunkBytes: number;
  threads: number;
}

/** @xstate.actor and @xstate.snapshot inspection events for `root` and every actor below it, as XState sends them at birth. */
export function announceActors(root: AnyActorRef, emit: (ev: InspectionEvent) => void): void {
  const visit = (ref: AnyActorRef) => {
    emit({ type: "@xstate.actor", actorRef: ref, rootId: root.sessionId } as InspectionEvent);
    emit({ type: "@xstate.snapshot", actorRef: ref, rootId: root.sessionId, snapshot: ref.getSnapshot(), event: { type: "xstate.init" } } as InspectionEvent);
    const children = (ref.getSnapshot() as { children?: Record<string, AnyActorRef> }).children ?? {};
    for (const c of Object.values(children)) if (c) visit(c);
  };
  visit(root);
}

function abortError(reason?: string): Error {
  const e = new Error(`generation cancelled${reason !== undefined ? `: ${reason}` : ""}`);
  e.name = "AbortError";
  return e;
}

function reasonOf(signal?: AbortSignal): string | undefined {
  return signal?.reason !== undefined ? String((signal.reason as Error)?.message ?? signal.reason) : undefined;
}

export class PipelineDecoder implements Decoder {
  readonly knobs: PipelineKnobs;
  readonly root: Actor<typeof pipelineMachine>;
  private readonly computePool: Piscina;
  private readonly ioPool: Piscina;
  private traceRec?: TraceRecorder;
  private traceSub?: Subscription;
  private req = 0;
  private step = 0;
  private epoch = 0;
  private attachedCtx?: DecodeContext;

  constructor(
    readonly parts: SparseParts,
    readonly kind: PipelineMode,
    opts: PipelineOptions = {},
  ) {
    const { pack, plan, cache } = parts;
    const C = plan.clusterSize;
    const nFF = pack.config.nFF;
    // Clusters give reads something to overlap, but each costs the scheduler ~25 µs of messages
    // (actors/token-machine.ts): one per MiB of a layer's gate rows, at most 8 (7B: 8, as
    // measured there — 16 were 20% slower, 4 9% slower; the default model: 1, where a cluster of
    // 8 held 6 µs of compute). With (nearly: ≥ 98%) the whole FFN resident there is little to
    // read, and one task per matrix costs the fewest messages.
    const gateBytes = nFF * pack.gateBytes;
    const clusters = plan.ffnResident >= 0.98 ? 1 : Math.min(8, Math.max(1, Math.floor(gateBytes / 2 ** 20)));
    const clusterNeurons = opts.clusterNeurons ?? C * Math.max(1, Math.ceil(nFF / (clusters * C)));
    if (!(Number.isInteger(clusterNeurons) && clusterNeurons >= C && clusterNeurons % C === 0)) {
      throw new RangeError(`clusterNeurons must be a multiple of the cache's cluster size (${C}), got ${clusterNeurons}`);
    }
    const nCpu = availableParallelism();
    const affinity = opts.affinity ?? true;
    // staging: chunks of whole hot clusters, so reads of several batches can be in flight
    const chunks = Math.max(1, Math.min(4, Math.floor(plan.stagingBytes / (C * pack.bundleBytes))));
    const chunkBytes = Math.floor(plan.stagingBytes / chunks / 4096) * 4096;
    const threads = native().getThreads();
    this.knobs = {
      mode: kind,
      // gate rows pinned and a layer's predicted neurons fit the cold region: one front and one back task per layer
      path: kind === "blocking" ? "blocking" : plan.ffnResident >= 1 ? "resident" : cache.pinned && plan.coldSlots >= nFF ? "fused" : "clusters",
      clusterNeurons,
      // with pinned gates the hot up+down rows are resident and a prefetched cluster's gate
      // blocks are read for nothing (7B, 50%: +70 MiB per token): no prefetch by default
      prefetchClusters: kind === "pipeline" ? (opts.prefetchClusters ?? (cache.pinned ? 0 : 4)) : 0,
      window: opts.window ?? 5,
      bigCores: affinity ? (opts.bigCores ?? (nCpu > 1 ? [nCpu - 1] : [0])) : undefined,
      littleCores: affinity ? (opts.littleCores ?? [0]) : undefined,
      ioInFlight: opts.ioInFlight ?? chunks,
      stagingChunks: chunks,
      stagingChunkBytes: chunkBytes,
      threads,
    };
    cache.setDeferred(chunkBytes);
    const window = kind === "blocking" ? new WindowCache(pack, plan, cache.reads, cache.slotBytes, cache.bundleRead, this.knobs.window) : undefined;
    if (window) parts.policy = window; // report() shows its statistics
    this.computePool = new Piscina({ filename: workerFile("compute-worker"), minThreads: 1, maxThreads: 1, idleTimeout: Infinity, concurrentTasksPerWorker: 64, atomics: "async" });
    this.ioPool = new Piscina({ filename: workerFile("io-worker"), minThreads: 1, maxThreads: 1, idleTimeout: Infinity, concurrentTasksPerWorker: 8, atomics: "async" });
    const trace = () => this.traceRec;
    const k = this.knobs;
    this.computeLink = computeWorkerActions(this.computePool, "big", trace);
    this.ioLink = ioWorkerActions({
      pool: this.ioPool,
      loader: parts.loaderId,
      staging: cache.staging,
      chunkBytes,
      arena: cache.arena,
      slotBytes: cache.slotBytes,
      device: pack.path,
      ready: cache.reads.flags.ready,
      cores: k.littleCores,
      trace,
      token: () => this.step - 1,
    });
    const { initWorker, postToWorker } = this.computeLink;
    const { readBatches, failBatches, reopen, answerDrained } = this.ioLink;
    const logic = pipelineMachine.provide({
      actors: {
        compute: computeMachine.provide({ actions: { initWorker, postToWorker } }),
        io: ioLoaderMachine.provide({ actions: { readBatches, failBatches, reopen, answerDrained } }),
        cache: cacheActor({ parts, window, steps: new FfnSteps(parts.ffn, pack.config.nLayer), clusterNeurons, prefetchClusters: k.prefetchClusters, trace, token: () => this.step - 1 }),
      },
    });
    const input: PipelineInput = {
      mode: kind,
      nLayer: pack.config.nLayer,
      path: k.path,
      oracle: parts.predictor === "oracle",
      prefix: k.prefetchClusters === 0, // a prefetch in flight would make "resident" not "landed"
      prefetch: k.prefetchClusters > 0,
      device: pack.path,
      stagingChunks: chunks,
      ioInFlight: k.ioInFlight,
    };
    this.input = input;
    this.root = createActor(logic, { input, id: "pipeline", systemId: "pipeline" });
    this.root.start();
  }

  /** What the root machine was created with (traces record it: replay creates the same root). */
  readonly input: PipelineInput;
  private readonly computeLink: ReturnType<typeof computeWorkerActions>;
  private readonly ioLink: ReturnType<typeof ioWorkerActions>;

  get trace(): TraceRecorder | undefined {
    return this.traceRec;
  }
  set trace(t: TraceRecorder | undefined) {
    this.traceSub?.unsubscribe();
    this.traceSub = undefined;
    this.traceRec = t;
    if (!t) return;
    // the root was born before the trace: record it (and its input) so the trace can be replayed
    t.actor({ type: "@xstate.actor", actor: "pipeline", machine: "pipeline", input: this.input });
    t.actor({ type: "@xstate.snapshot", actor: "pipeline", state: this.root.getSnapshot().value, status: this.root.getSnapshot().status });
    this.traceSub = this.root.system.inspect(toObserver(recordInspection(t)));
  }

  /** Observe the actor system; the actors alive before (the root and its children, born at load) are announced first. */
  inspect(observer: Observer<InspectionEvent> | ((ev: InspectionEvent) => void)): Subscription {
    const o = toObserver(observer as Observer<InspectionEvent>);
    announceActors(this.root, (ev) => o.next?.(ev));
    return this.root.system.inspect(o);
  }

  createContext(opts: ContextOptions): DecodeContext {
    const { plan, pack } = this.parts;
    const ctx = allocContext(pack.config, opts, false, { path: pack.path, contextSize: plan.options.contextSize, batchSize: plan.options.batchSize });
    try {
      this.parts.addSessionBuffers([ctx.rs.buf, ctx.kv.buf]);
    } catch (e) {
      freeContext(ctx);
      throw e;
    }
    return ctx;
  }

  releaseContext(ctx: DecodeContext): void {
    if (this.attachedCtx === ctx) this.attachedCtx = undefined;
    this.parts.removeSessionBuffers([ctx.rs.buf, ctx.kv.buf]);
    freeContext(ctx);
  }

  evaluate(_ctx: DecodeContext, _tokens: readonly number[], _pos0: number, _opts?: ForwardOptions): number {
    throw new Error(`evaluate() runs on the calling thread; ${this.parts.pack.path} was loaded with decoder "${this.kind}" (worker threads) — use generate(), or load it with decoder "inline" to evaluate`);
  }

  /** Dense batched prompt evaluation on the prefill role; returns the logits' offset in ctx.rs. */
  async prefill(ctx: DecodeContext, tokens: readonly number[], pos0: number, signal?: AbortSignal): Promise<number> {
    if (signal?.aborted) throw abortError(reasonOf(signal));
    const t0 = nowUs();
    await this.attach(ctx);
    const r = await this.request({ type: "prefill", req: ++this.req, tokens: [...tokens], pos0 });
    this.traceRec?.token({ index: -1, t0, t1: nowUs() });
    if (r.error !== undefined) throw new Error(r.error);
    return r.logits!;
  }

  /** One decode step: the token at position `pos` through every layer; returns the logits' offset in ctx.rs. */
  async decode(ctx: DecodeContext, token: number, pos: number, signal?: AbortSignal): Promise<number> {
    if (signal?.aborted) throw abortError(reasonOf(signal));
    await this.attach(ctx);
    const step = this.step++;
    const before = this.traceRec ? this.parts.neuronTotals() : undefined;
    const t0 = nowUs();
    const onAbort = () => this.root.send({ type: "abort", reason: reasonOf(signal) });
    signal?.addEventListener("abort", onAbort, { once: true });
    let r: PipelineResult;
    try {
      r = await this.request({ type: "decode", req: ++this.req, step, token, pos });
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
    if (this.traceRec) {
      const t1 = nowUs();
      const after = this.parts.neuronTotals();
      this.traceRec.token({ index: step, t0, t1, token, pos, predicted: after.predicted - before!.predicted, fired: after.fired - before!.fired });
    }
    this.parts.tokenDone();
    if (r.cancelled) throw abortError(r.reason);
    if (r.error !== undefined) throw new Error(r.error);
    return r.logits!;
  }

  /** The worker holds this context's descriptors (sent again after a failure replaced it). */
  private async attach(ctx: DecodeContext): Promise<void> {
    if (this.attachedCtx === ctx && this.root.getSnapshot().context.attached !== undefined) return;
    const { pack, plan, cache, ffn, weights, loaderId } = this.parts;
    const { buffers: _b, ...w } = weights;
    const r = await this.request({
      type: "attach",
      req: ++this.req,
      init: {
        op: "init",
        key: `${++this.epoch}:${ctx.rs.buf}:${ctx.kv.buf}`,
        cfg: pack.config,
        weights: w,
        rs: ctx.rs,
        kv: ctx.kv,
        ffn,
        prefill: {
          loader: loaderId,
          layerOffsets: pack.layers.map((l) => l.bundlesOffset),
          staging: cache.staging,
          stagingBytes: plan.stagingBytes,
          bundleScratch: ffn.scratch, // free during prefill: the decode scratch doubles as the dense FFN's
          bundleScratchBytes: ffnScratchBytes(pack.config.nFF, pack.config.nEmbd, plan.options.batchSize),
          inPlace: this.kind !== "blocking",
        },
        threads: this.knobs.threads,
        slotFlags: cache.reads.flags,
        cores: this.knobs.bigCores,
        role: "big",
      },
    });
    if (r.error !== undefined) throw new Error(r.error);
    this.attachedCtx = ctx;
  }

  /** Send a request once the root is idle; resolve with its result. */
  private async request(ev: Extract<PipelineRequest, { req: number }>): Promise<PipelineResult> {
    const root = this.root;
    if (!root.getSnapshot().matches("idle")) throw new Error("pipeline: a forward pass is already running on this model");
    root.send(ev);
    const snap = await waitFor(root, (s) => s.context.result?.req === ev.req, { timeout: Infinity });
    return snap.context.result!;
  }

  /** Resolves when the root is idle: nothing this decoder started is running (after a cancelled or failed token too). */
  async idle(): Promise<void> {
    await waitFor(this.root, (s) => s.matches("idle"), { timeout: Infinity });
  }

  /** The worker threads (tests kill one to check failure handling). */
  workerThreads(): { compute: import("node:worker_threads").Worker; io: import("node:worker_threads").Worker } {
    return { compute: this.computePool.threads[0]!, io: this.ioPool.threads[0]! };
  }

  describe(): string {
    const k = this.knobs;
    const how =
      k.path === "resident"
        ? "the whole FFN resident: one ffn task per layer, the next layer's front chained in it"
        : k.path === "fused"
        ? "gate rows pinned: one front (attention, predictor, gates) and one back (up, down) task per layer"
        : k.path === "blocking"
          ? "every missing neuron read, then one ffn task per chunk"
          : `clusters of ${k.clusterNeurons} pack positions`;
    return `decoder: ${k.mode} (actors on worker threads), ${how}, prefetch ${k.prefetchClusters} hot clusters of the next layer${k.mode === "blocking" ? `, window cache of ${k.window} tokens` : ""}, staging ${k.stagingChunks} × ${(k.stagingChunkBytes / 1024).toFixed(0)} KiB, ${k.ioInFlight} read batches in flight, compute worker ${k.bigCores ? `on core ${k.bigCores.join(",")}` : "unpinned"} with ${k.threads} kernel threads, I/O worker ${k.littleCores ? `on core ${k.littleCores.join(",")}` : "unpinned"}`;
  }

  async dispose(): Promise<void> {
    const done = this.idle().catch(() => {});
    await Promise.race([done, new Promise((r) => setTimeout(r, 30_000).unref())]);
    this.traceSub?.unsubscribe();
    this.root.stop();
    this.computeLink.close();
    this.ioLink.close();
    this.parts.dispose();
    await Promise.all([this.computePool.destroy(), this.ioPool.destroy()]);
  }
}
