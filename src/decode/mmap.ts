// The mmap decoder: llama.cpp's way on a neuron pack — the whole file memory-mapped, every neuron
// of every layer computed (dense), the kernel's page cache deciding what stays in RAM. It is the
// baseline the sparse decoders are measured against on the same file; under a memory cgroup the
// page cache is what the limit squeezes.
import type { ForwardOptions } from "../model/forward.js";
import { forward } from "../model/forward.js";
import { bindWeights, type Weights } from "../model/weights.js";
import { native } from "../native.js";
import { bundleLayoutOf, type BundleLayout } from "../sparse/ffn/layout.js";
import { bundleScratchBytes } from "../sparse/ffn/layout.js";
import { bundleRange, createBundleScratch, type BundleScratch } from "../sparse/ffn/steps.js";
import type { Pack } from "../sparse/pack/format.js";
import type { TraceRecorder } from "../trace/recorder.js";
import { allocContext, freeContext } from "./context.js";
import type { ContextOptions, DecodeContext, Decoder } from "./decoder.js";

export class MmapDecoder implements Decoder {
  readonly kind = "mmap";
  trace: TraceRecorder | undefined;
  readonly weights: Weights;
  private readonly map: number;
  private readonly layout: BundleLayout;
  private scratch: BundleScratch;
  private scratchTokens = 1;

  constructor(readonly pack: Pack) {
    const n = native();
    this.layout = bundleLayoutOf(pack); // refuses a non-ReLU FFN by name
    this.map = n.mapFile(pack.path).id;
    try {
      this.weights = bindWeights(pack.file, pack.config, this.map, { ffn: false }); // tensors at their file offsets in the mapping
      this.scratch = this.newScratch(1);
    } catch (e) {
      n.free(this.map);
      throw e;
    }
  }

  /** Bundle scratch for batches of up to `tokens` tokens. */
  private newScratch(tokens: number): BundleScratch {
    const bytes = bundleScratchBytes(this.pack.config.nFF, tokens);
    this.scratchTokens = tokens;
    return createBundleScratch(this.pack.config.nFF, native().alloc(bytes), 0, bytes);
  }

  createContext(opts: ContextOptions): DecodeContext {
    return allocContext(this.pack.config, opts, false);
  }

  releaseContext(ctx: DecodeContext): void {
    freeContext(ctx);
  }

  evaluate(ctx: DecodeContext, tokens: readonly number[], pos0: number, opts: ForwardOptions = {}): number {
    const n = native();
    if (tokens.length > this.scratchTokens) {
      n.free(this.scratch.buf);
      this.scratch = this.newScratch(tokens.length);
    }
    const { pack, layout, map, scratch } = this;
    return forward(pack.config, this.weights, ctx.rs, ctx.kv, tokens, pos0, {
      ...opts,
      ffn: (layer, rs, nTok) => {
        n.viewF32(rs.buf, rs.o, nTok * pack.config.nEmbd).fill(0);
        bundleRange(layout, map, pack.layers[layer]!.bundlesOffset, pack.config.nFF, rs, nTok, scratch);
      },
    });
  }

  async prefill(ctx: DecodeContext, tokens: readonly number[], pos0: number): Promise<number> {
    return this.evaluate(ctx, tokens, pos0);
  }

  async decode(ctx: DecodeContext, token: number, pos: number): Promise<number> {
    return this.evaluate(ctx, [token], pos);
  }

  async idle(): Promise<void> {}

  describe(): string {
    return "decoder: mmap (dense over a memory mapping of the pack, as llama.cpp; limit its memory with a cgroup)";
  }

  async dispose(): Promise<void> {
    const n = native();
    n.free(this.scratch.buf);
    for (const b of this.weights.buffers.splice(0)) if (b !== this.map) n.free(b);
    n.free(this.map);
  }
}
