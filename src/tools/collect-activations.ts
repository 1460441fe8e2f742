// Collecting what predictors learn from: per layer, the FFN input of every token of a corpus
// and which neurons fired, through the dense forward pass.
//
// Input x is the residual stream entering the FFN, i.e. BEFORE ffn_norm: in forward.ts the
// onFfnActivations hook fires after gatedAct and before `x += W_down·hb`, so at that moment
// rs.x still holds exactly the FFN block's input residual, rs.xb its ffn_norm output and rs.hb
// the gated activations. Label: neuron i is active for a token when hb[i] != 0 (for ReGLU
// exactly relu(gate)·up ≠ 0).
import type { Model } from "../api/model.js";
import { native } from "../native.js";

/** Per-layer activations collected for training / evaluation, in native buffers. */
export interface Collected {
  nTok: number;
  nEmbd: number;
  nFF: number;
  nLayer: number;
  /** per layer: native buffer id of x (nTok, nEmbd) f32: the residual before ffn_norm, or its output (input "xb") */
  x: number[];
  /** per layer: native buffer id of label bits (nTok, nFF/8), bit i LSB-first = neuron i active */
  y: number[];
  /** per layer: mean active neurons per token */
  activeMean: number[];
  dispose(): void;
}

/** Collect (x before ffn_norm — or with input "xb" the ffn_norm output —, active bits) per layer over `tokens`, in fresh-context windows. */
export function collectActivations(
  model: Model,
  tokens: readonly number[],
  opts: { window?: number; input?: "x" | "xb"; onProgress?: (done: number, total: number) => void; signal?: AbortSignal } = {},
): Collected {
  const { nLayer, nFF, nEmbd } = model.config;
  if (nFF % 8 !== 0) throw new Error(`collectActivations: nFF ${nFF} is not a multiple of 8`);
  const window = opts.window ?? 256;
  const n = native();
  const nTok = tokens.length;
  const rowBytes = nFF / 8;
  const x: number[] = [];
  const y: number[] = [];
  const dispose = () => {
    for (const id of [...x, ...y]) n.free(id);
    x.length = 0;
    y.length = 0;
  };
  const active = new Float64Array(nLayer);
  try {
    for (let l = 0; l < nLayer; l++) {
      x.push(n.alloc(Math.max(4, nTok * nEmbd * 4)));
      y.push(n.alloc(Math.max(1, nTok * rowBytes)));
    }
    const s = model.createSession({ contextSize: window, batchSize: Math.min(window, 256) });
    try {
      let base = 0; // index of the first token of the current evaluate() batch
      for (let w0 = 0; w0 < nTok; w0 += window) {
        opts.signal?.throwIfAborted();
        const win = tokens.slice(w0, w0 + window);
        s.reset();
        base = w0;
        s.evaluate(win, false, {
          onFfnActivations: (layer, rs, nt) => {
            n.copy(x[layer]!, base * nEmbd * 4, rs.buf, opts.input === "xb" ? rs.xb : rs.x, nt * nEmbd * 4);
            const hb = n.viewF32(rs.buf, rs.hb, nt * nFF);
            const yb = n.viewU8(y[layer]!, base * rowBytes, nt * rowBytes);
            let cnt = 0;
            for (let t = 0; t < nt; t++) {
              const r = t * nFF;
              const o = t * rowBytes;
              for (let b = 0; b < rowBytes; b++) {
                let v = 0;
                for (let k = 0; k < 8; k++) if (hb[r + 8 * b + k] !== 0) v |= 1 << k;
                yb[o + b] = v;
                if (v) cnt += popcount8(v);
              }
            }
            active[layer] += cnt;
            if (layer === nLayer - 1) base += nt; // next batch of this window
          },
        });
        opts.onProgress?.(Math.min(w0 + window, nTok), nTok);
      }
    } finally {
      s.dispose();
    }
  } catch (e) {
    dispose();
    throw e;
  }
  return { nTok, nEmbd, nFF, nLayer, x, y, activeMean: Array.from(active, (a) => a / Math.max(1, nTok)), dispose };
}

export function popcount8(v: number): number {
  v = v - ((v >> 1) & 0x55);
  v = (v & 0x33) + ((v >> 2) & 0x33);
  return (v + (v >> 4)) & 0x0f;
}

