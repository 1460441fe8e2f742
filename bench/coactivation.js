#!/usr/bin/env node
// Could one read cover several missing neurons (issue 14, PowerInfer-2's neuron bundles)? A
// layer's cold neurons — pack positions past --cold-from of the layer, where a token's misses
// come from — are read one request each today, and the pack orders them by firing frequency, so
// the neurons missing on a token rarely sit side by side. This measures, on the dense model's
// fired sets over a text, how many requests a token's fired cold neurons take when a request
// covers a run of pack positions with at most `gap` unneeded neurons inside it, and how many
// neurons it then reads per one needed:
//
//   pack     the pack's own order (hot-first by profiled frequency)
//   coact    the cold neurons re-ordered by co-activation learned on the first half of the
//            tokens (the profiler's greedy chain, src/sparse/coactivation.ts), measured on the
//            second half
//
//   node bench/coactivation.js [--dir /work/models7b] [--tokens 4096] [--tokens-7b 1024]
//                              [--cofire-group N] [--cofire-share S] [--cold-share 0.5] [--target-recall 0.995] (which 7B: bench/lib/seven-b.mjs)
//                              [--model M.gguf --text T.txt [--name N]]
//                              [--cold-from 0.3] [--out bench/results/coactivation.json]
// The default model (models/, its held-out text) always; the 7B-shaped model with --dir (its
// random-token text); any model with --model and --text (no pack: its order is hot-first by the
// firing counts of the learning half, as `pack` orders by a profile; --tokens of the text).
// Nothing here changes a pack: it says whether re-ordering would pay.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { coldShareOf, targetRecallOf, cofireOf, SEVEN_B_OPTIONS, sevenBFiles } from "./lib/seven-b.mjs";
import { benchArgs } from "./lib/usage.mjs";

const rootDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { values: v } = benchArgs(import.meta.url, {
  dir: { type: "string" },
  tokens: { type: "string", default: "4096" },
  "tokens-7b": { type: "string", default: "1024" },
  "cold-from": { type: "string", default: "0.3" },
  model: { type: "string" },
  text: { type: "string" },
  name: { type: "string" },
  out: { type: "string", default: join(rootDir, "bench", "results", "coactivation.json") },
  ...SEVEN_B_OPTIONS,
});
const dist = (p) => import(pathToFileURL(join(rootDir, "dist", "src", p)).href);
const { loadModel } = await dist("api/model.js");
const { openPack } = await dist("sparse/pack/open.js");
const { collectActivations } = await dist("tools/collect-activations.js");
const { native } = await dist("native.js");
// the order and the request count the profiler uses (src/sparse/coactivation.ts)
const { coactivationChain, runRequests } = await dist("sparse/coactivation.js");
const { hotFirstOrder } = await dist("sparse/pack/format.js");
const GAPS = [0, 1, 3];
const log = (s) => process.stderr.write(`[coactivation] ${s}\n`);

/** Firing counts of a layer's neurons over tokens [0, tokens) of its fired bits. */
function countsOf(nFF, bits, rowBytes, tokens) {
  const count = new Uint32Array(nFF);
  for (let t = 0; t < tokens; t++) for (let i = 0; i < nFF; i++) count[i] += (bits[t * rowBytes + (i >> 3)] >> (i & 7)) & 1;
  return count;
}

async function analyse(name, modelPath, packPath, textPath, nTokens) {
  const pack = packPath ? openPack(packPath) : undefined;
  const model = await loadModel(modelPath, { contextSize: 512, decoder: "dense" });
  const tokens = model.tokenizer.encode(readFileSync(textPath, "utf8")).slice(0, nTokens);
  const t0 = performance.now();
  const c = collectActivations(model, tokens, { window: 256 });
  log(`${name}: fired sets of ${tokens.length} tokens in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  const n = native();
  const { nFF, nLayer } = c;
  const rowBytes = nFF / 8;
  const half = tokens.length >> 1;
  const coldFrom = Math.floor(Number(v["cold-from"]) * nFF);
  const layers = [];
  try {
    for (let l = 0; l < nLayer; l++) {
      const bits = n.viewU8(c.y[l], 0, tokens.length * rowBytes);
      // no pack: hot-first by the learning half's counts, the order `pack` gives a profile without one
      const order = pack ? pack.layers[l].order : hotFirstOrder(countsOf(nFF, bits, rowBytes, half));
      const cold = Array.from(order.slice(coldFrom)); // cold index j → neuron id
      const firedCold = (t) => cold.flatMap((id, j) => ((bits[t * rowBytes + (id >> 3)] >> (id & 7)) & 1 ? [j] : []));
      const lists = Array.from({ length: tokens.length }, (_, t) => firedCold(t));
      const chain = coactivationChain(cold.length, lists.slice(0, half).map((f) => Int32Array.from(f)));
      const orders = { pack: cold.map((_, j) => j), coact: new Array(cold.length) };
      chain.forEach((j, p) => (orders.coact[j] = p));
      const row = { layer: l, cold: cold.length, firedPerToken: 0 };
      let fired = 0;
      const sums = {};
      for (const f of lists.slice(half)) {
        fired += f.length;
        for (const [o, pos] of Object.entries(orders)) {
          const ps = f.map((j) => pos[j]).sort((a, b) => a - b);
          for (const g of GAPS) {
            const r = runRequests(ps, g);
            const k = `${o} gap ${g}`;
            sums[k] ??= { req: 0, read: 0 };
            sums[k].req += r.requests;
            sums[k].read += r.read;
          }
        }
      }
      row.firedPerToken = fired / (tokens.length - half);
      row.perFired = Object.fromEntries(Object.entries(sums).map(([k, s]) => [k, { requests: fired ? s.req / fired : 0, read: fired ? s.read / fired : 0 }]));
      layers.push(row);
      const show = (k) => `${k} ${row.perFired[k].requests.toFixed(2)} (${row.perFired[k].read.toFixed(2)}×)`;
      log(`${name} layer ${l}: ${row.firedPerToken.toFixed(0)} cold neurons fire per token; requests per fired neuron (neurons read per needed): ${Object.keys(row.perFired).map(show).join(", ")}`);
    }
  } finally {
    c.dispose();
    model.dispose();
  }
  // all layers: weighted by the fired neurons
  const total = layers.reduce((a, r) => a + r.firedPerToken, 0);
  const overall = Object.fromEntries(
    Object.keys(layers[0].perFired).map((k) => [k, Object.fromEntries(["requests", "read"].map((q) => [q, layers.reduce((a, r) => a + r.perFired[k][q] * r.firedPerToken, 0) / total]))]),
  );
  log(`${name}, all layers: ${Object.entries(overall).map(([k, x]) => `${k} ${x.requests.toFixed(2)} (${x.read.toFixed(2)}×)`).join(", ")}`);
  return { name, model: modelPath, pack: packPath ?? null, text: textPath, tokens: tokens.length, coldFrom: Number(v["cold-from"]), layers, overall };
}

const models = join(rootDir, "models");
const out = { date: new Date().toISOString(), results: [] };
out.results.push(await analyse("default", join(models, "neuronpipe-default.gguf"), join(models, "neuronpipe-default.pack.gguf"), join(models, "heldout.txt"), Number(v.tokens)));
if (v.dir) {
  const f = sevenBFiles(resolve(v.dir), cofireOf(v), coldShareOf(v), targetRecallOf(v));
  out.results.push(await analyse("7B", f.model, f.pack, f.corpus, Number(v["tokens-7b"])));
}
if (v.model) {
  if (!v.text) throw new Error("--model needs --text: the text its fired sets are collected over");
  out.results.push(await analyse(v.name ?? v.model, resolve(v.model), undefined, resolve(v.text), Number(v.tokens)));
}
writeFileSync(v.out, JSON.stringify(out, null, 2));
log(`wrote ${v.out}`);
