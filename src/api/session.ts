// A conversation with a model: its KV cache, its position, and text generation as an async
// iterator of pieces. The session protocol (idle → prefilling → decoding → done | cancelled |
// failed) is the XState machine in actors/session-machine.ts; this file injects the work.
import { EventEmitter } from "eventemitter3";
import { createActor, fromPromise, type InspectionEvent } from "xstate";
import {
  type DecodeStepInput,
  type DecodeStepOutput,
  type PrefillInput,
  type StopReason,
  sessionMachine,
} from "../../actors/session-machine.js";
import { GGMLType, native } from "../native.js";
import { createKVCache, createRunState, forward, type ForwardOptions, type KVCache, type RunState } from "../model/forward.js";
import type { Model } from "./model.js";
import { Sampler, type SamplingOptions } from "./sampling.js";
import { inspectInto, TraceRecorder } from "../trace/recorder.js";

export interface SessionOptions {
  /** Context length in tokens (default: min(model's training context, 2048)). */
  contextSize?: number;
  /** Prompt tokens evaluated per batch (default 256). */
  batchSize?: number;
  /** KV cache element type (default f16, as llama.cpp). */
  kvType?: "f16" | "f32";
}

export interface GenerateOptions extends SamplingOptions {
  maxTokens?: number;
  signal?: AbortSignal;
  /** Add the BOS token before the prompt (default: the tokenizer's rule). Ignored when the session already holds tokens. */
  addBos?: boolean;
  /** Observe the session machine (XState inspection events). */
  inspect?: (ev: InspectionEvent) => void;
  /**
   * Record a trace of the generation (a model decoding with the actor pipeline): a JSON-lines
   * file path, or a recorder to collect the records in memory. See docs/pipeline.md.
   */
  trace?: string | TraceRecorder;
}

export interface GeneratedPiece {
  /** Text this token completes (may be "" while a multi-byte character is incomplete). */
  text: string;
  token: number;
}

export interface GenerationStats {
  promptTokens: number;
  generatedTokens: number;
  prefillSeconds: number;
  decodeSeconds: number;
  prefillTokensPerSecond: number;
  decodeTokensPerSecond: number;
  /** Peak resident set size of the process so far, bytes. */
  peakRssBytes: number;
  stopReason: StopReason | "cancelled" | "failed";
  threads: number;
}

export interface SessionEvents {
  token: (piece: GeneratedPiece) => void;
  prefilled: (info: { tokens: number; seconds: number }) => void;
  done: (stats: GenerationStats) => void;
  disposed: () => void;
}

export class Session extends EventEmitter<SessionEvents> {
  readonly contextSize: number;
  readonly batchSize: number;
  private rs: RunState;
  private kv: KVCache;
  /** Tokens whose K/V are in the cache, in order. */
  readonly tokens: number[] = [];
  /** Tokens generated but not yet evaluated (the last one of a generation); evaluated first next time. */
  private unevaluated: number[] = [];
  private busy = false;
  private disposed = false;
  lastStats?: GenerationStats;

  constructor(
    readonly model: Model,
    opts: SessionOptions = {},
  ) {
    super();
    const cfg = model.config;
    const plan = model.sparse?.plan.options; // a sparse model's memory plan reserved one session of this size
    this.contextSize = opts.contextSize ?? plan?.contextSize ?? Math.min(cfg.nCtxTrain, 2048);
    this.batchSize = opts.batchSize ?? plan?.batchSize ?? 256;
    if (plan && (this.contextSize > plan.contextSize || this.batchSize > plan.batchSize)) {
      throw new RangeError(
        `session of context ${this.contextSize} / batch ${this.batchSize} exceeds the memory plan of ${model.path} (context ${plan.contextSize}, batch ${plan.batchSize}); load the model with a larger contextSize/batchSize`,
      );
    }
    if (!(Number.isInteger(this.contextSize) && this.contextSize >= 1)) {
      throw new RangeError(`contextSize must be a whole number ≥ 1, got ${this.contextSize}`);
    }
    if (!(Number.isInteger(this.batchSize) && this.batchSize >= 1)) {
      throw new RangeError(`batchSize must be a whole number ≥ 1, got ${this.batchSize}`);
    }
    if (plan && opts.kvType === "f32") throw new RangeError("a sparse model's memory plan reserves an F16 KV cache");
    this.rs = createRunState(cfg, this.batchSize, !model.weights.sparseFfn);
    this.kv = createKVCache(cfg, this.contextSize, opts.kvType === "f32" ? GGMLType.F32 : GGMLType.F16);
    try {
      model.sparse?.addSessionBuffers([this.rs.buf, this.kv.buf]);
    } catch (e) {
      native().free(this.rs.buf);
      native().free(this.kv.buf);
      throw e;
    }
  }

  /** Native bytes held by this session (KV cache + scratch). */
  get stateBytes(): number {
    return this.rs.bytes + this.kv.bytes;
  }

  /**
   * Evaluate tokens at the end of the context and return a copy of the logits — of the last
   * token, or of every token with `all` (teacher forcing).
   */
  evaluate(tokens: readonly number[], all = false, hooks: Pick<ForwardOptions, "onFfnActivations" | "onLayer"> = {}): Float32Array {
    this.checkUsable();
    if (this.model.sparse?.pipeline) {
      throw new Error(
        `evaluate() runs on the calling thread; ${this.model.path} was loaded with engine "${this.model.sparse.pipeline.mode}" (worker threads) — use generate(), or load it with engine "sync" to evaluate`,
      );
    }
    const V = this.model.config.nVocab;
    const out = new Float32Array((all ? tokens.length : 1) * V);
    for (let i = 0; i < tokens.length; i += this.batchSize) {
      const batch = tokens.slice(i, i + this.batchSize);
      const off = forward(this.model.config, this.model.weights, this.rs, this.kv, batch, this.tokens.length, { allLogits: all, ...hooks });
      this.tokens.push(...batch);
      const n = all ? batch.length : 1;
      if (all || i + this.batchSize >= tokens.length) {
        out.set(native().viewF32(this.rs.buf, off, n * V), all ? i * V : 0);
      }
    }
    return out;
  }

  /** Forget the context (the KV cache is overwritten from position 0). */
  reset(): void {
    this.checkUsable();
    this.tokens.length = 0;
    this.unevaluated = [];
  }

  /** Generate text after `prompt`, streaming pieces. */
  async *generate(prompt: string, opts: GenerateOptions = {}): AsyncGenerator<GeneratedPiece, GenerationStats> {
    this.checkUsable();
    if (this.busy) throw new Error("session is already generating");
    const maxTokens = opts.maxTokens ?? 128;
    if (!(Number.isInteger(maxTokens) && maxTokens >= 0)) throw new RangeError(`maxTokens must be a whole number ≥ 0`);
    const sampler = new Sampler(opts);
    const tok = this.model.tokenizer;
    const first = this.tokens.length === 0 && this.unevaluated.length === 0;
    const promptTokens = [...this.unevaluated, ...tok.encode(prompt, { addBos: first ? opts.addBos : false })];
    if (promptTokens.length === 0) throw new Error("prompt is empty (no tokens) and the context is empty");
    if (this.tokens.length + promptTokens.length >= this.contextSize) {
      throw new RangeError(`prompt of ${promptTokens.length} tokens does not fit the context (${this.contextSize - this.tokens.length} free)`);
    }
    this.busy = true;
    const detok = tok.createDecoderStream();
    const n = native();
    const V = this.model.config.nVocab;
    let logits: Float32Array = new Float32Array(V);
    const history = [...this.tokens, ...promptTokens];
    let tPrefill0 = 0;
    let tPrefill1 = 0;
    let decodeMs = 0; // time in decode forward passes
    let decodePasses = 0;
    let closed = false;
    const pipeline = this.model.sparse?.pipeline;
    const trace =
      pipeline && opts.trace !== undefined
        ? typeof opts.trace === "string"
          ? new TraceRecorder({ mode: pipeline.mode, model: this.model.path, threads: {} }, opts.trace)
          : opts.trace
        : undefined;
    if (pipeline) pipeline.trace = trace;
    const record = trace ? inspectInto(trace, "session") : undefined;
    const inspect =
      record || opts.inspect
        ? (ev: InspectionEvent) => {
            opts.inspect?.(ev);
            record?.(ev);
          }
        : undefined;

    // channel from the decode actor to this iterator: one pending piece, resumed on pull
    let pending: { piece: GeneratedPiece; resume: () => void } | undefined;
    let wake: (() => void) | undefined;
    const notify = () => {
      const w = wake;
      wake = undefined;
      w?.();
    };

    const machine = sessionMachine.provide({
      actors: {
        prefill: fromPromise<void, PrefillInput>(async ({ input }) => {
          tPrefill0 = performance.now();
          if (pipeline) {
            // the accelerator-role prefill actor: dense batches, FFN streamed from the pack
            const off = await pipeline.prefill(this.rs, this.kv, input.tokens, this.tokens.length, opts.signal);
            this.tokens.push(...input.tokens);
            logits = Float32Array.from(n.viewF32(this.rs.buf, off, V));
          } else logits = this.evaluate(input.tokens);
          this.unevaluated = [];
          tPrefill1 = performance.now();
          this.emit("prefilled", { tokens: input.tokens.length, seconds: (tPrefill1 - tPrefill0) / 1000 });
        }),
        decodeStep: fromPromise<DecodeStepOutput, DecodeStepInput>(async ({ input }) => {
          if (input.step >= maxTokens) return { token: -1, stop: "max-tokens" };
          const token = sampler.sample(logits, history);
          if (tok.isEog(token)) return { token, stop: "eos" };
          history.push(token);
          this.unevaluated = [token];
          const piece = { text: detok.push(token), token };
          await new Promise<void>((resume) => {
            pending = { piece, resume };
            notify();
          });
          // let timers and messages (an abort from another thread, say) run between tokens
          await new Promise<void>((r) => setImmediate(r));
          if (closed || input.step + 1 >= maxTokens) return { token, stop: "max-tokens" };
          if (this.tokens.length + 1 >= this.contextSize) return { token, stop: "context-full" };
          const t0 = performance.now();
          const off = pipeline
            ? await pipeline.decode(this.rs, this.kv, token, this.tokens.length, opts.signal)
            : forward(this.model.config, this.model.weights, this.rs, this.kv, [token], this.tokens.length);
          if (closed) return { token, stop: "max-tokens" }; // cancelled while the pass ran: the token stays unevaluated
          this.tokens.push(token);
          this.unevaluated = [];
          logits = Float32Array.from(n.viewF32(this.rs.buf, off, V));
          decodeMs += performance.now() - t0;
          decodePasses++;
          return { token };
        }),
      },
    });
    const actor = createActor(machine, { inspect });
    actor.subscribe({ complete: notify, error: notify });
    actor.subscribe(() => notify());
    const onAbort = () => actor.send({ type: "ABORT", reason: String(opts.signal?.reason ?? "aborted") });
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    if (opts.signal?.aborted) onAbort();

    try {
      actor.start();
      actor.send({ type: "START", tokens: promptTokens });
      for (;;) {
        if (pending) {
          const { piece, resume } = pending;
          pending = undefined;
          this.emit("token", piece);
          yield piece;
          resume();
          continue;
        }
        const snap = actor.getSnapshot();
        if (snap.status !== "active") break;
        await new Promise<void>((r) => (wake = r));
      }
      const snap = actor.getSnapshot();
      const tail = detok.flush();
      if (tail) yield { text: tail, token: -1 };
      if (snap.value === "failed") throw new Error(`generation failed: ${snap.context.error}`);
      const gen = snap.context.generated;
      const decodeS = decodeMs / 1000;
      const prefillS = (tPrefill1 - tPrefill0) / 1000;
      const stats: GenerationStats = {
        promptTokens: promptTokens.length,
        generatedTokens: gen,
        prefillSeconds: prefillS,
        decodeSeconds: decodeS,
        prefillTokensPerSecond: prefillS > 0 ? promptTokens.length / prefillS : 0,
        // one forward pass per generated token (the last one is evaluated lazily, see `unevaluated`)
        decodeTokensPerSecond: decodeS > 0 ? decodePasses / decodeS : 0,
        peakRssBytes: process.resourceUsage().maxRSS * 1024,
        stopReason: snap.value === "cancelled" ? "cancelled" : (snap.context.stopReason ?? "max-tokens"),
        threads: n.getThreads(),
      };
      this.lastStats = stats;
      this.emit("done", stats);
      if (snap.value === "cancelled") opts.signal?.throwIfAborted();
      return stats;
    } finally {
      closed = true;
      opts.signal?.removeEventListener("abort", onAbort);
      actor.stop();
      pending?.resume();
      if (pipeline) {
        await pipeline.idle(); // a cancelled pass finishes its layer before the next may start
        pipeline.trace = undefined;
        if (typeof opts.trace === "string") trace?.close();
      }
      this.busy = false;
    }
  }

  private checkUsable() {
    if (this.disposed) throw new Error("session is disposed");
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    const n = native();
    this.model.sparse?.removeSessionBuffers([this.rs.buf, this.kv.buf]);
    n.free(this.rs.buf);
    n.free(this.kv.buf);
    this.emit("disposed");
    this.removeAllListeners();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.dispose();
  }
}
