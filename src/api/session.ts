// A conversation with a model: its KV cache, its position, and text generation as an async
// iterator of pieces. The session protocol (idle → prefilling → decoding → done | cancelled |
// failed) is the XState machine in actors/session-machine.ts; the work it invokes is the
// model's decoder (src/decode/), whatever kind it is.
import { EventEmitter } from "eventemitter3";
import { createActor, fromPromise, toObserver, type InspectionEvent, type Observer, type Subscription } from "xstate";
import {
  type DecodeStepInput,
  type DecodeStepOutput,
  type PrefillInput,
  type StopReason,
  sessionMachine,
} from "../../actors/session-machine.js";
import type { ContextOptions, DecodeContext, Decoder } from "../decode/decoder.js";
import type { ForwardOptions } from "../model/forward.js";
import type { ModelConfig } from "../model/config.js";
import { native } from "../native.js";
import type { Tokenizer } from "../tokenizer/index.js";
import { recordInspection, TraceRecorder } from "../trace/recorder.js";
import { Sampler, type SamplingOptions } from "./sampling.js";
import { StopSequences } from "./stop-sequences.js";

export type SessionOptions = ContextOptions;

/** Tokens generated when maxTokens is not given (library and CLI alike). */
export const DEFAULT_MAX_TOKENS = 128;

/** What XState's `inspect` option takes: an observer or a function of inspection events. */
export type InspectOption = Observer<InspectionEvent> | ((ev: InspectionEvent) => void);

export interface GenerateOptions extends SamplingOptions {
  /** Tokens to generate (default 128). */
  maxTokens?: number;
  signal?: AbortSignal;
  /** Add the BOS token before the prompt (default: the tokenizer's rule). Ignored when the session already holds tokens. */
  addBos?: boolean;
  /** Read control tokens written in the prompt (`<|im_end|>`, `</s>`) as those tokens, as a chat template's output needs (default false: as text). */
  parseSpecial?: boolean;
  /**
   * Observe the actors of this generation — the session machine and the decoder's actor system —
   * as XState inspection events (an observer or a function, as XState's `inspect` option). An
   * observer that throws is reported once as a process warning and does not stop the generation.
   */
  inspect?: InspectOption;
  /**
   * Record a trace of the generation: a JSON-lines file path, or a recorder to collect the
   * records in memory. See docs/pipeline.md, "Trace format".
   */
  trace?: string | TraceRecorder;
  /**
   * Stop when the generated text contains one of these strings (stop reason "stop-sequence"); the
   * stop string is not yielded, and text that could begin one is held back until it cannot.
   */
  stop?: readonly string[];
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

/** An inspection observer that never throws into XState: the first error becomes a warning. */
function guardedObserver(option: InspectOption): (ev: InspectionEvent) => void {
  const o = toObserver(option as Observer<InspectionEvent>);
  let warned = false;
  return (ev) => {
    try {
      o.next?.(ev);
    } catch (e) {
      if (!warned) process.emitWarning(`inspect observer threw (later errors of this generation are not reported): ${(e as Error)?.message ?? String(e)}`, "NeuronpipeInspectWarning");
      warned = true;
    }
  };
}

/** What a session needs of its model (api/model.ts's Model has these). */
export interface SessionModel {
  readonly path: string;
  readonly config: ModelConfig;
  readonly tokenizer: Tokenizer;
  readonly decoder: Decoder;
  /** A trace recorder to `path` whose header states the bytes each step touches. */
  createTrace(path?: string): TraceRecorder;
}

function allFinite(a: Float32Array): boolean {
  for (let i = 0; i < a.length; i++) if (!Number.isFinite(a[i]!)) return false;
  return true;
}

export class Session extends EventEmitter<SessionEvents> {
  readonly contextSize: number;
  readonly batchSize: number;
  private readonly ctx: DecodeContext;
  /** Tokens whose K/V are in the cache, in order. */
  readonly tokens: number[] = [];
  /** Tokens generated but not yet evaluated (the last one of a generation); evaluated first next time. */
  private unevaluated: number[] = [];
  private busy = false;
  private disposed = false;
  private released = false;
  /** Decoder passes running on this session's context. */
  private passes = 0;
  private stopGeneration?: () => void;
  private onReleased?: () => void;
  lastStats?: GenerationStats;

  constructor(
    readonly model: SessionModel,
    opts: SessionOptions = {},
  ) {
    super();
    this.ctx = model.decoder.createContext(opts);
    this.contextSize = this.ctx.contextSize;
    this.batchSize = this.ctx.batchSize;
  }

  /** Native bytes held by this session (KV cache + scratch). */
  get stateBytes(): number {
    return this.ctx.rs.bytes + this.ctx.kv.bytes;
  }

  /**
   * Evaluate tokens at the end of the context and return a copy of the logits — of the last
   * token, or of every token with `all` (teacher forcing). Runs on the calling thread.
   */
  evaluate(tokens: readonly number[], all = false, hooks: Pick<ForwardOptions, "onFfnActivations" | "onLayer" | "batchFfn"> = {}): Float32Array {
    this.checkUsable();
    if (this.busy) throw new Error("session is generating: evaluate() would corrupt it; wait for the generation to end");
    const V = this.model.config.nVocab;
    const out = new Float32Array((all ? tokens.length : 1) * V);
    for (let i = 0; i < tokens.length; i += this.batchSize) {
      const batch = tokens.slice(i, i + this.batchSize);
      const off = this.model.decoder.evaluate(this.ctx, batch, this.tokens.length, { allLogits: all, ...hooks });
      this.tokens.push(...batch);
      const n = all ? batch.length : 1;
      if (all || i + this.batchSize >= tokens.length) {
        out.set(native().viewF32(this.ctx.rs.buf, off, n * V), all ? i * V : 0);
      }
    }
    return out;
  }

  /** Forget the context (the KV cache is overwritten from position 0). */
  reset(): void {
    this.truncate(0);
  }

  /** Keep the first `n` tokens of the context and forget the rest (a later prompt continues from there). */
  truncate(n: number): void {
    this.checkUsable();
    if (this.busy) throw new Error("session is generating: changing its context would corrupt it; wait for the generation to end");
    if (!(Number.isInteger(n) && n >= 0 && n <= this.tokens.length)) throw new RangeError(`truncate: n must be a whole number from 0 to ${this.tokens.length}, got ${n}`);
    this.tokens.length = n;
    this.unevaluated = [];
  }

  /** The conversation's tokens so far: those in the KV cache, then the last generated one if it is not evaluated yet. */
  get sequence(): readonly number[] {
    return [...this.tokens, ...this.unevaluated];
  }

  /**
   * Prepare to continue with the sequence `tokens`: keep the longest prefix of this session's
   * sequence that `tokens` begins with (forgetting the rest) and return the tokens still to give
   * `generate` — at least one, so that it has logits to sample from.
   */
  reuse(tokens: readonly number[]): number[] {
    const held = this.sequence;
    let common = 0;
    while (common < held.length && common < tokens.length && held[common] === tokens[common]) common++;
    if (common === tokens.length) common = Math.max(0, common - 1);
    // common < held.length: common ≤ the tokens in the KV cache; what is held beyond it is dropped
    if (common < held.length) this.truncate(common);
    return tokens.slice(Math.min(common, held.length));
  }

  /** Generate text after `prompt` (text, or token ids), streaming pieces. */
  async *generate(prompt: string | readonly number[], opts: GenerateOptions = {}): AsyncGenerator<GeneratedPiece, GenerationStats> {
    this.checkUsable();
    if (this.busy) throw new Error("session is already generating");
    const maxTokens = opts.maxTokens ?? DEFAULT_MAX_TOKENS;
    if (!(Number.isInteger(maxTokens) && maxTokens >= 0)) throw new RangeError(`maxTokens must be a whole number ≥ 0`);
    const sampler = new Sampler(opts);
    const stops = opts.stop && opts.stop.length > 0 ? new StopSequences(opts.stop) : undefined;
    const tok = this.model.tokenizer;
    const first = this.tokens.length === 0 && this.unevaluated.length === 0;
    const promptTokens = [...this.unevaluated, ...(typeof prompt === "string" ? tok.encode(prompt, { addBos: first ? opts.addBos : false, parseSpecial: opts.parseSpecial }) : this.checkedIds(prompt))];
    if (promptTokens.length === 0) throw new Error("prompt is empty (no tokens) and the context is empty");
    if (this.tokens.length + promptTokens.length >= this.contextSize) {
      throw new RangeError(`prompt of ${promptTokens.length} tokens does not fit the context (${this.contextSize - this.tokens.length} free)`);
    }
    const { ctx } = this;
    const { decoder } = this.model;
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
    const subscriptions: Subscription[] = [];

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
          let off = -1;
          for (let i = 0; i < input.tokens.length; i += this.batchSize) {
            const batch = input.tokens.slice(i, i + this.batchSize);
            off = await this.pass(() => decoder.prefill(ctx, batch, this.tokens.length, opts.signal));
            this.tokens.push(...batch);
          }
          logits = Float32Array.from(n.viewF32(ctx.rs.buf, off, V));
          if (!allFinite(logits)) throw this.nonFinite(input.tokens.at(-1)!, this.tokens.length - 1);
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
          const text = detok.push(token);
          const released = stops ? stops.push(text) : { text, stopped: false };
          const piece = { text: released.text, token };
          await new Promise<void>((resume) => {
            pending = { piece, resume };
            notify();
          });
          if (released.stopped) return { token, stop: "stop-sequence" };
          // let timers and messages (an abort from another thread, say) run between tokens
          await new Promise<void>((r) => setImmediate(r));
          if (closed || input.step + 1 >= maxTokens) return { token, stop: "max-tokens" };
          if (this.tokens.length + 1 >= this.contextSize) return { token, stop: "context-full" };
          const t0 = performance.now();
          const off = await this.pass(() => decoder.decode(ctx, token, this.tokens.length, opts.signal));
          if (closed) return { token, stop: "max-tokens" }; // cancelled while the pass ran: the token stays unevaluated
          this.tokens.push(token);
          this.unevaluated = [];
          logits = Float32Array.from(n.viewF32(ctx.rs.buf, off, V));
          if (!allFinite(logits)) throw this.nonFinite(token, this.tokens.length - 1);
          decodeMs += performance.now() - t0;
          decodePasses++;
          return { token };
        }),
      },
    });

    this.busy = true;
    let trace: TraceRecorder | undefined;
    let actor: ReturnType<typeof createActor<typeof machine>> | undefined;
    const onAbort = () => actor?.send({ type: "ABORT", reason: String(opts.signal?.reason ?? "aborted") });
    this.stopGeneration = () => {
      actor?.send({ type: "ABORT", reason: "session disposed" });
      notify();
    };
    try {
      trace = opts.trace === undefined ? undefined : typeof opts.trace === "string" ? this.model.createTrace(opts.trace) : opts.trace;
      decoder.trace = trace;
      const observers: ((ev: InspectionEvent) => void)[] = [];
      if (trace) observers.push(recordInspection(trace));
      if (opts.inspect) {
        const user = guardedObserver(opts.inspect);
        observers.push(user);
        if (decoder.inspect) subscriptions.push(decoder.inspect(user));
      }
      const inspect = observers.length === 0 ? undefined : observers.length === 1 ? observers[0] : (ev: InspectionEvent) => observers.forEach((o) => o(ev));
      actor = createActor(machine, { inspect, id: "session", systemId: "session" });
      actor.subscribe({ complete: notify, error: notify });
      actor.subscribe(() => notify());
      opts.signal?.addEventListener("abort", onAbort, { once: true });
      if (opts.signal?.aborted) onAbort();
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
      if (this.disposed) throw new Error("the session was disposed during the generation");
      let tail = detok.flush();
      if (stops && snap.context.stopReason !== "stop-sequence") {
        const r = stops.push(tail);
        tail = r.stopped ? r.text : r.text + stops.flush();
      } else if (stops) tail = "";
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
      actor?.stop();
      pending?.resume();
      try {
        await decoder.idle(); // a cancelled pass finishes its layer before the next may start
      } finally {
        for (const s of subscriptions) s.unsubscribe();
        decoder.trace = undefined;
        if (typeof opts.trace === "string") trace?.close();
        this.busy = false;
        this.stopGeneration = undefined;
        if (this.disposed) this.releaseContext();
      }
    }
  }

  /**
   * The error for logits that hold NaN or ±Inf: the token at `pos` is evaluated again with a check
   * after each layer, to name the first layer whose output is not finite (generation stops: no
   * token is sampled from such logits).
   */
  private nonFinite(token: number, pos: number): Error {
    const n = native();
    const E = this.model.config.nEmbd;
    let layer = -1;
    let checked = false;
    try {
      this.model.decoder.evaluate(this.ctx, [token], pos, {
        onLayer: (l) => {
          checked = true;
          if (layer < 0 && !allFinite(n.viewF32(this.ctx.rs.buf, this.ctx.rs.x, E))) layer = l;
        },
      });
    } catch {
      checked = false;
    }
    const where = layer >= 0 ? `the output of layer ${layer} (blk.${layer}.*) is the first that is not finite` : checked ? "every layer's output is finite: the output norm or output.weight is not" : "(the layer was not found)";
    return new Error(`${this.model.path}: non-finite logits at position ${pos}: ${where}; the weights or the metadata hold NaN/Inf values or overflow`);
  }

  private checkedIds(ids: readonly number[]): number[] {
    const V = this.model.config.nVocab;
    for (const [i, id] of ids.entries()) {
      if (!(Number.isInteger(id) && id >= 0 && id < V)) throw new RangeError(`prompt token ${i} is ${id}: token ids are whole numbers from 0 to ${V - 1}`);
    }
    return [...ids];
  }

  private checkUsable() {
    if (this.disposed) throw new Error("session is disposed");
  }

  /** One decoder pass over this session's context; a dispose meanwhile releases the context once the pass is over. */
  private async pass(f: () => Promise<number>): Promise<number> {
    if (this.disposed) throw new Error("the session was disposed during the generation");
    this.passes++;
    try {
      return await f();
    } finally {
      this.passes--;
      if (this.disposed) {
        this.releaseContext();
        // eslint-disable-next-line no-unsafe-finally
        throw new Error("the session was disposed during the generation");
      }
    }
  }

  private releaseContext(): void {
    if (this.released || this.passes > 0) return;
    this.released = true;
    this.model.decoder.releaseContext(this.ctx);
    this.emit("disposed");
    this.removeAllListeners();
    this.onReleased?.();
  }

  /** Resolves once the session's context is released (after dispose, and after a decoder pass that was running). */
  whenReleased(): Promise<void> {
    if (this.released) return Promise.resolve();
    return new Promise((r) => {
      const prev = this.onReleased;
      this.onReleased = () => {
        prev?.();
        r();
      };
    });
  }

  /**
   * Free the session's KV cache. During a generation the generation stops (the iterator throws
   * "the session was disposed during the generation"), and a decoder pass already running
   * finishes first: its context is released after it.
   */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.stopGeneration?.();
    this.releaseContext();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.dispose();
  }
}
