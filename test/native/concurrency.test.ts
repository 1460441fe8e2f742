// Several JS threads using the addon at once: buffer ids are process-wide, the pool is
// shared (a caller that finds it busy runs inline) and results stay bit-identical.
import { Worker } from "node:worker_threads";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { afterAll, describe, it } from "vitest";
import { N, GGMLType, bufF32, bufBytes, readF32, freeAll, randF32, bitsEqual, makeWeights } from "./helpers.js";

// Same resolution as src/native.ts (NEURONPIPE_ADDON selects another build).
const addonPath =
  process.env.NEURONPIPE_ADDON ?? join(dirname(fileURLToPath(import.meta.url)), "../../native/build/Release/neuronpipe.node");

afterAll(() => {
  freeAll();
  N.setThreads(2);
});

describe("concurrent callers", () => {
  it("worker threads and the main thread run matvec on shared buffers at the same time", async () => {
    const rows = 1024, cols = 32 * 64;
    const { id: w } = makeWeights(GGMLType.Q4_0, rows, cols, 1234);
    const x = bufF32(randF32(cols, 99));
    N.setThreads(2);
    const yRef = bufBytes(rows * 4);
    N.matvec(GGMLType.Q4_0, w, 0, rows, cols, x, 0, yRef, 0);
    const ref = readF32(yRef, rows);

    const nWorkers = 2, iters = 40;
    const outs = Array.from({ length: nWorkers }, () => bufBytes(rows * 4));
    const code = `
      const { parentPort, workerData } = require("node:worker_threads");
      const N = require(workerData.addon);
      const { w, x, y, rows, cols, iters } = workerData;
      for (let i = 0; i < iters; i++) N.matvec(2, w, 0, rows, cols, x, 0, y, 0);
      parentPort.postMessage("done");
    `;
    const done = outs.map(
      (y) =>
        new Promise<void>((resolve, reject) => {
          const wk = new Worker(code, { eval: true, workerData: { addon: addonPath, w, x, y, rows, cols, iters } });
          wk.once("message", () => resolve());
          wk.once("error", reject);
        }),
    );
    const yMain = bufBytes(rows * 4);
    for (let i = 0; i < iters; i++) N.matvec(GGMLType.Q4_0, w, 0, rows, cols, x, 0, yMain, 0);
    await Promise.all(done);
    bitsEqual(readF32(yMain, rows), ref, "main thread");
    outs.forEach((y, i) => bitsEqual(readF32(y, rows), ref, `worker ${i}`));
  });
});
