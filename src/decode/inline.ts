// The inline decoder: a neuron pack under a memory budget, the sparse FFN on the calling thread.
// Per token and layer (sparse/ffn/steps.ts for the steps):
//
//   zero, predict                  o = 0; P = predicted neurons (oracle: all)
//   (decode, gate rows not pinned) cache.readAhead(now)
//                                  P's cold neurons not resident: whole bundles read in the
//                                  background while the resident gates are computed
//   for chunks of P, as large as the cache can hold at once (ascending pack order):
//     cache.loadGates              gate rows resident (pinned rows, hot clusters, cold gate blocks)
//     gate                         g over the chunk (the resident rows first, then, once they
//                                  have landed, the rows read now); A = the fired ones
//     cache.demoteSilent           predicted-but-silent cold neurons to the LRU's tail
//     cache.loadUpDown             up+down of A resident (cold: one more block each)
//     upAct, down                  h = act(g)·u;  o += Σ h·down   (A ascending)
//
//   (decode) lookAhead, cache.readAhead
//                                  the likely-firing neurons of layers L+1 and L+2 that are not
//                                  resident are read in the background while this thread goes
//                                  on (up+down blocks with pinned gate rows, else whole bundles);
//                                  a layer's first load waits for its batch
//
// Other reads happen synchronously inside the cache's loads. The down projection accumulates in
// pack order whatever the chunking, and reads ahead only change where bytes come from, so the
// logits are bit-identical to every other decoder's for any budget.
import type { ForwardOptions, RunState } from "../model/forward.js";
import { forward } from "../model/forward.js";
import { createBundleScratch, FfnSteps, type Landing } from "../sparse/ffn/steps.js";
import { ffnScratchBytes } from "../sparse/ffn/layout.js";
import { StreamedFfn } from "../sparse/ffn/streamed.js";
import { nowUs, type TraceRecorder } from "../trace/recorder.js";
import { recordPrefillSpans } from "../links/spans.js";
import { allocContext, freeContext } from "./context.js";
import type { ContextOptions, DecodeContext, Decoder } from "./decoder.js";
import { TokenClock } from "./token-clock.js";
import type { SparseParts } from "../sparse/parts.js";

export class InlineDecoder implements Decoder {
  readonly kind = "inline";
  trace: TraceRecorder | undefined;
  /** Evict predicted-but-silent cold neurons first (NeuronCache.demoteSilent). */
  demote = true;
  /** Read a later layer's likely-firing neurons in the background (when the plan has read-ahead staging). */
  readAhead = true;
  /** How many layers ahead: at the end of layer L, layer L+aheadLayers's neurons are read (as many batches in flight). */
  aheadLayers = 2;
  /** Without pinned gate rows: a layer's predicted neurons that are not resident are read in the background while its resident gates are computed (with reads ahead on). */
  readNow = true;
  private aheadIssued = 0; // the last layer of this token whose reads ahead were issued
  private streamed?: StreamedFfn;
  private readonly steps: FfnSteps;
  private step = 0;
  /** The traced decode step's clock (steps of a token run one after the other on this thread). */
  private clock?: TokenClock;
  /** Bytes and requests the cache had read when the last span was marked. */
  private readMark = { bytes: 0, reads: 0 };
  private readonly ffn = (layer: number, rs: RunState, nTok: number) => this.ffnBlock(layer, rs, nTok, false);
  private readonly sparseFfn = (layer: number, rs: RunState, nTok: number) => this.ffnBlock(layer, rs, nTok, true);

  constructor(readonly parts: SparseParts) {
    this.steps = new FfnSteps(parts.ffn, parts.pack.config.nLayer);
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
    this.parts.removeSessionBuffers([ctx.rs.buf, ctx.kv.buf]);
    freeContext(ctx);
  }

  evaluate(ctx: DecodeContext, tokens: readonly number[], pos0: number, opts: ForwardOptions = {}): number {
    const off = forward(this.parts.pack.config, this.parts.weights, ctx.rs, ctx.kv, tokens, pos0, { ...opts, ffn: opts.batchFfn === "sparse" ? this.sparseFfn : this.ffn });
    this.parts.tokenDone();
    return off;
  }

  async prefill(ctx: DecodeContext, tokens: readonly number[], pos0: number): Promise<number> {
    const trace = this.trace;
    if (!trace || tokens.length < 2) return this.evaluate(ctx, tokens, pos0);
    // traced: the streamed FFN's GEMMs on the prefill lane, its reads on the I/O lane
    const streamed = this.streamedFfn();
    const t0 = nowUs();
    streamed.recordSpans = true;
    try {
      return this.evaluate(ctx, tokens, pos0);
    } finally {
      streamed.recordSpans = false;
      const { chunks, reads } = streamed.takeSpans();
      recordPrefillSpans(trace, -1, chunks, reads);
      trace.token({ index: -1, t0, t1: nowUs() });
    }
  }

  async decode(ctx: DecodeContext, token: number, pos: number): Promise<number> {
    const step = this.step++;
    if (!this.trace) return this.evaluate(ctx, [token], pos);
    const before = this.parts.neuronTotals();
    this.readMark = this.readTotals();
    const clock = (this.clock = new TokenClock(this.trace, step));
    try {
      const off = this.evaluate(ctx, [token], pos);
      clock.mark("compute", "logits");
      const after = this.parts.neuronTotals();
      clock.finish({ token, pos, predicted: after.predicted - before.predicted, fired: after.fired - before.fired });
      return off;
    } finally {
      this.clock = undefined;
    }
  }

  async idle(): Promise<void> {}

  describe(): string {
    const { cache, plan, pack } = this.parts;
    const ahead = this.readAhead && cache.aheadStaging >= 0;
    const block = cache.pinned ? pack.upDownBlock : pack.bundleBytes;
    const now = ahead && this.readsNow;
    const batches = this.aheadBatches();
    return `decoder: inline (sparse FFN on the calling thread: predict, read what is missing, compute)${ahead ? `; reads ahead: the next ${this.aheadLayers} layers' likely-firing neurons in the background (${cache.pinned ? "up+down blocks" : "whole bundles"}), up to ${Math.floor(plan.readAheadBytes / block / batches)} per layer` : ""}${now ? "; a layer's predicted cold neurons not resident are read in the background while its resident gates are computed" : ""}`;
  }

  async dispose(): Promise<void> {
    try {
      this.streamed?.finish();
    } catch {
      // a read that failed while nothing waits for it any more
    }
    this.parts.dispose();
  }

  /**
   * A batch of tokens (a prompt) takes the dense FFN streamed from the pack (every neuron, no
   * predictor, GEMMs), through the cache's I/O staging, which decode does not use meanwhile.
   */
  private streamedFfn(): StreamedFfn {
    if (this.streamed) return this.streamed;
    const { cache, plan, pack, ffn } = this.parts;
    const { nFF, nEmbd } = pack.config;
    return (this.streamed = new StreamedFfn(ffn, {
      loader: cache.loader.id,
      staging: cache.staging,
      stagingBytes: plan.stagingBytes,
      layerOffsets: pack.layers.map((l) => l.bundlesOffset),
      scratch: createBundleScratch(nFF, ffn.scratch, 0, ffnScratchBytes(nFF, nEmbd, plan.options.batchSize)),
      inPlace: true,
    }));
  }

  /** o = FFN(xb) of `layer` for each token of the batch: a prompt batch dense and streamed, else token by token sparse (x, the residual before ffn_norm, feeds the predictor). */
  private ffnBlock(layer: number, rs: RunState, nTok: number, sparse: boolean): void {
    if (nTok > 1 && !sparse) {
      // held slots are used in place: any read ahead still landing in one lands first
      if (layer === 0) this.parts.cache.settle();
      return this.streamedFfn().run(layer, rs, nTok);
    }
    const bytes = this.parts.pack.config.nEmbd * 4;
    // reads ahead in decode only: with a batch the next FFN is this layer's, for the next token
    const ahead = nTok === 1 && this.readAhead && this.parts.cache.aheadStaging >= 0;
    for (let t = 0; t < nTok; t++) this.token(layer, { buf: rs.buf, x: rs.x + t * bytes, xb: rs.xb + t * bytes, o: rs.o + t * bytes }, ahead);
  }

  private token(layer: number, t: { buf: number; x: number; xb: number; o: number }, ahead: boolean): void {
    const { steps, parts } = this;
    const { cache } = parts;
    const st = parts.ffnStats[layer]!;
    const clock = this.clock;
    clock?.mark("compute", "attention", layer);
    st.tokens++;
    steps.zero(t);
    const nP = steps.predict(layer, t, parts.predictor === "oracle");
    st.predicted += nP;
    clock?.mark("predictor", "predict", layer, { neurons: nP });
    const { P, slots, aPos, aSlots } = steps;
    // without pinned gate rows, the predicted neurons not resident are read in the background now
    // (whole bundles, one request a run) while the resident gates are computed
    const now = ahead && this.readsNow && cache.readAhead(layer, P, nP, this.aheadBatches(), true) > 0;
    if (now) clock?.mark("predictor", "predict", layer);
    for (let start = 0; start < nP; ) {
      if (!cache.pinned) this.settle(layer, true); // the gate rows read ahead land before they are used (traced here)
      const end = cache.loadGates(layer, P, start, nP, slots.subarray(start));
      if (clock) this.markLoad(clock, layer, "gate");
      const g = steps.gate(layer, t, start, end - start, now ? this.landing(layer) : undefined);
      clock?.mark("compute", "gate", layer, { neurons: end - start });
      if (this.demote) cache.demoteSilent(layer, slots.subarray(start), g.nSilent);
      st.fired += g.nA;
      if (g.nA > 0) {
        this.settle(layer);
        cache.loadUpDown(layer, aPos.subarray(start), g.nA, aSlots.subarray(start));
        if (clock) this.markLoad(clock, layer, "updown");
        steps.upAct(t, start, g.nA);
        clock?.mark("compute", "up", layer, { neurons: g.nA });
        steps.down(t, start, g.nA);
        clock?.mark("compute", "down", layer, { neurons: g.nA });
      }
      start = end;
    }
    this.settle(layer);
    const { config } = parts.pack;
    if (!ahead) return;
    // layers layer+1 … layer+aheadLayers that have no batch yet (after layer 0: all of them; then one)
    if (layer === 0) this.aheadIssued = 0;
    for (let next = Math.max(this.aheadIssued, layer) + 1; next <= Math.min(layer + this.aheadLayers, config.nLayer - 1); next++) {
      const c = steps.lookAhead(next, t, parts.weights.layers[next]!.ffnNorm, config.rmsEps, parts.predictor === "oracle");
      const n = cache.readAhead(next, aPos, c, this.aheadBatches());
      this.aheadIssued = next;
      clock?.mark("predictor", "predict", next, { neurons: n });
    }
  }

  /** Are a layer's own misses read in the background (readNow; only without pinned gate rows)? */
  private get readsNow(): boolean {
    return this.readNow && !this.parts.cache.pinned;
  }

  /** Batches of reads ahead in flight at most: one per layer ahead, and the layer's own misses (readsNow). */
  private aheadBatches(): number {
    return this.aheadLayers + (this.readsNow ? 1 : 0);
  }

  /** The landing rows of `layer` for the gate step, and how it waits for them (traced). */
  private landing(layer: number): Landing {
    const settle = () => {
      this.clock?.mark("compute", "gate", layer); // the resident rows' gates, computed while the rest landed
      this.settle(layer);
    };
    return { positions: this.parts.cache.landing, settle };
  }

  /** Wait for the reads ahead of `layer` (and any issued before them; with keepNow not its own misses' batch), and trace them: the background reads on the I/O lane, the wait as bookkeeping. */
  private settle(layer: number, keepNow = false): void {
    const { cache } = this.parts;
    if (!cache.readingAhead(layer)) return;
    const done = cache.settleLayer(layer, keepNow);
    const clock = this.clock;
    if (!clock) return;
    for (const d of done) clock.trace.span({ lane: "io", name: "read", t0: d.t0, t1: d.t1, token: clock.step, layer: d.layer, bytes: d.bytes, reads: d.reads, phase: "ahead" });
    clock.mark("scheduler", "plan", layer);
  }

  /** A cache load just ended: a read span if it read (synchronously, nothing overlaps it), else bookkeeping. */
  private markLoad(clock: TokenClock, layer: number, phase: "gate" | "updown"): void {
    const now = this.readTotals();
    const m = this.readMark;
    if (now.bytes > m.bytes) clock.mark("io", "read", layer, { bytes: now.bytes - m.bytes, reads: now.reads - m.reads, phase });
    else clock.mark("scheduler", "plan", layer);
    this.readMark = now;
  }

  private readTotals(): { bytes: number; reads: number } {
    let bytes = 0;
    let reads = 0;
    // reads ahead are traced when they complete (settle), not as synchronous loads
    for (const s of this.parts.cache.stats) {
      bytes += s.bytesRead - s.aheadBytes;
      reads += s.reads - s.aheadReads;
    }
    return { bytes, reads };
  }
}
