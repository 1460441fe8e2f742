// The dense steps of a decode token — attention's four matvecs per layer, the classifier, and a
// pack's trained predictor (its two matrices and the flagging per layer) — timed on this machine
// for a model's own matrix shapes and weight types, once per shape set and thread count, and kept
// with the probe (machine.json `denseSteps`). The kernel table and the probe's matvec by shape
// are Q4_0 over 128 MiB: on the shipped model (F32, 256 wide, 9 MiB of attention and classifier
// in the last-level cache) they said 14.5 µs for a call that takes 4.0, and the planner predicted
// its resident token a third slow. Timing the model's own shapes replaces that extrapolation. The
// predictor's short rows (the 7B's linear predictor: 11,008 rows of 64 Q8_0 weights) go through a
// blocked kernel the probe does not measure: from its bytes the model said 1.6 ms a 7B token,
// timed here it takes 2.5, inside a decode 3.9. The weights are a copy of one quantised matrix per
// shape (the rate does not depend on the values), in anonymous memory, so nothing of the model
// file is read.
//
// A pack's steps are timed layer by layer as its resident decode runs them: attention, the
// predictor, then the sparse FFN's gathers over the neurons a token flags and fires on average
// (the profile's rates), on slots laid out as the neuron cache's. Timed back to back without the
// FFN between layers, s-230m's attention took 1.17–1.27 ms where its decode spent 1.46–1.52; with
// the gathers between, 1.29–1.39 (its predictor 0.34 → 0.38, its classifier 0.42 → 0.47): the
// gathers' scattered rows slow the streams after them (docs/benchmarks.md, "2026-11-28").
import type { GGUFFile } from "../gguf/reader.js";
import { GateKind, GGMLType, native } from "../native.js";
import { tensorTypeName } from "../gguf/types.js";
import type { Pack } from "../sparse/pack/format.js";
import { classifierTensor, type ModelConfig } from "../model/config.js";
import { DENSE_STEP_TIMES, type DenseStepRate } from "./machine.js";
import { profileRates } from "./cache-model.js";
import { nonNegativeLeastSquares } from "./least-squares.js";
import { lcg } from "../util/lcg.js";
import { median } from "../util/median.js";

const ATTENTION = ["attn_q", "attn_k", "attn_v", "attn_output"] as const;

/** One matrix of a dense step: weight type, rows, columns. */
interface Matrix {
  type: number;
  rows: number;
  cols: number;
}

/** A pack's trained predictor per layer: fc1 (hidden, n_embd), fc2 (n_ff, hidden); mlp: F32, fc2·relu(fc1·x), linear: fc2·fc1·x̂. */
interface PredictorShape {
  form: "mlp" | "linear";
  fc1: Matrix;
  fc2: Matrix;
}

/**
 * A pack's sparse FFN per layer as a resident token runs it: `flagged` gate rows gathered, `fired`
 * up rows gathered and down rows accumulated (the profile's mean per layer), over slots of a gate,
 * an up and a down row each (the neuron cache's layout).
 */
export interface FfnShape {
  gateType: number;
  upType: number;
  downType: number;
  /** n_embd */
  cols: number;
  nFF: number;
  flagged: number;
  fired: number;
}

/** What the shapes need of a model's configuration: its layers and attention heads. */
export type DenseConfig = Pick<ModelConfig, "nLayer" | "nHead" | "nHeadKv" | "headDim">;

/** The matrices of a token's dense steps: per layer attention's four, then the classifier. */
export interface DenseShapes {
  nLayer: number;
  /** Attention's heads: its scores and sums over the KV cache, timed at POSITIONS. */
  nHead: number;
  nHeadKv: number;
  headDim: number;
  /** Per layer, q, k, v, output (as every layer of the model has). */
  attention: Matrix[];
  output: Matrix;
  /** Per layer, the pack's predictor (layer 0's shapes; a pack's predictor has one rank for all layers or is timed at layer 0's). */
  predictor?: PredictorShape;
  /** Per layer, between the predictor and the next layer: the sparse FFN's gathers (a pack with a trained predictor). */
  ffn?: FfnShape;
  /** What identifies these shapes (two models with the same shapes and types take the same time). */
  key: string;
}

/**
 * The dense matrices of `file` (a model or a pack: the same tensor names), or undefined when layer
 * 0 lacks one; with `predictorForm` (a pack with trained predictors), blk.0.fc1/fc2 too; with
 * `ffn`, the sparse FFN timed between layers.
 */
export function denseShapes(file: GGUFFile, cfg: DenseConfig, predictorForm?: "mlp" | "linear", ffn?: FfnShape): DenseShapes | undefined {
  const { nLayer, nHead, nHeadKv, headDim } = cfg;
  const matrix = (name: string): Matrix | undefined => {
    const t = file.tensorsByName.get(name);
    return t && t.ne.length === 2 ? { type: t.type, rows: t.ne[1]!, cols: t.ne[0]! } : undefined;
  };
  const attention = ATTENTION.map((n) => matrix(`blk.0.${n}.weight`));
  const output = matrix(classifierTensor(file));
  if (!output || attention.some((a) => !a)) return undefined;
  const name = (m: Matrix) => `${tensorTypeName(m.type)} ${m.rows}×${m.cols}`;
  const fc1 = matrix("blk.0.fc1.weight");
  const fc2 = matrix("blk.0.fc2.weight");
  // the mlp form runs on F32 weights only (the pack's format)
  const usable = fc1 && fc2 && (predictorForm === "linear" || (fc1.type === GGMLType.F32 && fc2.type === GGMLType.F32));
  const predictor = predictorForm && usable ? { form: predictorForm, fc1: fc1!, fc2: fc2! } : undefined;
  const ffnKey = ffn ? `; ffn ${ffn.flagged} flagged, ${ffn.fired} fired of ${ffn.nFF} (${[ffn.gateType, ffn.upType, ffn.downType].map(tensorTypeName).join("/")}, ${ffn.cols} wide)` : "";
  const key = `${nLayer} × (${(attention as Matrix[]).map(name).join(", ")}; ${nHead} heads of ${headDim}, ${nHeadKv} KV); ${name(output)}` + (predictor ? `; predictor ${predictor.form} ${name(predictor.fc1)}, ${name(predictor.fc2)}` : "") + ffnKey;
  return { nLayer, nHead, nHeadKv, headDim, attention: attention as Matrix[], output, predictor, ...(ffn && { ffn }), key };
}

/**
 * The dense shapes a decode of `pack` runs: its attention, classifier and trained predictor. The
 * time model, the planner's timing at load and the calibration all key machine.json's
 * `denseSteps` by this, so one derivation keeps them agreeing (a key that differed would fall
 * back to the kernel table silently).
 */
export function packDenseShapes(pack: Pack): DenseShapes | undefined {
  const form = pack.predictor?.[0]?.form;
  return denseShapes(pack.file, pack.config, form, form ? packFfnShape(pack) : undefined);
}

/** A pack's sparse FFN per layer at its trained predictor's mean rates (cache-model.ts profileRates). */
function packFfnShape(pack: Pack): FfnShape {
  const { nLayer, nFF, nEmbd } = pack.config;
  const r = profileRates(pack);
  const perLayer = (x: number) => Math.max(1, Math.min(nFF, Math.round(x / nLayer)));
  return { gateType: pack.gateType, upType: pack.upType, downType: pack.downType, cols: nEmbd, nFF, flagged: perLayer(r.flaggedPerToken), fired: Math.min(perLayer(r.flaggedPerToken), perLayer(r.firedPerToken)) };
}

/** At most this many bytes of FFN slots are allocated to time the gathers (a 7B's 32 × 11,008 slots would take 2.4 GB; 256 MiB is far beyond any last-level cache). */
const FFN_SLOTS_BYTES = 256 * 2 ** 20;

/**
 * Time the dense steps of `shapes` on the pool's threads, layer by layer as a token runs them:
 * its four attention matvecs over a copy of the model's attention bytes with its scores and sums
 * over a KV cache between v and the output (at POSITIONS in turn), its predictor, its sparse FFN's
 * gathers; then the classifier. Passes for about `seconds` after a warm-up of a third of it, each
 * step the median of its passes (the scores: a line through their medians by position).
 */
export function measureDenseSteps(shapes: DenseShapes, seconds = 0.3): Omit<DenseStepRate, "measuredAt"> {
  const n = native();
  const { nLayer, attention, output, predictor, ffn } = shapes;
  const bytes = (m: Matrix) => n.rowBytes(m.type, m.cols) * m.rows;
  const layerBytes = attention.reduce((a, m) => a + bytes(m), 0);
  const predictorLayer = predictor ? [predictor.fc1, predictor.fc2] : [];
  const predictorBytes = predictorLayer.reduce((a, m) => a + bytes(m), 0);
  const all = [...attention, output, ...predictorLayer];
  const widest = Math.max(...all.map((m) => m.cols), ffn?.cols ?? 0);
  const tallest = Math.max(...all.map((m) => m.rows), ffn?.nFF ?? 0);
  // (layer, attention) then the classifier then (layer, predictor), as back to back as in a model
  const outputAt = nLayer * layerBytes;
  const predictorAt = outputAt + bytes(output);
  const weights = n.alloc(predictorAt + nLayer * predictorBytes);
  const x = n.alloc(widest * 4);
  const y = n.alloc(Math.max(tallest, shapes.nHead * shapes.headDim) * 4);
  const h = n.alloc(tallest * 4);
  const flags = n.alloc(tallest * 4);
  const thresholds = n.alloc(tallest * 4); // 0: about half the neurons flagged
  const ids = [weights, x, y, h, flags, thresholds];
  try {
    // each matrix of layer 0 quantised from uniform values, then copied to every layer
    const src = n.alloc(Math.min(64, tallest) * widest * 4);
    try {
      n.fillUniform(src, 0, Math.min(64, tallest) * widest, 7n, 1);
      n.fillUniform(x, 0, widest, 8n, 1);
      const place = (m: Matrix, off: number) => {
        const rb = n.rowBytes(m.type, m.cols);
        for (let r = 0; r < m.rows; r += 64) n.quantize(m.type, src, 0, weights, off + r * rb, Math.min(64, m.rows - r), m.cols);
        return off + bytes(m);
      };
      attention.reduce((off, m) => place(m, off), 0);
      place(output, outputAt);
      predictorLayer.reduce((off, m) => place(m, off), predictorAt);
      for (let l = 1; l < nLayer; l++) {
        n.copy(weights, l * layerBytes, weights, 0, layerBytes);
        if (predictor) n.copy(weights, predictorAt + l * predictorBytes, weights, predictorAt, predictorBytes);
      }
    } finally {
      n.free(src);
    }
    const gathers = ffn && ffnGathers(ffn, nLayer, ids);
    const kv = kvCache(shapes, ids);
    const steps = { attention: 0, scores: 0, predictor: 0, gate: 0, upDown: 0 };
    let at = performance.now();
    /** µs since the last mark, to `step` */
    const mark = (step: keyof typeof steps) => {
      const now = performance.now();
      steps[step] += now - at;
      at = now;
    };
    // what FfnSteps.predict does per layer: linear, two matvecs and the flagging; mlp, the fused
    // scores and the flagging loop on the calling thread
    const scores = n.viewF32(y, 0, tallest);
    const flagged = n.viewI32(flags, 0, tallest);
    const predict = (l: number) => {
      if (!predictor) return;
      const { fc1, fc2 } = predictor;
      const off = predictorAt + l * predictorBytes;
      if (predictor.form === "linear") {
        n.matvec(fc1.type, weights, off, fc1.rows, fc1.cols, x, 0, h, 0);
        n.matvec(fc2.type, weights, off + bytes(fc1), fc2.rows, fc2.cols, h, 0, y, 0);
        n.flagAbove(y, 0, thresholds, 0, fc2.rows, flags, 0);
      } else {
        n.predictorScores(weights, off, weights, off + bytes(fc1), fc1.cols, fc1.rows, fc2.rows, x, 0, 1, y, 0);
        let c = 0;
        for (let p = 0; p < fc2.rows; p++) if (scores[p]! > 0) flagged[c++] = p;
      }
    };
    const token = (position: number) => {
      at = performance.now();
      let off = 0;
      for (let l = 0; l < nLayer; l++) {
        attention.forEach((m, i) => {
          if (i === 3) {
            // between v and the output matvec, as forward() runs it
            mark("attention");
            kv.attend(l, position, y);
            mark("scores");
          }
          n.matvec(m.type, weights, off, m.rows, m.cols, x, 0, y, 0);
          off += bytes(m);
        });
        mark("attention");
        predict(l);
        mark("predictor");
        if (gathers) {
          gathers.gate(l, x);
          mark("gate");
          gathers.upDown(l, x);
          mark("upDown");
        }
      }
    };
    const classify = () => n.matvec(output.type, weights, outputAt, output.rows, output.cols, x, 0, y, 0);
    const passes: Record<keyof typeof steps | "output", number[]> = { attention: [], scores: [], predictor: [], gate: [], upDown: [], output: [] };
    const warm = performance.now();
    for (let i = 0; performance.now() - warm < (seconds * 1000) / 3; i++) {
      token(POSITIONS[i % POSITIONS.length]!);
      classify();
    }
    // each pass at the next of POSITIONS: the scores' passes grouped by position
    const t0 = performance.now();
    for (let i = 0; performance.now() - t0 < seconds * 1000 || i < 3 * POSITIONS.length; i++) {
      for (const k of Object.keys(steps) as (keyof typeof steps)[]) steps[k] = 0;
      token(POSITIONS[i % POSITIONS.length]!);
      const t1 = performance.now();
      classify();
      passes.output.push((performance.now() - t1) * 1000);
      for (const k of Object.keys(steps) as (keyof typeof steps)[]) passes[k].push(steps[k] * 1000);
    }
    // each step the lower middle of its passes (not util/median's upper middle: kept as timed before)
    const lowerMedian = (v: number[]) => [...v].sort((p, q) => p - q)[(v.length - 1) >> 1]!;
    // the scores' cost: a line through the medians at each position (least squares, both ≥ 0)
    const { w } = nonNegativeLeastSquares(
      POSITIONS.map((p) => [1, p]),
      POSITIONS.map((_, j) => lowerMedian(passes.scores.filter((_, i) => i % POSITIONS.length === j))),
    );
    return {
      key: shapes.key,
      threads: n.getThreads(),
      attentionUs: lowerMedian(passes.attention),
      scoresUs: w[0]!,
      positionUs: w[1]!,
      outputUs: lowerMedian(passes.output),
      ...(predictor ? { predictorUs: lowerMedian(passes.predictor) } : {}),
      ...(ffn ? { gateUs: lowerMedian(passes.gate), upDownUs: lowerMedian(passes.upDown) } : {}),
    };
  } finally {
    for (const id of ids) n.free(id);
  }
}

/**
 * The context positions a token's attention is timed at, one per pass in turn: its cost is the line
 * through them. Timed alone, back to back, s-230m's KV cache stays in the last-level cache at the
 * first positions (64: 0.16 ms a token) and not at the last (288: 1.13 ms); between the layers'
 * other steps, as in a decode, it is read from memory at every position.
 */
const POSITIONS = [16, 96, 176, 256] as const;

/** Every layer's F16 KV cache (as the decoders keep it) over POSITIONS' last, filled from uniform values; `attend` runs n.attention of a layer's query at a position into `out`. Buffers it allocates are added to `ids`. */
function kvCache(shapes: DenseShapes, ids: number[]) {
  const n = native();
  const { nLayer, nHead, nHeadKv, headDim } = shapes;
  const ctx = POSITIONS[POSITIONS.length - 1]! + 1;
  const rowLen = nHeadKv * headDim;
  const layerBytes = Math.ceil((ctx * rowLen * 2) / 64) * 64;
  const kv = n.alloc(2 * nLayer * layerBytes);
  ids.push(kv);
  const rows = n.alloc(ctx * rowLen * 4);
  try {
    n.fillUniform(rows, 0, ctx * rowLen, 11n, 1);
    for (let c = 0; c < 2 * nLayer; c++) n.kvStore(GGMLType.F16, kv, c * layerBytes, ctx, rowLen, 0, ctx, rows, 0);
  } finally {
    n.free(rows);
  }
  const q = n.alloc(nHead * headDim * 4);
  ids.push(q);
  n.fillUniform(q, 0, nHead * headDim, 12n, 1);
  return {
    attend: (l: number, position: number, out: number) => n.attention(GGMLType.F16, q, 0, kv, 2 * l * layerBytes, kv, (2 * l + 1) * layerBytes, ctx, nHead, nHeadKv, headDim, position, 1, out, 0),
  };
}

/**
 * The sparse FFN's gathers of a layer on copies: slots of a gate, an up and a down row each (at
 * most FFN_SLOTS_BYTES of them: each layer its own nFF slots when they fit, else slots anywhere),
 * a fixed random choice per layer of `flagged` slots whose gate rows are gathered and `fired` of
 * them whose up rows are gathered and down rows accumulated, in ascending order as the decoder
 * runs them. Buffers it allocates are added to `ids` (freed by the caller).
 */
function ffnGathers(f: FfnShape, nLayer: number, ids: number[]) {
  const n = native();
  const row = (type: number) => n.rowBytes(type, f.cols);
  const slotBytes = row(f.gateType) + row(f.upType) + row(f.downType);
  const slots = Math.max(f.nFF, Math.min(nLayer * f.nFF, Math.floor(FFN_SLOTS_BYTES / slotBytes)));
  const arena = n.alloc(slots * slotBytes);
  ids.push(arena);
  // 64 slots quantised from uniform values, then doubled to fill the arena
  const first = Math.min(64, slots);
  const src = n.alloc(first * f.cols * 4);
  try {
    n.fillUniform(src, 0, first * f.cols, 9n, 1);
    for (let s = 0; s < first; s++) {
      let off = s * slotBytes;
      for (const type of [f.gateType, f.upType, f.downType]) {
        n.quantize(type, src, s * f.cols * 4, arena, off, 1, f.cols);
        off += row(type);
      }
    }
  } finally {
    n.free(src);
  }
  for (let done = first; done < slots; done *= 2) n.copy(arena, done * slotBytes, arena, 0, Math.min(done, slots - done) * slotBytes);
  // per layer: flagged slots ascending, then its fired ones ascending (a fixed LCG: the same choice every time)
  const perLayer = f.flagged + f.fired;
  const idx = n.alloc(nLayer * perLayer * 4);
  ids.push(idx);
  const iv = n.viewI32(idx, 0, nLayer * perLayer);
  const next = lcg();
  const random = (k: number) => Math.floor((next() / 2 ** 32) * k);
  const own = slots >= nLayer * f.nFF;
  const span = own ? f.nFF : slots;
  for (let l = 0; l < nLayer; l++) {
    const base = own ? l * f.nFF : 0;
    const chosen = new Set<number>();
    while (chosen.size < f.flagged) chosen.add(base + random(span));
    const list = [...chosen];
    for (let i = list.length - 1; i > 0; i--) {
      const j = random(i + 1);
      [list[i], list[j]] = [list[j]!, list[i]!];
    }
    const fired = list.slice(0, f.fired).sort((a, b) => a - b);
    iv.set(list.sort((a, b) => a - b), l * perLayer);
    iv.set(fired, l * perLayer + f.flagged);
  }
  const g = n.alloc(f.nFF * 4);
  const u = n.alloc(f.nFF * 4);
  const act = n.alloc(f.nFF * 4);
  const o = n.alloc(f.cols * 4);
  ids.push(g, u, act, o);
  n.fillUniform(g, 0, f.nFF, 10n, 1);
  const upAt = row(f.gateType);
  const downAt = upAt + row(f.upType);
  return {
    gate: (l: number, x: number) => n.matvecRows(f.gateType, arena, 0, slots, f.cols, idx, l * perLayer * 4, f.flagged, x, 0, g, 0, slotBytes),
    upDown: (l: number, x: number) => {
      const at = (l * perLayer + f.flagged) * 4;
      n.matvecRows(f.upType, arena, upAt, slots, f.cols, idx, at, f.fired, x, 0, u, 0, slotBytes);
      n.gatedAct(GateKind.ReGLU, g, 0, u, 0, act, 0, f.fired);
      n.axpyRows(f.downType, arena, downAt, slots, f.cols, idx, at, f.fired, act, 0, o, 0, slotBytes);
    },
  };
}

/**
 * `shapes` timed now, as they run: for a second, each step the median of its passes. Not scaled
 * by a phase check to the probe's speed (as once): on the 7B, four timings a minute apart read
 * attention at 41.6–43.8 ms a token and scaled by their phase checks 33–48, where decoding traced
 * it at 40–44. The phase check of half a second moved more than the machine did.
 */
export function timeDenseSteps(shapes: DenseShapes, seconds = 1): DenseStepRate {
  return { ...measureDenseSteps(shapes, seconds), measuredAt: new Date().toISOString() };
}

/**
 * Dense steps timed in passes, as KernelSampler times the kernels: each model's steps timed once a
 * pass (a key given twice, once), and each step's rate the median of its passes; a phase of the
 * machine that lasts a pass moves one sample, not the rate.
 */
export class DenseStepSampler {
  private readonly shapes: DenseShapes[];
  /** Per model (its shapes' key), what each pass measured. */
  readonly samples = new Map<string, DenseStepRate[]>();

  constructor(
    shapes: readonly DenseShapes[],
    readonly seconds = 0.3,
  ) {
    this.shapes = [...new Map(shapes.map((s) => [s.key, s])).values()];
  }

  pass(): void {
    for (const s of this.shapes) this.samples.set(s.key, [...(this.samples.get(s.key) ?? []), timeDenseSteps(s, this.seconds)]);
  }

  /** Each model's steps, each the median of its passes (the upper middle of an even count); the first pass's other fields. */
  rates(): DenseStepRate[] {
    return [...this.samples.values()].map((d) => ({ ...d[0]!, ...Object.fromEntries(DENSE_STEP_TIMES.map((k) => [k, d[0]![k] === undefined ? undefined : median(d.map((x) => x[k]!))])) }));
  }
}
