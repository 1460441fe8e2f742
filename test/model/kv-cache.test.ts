// The KV cache is committed when it is created (model/forward.ts createKVCache): every page of
// it is resident before the first token, as the kernel counts it (mincore), where a buffer of
// the same size allocated and left alone holds none; and it reads as zeros.
import { describe, expect, it } from "vitest";
import { GGMLType, native } from "../../src/native.js";
import { createKVCache, kvCacheBytes } from "../../src/model/forward.js";
import type { ModelConfig } from "../../src/model/config.js";

// 8 layers of 8 KV heads of 128 over 1,024 positions, F16: 2 KiB a row, 2 MiB a layer's K or V, 32 MiB
const cfg = { nLayer: 8, nHeadKv: 8, headDim: 128 } as ModelConfig;

describe("KV cache", () => {
  it("every page resident at creation (a lazily mapped buffer of the same size: none); all zeros", () => {
    const n = native();
    const bytes = kvCacheBytes(cfg, 1024, GGMLType.F16);
    expect(bytes).toBe(8 * 2 * 1024 * 2048);
    // the reference, measured before the cache exists (a huge page faulted in the cache's mapping
    // may cover the last page of a mapping beside it)
    const untouched = n.alloc(bytes);
    const lazily = n.residentBytes(untouched);
    const kv = createKVCache(cfg, 1024, GGMLType.F16);
    try {
      expect(lazily).toBe(0);
      expect(kv.bytes).toBe(bytes);
      expect(n.residentBytes(kv.buf)).toBeGreaterThanOrEqual(bytes);
      const v = n.viewF32(kv.buf, 0, bytes / 4);
      expect(v.some((x) => x !== 0)).toBe(false);
    } finally {
      n.free(untouched);
      n.free(kv.buf);
    }
  });
});
