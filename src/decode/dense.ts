// The dense decoder: every weight resident (a plain GGUF file, mapped), the forward pass of
// model/forward.ts on the calling thread.
import type { ModelConfig } from "../model/config.js";
import { native } from "../native.js";
import { forward, type ForwardOptions } from "../model/forward.js";
import type { Weights } from "../model/weights.js";
import type { TraceRecorder } from "../trace/recorder.js";
import { allocContext, freeContext } from "./context.js";
import type { ContextOptions, DecodeContext, Decoder } from "./decoder.js";

export class DenseDecoder implements Decoder {
  readonly kind = "dense";
  trace: TraceRecorder | undefined;

  constructor(
    readonly config: ModelConfig,
    readonly weights: Weights,
  ) {}

  createContext(opts: ContextOptions): DecodeContext {
    return allocContext(this.config, opts, true);
  }

  releaseContext(ctx: DecodeContext): void {
    freeContext(ctx);
  }

  evaluate(ctx: DecodeContext, tokens: readonly number[], pos0: number, opts: ForwardOptions = {}): number {
    return forward(this.config, this.weights, ctx.rs, ctx.kv, tokens, pos0, opts);
  }

  async prefill(ctx: DecodeContext, tokens: readonly number[], pos0: number): Promise<number> {
    return this.evaluate(ctx, tokens, pos0);
  }

  async decode(ctx: DecodeContext, token: number, pos: number): Promise<number> {
    return this.evaluate(ctx, [token], pos);
  }

  async idle(): Promise<void> {}

  describe(): string {
    return "decoder: dense (every weight resident, forward pass on the calling thread)";
  }

  /** Frees the weights (the file mapping and converted copies). */
  async dispose(): Promise<void> {
    const n = native();
    for (const b of this.weights.buffers.splice(0)) n.free(b);
  }
}
