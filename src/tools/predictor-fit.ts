// Low-rank linear predictors (the default of `neuronpipe train-predictor`; predictor-file.ts for
// the form). A neuron of a ReLU-family FFN fires when its gate pre-activation g = W_gate·x̂ is
// positive, x̂ the ffn_norm output. g is linear in x̂, so the predictor estimates it through a
// rank-r bottleneck and flags a neuron when the estimate clears a per-neuron margin:
//
//   fit        G = X̂·W_gateᵀ over the fitting tokens; the best rank-r approximation of G is
//              G·V·Vᵀ with V (n_ff × r) its top right singular vectors (reduced-rank regression
//              of an exactly linear target): fc1 = Vᵀ·W_gate (r × n_embd), fc2 = V (n_ff × r).
//              V comes from subspace iteration on K = W_gate·C·W_gateᵀ, C = X̂ᵀX̂, never formed:
//              three native matmuls per step, Gram–Schmidt twice, then Rayleigh–Ritz (linalg.ts).
//   margins    σ_i = rms(g_i − s_i) over fitting tokens, s = fc2·fc1·x̂ as quantised; a neuron
//              is flagged when s_i > −κ·σ_i, κ the smallest reaching the target recall on the
//              calibration tokens (held out of the fit). thresholds_i = −κ·σ_i. With a cold
//              share (coldShare), the neurons firing least get a κ of their own: the cheapest
//              pair reaching the same recall, a cold flag costing coldCost (cold-margins.ts).
//   rank       among ranks 32, 64, … ≤ maxRank whose predictor fits sizeBudget of the layer's
//              FFN bytes, the smallest flagging ≤ maxRatio× the neurons that fire (a flagged
//              neuron costs a gate row, a read when it is not resident), else the most precise.
//
// Closed form and deterministic: no learning rate, no epochs; the only randomness is the seeded
// start of the subspace iteration.
import type { Model } from "../api/model.js";
import { DenseDecoder } from "../decode/dense.js";
import { GGMLType, native } from "../native.js";
import type { LinearPredictor, LayerReport } from "../sparse/predictor-file.js";
import { Rng } from "../api/sampling.js";
import { popcount8, type Collected } from "./collect-activations.js";
import { coldMargins, coldNeurons, groupScores } from "./cold-margins.js";
import { Mat, mulT, orthonormalizeRows, symmetricEigen, transpose } from "./linalg.js";
import { firedBit } from "../sparse/fired-bits.js";

/** Recall the trainer's thresholds reach on their calibration tokens unless told otherwise (about 0.995 on unseen text). */
export const DEFAULT_TARGET_RECALL = 0.998;

export interface LinearFitOptions {
  /** Largest rank tried, a multiple of 32 (default min(256, n_embd)). */
  maxRank?: number;
  /** Recall the per-neuron margins must reach on the calibration tokens (default DEFAULT_TARGET_RECALL). */
  targetRecall?: number;
  /** Predictor bytes ≤ sizeBudget · the layer's FFN bytes (gate + up + down as stored) (default 0.15). */
  sizeBudget?: number;
  /** The smallest rank flagging at most this many times the neurons that fire (calibration tokens) is taken; if none does, the most precise (default 1.6). */
  maxRatio?: number;
  /**
   * Share of each layer's neurons, those firing least on the fitting tokens, that get a margin of
   * their own (cold-margins.ts): the ones a memory budget leaves on storage, where a false flag
   * costs a read. Default 0: one margin for every neuron.
   */
  coldShare?: number;
  /** With coldShare: what a flag of a cold neuron costs, in flags of hot ones (default 32: a read against a gate row here). */
  coldCost?: number;
  /** GGML type of fc1/fc2 rows (default Q8_0). */
  type?: number;
  /** Subspace iterations (default 4). */
  iterations?: number;
  seed?: number;
  onLayer?: (layer: number) => void;
}

export interface LinearFitResult {
  layers: LinearPredictor[];
  report: LayerReport[];
  /** Bytes of predictor read per token, all layers. */
  predictorBytes: number;
  /** Bytes of the FFN weights a dense token reads, all layers. */
  ffnBytes: number;
}

const RANK_STEP = 32;

/** Per-layer statistics of scores against labels (exported for its test). */
export interface Confusion {
  tp: number;
  fp: number;
  fn: number;
  tokens: number;
  /** (nFF) per neuron: the share of the tokens it did not fire on that it was flagged on. */
  falseFlags: Float32Array;
}

export function confusion(s: Float32Array, thr: Float32Array, bits: Uint8Array, nTok: number, nFF: number): Confusion {
  let tp = 0;
  let fp = 0;
  let fn = 0;
  const rb = nFF / 8;
  const fpOf = new Uint32Array(nFF);
  const negOf = new Uint32Array(nFF);
  for (let t = 0; t < nTok; t++) {
    const o = t * nFF;
    for (let i = 0; i < nFF; i++) {
      const y = firedBit(bits, rb, t, i);
      const p = s[o + i]! > thr[i]!;
      if (p && y) tp++;
      else if (p) fp++;
      else if (y) fn++;
      if (!y) {
        negOf[i]!++;
        if (p) fpOf[i]!++;
      }
    }
  }
  const falseFlags = Float32Array.from(fpOf, (f, i) => (negOf[i]! > 0 ? f / negOf[i]! : 0));
  return { tp, fp, fn, tokens: nTok, falseFlags };
}

/**
 * The one margin κ: the target share of the calibration positives have −s_i/σ_i below it
 * (scores s (nTok, nFF), labels bits (nTok, nFF/8), σ (nFF)).
 */
function oneMargin(s: Float32Array, sig: Float64Array, bits: Uint8Array, nTok: number, nFF: number, positives: number, targetRecall: number): number {
  if (positives === 0) return -Infinity;
  const z = new Float64Array(positives);
  let k = 0;
  for (let t = 0; t < nTok; t++)
    for (let i = 0; i < nFF; i++) if (firedBit(bits, nFF / 8, t, i)) z[k++] = -s[t * nFF + i]! / sig[i]!;
  z.sort();
  return z[Math.min(positives - 1, Math.ceil(targetRecall * positives) - 1)]! * (1 + 1e-6) + 1e-9;
}

/**
 * Fit one linear predictor per layer. `fit` holds the fitting tokens' x̂ (ffn_norm outputs,
 * collected with input "xb") and labels; `cal` the calibration tokens'; `ev` the evaluation split's.
 */
export function fitLinearPredictors(model: Model, fit: Collected, cal: Collected, ev: Collected, opts: LinearFitOptions = {}): LinearFitResult {
  if (!(model.decoder instanceof DenseDecoder)) throw new Error("fitLinearPredictors: the model must be loaded with the dense decoder");
  const n = native();
  const { nEmbd: E, nFF: F, nLayer } = model.config;
  const weights = model.decoder.weights;
  const type = opts.type ?? GGMLType.Q8_0;
  const maxRank = Math.min(opts.maxRank ?? Math.min(256, E), Math.floor(F / RANK_STEP) * RANK_STEP);
  if (maxRank < RANK_STEP || maxRank % RANK_STEP !== 0) throw new RangeError(`maxRank must be a positive multiple of ${RANK_STEP} ≤ n_ff, got ${maxRank}`);
  const targetRecall = opts.targetRecall ?? DEFAULT_TARGET_RECALL;
  const sizeBudget = opts.sizeBudget ?? 0.15;
  const maxRatio = opts.maxRatio ?? 1.6;
  const coldShare = opts.coldShare ?? 0;
  const coldCost = opts.coldCost ?? 32;
  if (!(coldShare >= 0 && coldShare < 1)) throw new RangeError(`coldShare must be in [0, 1), got ${coldShare}`);
  if (!(coldCost > 0)) throw new RangeError(`coldCost must be positive, got ${coldCost}`);
  const iterations = opts.iterations ?? 4;
  const rng = new Rng(opts.seed ?? 1);
  const layers: LinearPredictor[] = [];
  const report: LayerReport[] = [];
  let predictorBytes = 0;
  let ffnBytes = 0;
  for (let l = 0; l < nLayer; l++) {
    opts.onLayer?.(l);
    const t0 = performance.now();
    const L = weights.layers[l]!;
    const gate = L.ffnGate!;
    const layerFfnBytes = [L.ffnGate!, L.ffnUp!, L.ffnDown!].reduce((s, t) => s + t.rows * n.rowBytes(t.type, t.cols), 0);
    ffnBytes += layerFfnBytes;
    const owned: Mat[] = [];
    const keep = <T extends Mat>(m: T) => (owned.push(m), m);
    try {
      // ---- the subspace: top right singular vectors of G = X̂·Wᵀ -------------------------
      const X = keep(Mat.from(fit.nTok, E, (d) => d.set(n.viewF32(fit.x[l]!, 0, fit.nTok * E))));
      const Xt = keep(transpose(X));
      const C = keep(mulT(Xt, Xt)); // X̂ᵀX̂ (E × E)
      const W = keep(new Mat(F, E));
      for (let i = 0; i < F; i++) n.dequantizeRow(gate.type, gate.buf, gate.off, E, i, W.buf, i * E * 4);
      const Wt = keep(transpose(W));
      const q = Math.min(F, maxRank + RANK_STEP);
      let Q = Mat.from(q, F, (d) => {
        for (let i = 0; i < d.length; i++) d[i] = Math.sqrt(-2 * Math.log(Math.max(rng.next(), 1e-12))) * Math.cos(2 * Math.PI * rng.next());
      });
      const applyK = (A: Mat): Mat => {
        // rows of A are vectors in n_ff space; returns rows of K·a
        const t1 = mulT(A, Wt); // (q × E): Wᵀ·a
        const t2 = mulT(t1, C); // C·(Wᵀa)
        t1.free();
        const y = mulT(t2, W); // W·C·Wᵀ·a
        t2.free();
        return y;
      };
      for (let it = 0; it < iterations; it++) {
        const Y = applyK(Q);
        Q.free();
        Q = orthonormalizeRows(Y);
        if (Q !== Y) Y.free();
      }
      keep(Q);
      const KQ = keep(applyK(Q));
      const M = mulT(KQ, Q); // (q × q): M[a][b] = q_b·K·q_a
      const m = Float64Array.from(M.data);
      M.free();
      for (let a = 0; a < q; a++) for (let b = 0; b < a; b++) m[a * q + b] = m[b * q + a] = (m[a * q + b]! + m[b * q + a]!) / 2;
      const eig = symmetricEigen(m, q);
      // V rows (maxRank × F) = top eigenvectors of M mapped back through Q: v_k = Σ_j e_kj·q_j
      const Ek = keep(Mat.from(maxRank, q, (d) => {
        for (let k = 0; k < maxRank; k++) for (let j = 0; j < q; j++) d[k * q + j] = eig.vectors[k * q + j]!;
      }));
      const Qt = keep(transpose(Q));
      const V = keep(mulT(Ek, Qt)); // (maxRank × F)
      const fc1All = keep(mulT(V, Wt)); // (maxRank × E) = Vᵀ·W
      // ---- scores of each candidate rank; margins and the calibrated κ ------------------
      const S = Math.min(fit.nTok, 4096); // fitting tokens the margins are measured on
      const Xs = keep(Mat.from(S, E, (d) => d.set(n.viewF32(fit.x[l]!, 0, S * E))));
      const Xc = keep(Mat.from(cal.nTok, E, (d) => d.set(n.viewF32(cal.x[l]!, 0, cal.nTok * E))));
      const gS = keep(new Mat(S, F));
      n.matmul(gate.type, gate.buf, gate.off, F, E, Xs.buf, 0, S, gS.buf, 0);
      const calBits = n.viewU8(cal.y[l]!, 0, cal.nTok * (F / 8));
      const cold = coldShare > 0 ? coldNeurons(n.viewU8(fit.y[l]!, 0, fit.nTok * (F / 8)), fit.nTok, F, coldShare) : undefined;
      let positives = 0;
      for (const b of calBits) positives += popcount8(b);
      let best: { r: number; cost: number; fc1: Uint8Array; fc2: Uint8Array; thr: Float32Array; kappa: number; kappaCold?: number; calRecall: number; calFlagged: number; unexplained: number } | undefined;
      for (let r = RANK_STEP; r <= maxRank; r += RANK_STEP) {
        const bytes = r * n.rowBytes(type, E) + F * n.rowBytes(type, r) + 4 * F;
        if (bytes > sizeBudget * layerFfnBytes && r > RANK_STEP) break;
        const q1 = n.alloc(r * n.rowBytes(type, E));
        const q2 = n.alloc(F * n.rowBytes(type, r));
        const f2 = n.alloc(F * r * 4);
        try {
          n.quantize(type, fc1All.buf, 0, q1, 0, r, E);
          const f2v = n.viewF32(f2, 0, F * r);
          const v = V.data;
          for (let i = 0; i < F; i++) for (let k = 0; k < r; k++) f2v[i * r + k] = v[k * F + i]!;
          n.quantize(type, f2, 0, q2, 0, F, r);
          const scores = (Xm: Mat): Mat => {
            const h = new Mat(Xm.rows, r);
            n.matmul(type, q1, 0, r, E, Xm.buf, 0, Xm.rows, h.buf, 0);
            const s = new Mat(Xm.rows, F);
            n.matmul(type, q2, 0, F, r, h.buf, 0, Xm.rows, s.buf, 0);
            h.free();
            return s;
          };
          // σ_i over the fitting sample
          const sS = scores(Xs);
          const sig = new Float64Array(F);
          const gs = gS.data;
          const ss = sS.data;
          let res = 0;
          let tot = 0;
          for (let t = 0; t < S; t++)
            for (let i = 0; i < F; i++) {
              const e = gs[t * F + i]! - ss[t * F + i]!;
              sig[i] += e * e;
              tot += gs[t * F + i]! * gs[t * F + i]!;
            }
          sS.free();
          for (let i = 0; i < F; i++) {
            res += sig[i]!;
            sig[i] = Math.sqrt(sig[i]! / S) + 1e-12;
          }
          const sC = scores(Xc);
          const sc = sC.data;
          // one margin κ for every neuron, or with a cold share a margin per group: the cheapest
          // pair reaching the same recall
          const two = cold ? coldMargins(groupScores(sc, sig, calBits, cal.nTok, F, cold), targetRecall, coldCost) : undefined;
          const kappa = two ? two.hot : oneMargin(sc, sig, calBits, cal.nTok, F, positives, targetRecall);
          const thr = Float32Array.from(sig, (s, i) => Math.fround(-(two && cold![i] ? two.cold : kappa) * s));
          const c = confusion(sc, thr, calBits, cal.nTok, F);
          sC.free();
          const flaggedPerToken = (c.tp + c.fp) / Math.max(1, cal.nTok);
          // every flagged neuron costs its gate row (a read, when it is not resident): the
          // smallest rank that flags ≤ maxRatio× the fired ones, else the most precise one
          const ratio = (c.tp + c.fp) / Math.max(1, c.tp + c.fn);
          const cost = ratio <= maxRatio ? r : (1 + ratio) * 1e9;
          if (!best || cost < best.cost) {
            best = {
              r,
              cost,
              fc1: Uint8Array.from(n.viewU8(q1, 0, r * n.rowBytes(type, E))),
              fc2: Uint8Array.from(n.viewU8(q2, 0, F * n.rowBytes(type, r))),
              thr,
              kappa,
              kappaCold: two?.cold,
              calRecall: c.tp / Math.max(1, c.tp + c.fn),
              calFlagged: flaggedPerToken / F,
              unexplained: tot > 0 ? res / tot : 0,
            };
          }
        } finally {
          n.discard(q1);
          n.discard(q2);
          n.discard(f2);
        }
      }
      const b = best!;
      const layer: LinearPredictor = { form: "linear", hidden: b.r, type, fc1: b.fc1, fc2: b.fc2, thresholds: b.thr };
      layers.push(layer);
      predictorBytes += b.fc1.length + b.fc2.length + 4 * F;
      // ---- the evaluation split --------------------------------------------------------
      const e = evaluateLinear(layer, ev, l, E, F);
      // the planner's cache model reads how its false positives spread over the neurons
      if (e.tokens > 0) layer.falseFlags = e.falseFlags;
      report.push({
        layer: l,
        hidden: b.r,
        params: b.r * (E + F),
        threshold: b.kappa,
        ...(b.kappaCold !== undefined ? { coldThreshold: b.kappaCold } : {}),
        posWeight: 0,
        loss: b.unexplained,
        trainRecall: b.calRecall,
        trainActiveFrac: b.calFlagged,
        recall: e.tp + e.fn > 0 ? e.tp / (e.tp + e.fn) : 1,
        precision: e.tp + e.fp > 0 ? e.tp / (e.tp + e.fp) : 1,
        predictedActiveFrac: (e.tp + e.fp) / Math.max(1, e.tokens * F),
        trueActiveFrac: (e.tp + e.fn) / Math.max(1, e.tokens * F),
        activeMean: fit.activeMean[l]!,
        trainMs: performance.now() - t0,
      });
    } finally {
      for (const m of owned) m.free();
    }
  }
  return { layers, report, predictorBytes, ffnBytes };
}

/** Confusion counts of a linear predictor over a collected split's layer (x̂ rows and labels). */
export function evaluateLinear(p: LinearPredictor, c: Collected, layer: number, E: number, F: number): Confusion {
  const n = native();
  const r = p.hidden;
  const q1 = n.alloc(p.fc1.length);
  const q2 = n.alloc(p.fc2.length);
  const h = n.alloc(Math.max(4, c.nTok * r * 4));
  const s = n.alloc(Math.max(4, c.nTok * F * 4));
  try {
    n.viewU8(q1, 0, p.fc1.length).set(p.fc1);
    n.viewU8(q2, 0, p.fc2.length).set(p.fc2);
    n.matmul(p.type, q1, 0, r, E, c.x[layer]!, 0, c.nTok, h, 0);
    n.matmul(p.type, q2, 0, F, r, h, 0, c.nTok, s, 0);
    return confusion(n.viewF32(s, 0, c.nTok * F), p.thresholds, n.viewU8(c.y[layer]!, 0, c.nTok * (F / 8)), c.nTok, F);
  } finally {
    for (const b of [q1, q2, h, s]) n.discard(b);
  }
}
