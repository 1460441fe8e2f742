// The dense decoder: every weight resident (a plain GGUF file, mapped), the forward pass of
// model/forward.ts on the calling thread.
import type { ModelConfig } from "../model/config.js";
import { native } from "../native.js";
import { denseFfn, forward, type ForwardOptions, type RunState } from "../model/forward.js";
import type { Weights } from "../model/weights.js";
import type { TraceRecorder } from "../trace/recorder.js";
import { allocContext, freeContext } from "./context.js";
import type { ContextOptions, DecodeContext, Decoder } from "./decoder.js";
import { TokenClock } from "./token-clock.js";

export class DenseDecoder implements Decoder {
  readonly kind = "dense";
  trace: TraceRecorder | undefined;
  private step = 0;

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
    const step = this.step++;
    if (!this.trace) return this.evaluate(ctx, [token], pos);
    // traced: attention, FFN and logits of every layer as spans (the time budget of trace stats)
    const clock = new TokenClock(this.trace, step);
    const ffn = (l: number, rs: RunState, nTok: number) => {
      clock.mark("compute", "attention", l);
      denseFfn(this.config, this.weights, rs, l, nTok);
      clock.mark("compute", "ffn", l, { neurons: this.config.nFF });
    };
    const off = forward(this.config, this.weights, ctx.rs, ctx.kv, [token], pos, { ffn });
    clock.mark("compute", "logits");
    clock.finish({ token, pos });
    return off;
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
