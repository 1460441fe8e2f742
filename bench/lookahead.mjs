// How well a layer's linear predictor would flag the NEXT layer's neurons from the state known one
// layer earlier (issue 14, item 5: reads issued ahead): layer L+1's predictor on layer L's FFN input
// (normalised with layer L+1's ffn_norm), recall and flagged/fired against layer L+1's firing.
//   node bench/lookahead.mjs MODEL.gguf MODEL.predictor.gguf CORPUS [TOKENS]
import { loadModel } from "../dist/src/index.js";
import { native } from "../dist/src/native.js";
import { readPredictors } from "../dist/src/sparse/predictor-file.js";
import { collectActivations } from "../dist/src/tools/collect-activations.js";
import { readFileSync } from "node:fs";
const [modelPath, predPath, corpus, nTokArg] = process.argv.slice(2);
const n = native();
const m = await loadModel(modelPath);
const toks = m.tokenizer.encode(readFileSync(corpus, "utf8")).slice(-Number(nTokArg ?? 1000));
const c = collectActivations(m, toks, { input: "x" });
const pr = readPredictors(predPath);
const { nEmbd: E, nFF: F, nLayer, rmsEps } = m.config;
const W = m.decoder.weights;
const xb = n.alloc(c.nTok * E * 4);
const pop = (b) => { let k = 0; while (b) { k += b & 1; b >>= 1; } return k; };
for (const lag of [0, 1]) {
  let tp = 0, fp = 0, fn = 0;
  for (let L = 0; L + lag < nLayer; L++) {
    const T = L + lag; // predict layer T from layer L's FFN input
    const norm = W.layers[T].ffnNorm;
    n.rmsnorm(c.x[L], 0, norm.buf, norm.off, E, c.nTok, rmsEps, xb, 0);
    const p = pr.layers[T];
    const r = p.hidden;
    const q1 = n.alloc(p.fc1.length), q2 = n.alloc(p.fc2.length), h = n.alloc(c.nTok * r * 4), s = n.alloc(c.nTok * F * 4);
    n.viewU8(q1, 0, p.fc1.length).set(p.fc1);
    n.viewU8(q2, 0, p.fc2.length).set(p.fc2);
    n.matmul(p.type, q1, 0, r, E, xb, 0, c.nTok, h, 0);
    n.matmul(p.type, q2, 0, F, r, h, 0, c.nTok, s, 0);
    const sv = n.viewF32(s, 0, c.nTok * F);
    const y = n.viewU8(c.y[T], 0, c.nTok * (F / 8));
    for (let t = 0; t < c.nTok; t++) for (let i = 0; i < F; i++) {
      const fired = (y[t * (F / 8) + (i >> 3)] >> (i & 7)) & 1;
      const flag = sv[t * F + i] > p.thresholds[i];
      if (flag && fired) tp++; else if (flag) fp++; else if (fired) fn++;
    }
    for (const b of [q1, q2, h, s]) n.free(b);
  }
  console.log(`${lag === 0 ? "same layer (the shipped use)" : "layer L+1 from layer L's input"}: recall ${(tp / (tp + fn)).toFixed(4)}, flagged/fired ${((tp + fp) / (tp + fn)).toFixed(2)}`);
}
