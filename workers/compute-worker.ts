// A compute actor's thread (piscina worker, role big or little): runs the forward steps of a
// pipelined session on native memory addressed by buffer id — attention, predictor, the gate /
// up / down rows of one cluster, the logits, a dense prefill. Tasks carry descriptors only
// (src/pipeline/protocol.ts) and run in arrival order, so the scheduler fixes the order in
// which the down columns accumulate.
import { native, type NativeAddon } from "../src/native.js";
import { addFfnOutput, attentionBlock, checkBatch, embedTokens, ffnInput, forward, outputLogits } from "../src/model/forward.js";
import type { Weights } from "../src/model/weights.js";
import { createBundleScratch, denseBundles, type BundleScratch } from "../src/sparse/ffn/dense-bundles.js";
import type { ComputeInit, ComputeResult, ComputeTask, FrontTask } from "../actors/protocol.js";
import { nowUs } from "../src/trace/recorder.js";
import { serveChannel } from "../src/decode/pipeline/worker-channel.js";
import { waitBatch } from "../actors/io-flags.js";

interface State {
  init: ComputeInit;
  weights: Weights;
  bundles: BundleScratch;
  P: Int32Array;
  slots: Int32Array;
  gate: Float32Array;
  aSlots: Int32Array;
  aPos: Int32Array;
  gA: Float32Array;
  scores: Float32Array;
  slotOf: Int32Array;
  ioDone: Int32Array;
  /** Fired neurons [0, prefixDone) of the current layer already computed (resident prefix), with their up/down intervals. */
  prefixDone: number;
  prefixCuts: number[];
}

let state: State | undefined;
let tid = 0;
let afterAnswer: (() => void) | undefined; // work queued by the last task for after its answer

function runAfterAnswer(): void {
  const f = afterAnswer;
  afterAnswer = undefined;
  f?.(); // kernels on validated descriptors: nothing to throw
}

function setUp(init: ComputeInit): State {
  const n = native();
  if (init.cores) n.setAffinity(init.cores);
  n.setThreads(init.threads);
  tid = n.threadInfo().tid;
  const f = init.ffn;
  const nFF = init.cfg.nFF;
  return {
    init,
    weights: { ...init.weights, buffers: [] },
    bundles: createBundleScratch(nFF, init.prefill.bundleScratch, 0),
    P: n.viewI32(f.scratch, f.off.P, nFF),
    slots: n.viewI32(f.scratch, f.off.slots, nFF),
    gate: n.viewF32(f.scratch, f.off.gate, nFF),
    aSlots: n.viewI32(f.scratch, f.off.aSlots, nFF),
    aPos: n.viewI32(f.scratch, f.off.aPos, nFF),
    gA: n.viewF32(f.scratch, f.off.gA, nFF),
    scores: n.viewF32(f.scratch, f.off.scores, nFF),
    slotOf: n.viewI32(f.slotOf.buf, f.slotOf.off, init.cfg.nLayer * nFF),
    ioDone: new Int32Array(init.ioDone),
    prefixDone: 0,
    prefixCuts: [],
  };
}

export default function compute(task: ComputeTask): ComputeResult {
  const t0 = nowUs();
  if (task.op === "init") {
    const { port, ...init } = task;
    state = setUp(init);
    // later tasks of this session come over the direct channel (a new init brings a new one)
    if (port) serveChannel(port, compute, runAfterAnswer);
    return { t0, t1: nowUs(), tid };
  }
  const s = state;
  if (!s || s.init.key !== task.key) throw new Error(`compute worker: not initialised for session ${task.key} (task ${task.op})`);
  const out: ComputeResult = { t0, t1: 0, tid };
  const n = native();
  const { cfg, rs } = s.init;
  switch (task.op) {
    case "attention":
      attention(s, task.layer, task.pos0, task.nTok, task.tokens);
      break;
    case "front":
      Object.assign(out, front(n, s, task));
      break;
    case "back": {
      // the resident prefix ran after the front's answer; wait for the reads, then the rest
      for (const b of task.batches) waitBatch(s.ioDone, b, `compute worker: layer ${task.layer}`);
      const c = upDown(n, s, s.prefixDone, task.nA); // the wait before is not a kernel span
      out.cuts = [...s.prefixCuts, ...c];
      s.prefixDone = 0;
      s.prefixCuts = [];
      if (task.next) {
        out.t1 = c[3]!;
        out.front = front(n, s, task.next);
        return out;
      }
      break;
    }
    case "predict":
      out.nP = predict(n, s, task.layer, task.oracle);
      break;
    case "gate":
      Object.assign(out, gate(n, s, task.layer, task.start, task.count));
      break;
    case "up":
      up(n, s, task.start, task.nA);
      break;
    case "down":
      down(n, s, task.start, task.nA);
      break;
    case "ffn": {
      const g = gate(n, s, task.layer, task.start, task.count);
      upDown(n, s, task.start, task.start + g.nA);
      Object.assign(out, g);
      break;
    }
    case "logits":
      addFfnOutput(cfg, rs, 1);
      out.logits = outputLogits(cfg, s.weights, rs, 1, false);
      break;
    case "prefill":
      Object.assign(out, prefill(n, s, task.tokens, task.pos0));
      break;
    default:
      throw new Error(`compute worker: unknown task ${(task as { op: string }).op}`);
  }
  out.t1 = nowUs();
  return out;
}

/** layer > 0: x += o of the layer before; layer 0 with tokens: embed them. Then attention and xb = ffn_norm(x). */
function attention(s: State, layer: number, pos0: number, nTok: number, tokens?: number[]): void {
  const { cfg, rs, kv } = s.init;
  if (tokens) {
    checkBatch(rs, kv, nTok, pos0);
    embedTokens(cfg, s.weights, rs, tokens);
  } else if (layer > 0) addFfnOutput(cfg, rs, nTok);
  attentionBlock(cfg, s.weights, rs, kv, layer, pos0, nTok);
  ffnInput(cfg, s.weights, rs, layer, nTok);
}

/** Attention, predictor and every predicted gate row of a layer (pinned gates: row = layer·nFF + p). */
function front(n: NativeAddon, s: State, task: FrontTask): ComputeResult {
  const t0 = nowUs();
  attention(s, task.layer, task.pos0, task.nTok, task.tokens);
  const m1 = nowUs();
  const nP = predict(n, s, task.layer, task.oracle);
  const m2 = nowUs();
  const base = task.layer * s.init.cfg.nFF;
  for (let k = 0; k < nP; k++) s.slots[k] = base + s.P[k]!;
  const g = gate(n, s, task.layer, 0, nP);
  // the resident prefix of the fired neurons, computed once this answer is posted
  let prefix = 0;
  if (task.prefix) while (prefix < g.nA && s.aSlots[prefix]! >= 0) prefix++;
  s.prefixDone = 0;
  s.prefixCuts = [];
  afterAnswer = () => {
    s.prefixCuts = upDown(n, s, 0, prefix);
    s.prefixDone = prefix;
  };
  const t1 = nowUs();
  return { t0, t1, tid, nP, ...g, cuts: [t0, m1, m1, m2, m2, t1] };
}

/** Up, act and down of fired neurons [from, to) (down in order: callers go from 0 upwards); returns the up and down intervals. */
function upDown(n: NativeAddon, s: State, from: number, to: number): number[] {
  const t0 = nowUs();
  if (to > from) up(n, s, from, to - from);
  const t1 = nowUs();
  if (to > from) down(n, s, from, to - from);
  return [t0, t1, t1, nowUs()];
}

/** o = 0; P = the predicted neurons of `layer`, ascending pack positions; returns |P|. */
function predict(n: NativeAddon, s: State, layer: number, oracle: boolean): number {
  const { cfg, rs, ffn } = s.init;
  const nFF = cfg.nFF;
  n.viewF32(rs.buf, rs.o, cfg.nEmbd).fill(0);
  if (oracle || !ffn.pred) {
    for (let p = 0; p < nFF; p++) s.P[p] = p;
    return nFF;
  }
  const pr = ffn.pred;
  n.predictorScores(pr.buf, pr.fc1[layer]!, pr.buf, pr.fc2[layer]!, cfg.nEmbd, pr.hidden[layer]!, nFF, rs.buf, rs.x, 1, ffn.scratch, ffn.off.scores);
  const thr = pr.threshold[layer]!;
  let nP = 0;
  for (let p = 0; p < nFF; p++) if (s.scores[p]! > thr) s.P[nP++] = p;
  return nP;
}

/**
 * Phase 1 of one cluster: gate rows of P[start, start+count) (rows in slots[start…]). Fired
 * neurons go to aSlots/aPos/gA[start…] with their cache slots — with pinned gates looked up in
 * slotOf (-1 when up+down are not resident; the scheduler's loadUpDown then writes them).
 */
function gate(n: NativeAddon, s: State, layer: number, start: number, count: number): { nA: number; nSilent: number } {
  const { cfg, rs, ffn } = s.init;
  const gr = ffn.gateRows;
  n.matvecRows(ffn.gateType, gr.buf, 0, gr.rows, cfg.nEmbd, ffn.scratch, ffn.off.slots + start * 4, count, rs.buf, rs.xb, ffn.scratch, ffn.off.gate + start * 4, gr.stride);
  const base = layer * cfg.nFF;
  let nA = 0;
  let nSilent = 0;
  for (let k = start; k < start + count; k++) {
    const g = s.gate[k]!;
    if (g > 0) {
      s.aSlots[start + nA] = ffn.pinned ? s.slotOf[base + s.P[k]!]! : s.slots[k]!;
      s.aPos[start + nA] = s.P[k]!;
      s.gA[start + nA] = g;
      nA++;
    } else s.slots[start + nSilent++] = s.P[k]!; // slot no longer needed: its position, for demoteSilent
  }
  return { nA, nSilent };
}

/** Phase 2a: up rows of the fired neurons, then h = act(g)·u. */
function up(n: NativeAddon, s: State, start: number, nA: number): void {
  const { cfg, rs, ffn } = s.init;
  const o = ffn.off;
  n.matvecRows(ffn.upType, ffn.arena, ffn.upOffset, ffn.slots, cfg.nEmbd, ffn.scratch, o.aSlots + start * 4, nA, rs.buf, rs.xb, ffn.scratch, o.uA + start * 4, ffn.slotBytes);
  n.gatedAct(ffn.kind, ffn.scratch, o.gA + start * 4, ffn.scratch, o.uA + start * 4, ffn.scratch, o.hA + start * 4, nA);
}

/** Phase 2b: o += Σ h[k]·down(k), k ascending; the scheduler posts clusters in pack order. */
function down(n: NativeAddon, s: State, start: number, nA: number): void {
  const { cfg, rs, ffn } = s.init;
  const o = ffn.off;
  n.axpyRows(ffn.downType, ffn.arena, ffn.downOffset, ffn.slots, cfg.nEmbd, ffn.scratch, o.aSlots + start * 4, nA, ffn.scratch, o.hA + start * 4, rs.buf, rs.o, ffn.slotBytes);
}

/**
 * The accelerator role: a prompt batch through the dense forward, each layer's FFN streamed
 * from the pack through the staging buffer in sequential reads (all neurons, pack order).
 */
function prefill(n: NativeAddon, s: State, tokens: number[], pos0: number): { logits: number; reads: number } {
  const { cfg, rs, kv, ffn, prefill: pf } = s.init;
  const B = ffn.bundleBytes;
  const per = Math.max(1, Math.floor(pf.stagingBytes / B));
  s.bundles = createBundleScratch(cfg.nFF, pf.bundleScratch, 0); // its iota shares the decode scratch: write it again
  let reads = 0;
  const w: Weights = {
    ...s.weights,
    sparseFfn: {
      run(layer, rs2, nTok) {
        n.viewF32(rs2.buf, rs2.o, nTok * cfg.nEmbd).fill(0);
        for (let a = 0; a < cfg.nFF; a += per) {
          const m = Math.min(per, cfg.nFF - a);
          n.readBatch(pf.loader, Float64Array.of(pf.layerOffsets[layer]! + a * B, m * B, pf.staging, 0));
          reads += m * B;
          denseBundles(ffn, pf.staging, 0, m, rs2, nTok, s.bundles);
        }
      },
    },
  };
  const logits = forward(cfg, w, rs, kv, tokens, pos0);
  return { logits, reads };
}
