// The decoder seam: one way of running tokens through a model's layers. A Model holds one
// decoder; a Session asks it to prefill a batch of prompt tokens and to decode one token at a
// time, without knowing which kind it is.
//
//   dense     every weight resident (a plain GGUF file mapped), the dense forward pass
//   inline    a neuron pack under a memory budget: the sparse FFN on the calling thread
//             (predict, read what is missing, compute — one layer after another)
//   pipeline  the same, as XState actors on worker threads: reads overlap compute (docs/pipeline.md)
//   blocking  the LLMFlash baseline on the same actors: a window cache, every read before compute
//   mmap      llama.cpp's way over a pack: dense, the file memory-mapped, the page cache decides
import type { InspectionEvent, Observer, Subscription } from "xstate";
import type { ForwardOptions, KVCache, RunState } from "../model/forward.js";
import type { TraceRecorder } from "../trace/recorder.js";

export type DecoderKind = "dense" | "inline" | "pipeline" | "blocking" | "mmap";
export const DECODER_KINDS: readonly DecoderKind[] = ["dense", "inline", "pipeline", "blocking", "mmap"];

export interface ContextOptions {
  /** Context length in tokens (default: the memory plan's, else min(model's training context, 2048)). */
  contextSize?: number;
  /** Prompt tokens evaluated per batch (default: the memory plan's, else 256). */
  batchSize?: number;
  /** KV cache element type (default f16, as llama.cpp). */
  kvType?: "f16" | "f32";
}

/** A session's state in native memory: its KV cache and run state (scratch activations). */
export interface DecodeContext {
  readonly rs: RunState;
  readonly kv: KVCache;
  readonly contextSize: number;
  readonly batchSize: number;
}

export interface Decoder {
  readonly kind: DecoderKind;
  /** Allocate a session's KV cache and run state (a pack's memory plan holds one session). */
  createContext(opts: ContextOptions): DecodeContext;
  releaseContext(ctx: DecodeContext): void;
  /**
   * Evaluate tokens at positions pos0.. on the calling thread; returns the logits' offset in
   * ctx.rs (of the last token, or of every token with allLogits). Decoders that run on worker
   * threads refuse, naming one that does not.
   */
  evaluate(ctx: DecodeContext, tokens: readonly number[], pos0: number, opts?: ForwardOptions): number;
  /** A batch of prompt tokens (at most ctx.batchSize) at positions pos0..; returns the last token's logits offset. */
  prefill(ctx: DecodeContext, tokens: readonly number[], pos0: number, signal?: AbortSignal): Promise<number>;
  /** One token at position `pos`; returns its logits' offset. */
  decode(ctx: DecodeContext, token: number, pos: number, signal?: AbortSignal): Promise<number>;
  /** Resolves when nothing this decoder started is running (after a cancelled token). */
  idle(): Promise<void>;
  /** Where the decoder records spans and its actors' events (undefined: not recording). */
  trace: TraceRecorder | undefined;
  /** Observe the decoder's actor system (XState inspection events), if it has one. */
  inspect?(observer: Observer<InspectionEvent> | ((ev: InspectionEvent) => void)): Subscription;
  /** Every knob it runs with, in words (printed at load). */
  describe(): string;
  dispose(): Promise<void>;
}
