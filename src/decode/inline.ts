// The sparse FFN of one token and layer, top to bottom:
//
//   predict   P = { p : (fc2 · relu(fc1 · x))[p] > threshold }   (oracle: every neuron)
//   phase 1   gate rows of P resident (cache: pinned rows, hot clusters or single cold gate blocks)
//             g[k] = W_gate[P[k]] · xb
//   phase 2   A = { k : relu(g[k]) != 0 }; up+down of A resident (cold: one more block each)
//             u[k] = W_up[A[k]] · xb;  h[k] = act(g[k]) · u[k]   (dReLU: relu(g)·relu(u))
//             o = Σ_k h[k] · W_down[:, A[k]]   (k ascending in pack order)
//
// P and A are processed in ascending pack order, in chunks as large as the cache allows; the
// down projection accumulates in that order whatever the chunking, so the output is
// bit-identical for any budget, I/O backend or thread count. The gate dot products use the
// same kernels (and Q8_0 activation rounding) as the dense matvec, so the oracle fires exactly
// the neurons the dense FFN fires.
import { closeSync, openSync } from "node:fs";
import { GateKind, native, type NativeAddon } from "../native.js";
import type { RunState } from "../model/forward.js";
import type { SparseFfn } from "../model/weights.js";
import type { NeuronCache } from "../sparse/cache/neuron-cache.js";
import type { Pack } from "../sparse/pack/format.js";
import { readIntoNative } from "../sparse/read-native.js";

export type PredictorMode = "trained" | "oracle";

export interface LayerFfnStats {
  /** Neurons predicted active (gate computed) and neurons that fired (relu(gate) != 0), summed over tokens. */
  predicted: number;
  fired: number;
  tokens: number;
}

export class SparseFfnEngine implements SparseFfn {
  readonly stats: LayerFfnStats[];
  private readonly n: NativeAddon;
  private readonly nFF: number;
  private readonly dim: number;
  readonly kind: number;
  // scratch (one native buffer): scores, P, slots, gate values, active slots, active positions, g/u/h of A
  readonly scratch: number;
  readonly off: { scores: number; P: number; slots: number; gate: number; aSlots: number; aPos: number; gA: number; uA: number; hA: number };
  private readonly v: { scores: Float32Array; P: Int32Array; slots: Int32Array; gate: Float32Array; aSlots: Int32Array; aPos: Int32Array; gA: Float32Array };
  readonly pred?: { buf: number; fc1: number[]; fc2: number[]; hidden: number[]; threshold: number[] };
  /** Called after each token's last layer (memory sampling). */
  onToken?: () => void;
  /** Evict predicted-but-silent cold neurons first (NeuronCache.demoteSilent). */
  demote = true;

  constructor(
    readonly pack: Pack,
    readonly cache: NeuronCache,
    readonly mode: PredictorMode,
  ) {
    const n = (this.n = native());
    const cfg = pack.config;
    this.nFF = cfg.nFF;
    this.dim = cfg.nEmbd;
    if (cfg.activation !== "reglu" && cfg.activation !== "drelu") {
      throw new Error(`${pack.path}: sparse decoding needs a ReLU-family FFN (ReGLU or dReLU); this model uses ${cfg.activation}`);
    }
    this.kind = cfg.activation === "reglu" ? GateKind.ReGLU : GateKind.dReLU;
    const F = this.nFF * 4;
    const names = ["scores", "P", "slots", "gate", "aSlots", "aPos", "gA", "uA", "hA"] as const;
    this.scratch = n.alloc(names.length * F);
    this.off = Object.fromEntries(names.map((k, i) => [k, i * F])) as typeof this.off;
    this.v = {
      scores: n.viewF32(this.scratch, this.off.scores, this.nFF),
      P: n.viewI32(this.scratch, this.off.P, this.nFF),
      slots: n.viewI32(this.scratch, this.off.slots, this.nFF),
      gate: n.viewF32(this.scratch, this.off.gate, this.nFF),
      aSlots: n.viewI32(this.scratch, this.off.aSlots, this.nFF),
      aPos: n.viewI32(this.scratch, this.off.aPos, this.nFF),
      gA: n.viewF32(this.scratch, this.off.gA, this.nFF),
    };
    if (mode === "trained") {
      if (!pack.predictor) {
        n.free(this.scratch);
        throw new Error(
          `${pack.path}: the pack has no predictors (blk.N.fc1.weight / blk.N.fc2.weight); train them with \`neuronpipe train-predictor\` and pack again, or run with the oracle predictor`,
        );
      }
      // straight from the file into native memory (no JS copy: the plan counts these bytes once)
      const { nEmbd, nFF } = cfg;
      let bytes = 0;
      for (const l of pack.predictor) bytes += l.hidden * (nEmbd + nFF) * 4;
      const buf = n.alloc(bytes);
      const fc1: number[] = [];
      const fc2: number[] = [];
      const fd = openSync(pack.path, "r");
      try {
        let o = 0;
        for (const [i, l] of pack.predictor.entries()) {
          fc1.push(o);
          readIntoNative(fd, pack.path, `tensor blk.${i}.fc1.weight`, l.fc1Offset, l.hidden * nEmbd * 4, buf, o);
          o += l.hidden * nEmbd * 4;
          fc2.push(o);
          readIntoNative(fd, pack.path, `tensor blk.${i}.fc2.weight`, l.fc2Offset, nFF * l.hidden * 4, buf, o);
          o += nFF * l.hidden * 4;
        }
      } catch (e) {
        closeSync(fd);
        n.free(buf);
        n.free(this.scratch);
        throw e;
      }
      closeSync(fd);
      this.pred = { buf, fc1, fc2, hidden: pack.predictor.map((l) => l.hidden), threshold: pack.predictor.map((l) => l.threshold) };
    }
    this.stats = Array.from({ length: cfg.nLayer }, () => ({ predicted: 0, fired: 0, tokens: 0 }));
  }

  /** Native buffers the engine holds (memory accounting). */
  get buffers(): number[] {
    return this.pred ? [this.scratch, this.pred.buf] : [this.scratch];
  }

  run(layer: number, rs: RunState, nTok: number): void {
    const bytes = this.dim * 4;
    for (let t = 0; t < nTok; t++) this.token(layer, rs.buf, rs.x + t * bytes, rs.xb + t * bytes, rs.o + t * bytes);
    if (layer === this.pack.config.nLayer - 1) this.onToken?.();
  }

  /** o = FFN(xb) for one token; x (the residual before ffn_norm) feeds the predictor. */
  private token(layer: number, buf: number, xOff: number, xbOff: number, oOff: number): void {
    const { n, nFF, dim, pack, cache, v, off } = this;
    const st = this.stats[layer]!;
    st.tokens++;

    // predict
    let nP = 0;
    if (this.pred) {
      const pr = this.pred;
      n.predictorScores(pr.buf, pr.fc1[layer]!, pr.buf, pr.fc2[layer]!, dim, pr.hidden[layer]!, nFF, buf, xOff, 1, this.scratch, off.scores);
      const thr = pr.threshold[layer]!;
      const s = v.scores;
      for (let p = 0; p < nFF; p++) if (s[p]! > thr) v.P[nP++] = p;
    } else {
      for (let p = 0; p < nFF; p++) v.P[p] = p;
      nP = nFF;
    }
    st.predicted += nP;

    n.viewF32(buf, oOff, dim).fill(0);
    const stride = cache.slotBytes;
    const rows = cache.plan.slots;
    const gr = cache.gateRows;
    for (let start = 0; start < nP; ) {
      // phase 1: gates of P[start..end)
      const end = cache.loadGates(layer, v.P, start, nP, v.slots);
      const m = end - start;
      n.matvecRows(pack.gateType, gr.buf, 0, gr.rows, dim, this.scratch, off.slots, m, buf, xbOff, this.scratch, off.gate, gr.stride);
      let nA = 0;
      let nSilent = 0;
      for (let k = 0; k < m; k++) {
        const g = v.gate[k]!;
        if (g > 0) {
          v.aSlots[nA] = v.slots[k]!;
          v.aPos[nA] = v.P[start + k]!;
          v.gA[nA] = g;
          nA++;
        } else v.slots[nSilent++] = v.P[start + k]!; // reuse: positions of the silent ones
      }
      if (this.demote) cache.demoteSilent(layer, v.slots, nSilent);
      st.fired += nA;
      if (nA > 0) {
        // phase 2: up + down of the neurons that fired
        cache.loadUpDown(layer, v.aPos, nA, v.aSlots);
        n.matvecRows(pack.upType, cache.arena, cache.upOffset, rows, dim, this.scratch, off.aSlots, nA, buf, xbOff, this.scratch, off.uA, stride);
        n.gatedAct(this.kind, this.scratch, off.gA, this.scratch, off.uA, this.scratch, off.hA, nA);
        n.axpyRows(pack.downType, cache.arena, cache.downOffset, rows, dim, this.scratch, off.aSlots, nA, this.scratch, off.hA, buf, oOff, stride);
      }
      start = end;
    }
  }

  resetStats(): void {
    for (const s of this.stats) Object.assign(s, { predicted: 0, fired: 0, tokens: 0 });
  }

  dispose(): void {
    for (const b of this.buffers) this.n.free(b);
  }
}
