// Micro-benchmark (not a test): GB/s of weight bytes streamed by matvec.
// Usage: node native/bench/matvec-bench.mjs [simd]   (after npm run build:native)
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
const N = require("../build/Release/neuronpipe.node");

const simd = process.argv[2] ?? N.bestSimd();
N.setSimd(simd);
const shapes = [[4096, 11008], [11008, 4096], [4096, 4096], [32000, 4096]];
const types = [["Q4_0", 2], ["Q8_0", 8], ["F16", 1]];
const minTime = Number(process.env.BENCH_SECONDS ?? 0.6);

console.log(`simd=${N.getSimd()} build=${JSON.stringify(N.buildInfo())}`);
// GB/s = weight bytes per wall second. cpu = weight bytes per CPU-second of this process
// (all threads, including idle spinning): on a machine shared with other busy processes the
// wall figure drops while the cpu figure shows what the kernel does when it has the core.
console.log("type  rows x cols     threads  ms/call   GB/s  GB/cpu-s");
for (const [tname, t] of types) {
  for (const [rows, cols] of shapes) {
    if (process.env.BENCH_ALL !== "1" && rows === 4096 && cols === 4096) continue;
    if (process.env.BENCH_ALL !== "1" && rows === 32000) continue;
    const rb = N.rowBytes(t, cols);
    const bytes = rows * rb;
    // Several copies so the weights do not sit in cache (L3 is 32 MiB on these machines).
    const copies = Math.max(2, Math.ceil((256 << 20) / bytes));
    const src = N.alloc(cols * 4 * 64);
    N.fillUniform(src, 0, cols * 64, 1n, 1);
    const ws = [];
    for (let c = 0; c < copies; c++) {
      const w = N.alloc(bytes);
      for (let r = 0; r < rows; r += 64) N.quantize(t, src, 0, w, r * rb, Math.min(64, rows - r), cols);
      ws.push(w);
    }
    const x = N.alloc(cols * 4), y = N.alloc(rows * 4);
    N.fillUniform(x, 0, cols, 2n, 1);
    for (const threads of [1, 2]) {
      N.setThreads(threads);
      for (const w of ws) N.matvec(t, w, 0, rows, cols, x, 0, y, 0); // warm-up
      let n = 0;
      const c0 = process.cpuUsage();
      const t0 = process.hrtime.bigint();
      let el = 0;
      while (el < minTime) {
        N.matvec(t, ws[n % copies], 0, rows, cols, x, 0, y, 0);
        n++;
        el = Number(process.hrtime.bigint() - t0) / 1e9;
      }
      const cu = process.cpuUsage(c0);
      const cpu = (cu.user + cu.system) / 1e6;
      const ms = (el / n) * 1e3;
      console.log(
        `${tname.padEnd(5)} ${`${rows}x${cols}`.padEnd(14)} ${String(threads).padStart(7)} ${ms.toFixed(3).padStart(8)} ${(bytes / (el / n) / 1e9).toFixed(1).padStart(6)} ${((bytes * n) / cpu / 1e9).toFixed(1).padStart(9)}`,
      );
    }
    for (const w of ws) N.free(w);
    N.free(src); N.free(x); N.free(y);
  }
}
N.setThreads(2);
