#!/usr/bin/env node
// Two settings of one knob measured in ONE generation: the knob is switched every --block
// tokens (A, B, A, B, …) and each decode step is timed. On a machine whose speed drifts by ±10%
// from one run to the next (this VM's memory phases, docs/benchmarks.md), two separate runs
// cannot resolve a 3% change; blocks a few tokens long, alternated, see the same drift. An A/A
// run (--a equal to --b) shows the method's own noise.
//
//   node bench/alternate.js --model PACK [--memory BYTES] --knob KNOB --a V --b V
//                           [--tokens 256] [--block 4] [--prompt TEXT] [--out FILE]
//
// Knobs (the inline decoder's, switched between tokens; none changes a token):
//   aheadLayers   layers whose reads are issued ahead (a number)
//   readAhead     reads ahead at all (true/false)
//   readNow       a layer's own misses read in the background (true/false)
//   demote        predicted-but-silent cold neurons to the LRU's tail (true/false)
//   threads       the native compute pool's threads (a number; any decoder)
// Prints, per setting, the mean and median token time, and B/A: the ratio of the means, and the
// median (10th–90th percentile) of the ratios of each B block to the A block before it. Greedy
// decoding; the token ids are checked to be those of a run without switching (--check).
import { writeFileSync } from "node:fs";
import { benchArgs } from "./lib/usage.mjs";

const { values: v } = benchArgs(import.meta.url, {
  model: { type: "string" },
  memory: { type: "string" },
  knob: { type: "string" },
  a: { type: "string" },
  b: { type: "string" },
  tokens: { type: "string", default: "256" },
  block: { type: "string", default: "4" },
  prompt: { type: "string", default: "The whale" },
  ctx: { type: "string", default: "512" },
  check: { type: "boolean", default: false },
  out: { type: "string" },
});
const fail = (msg) => {
  process.stderr.write(`alternate.js: ${msg} (--help lists the options)\n`);
  process.exit(2);
};
if (!v.model || !v.knob || v.a === undefined || v.b === undefined) fail("--model, --knob, --a and --b are required");
const tokens = Number(v.tokens);
const block = Number(v.block);
if (!Number.isInteger(tokens) || tokens < 4 * block || !Number.isInteger(block) || block < 1) fail(`--tokens ${v.tokens} must be an integer ≥ 4 × --block ${v.block}`);

const { alternate } = await import("./lib/alternate.mjs");
const np = await import("../dist/src/index.js");
const log = (...a) => process.stderr.write(`[bench:alternate] ${a.join(" ")}\n`);
const model = await np.loadModel(v.model, { contextSize: Number(v.ctx), ...(v.memory ? { memory: v.memory } : {}) });
try {
  log(`${v.model}${v.memory ? ` at ${v.memory} bytes` : ""}, decoder ${model.decoder.kind}: ${v.knob} ${v.a} (A) against ${v.b} (B), blocks of ${block}, ${tokens} tokens`);
  const r = await alternate(model, { knob: v.knob, a: v.a, b: v.b, tokens, block, prompt: v.prompt, check: v.check });
  const f = (x) => x.toFixed(2);
  for (const s of ["a", "b"]) log(`${s.toUpperCase()} ${v.knob}=${v[s]}: mean ${f(r[s].meanMs)} ms, median ${f(r[s].medianMs)} ms over ${r[s].tokens} tokens`);
  log(`B/A: means ${r.ratio.toFixed(3)}; paired blocks median ${r.paired.median.toFixed(3)} (10–90%: ${r.paired.p10.toFixed(3)}–${r.paired.p90.toFixed(3)}, ${r.paired.n} pairs)${r.checked ? "; token ids identical to a run without switching" : ""}`);
  if (v.out) writeFileSync(v.out, JSON.stringify({ model: v.model, memory: v.memory ?? null, knob: v.knob, ...r }, null, 1));
} finally {
  await model.close();
}
