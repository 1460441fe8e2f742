// Allocating a session's native state (KV cache, run state) for a decoder.
import { GGMLType, native } from "../native.js";
import type { ModelConfig } from "../model/config.js";
import { createKVCache, createRunState } from "../model/forward.js";
import type { ContextOptions, DecodeContext } from "./decoder.js";

/**
 * A context of the requested size: defaults from `plan` (a pack's memory plan reserved one
 * session of that size) or the model; sizes beyond the plan are refused. `denseFfn`: the run
 * state holds the dense FFN's vectors (a sparse FFN keeps its own scratch).
 */
export function allocContext(cfg: ModelConfig, opts: ContextOptions, denseFfn: boolean, plan?: { path: string; contextSize: number; batchSize: number }): DecodeContext {
  const contextSize = opts.contextSize ?? plan?.contextSize ?? Math.min(cfg.nCtxTrain, 2048);
  const batchSize = opts.batchSize ?? plan?.batchSize ?? 256;
  if (plan && (contextSize > plan.contextSize || batchSize > plan.batchSize)) {
    throw new RangeError(
      `session of context ${contextSize} / batch ${batchSize} exceeds the memory plan of ${plan.path} (context ${plan.contextSize}, batch ${plan.batchSize}); load the model with a larger contextSize/batchSize`,
    );
  }
  if (!(Number.isInteger(contextSize) && contextSize >= 1)) throw new RangeError(`contextSize must be a whole number ≥ 1, got ${contextSize}`);
  if (!(Number.isInteger(batchSize) && batchSize >= 1)) throw new RangeError(`batchSize must be a whole number ≥ 1, got ${batchSize}`);
  if (plan && opts.kvType === "f32") throw new RangeError("a sparse model's memory plan reserves an F16 KV cache");
  const rs = createRunState(cfg, batchSize, denseFfn);
  try {
    const kv = createKVCache(cfg, contextSize, opts.kvType === "f32" ? GGMLType.F32 : GGMLType.F16);
    return { rs, kv, contextSize, batchSize };
  } catch (e) {
    native().free(rs.buf);
    throw e;
  }
}

export function freeContext(ctx: DecodeContext): void {
  const n = native();
  n.free(ctx.rs.buf);
  n.free(ctx.kv.buf);
}
