// The dense steps of a decode token — attention's four matvecs per layer and the classifier —
// timed on this machine for a model's own matrix shapes and weight types, once per shape set and
// thread count, and kept with the probe (machine.json `denseSteps`). The kernel table and the
// probe's matvec by shape are Q4_0 over 128 MiB: on the shipped model (F32, 256 wide, 9 MiB of
// attention and classifier in the last-level cache) they said 14.5 µs for a call that takes 4.0,
// and the planner predicted its resident token a third slow. Timing the model's own shapes
// replaces that extrapolation; the weights are a copy of one quantised matrix per shape (the rate
// does not depend on the values), in anonymous memory, so nothing of the model file is read.
import type { GGUFFile } from "../gguf/reader.js";
import { native } from "../native.js";
import { tensorTypeName } from "../gguf/types.js";
import type { DenseStepRate, MachineBounds } from "./machine.js";
import { PhaseMeter } from "./phase.js";

const ATTENTION = ["attn_q", "attn_k", "attn_v", "attn_output"] as const;

/** One matrix of a dense step: weight type, rows, columns. */
interface Matrix {
  type: number;
  rows: number;
  cols: number;
}

/** The matrices of a token's dense steps: per layer attention's four, then the classifier. */
export interface DenseShapes {
  nLayer: number;
  /** Per layer, q, k, v, output (as every layer of the model has). */
  attention: Matrix[];
  output: Matrix;
  /** What identifies these shapes (two models with the same shapes and types take the same time). */
  key: string;
}

/** The dense matrices of `file` (a model or a pack: the same tensor names), or undefined when layer 0 lacks one. */
export function denseShapes(file: GGUFFile, nLayer: number): DenseShapes | undefined {
  const matrix = (name: string): Matrix | undefined => {
    const t = file.tensorsByName.get(name);
    return t && t.ne.length === 2 ? { type: t.type, rows: t.ne[1]!, cols: t.ne[0]! } : undefined;
  };
  const attention = ATTENTION.map((n) => matrix(`blk.0.${n}.weight`));
  const output = matrix(file.tensorsByName.has("output.weight") ? "output.weight" : "token_embd.weight");
  if (!output || attention.some((a) => !a)) return undefined;
  const name = (m: Matrix) => `${tensorTypeName(m.type)} ${m.rows}×${m.cols}`;
  return { nLayer, attention: attention as Matrix[], output, key: `${nLayer} × (${(attention as Matrix[]).map(name).join(", ")}); ${name(output)}` };
}

/**
 * Time the dense steps of `shapes` on the pool's threads: every layer's four matvecs in turn over
 * a copy of the model's attention bytes (as a token touches them), then the classifier; passes for
 * about `seconds` after a warm-up of a third of it, each step the median of its passes.
 */
export function measureDenseSteps(shapes: DenseShapes, seconds = 0.3): Omit<DenseStepRate, "measuredAt"> {
  const n = native();
  const { nLayer, attention, output } = shapes;
  const bytes = (m: Matrix) => n.rowBytes(m.type, m.cols) * m.rows;
  const layerBytes = attention.reduce((a, m) => a + bytes(m), 0);
  const widest = Math.max(output.cols, ...attention.map((m) => m.cols));
  const tallest = Math.max(output.rows, ...attention.map((m) => m.rows));
  const weights = n.alloc(nLayer * layerBytes + bytes(output));
  const x = n.alloc(widest * 4);
  const y = n.alloc(tallest * 4);
  try {
    // each matrix of layer 0 quantised from uniform values, then copied to every layer
    const src = n.alloc(Math.min(64, tallest) * widest * 4);
    try {
      n.fillUniform(src, 0, Math.min(64, tallest) * widest, 7n, 1);
      n.fillUniform(x, 0, widest, 8n, 1);
      let off = 0;
      for (const m of [...attention, output]) {
        const rb = n.rowBytes(m.type, m.cols);
        for (let r = 0; r < m.rows; r += 64) n.quantize(m.type, src, 0, weights, off + r * rb, Math.min(64, m.rows - r), m.cols);
        off += bytes(m);
        if (m === attention.at(-1)) off = nLayer * layerBytes; // the classifier after every layer
      }
      for (let l = 1; l < nLayer; l++) n.copy(weights, l * layerBytes, weights, 0, layerBytes);
    } finally {
      n.free(src);
    }
    const attend = () => {
      let off = 0;
      for (let l = 0; l < nLayer; l++)
        for (const m of attention) {
          n.matvec(m.type, weights, off, m.rows, m.cols, x, 0, y, 0);
          off += bytes(m);
        }
    };
    const classify = () => n.matvec(output.type, weights, nLayer * layerBytes, output.rows, output.cols, x, 0, y, 0);
    const a: number[] = [];
    const o: number[] = [];
    const warm = performance.now();
    while (performance.now() - warm < (seconds * 1000) / 3) {
      attend();
      classify();
    }
    const t0 = performance.now();
    while (performance.now() - t0 < seconds * 1000 || a.length < 3) {
      const t1 = performance.now();
      attend();
      const t2 = performance.now();
      classify();
      a.push((t2 - t1) * 1000);
      o.push((performance.now() - t2) * 1000);
    }
    const median = (v: number[]) => [...v].sort((p, q) => p - q)[(v.length - 1) >> 1]!;
    return { key: shapes.key, threads: n.getThreads(), attentionUs: median(a), outputUs: median(o) };
  } finally {
    for (const id of [weights, x, y]) n.free(id);
  }
}

/**
 * `shapes` timed now and brought to the probe's speed: when the probe has working-set rates, a
 * phase check (phase.ts) right after says how fast the machine ran, and the µs are scaled by it.
 */
export function timeDenseSteps(m: MachineBounds, shapes: DenseShapes, seconds = 0.3): DenseStepRate {
  const t = measureDenseSteps(shapes, seconds);
  let phase = 1;
  if (m.workingSets?.length) {
    const n = native();
    const bytes = shapes.nLayer * shapes.attention.reduce((a, x) => a + n.rowBytes(x.type, x.cols) * x.rows, 0) + n.rowBytes(shapes.output.type, shapes.output.cols) * shapes.output.rows;
    const meter = new PhaseMeter(m, bytes);
    try {
      phase = meter.measure(seconds / 2).memory;
    } finally {
      meter.dispose();
    }
  }
  return { ...t, attentionUs: t.attentionUs * phase, outputUs: t.outputUs * phase, measuredAt: new Date().toISOString() };
}
