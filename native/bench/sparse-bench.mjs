// Micro-benchmark (not a test): GB/s of weight bytes touched by the sparse FFN kernels
// (gate/up rows gathered by index, down rows accumulated by index) beside the dense matvec
// of the same weight type and shape, on one thread and on two.
// Usage: node native/bench/sparse-bench.mjs [--embd 4096] [--ff 11008] [--fraction 0.1,0.2]
import { createRequire } from "node:module";
import { parseArgs } from "node:util";
const require = createRequire(import.meta.url);
const N = require("../build/Release/neuronpipe.node");

const { values: v } = parseArgs({
  options: {
    embd: { type: "string", default: "4096" },
    ff: { type: "string", default: "11008" },
    fraction: { type: "string", default: "0.1,0.25" },
    types: { type: "string", default: "Q4_0,Q8_0,F16" },
    seconds: { type: "string", default: "0.15" },
    rounds: { type: "string", default: "5" },
    json: { type: "boolean", default: false },
  },
});
const embd = Number(v.embd), ff = Number(v.ff), minTime = Number(v.seconds), rounds = Number(v.rounds);
const median = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
const typeIds = { F32: 0, F16: 1, Q4_0: 2, Q8_0: 8 };
const rows = [];

function timeIt(fn) {
  fn();
  let n = 0;
  const t0 = process.hrtime.bigint();
  let el = 0;
  while (el < minTime) {
    fn(n++);
    el = Number(process.hrtime.bigint() - t0) / 1e9;
  }
  return el / n;
}

for (const tname of v.types.split(",")) {
  const t = typeIds[tname];
  const rb = N.rowBytes(t, embd); // one neuron's gate, up or down row (pack stores down by neuron)
  const bytes = ff * rb;
  // copies so the weights are not in the 32 MiB L3
  const copies = Math.max(2, Math.ceil((512 << 20) / bytes));
  const src = N.alloc(embd * 4 * 64);
  N.fillUniform(src, 0, embd * 64, 1n, 1);
  const ws = [];
  for (let c = 0; c < copies; c++) {
    const w = N.alloc(bytes);
    for (let r = 0; r < ff; r += 64) N.quantize(t, src, 0, w, r * rb, Math.min(64, ff - r), embd);
    ws.push(w);
  }
  const x = N.alloc(embd * 4), y = N.alloc(ff * 4), out = N.alloc(embd * 4), coef = N.alloc(ff * 4);
  N.fillUniform(x, 0, embd, 2n, 1);
  N.fillUniform(coef, 0, ff, 3n, 1);
  for (const threads of [1, 2]) {
    N.setThreads(threads);
    const fr = v.fraction.split(",").map(Number);
    const sets = fr.map((f) => {
      // f·ff distinct rows, ascending, spread uniformly (as fired neurons are)
      const k = Math.round(f * ff);
      const buf = N.alloc(ff * 4);
      const ix = N.viewI32(buf, 0, ff);
      let s = 12345;
      const pick = new Set();
      while (pick.size < k) {
        s = (Math.imul(s, 1103515245) + 12345) >>> 0;
        pick.add((s >>> 8) % ff);
      }
      ix.set([...pick].sort((a, b) => a - b));
      return { f, k, buf, gather: [], axpy: [], gatherRatio: [], axpyRatio: [] };
    });
    // rounds alternate dense and sparse so a noisy neighbour hits both alike; medians reported
    const denseRuns = [];
    for (let round = 0; round < rounds; round++) {
      const dense = bytes / timeIt((i = 0) => N.matvec(t, ws[i % copies], 0, ff, embd, x, 0, y, 0)) / 1e9;
      denseRuns.push(dense);
      for (const st of sets) {
        const touched = st.k * rb;
        const g = touched / timeIt((i = 0) => N.matvecRows(t, ws[i % copies], 0, ff, embd, st.buf, 0, st.k, x, 0, y, 0)) / 1e9;
        const a = touched / timeIt((i = 0) => N.axpyRows(t, ws[i % copies], 0, ff, embd, st.buf, 0, st.k, coef, 0, out, 0)) / 1e9;
        st.gather.push(g);
        st.axpy.push(a);
        st.gatherRatio.push(g / dense);
        st.axpyRatio.push(a / dense);
      }
    }
    const row = { type: tname, threads, denseGBs: median(denseRuns), sparse: [] };
    for (const st of sets) {
      row.sparse.push({ fraction: st.f, rows: st.k, gatherGBs: median(st.gather), axpyGBs: median(st.axpy), gatherOfDense: median(st.gatherRatio), axpyOfDense: median(st.axpyRatio) });
      N.free(st.buf);
    }
    rows.push(row);
  }
  for (const w of ws) N.free(w);
  for (const b of [src, x, y, out, coef]) N.free(b);
}
N.setThreads(2);
if (v.json) process.stdout.write(JSON.stringify({ simd: N.getSimd(), embd, ff, rows }, null, 2) + "\n");
else {
  console.log(`simd=${N.getSimd()}  ${ff} rows x ${embd} cols  (GB/s of weight bytes touched, median of ${rounds} rounds; % = median of per-round ratios to dense)`);
  console.log("type  thr  dense   frac  gather (%)        axpy (%)");
  for (const r of rows)
    for (const s of r.sparse)
      console.log(
        `${r.type.padEnd(5)} ${String(r.threads).padStart(3)} ${r.denseGBs.toFixed(1).padStart(6)}  ${s.fraction.toFixed(2)}  ${s.gatherGBs.toFixed(1).padStart(6)} (${(100 * s.gatherOfDense).toFixed(0).padStart(3)}%)  ${s.axpyGBs.toFixed(1).padStart(6)} (${(100 * s.axpyOfDense).toFixed(0).padStart(3)}%)`,
      );
}
