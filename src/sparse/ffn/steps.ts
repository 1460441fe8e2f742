// The sparse FFN of one token and layer, as steps — written once, called by every decoder
// (inline on the caller's thread, the actor pipeline's compute worker, the LLMFlash baseline):
//
//   zero      o = 0                                                    (an explicit step)
//   predict   P = { p : (fc2 · fc1 · xb)[p] > threshold[p] }          (linear predictor; oracle: every neuron)
//   gate      g[k] = W_gate[P[k]] · xb for k in a range of P; the fired ones (relu(g) != 0)
//             compacted to A with their gate value and up+down slot
//   upAct     u[k] = W_up[A[k]] · xb;  h[k] = act(g[k]) · u[k]        (dReLU: relu(g)·relu(u))
//   down      o += Σ_k h[k] · W_down[:, A[k]]   (k ascending in pack order)
//   residual  x += o                                                   (model/forward.ts addFfnOutput)
//
//   lookAhead (reads ahead) the next layer's likely-firing neurons not resident:
//             x' = x + o, x̂' = ffn_norm'(x'), P' = predictor'(x̂'), of P' (pinned gate rows) those
//             whose gate row is positive on x̂'
//
// Which rows are resident (and reading the rest) is the caller's business: the neuron cache
// says where each row is (slots), the steps only compute. Ranges of P and A are processed in
// ascending pack order and the down projection accumulates in that order whatever the chunking,
// so the output is bit-identical for any budget, I/O backend or thread count. The gate dot
// products use the dense kernels (same Q8_0 activation rounding), so the oracle fires exactly
// the neurons the dense FFN fires.
//
// bundleRange computes every neuron of a range of bundles straight from pack-layout memory
// (the mmap decoder over a mapping, the prefill over staging): the same kernels, so a neuron
// that does not fire adds an exact zero and the result equals the oracle's bit for bit.
import { native, type NativeAddon } from "../../native.js";
import { batchRows, type BundleLayout, type FfnLayout } from "./layout.js";

/** One token's rows in a run state: the residual x (predictor input), the normed xb, the output o. */
export interface TokenRows {
  buf: number;
  x: number;
  xb: number;
  o: number;
}

/** Gate rows still being read: landing positions (1 at a pack position whose rows are not there yet), and how to wait for them. */
export interface Landing {
  positions: Uint8Array;
  settle(): void;
}

/** Fired neurons of a gate step, and the predicted ones that did not fire. */
export interface GateResult {
  nA: number;
  nSilent: number;
}

export class FfnSteps {
  private readonly n: NativeAddon = native();
  /** Views of the scratch (layout.ts, createFfnScratch). */
  readonly P: Int32Array;
  readonly slots: Int32Array;
  readonly aSlots: Int32Array;
  readonly aPos: Int32Array;
  private readonly scores: Float32Array;
  private readonly gateV: Float32Array;
  private readonly gA: Float32Array;
  private readonly slotOf?: Int32Array;
  /** (nLayer·nFF) the slot of each neuron, or -1 (the cache's table). */
  readonly slotTable: Int32Array;

  constructor(
    readonly L: FfnLayout,
    nLayer: number,
  ) {
    const n = this.n;
    const { scratch: b, off, nFF } = L;
    this.scores = n.viewF32(b, off.scores, nFF);
    this.P = n.viewI32(b, off.P, nFF);
    this.slots = n.viewI32(b, off.slots, nFF);
    this.gateV = n.viewF32(b, off.gate, nFF);
    this.aSlots = n.viewI32(b, off.aSlots, nFF);
    this.aPos = n.viewI32(b, off.aPos, nFF);
    this.gA = n.viewF32(b, off.gA, nFF);
    this.slotTable = n.viewI32(L.slotOf.buf, L.slotOf.off, nLayer * nFF);
    if (L.pinned) this.slotOf = this.slotTable;
  }

  /** o = 0: the FFN's output accumulates from here. */
  zero(t: TokenRows): void {
    this.n.viewF32(t.buf, t.o, this.L.dim).fill(0);
  }

  /** P = the neurons predicted to fire in `layer` (every neuron with the oracle or without predictors); returns |P|. */
  predict(layer: number, t: TokenRows, oracle: boolean): number {
    const { L, P } = this;
    const nFF = L.nFF;
    const pr = L.pred;
    if (oracle || !pr) {
      for (let p = 0; p < nFF; p++) P[p] = p;
      return nFF;
    }
    const s = this.scores;
    let nP = 0;
    if (pr.form === "linear") {
      // h = fc1·x̂ (rank), s = fc2·h: the dense kernels, so the same bits on every path
      const h = pr.hidden[layer]!;
      this.n.matvec(pr.type, pr.buf, pr.fc1[layer]!, h, L.dim, t.buf, t.xb, L.scratch, L.off.pHidden);
      this.n.matvec(pr.type, pr.buf, pr.fc2[layer]!, nFF, h, L.scratch, L.off.pHidden, L.scratch, L.off.scores);
      return this.n.flagAbove(L.scratch, L.off.scores, pr.buf, pr.thresholds[layer]!, nFF, L.scratch, L.off.P);
    }
    this.n.predictorScores(pr.buf, pr.fc1[layer]!, pr.buf, pr.fc2[layer]!, L.dim, pr.hidden[layer]!, nFF, t.buf, t.x, 1, L.scratch, L.off.scores);
    const thr = pr.threshold[layer]!;
    for (let p = 0; p < nFF; p++) if (s[p]! > thr) P[nP++] = p;
    return nP;
  }

  /**
   * Gate rows of P[start, start+count), read from gateRows at slots[start…]. Fired neurons go to
   * aSlots/aPos/gA[start…] with their up+down slot (pinned gates: looked up in slotOf, -1 when
   * not resident — the cache's loadUpDown then writes it); the positions of the silent ones go to
   * slots[start…] (for the cache's demoteSilent).
   */
  gate(layer: number, t: TokenRows, start: number, count: number, landing?: Landing): GateResult {
    const { L, P, slots, aSlots, aPos, gA, gateV, slotOf } = this;
    const gr = L.gateRows;
    if (!landing || !this.gateAroundLanding(t, start, count, landing))
      this.n.matvecRows(L.gateType, gr.buf, 0, gr.rows, L.dim, L.scratch, L.off.slots + start * 4, count, t.buf, t.xb, L.scratch, L.off.gate + start * 4, gr.stride);
    const base = layer * L.nFF;
    let nA = 0;
    let nSilent = 0;
    for (let k = start; k < start + count; k++) {
      const g = gateV[k]!;
      if (g > 0) {
        aSlots[start + nA] = slotOf ? slotOf[base + P[k]!]! : slots[k]!;
        aPos[start + nA] = P[k]!;
        gA[start + nA] = g;
        nA++;
      } else slots[start + nSilent++] = P[k]!; // the slot is no longer needed: its position instead
    }
    return { nA, nSilent };
  }

  /**
   * g[k] for k in [start, start+count) when some of those rows are still being read: the resident
   * rows first, then (after landing.settle()) the landing ones, each row the same dot product as
   * in one call. aSlots, aPos and gA hold the split meanwhile (gate() rewrites them). False, and
   * nothing computed, when no row of the range is landing.
   */
  private gateAroundLanding(t: TokenRows, start: number, count: number, landing: Landing): boolean {
    const { L, P, slots, aSlots, aPos, gA, gateV } = this;
    const at = landing.positions;
    let nLand = 0;
    for (let k = start; k < start + count; k++) nLand += at[P[k]!]!;
    if (nLand === 0) return false;
    let r = start; // resident rows from start, landing ones from start + count - nLand
    let l = start + count - nLand;
    for (let k = start; k < start + count; k++) {
      const j = at[P[k]!] ? l++ : r++;
      aSlots[j] = slots[k]!;
      aPos[j] = k;
    }
    const gr = L.gateRows;
    const split = start + count - nLand;
    this.n.matvecRows(L.gateType, gr.buf, 0, gr.rows, L.dim, L.scratch, L.off.aSlots + start * 4, count - nLand, t.buf, t.xb, L.scratch, L.off.gA + start * 4, gr.stride);
    landing.settle();
    this.n.matvecRows(L.gateType, gr.buf, 0, gr.rows, L.dim, L.scratch, L.off.aSlots + split * 4, nLand, t.buf, t.xb, L.scratch, L.off.gA + split * 4, gr.stride);
    for (let j = start; j < start + count; j++) gateV[aPos[j]!] = gA[j]!;
    return true;
  }

  /**
   * The neurons of layer `next` likely to fire, as known when this layer's down is done: x' = x + o
   * (the next layer's residual before its attention), x̂' = rmsnorm(x') with the next layer's
   * ffn_norm, P' = the next layer's predictor on x̂' (every neuron with the oracle), and of P'
   * those not resident: with pinned gate rows (row = next·nFF + p) those whose gate row is
   * positive on x̂', else all of them (their gate rows are read too). They go to aPos[0..),
   * ascending; returns how many. Overwrites P, slots, scores and gate: call after this layer's down.
   */
  lookAhead(next: number, t: TokenRows, ffnNorm: { buf: number; off: number }, eps: number, oracle: boolean): number {
    const { L, P, slots, aPos, gateV, slotTable } = this;
    const o = L.off;
    const n = this.n;
    n.add(t.buf, t.x, t.buf, t.o, L.scratch, o.aheadX, L.dim);
    n.rmsnorm(L.scratch, o.aheadX, ffnNorm.buf, ffnNorm.off, L.dim, 1, eps, L.scratch, o.aheadXb);
    const nP = this.predict(next, { buf: L.scratch, x: o.aheadX, xb: o.aheadXb, o: -1 }, oracle);
    const base = next * L.nFF;
    let m = 0;
    for (let k = 0; k < nP; k++) {
      const g = base + P[k]!;
      if (slotTable[g]! < 0) slots[m++] = g;
    }
    if (m === 0) return 0;
    if (!L.pinned) {
      for (let k = 0; k < m; k++) aPos[k] = slots[k]! - base;
      return m;
    }
    const gr = L.gateRows;
    n.matvecRows(L.gateType, gr.buf, 0, gr.rows, L.dim, L.scratch, o.slots, m, L.scratch, o.aheadXb, L.scratch, o.gate, gr.stride);
    let c = 0;
    for (let k = 0; k < m; k++) if (gateV[k]! > 0) aPos[c++] = slots[k]! - base;
    return c;
  }

  /** Up rows of the fired neurons aSlots[start, start+nA), then h = act(g)·u. */
  upAct(t: TokenRows, start: number, nA: number): void {
    const { L } = this;
    const o = L.off;
    this.n.matvecRows(L.upType, L.arena, L.upOffset, L.slots, L.dim, L.scratch, o.aSlots + start * 4, nA, t.buf, t.xb, L.scratch, o.uA + start * 4, L.slotBytes);
    this.n.gatedAct(L.kind, L.scratch, o.gA + start * 4, L.scratch, o.uA + start * 4, L.scratch, o.hA + start * 4, nA);
  }

  /** o += Σ h[k]·down(aSlots[k]) for k in [start, start+nA), ascending (callers go through A in pack order). */
  down(t: TokenRows, start: number, nA: number): void {
    const { L } = this;
    const o = L.off;
    this.n.axpyRows(L.downType, L.arena, L.downOffset, L.slots, L.dim, L.scratch, o.aSlots + start * 4, nA, L.scratch, o.hA + start * 4, t.buf, t.o, L.slotBytes);
  }
}

/**
 * Scratch for bundleRange / bundleBatch, i32 tables of n_ff then f32 values:
 *   iota (p), staged (-1-p: every row from the staging source), selGate and selUpDown (a batch's
 *   row picks, written by its caller), then g, u, h (cap f32 each: a batch of tokens takes
 *   batchRows(cap, nTok) neurons at a time).
 */
export interface BundleScratch {
  buf: number;
  iota: number;
  staged: number;
  selGate: number;
  selUpDown: number;
  g: number;
  u: number;
  h: number;
  cap: number;
}

/** Lay out (and fill iota and staged of) bundle scratch in `bytes` bytes at `at` in `buf`. */
export function createBundleScratch(nFF: number, buf: number, at: number, bytes: number): BundleScratch {
  const cap = Math.floor((bytes / 4 - 4 * nFF) / 3);
  if (cap < 1) throw new RangeError(`bundle scratch: ${bytes} bytes cannot hold 4 tables of ${nFF} neurons and one value each`);
  const t = (i: number) => at + i * nFF * 4;
  const s = { buf, iota: t(0), staged: t(1), selGate: t(2), selUpDown: t(3), g: t(4), u: t(4) + cap * 4, h: t(4) + 2 * cap * 4, cap };
  fillTables(s, nFF);
  return s;
}

/** (Re)write iota and staged (decode's steps may share the memory and write over them). */
export function fillTables(s: BundleScratch, nFF: number): void {
  const n = native();
  const iota = n.viewI32(s.buf, s.iota, nFF), staged = n.viewI32(s.buf, s.staged, nFF);
  for (let i = 0; i < nFF; i++) {
    iota[i] = i;
    staged[i] = -1 - i;
  }
}

/** Rows of one strided buffer: row r at off + r·stride, r < rows. */
export interface RowSource {
  buf: number;
  off: number;
  stride: number;
  rows: number;
}

/**
 * Where a batch's bundle rows are, position by position (native matmulSel): sel[i] >= 0 picks row
 * sel[i] of the resident source (the cache: gate rows pinned or in slots, up and down in slots),
 * sel[i] < 0 bundle -1-sel[i] of the staging source. selGate and selUpDown are byte offsets of
 * the picks in the scratch's buffer (pinned gate rows are picked apart from the slots).
 */
export interface BatchRows {
  gate: RowSource;
  up: RowSource;
  down: RowSource;
  staging: { buf: number; off: number; bundles: number };
  selGate: number;
  selUpDown: number;
}

/**
 * Every neuron of `count` bundles at (src, srcOff), for tokens 0..nTok-1 of the run state at
 * rsBuf (xb rows in, o rows accumulated; `row` bytes apart):
 *   g = W_gate · xb;  u = W_up · xb;  h = act(g) · u;  o += Σ_k h[k] · W_down[:, k]   (k ascending)
 * One token: matvecs over the rows (the decode path). A batch (prefill): GEMMs over batchRows
 * rows at a time (int8 VNNI panels; the down rows requantised 32 at a time, matmulTAcc).
 */
export function bundleRange(L: BundleLayout, src: number, srcOff: number, count: number, rs: { buf: number; xb: number; o: number }, nTok: number, s: BundleScratch): void {
  const n = native();
  const B = L.bundleBytes;
  if (nTok === 1) {
    n.matvecRows(L.gateType, src, srcOff, count, L.dim, s.buf, s.iota, count, rs.buf, rs.xb, s.buf, s.g, B);
    n.matvecRows(L.upType, src, srcOff + L.gateBlock, count, L.dim, s.buf, s.iota, count, rs.buf, rs.xb, s.buf, s.u, B);
    n.gatedAct(L.kind, s.buf, s.g, s.buf, s.u, s.buf, s.h, count);
    n.axpyRows(L.downType, src, srcOff + L.gateBlock + L.upBytes, count, L.dim, s.buf, s.iota, count, s.buf, s.h, rs.buf, rs.o, B);
    return;
  }
  // a batch: every row from the staging source (src itself)
  const staging = { buf: src, off: srcOff, bundles: count };
  const none = { buf: src, off: 0, stride: B, rows: 0 };
  bundleBatch(L, { gate: none, up: none, down: none, staging, selGate: s.staged, selUpDown: s.staged }, count, rs, nTok, s);
}

/**
 * Every neuron of `count` positions for a batch of tokens, each position's rows where `rows` picks
 * them (resident in the cache or in staging): GEMMs over batchRows rows at a time —
 *   g = W_gate · xb;  u = W_up · xb;  h = act(g) · u;  o += h · W_down
 * (int8 VNNI panels; the down rows requantised 32 at a time, so calls at multiples of DOWN_GROUP
 * give the bits of one call). The same bits wherever a row is.
 */
export function bundleBatch(L: BundleLayout, rows: BatchRows, count: number, rs: { buf: number; xb: number; o: number }, nTok: number, s: BundleScratch): void {
  const n = native();
  const B = L.bundleBytes;
  const { gate, up, down, staging: st } = rows;
  const per = batchRows(s.cap, nTok);
  for (let a = 0; a < count; a += per) {
    const m = Math.min(per, count - a);
    const sg = rows.selGate + a * 4, su = rows.selUpDown + a * 4;
    // g, u: (nTok, m)
    n.matmulSel(L.gateType, gate.buf, gate.off, gate.stride, gate.rows, st.buf, st.off, B, st.bundles, s.buf, sg, m, L.dim, rs.buf, rs.xb, nTok, s.buf, s.g);
    n.matmulSel(L.upType, up.buf, up.off, up.stride, up.rows, st.buf, st.off + L.gateBlock, B, st.bundles, s.buf, su, m, L.dim, rs.buf, rs.xb, nTok, s.buf, s.u);
    n.gatedAct(L.kind, s.buf, s.g, s.buf, s.u, s.buf, s.h, nTok * m);
    // o += h · down rows (int8 panels, requantised per 32 rows)
    n.matmulTAccSel(L.downType, down.buf, down.off, down.stride, down.rows, st.buf, st.off + L.gateBlock + L.upBytes, B, st.bundles, s.buf, su, m, L.dim, s.buf, s.h, m, nTok, rs.buf, rs.o);
  }
}
