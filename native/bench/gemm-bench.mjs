// Micro-benchmark (not a test): batched matmul (prefill GEMM) GFLOP/s per core, per weight type.
// Usage: node native/bench/gemm-bench.mjs [simd]   (after npm run build:native)
// FLOPs = 2 * rows * cols * tokens. Peak per core printed beside it: this machine's Zen 5 issues
// two 512-bit vpdpbusd per cycle (2 x 64 int8 MACs = 256 ops) and two 512-bit FMAs (2 x 16 FMAs =
// 64 FLOP) -- measured with an asm loop of 12 independent ones: 8.4 per ns at 4.2 GHz. The clock
// is measured here by a chain of dependent one-cycle integer ops (/proc/cpuinfo shows the base
// clock under a VM). Set PEAK_PER_CYCLE=int8,f32 for another CPU.
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
const N = require("../build/Release/neuronpipe.node");

const simd = process.argv[2] ?? N.bestSimd();
N.setSimd(simd);
function chain(n) {
  let x = 0;
  for (let i = 0; i < n; i++) {
    x = (x + i) | 0;
    x = (x ^ 1) | 0;
  }
  return x;
}
chain(1e7);
let ghz = 0;
for (let r = 0; r < 3; r++) {
  const t0 = process.hrtime.bigint();
  chain(2e8);
  ghz = Math.max(ghz, (2 * 2e8) / Number(process.hrtime.bigint() - t0));
}
const [int8PerCycle, f32PerCycle] = (process.env.PEAK_PER_CYCLE ?? "256,64").split(",").map(Number);
const shapes = [[4096, 4096], [11008, 4096], [4096, 11008]];
const types = [["Q4_0", 2, int8PerCycle], ["Q8_0", 8, int8PerCycle], ["F16", 1, f32PerCycle], ["F32", 0, f32PerCycle]];
const tokens = (process.env.GEMM_TOKENS ?? "128,512").split(",").map(Number);
const minTime = Number(process.env.BENCH_SECONDS ?? 0.6);
const threadList = (process.env.GEMM_THREADS ?? "1,2").split(",").map(Number);

console.log(`simd=${N.getSimd()} clock ${ghz.toFixed(2)} GHz (measured): peak per core ${(int8PerCycle * ghz).toFixed(0)} int8 GOP/s, ${(f32PerCycle * ghz).toFixed(0)} F32 GFLOP/s`);
console.log("type  rows x cols    tokens threads  ms/call  GFLOP/s  per core  % of peak");
for (const [tname, t, peakOps] of types) {
  for (const [rows, cols] of shapes) {
    const rb = N.rowBytes(t, cols);
    const src = N.alloc(cols * 4 * 64);
    N.fillUniform(src, 0, cols * 64, 1n, 1);
    const w = N.alloc(rows * rb);
    for (let r = 0; r < rows; r += 64) N.quantize(t, src, 0, w, r * rb, Math.min(64, rows - r), cols);
    for (const nTok of tokens) {
      const X = N.alloc(nTok * cols * 4), Y = N.alloc(nTok * rows * 4);
      N.fillUniform(X, 0, nTok * cols, 2n, 1);
      for (const threads of threadList) {
        N.setThreads(threads);
        N.matmul(t, w, 0, rows, cols, X, 0, nTok, Y, 0);
        let n = 0, el = 0;
        const t0 = process.hrtime.bigint();
        while (el < minTime) {
          N.matmul(t, w, 0, rows, cols, X, 0, nTok, Y, 0);
          n++;
          el = Number(process.hrtime.bigint() - t0) / 1e9;
        }
        const gf = (2 * rows * cols * nTok) / (el / n) / 1e9;
        const core = gf / threads;
        console.log(`${tname.padEnd(5)} ${`${rows}x${cols}`.padEnd(14)} ${String(nTok).padStart(6)} ${String(threads).padStart(7)} ${((el / n) * 1e3).toFixed(2).padStart(8)} ${gf.toFixed(0).padStart(8)} ${core.toFixed(0).padStart(9)} ${((100 * core) / (peakOps * ghz)).toFixed(0).padStart(9)}`);
      }
      N.free(X); N.free(Y);
    }
    N.free(w); N.free(src);
  }
}
N.setThreads(2);
