// A machine for tests of the planner: every rate set by the test, none measured.
import type { MachineBounds } from "../../src/plan/machine.js";

/** A machine whose every rate the test sets: memory 20 GB/s on 1 thread and 40 on 2, each kernel 10 GB/s per type on 2 threads, 4 KiB..64 KiB random reads at 10K/s at depth 1 and 80K/s from depth 8 on. */
export function fakeMachine(decoders?: MachineBounds["decoders"]): MachineBounds {
  const types = ["F32", "F16", "Q8_0", "Q4_0"] as const;
  return {
    version: 2,
    measuredAt: "2026-01-01T00:00:00.000Z",
    host: "test",
    cpu: "test ×2",
    memory: [
      { threads: 1, readGBps: 20 },
      { threads: 2, readGBps: 40 },
    ],
    disk: {
      path: "/x",
      backend: "pread",
      directIO: true,
      sequentialGBps: 1,
      random4kIops: 80_000,
      queueDepth: 32,
      rates: [4096, 8192, 16384, 65536].flatMap((blockBytes) => [1, 8, 32, 128].map((queueDepth) => ({ kind: "random" as const, blockBytes, queueDepth, readsPerSecond: queueDepth === 1 ? 10_000 : 80_000, GBps: 0 }))),
    },
    kernels: types.flatMap((type) => (["matvec", "gather", "axpy"] as const).map((kernel) => ({ type, kernel, threads: 2, GBps: 10 }))),
    messages: { postMessageUs: 50, atomicsUs: 50 },
    decoders: decoders ?? { inline: { layerUs: 10, neuronNs: 0, requestUs: 0 }, pipeline: { layerUs: 200, neuronNs: 0, requestUs: 0 }, blocking: { layerUs: 200, neuronNs: 0, requestUs: 0 } },
  };
}
