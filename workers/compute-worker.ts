// A compute worker's thread (piscina worker, role big or little): runs the forward steps of a
// pipelined session on native memory addressed by buffer id — a layer's front (attention,
// predictor, gates), the gate rows of one cluster, the up/down rows of its fired neurons, the
// logits, a dense prefill — with the FFN steps every decoder shares (sparse/ffn/steps.ts).
// Tasks carry descriptors only (actors/protocol.ts) and run in arrival order, so the token
// machine fixes the order in which the down columns accumulate; a task that needs reads waits
// on the slot flags here (sparse/cache/slot-flags.ts), not in the scheduler.
import { native } from "../src/native.js";
import { addFfnOutput, attentionBlock, checkBatch, embedTokens, ffnInput, forward, outputLogits } from "../src/model/forward.js";
import type { Weights } from "../src/model/weights.js";
import { createBundleScratch, FfnSteps, type TokenRows } from "../src/sparse/ffn/steps.js";
import { StreamedFfn } from "../src/sparse/ffn/streamed.js";
import type { ComputeInit, ComputeResult, ComputeTask, FrontTask } from "../src/protocol/tasks.js";
import { nowUs } from "../src/trace/recorder.js";
import { serveChannel } from "../src/util/worker-channel.js";
import { slotReady, waitSlots } from "../src/sparse/cache/slot-flags.js";

interface State {
  init: ComputeInit;
  weights: Weights;
  streamed: StreamedFfn;
  steps: FfnSteps;
  /** The decode token's rows of the run state. */
  token: TokenRows;
  /** Slot flags: the batch each arena slot waits for, and the batch that landed in it. */
  want: Int32Array;
  ready: Int32Array;
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
  const { rs } = init;
  const want = new Int32Array(init.slotFlags.want), ready = new Int32Array(init.slotFlags.ready);
  return {
    init,
    weights: { ...init.weights, buffers: [] },
    streamed: new StreamedFfn(init.ffn, {
      loader: init.prefill.loader,
      staging: init.prefill.staging,
      stagingBytes: init.prefill.stagingBytes,
      layerOffsets: init.prefill.layerOffsets,
      scratch: createBundleScratch(init.cfg.nFF, init.prefill.bundleScratch, 0, init.prefill.bundleScratchBytes),
      inPlace: init.prefill.inPlace,
      // a slot whose read is still in flight is read from the pack instead
      slotReady: (slot) => slotReady(want, ready, slot),
    }),
    steps: new FfnSteps(init.ffn, init.cfg.nLayer),
    token: { buf: rs.buf, x: rs.x, xb: rs.xb, o: rs.o },
    want,
    ready,
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
  const { cfg, rs } = s.init;
  switch (task.op) {
    case "front":
      return front(s, task);
    case "gate": {
      if (!s.init.ffn.pinned) waitReads(s, task.layer, s.steps.slots, task.start, task.count); // the wait is not a kernel span
      out.t0 = nowUs();
      Object.assign(out, s.steps.gate(task.layer, s.token, task.start, task.count));
      break;
    }
    case "back": {
      waitReads(s, task.layer, s.steps.aSlots, task.start, task.nA);
      // with a prefix, the resident fired neurons before it ran after the front's answer
      const from = task.prefixed ? task.start + s.prefixDone : task.start;
      const c = upDown(s, from, task.start + task.nA);
      out.cuts = task.prefixed ? [...s.prefixCuts, ...c] : c;
      s.prefixDone = 0;
      s.prefixCuts = [];
      out.t0 = out.cuts[0]!;
      out.t1 = c[3]!;
      if (task.next) out.front = front(s, task.next);
      return out;
    }
    case "ffn": {
      if (task.lookup) {
        const { P, slots, slotTable } = s.steps;
        const base = task.layer * cfg.nFF;
        // pinned gate rows are indexed by neuron, cached ones live in the neuron's slot
        if (s.init.ffn.pinned) for (let k = task.start; k < task.start + task.count; k++) slots[k] = base + P[k]!;
        else for (let k = task.start; k < task.start + task.count; k++) slots[k] = slotTable[base + P[k]!]!;
      }
      if (!s.init.ffn.pinned) waitReads(s, task.layer, s.steps.slots, task.start, task.count);
      out.t0 = nowUs();
      const g = s.steps.gate(task.layer, s.token, task.start, task.count);
      if (s.init.ffn.pinned) waitReads(s, task.layer, s.steps.aSlots, task.start, g.nA);
      upDown(s, task.start, task.start + g.nA);
      Object.assign(out, g);
      out.t1 = nowUs();
      if (task.next) out.front = front(s, task.next);
      return out;
    }
    case "logits":
      addFfnOutput(cfg, rs, 1); // the residual step of the last layer
      out.logits = outputLogits(cfg, s.weights, rs, 1, false);
      break;
    case "prefill":
      Object.assign(out, prefill(s, task.tokens, task.pos0));
      break;
    default:
      throw new Error(`compute worker: unknown task ${(task as { op: string }).op}`);
  }
  out.t1 = nowUs();
  return out;
}

/** Block this thread (not a core) until the slots slots[start, start+count) hold their reads; a failed read throws. */
function waitReads(s: State, layer: number, slots: Int32Array, start: number, count: number): void {
  waitSlots(s.want, s.ready, slots, start, count, `compute worker: layer ${layer}`);
}

/**
 * The start of a layer: x += o of the layer before (or the token's embedding), attention,
 * xb = ffn_norm(x), o = 0, the predictor — and with `gates` every predicted gate row (pinned
 * gate rows: row = layer·nFF + p).
 */
function front(s: State, task: FrontTask): ComputeResult {
  const { cfg, rs, kv } = s.init;
  const t0 = nowUs();
  if (task.tokens) {
    checkBatch(rs, kv, task.nTok, task.pos0);
    embedTokens(cfg, s.weights, rs, task.tokens);
  } else if (task.residual) addFfnOutput(cfg, rs, task.nTok);
  attentionBlock(cfg, s.weights, rs, kv, task.layer, task.pos0, task.nTok);
  ffnInput(cfg, s.weights, rs, task.layer, task.nTok);
  const m1 = nowUs();
  s.steps.zero(s.token);
  const nP = s.steps.predict(task.layer, s.token, task.oracle);
  const m2 = nowUs();
  if (!task.gates) return { t0, t1: m2, tid, nP, cuts: [t0, m1, m1, m2] };
  const { P, slots, aSlots } = s.steps;
  const base = task.layer * cfg.nFF;
  for (let k = 0; k < nP; k++) slots[k] = base + P[k]!;
  const g = s.steps.gate(task.layer, s.token, 0, nP);
  // the resident prefix of the fired neurons, computed once this answer is posted
  let prefix = 0;
  if (task.prefix) while (prefix < g.nA && aSlots[prefix]! >= 0) prefix++;
  s.prefixDone = 0;
  s.prefixCuts = [];
  // every fired neuron resident: nothing for the scheduler to plan or the I/O worker to read
  const allResident = prefix === g.nA;
  afterAnswer = () => {
    // with reads to plan, one kernel thread: the other core is the scheduler's and the I/O
    // worker's, which plan and issue this layer's reads right now (on the critical path);
    // without, both cores compute
    const n = native();
    if (!allResident) n.setCallerThreads(1);
    s.prefixCuts = upDown(s, 0, prefix);
    if (!allResident) n.setCallerThreads(0);
    s.prefixDone = prefix;
  };
  const t1 = nowUs();
  return { t0, t1, tid, nP, ...g, cuts: [t0, m1, m1, m2, m2, t1] };
}

/** Up, act and down of fired neurons [from, to) (down in order: callers go from 0 upwards); returns the up and down intervals. */
function upDown(s: State, from: number, to: number): number[] {
  const t0 = nowUs();
  if (to > from) s.steps.upAct(s.token, from, to - from);
  const t1 = nowUs();
  if (to > from) s.steps.down(s.token, from, to - from);
  return [t0, t1, t1, nowUs()];
}

/**
 * The accelerator role: a prompt batch through the dense forward, each layer's FFN streamed
 * from the pack (sparse/ffn/streamed.ts: sequential reads into half the staging while the other
 * half computes, GEMMs over the bundles).
 */
function prefill(s: State, tokens: number[], pos0: number): Pick<ComputeResult, "logits" | "reads" | "chunks" | "readSpans"> {
  const { cfg, rs, kv } = s.init;
  const before = s.streamed.stats.bytes;
  s.streamed.recordSpans = true;
  try {
    const logits = forward(cfg, s.weights, rs, kv, tokens, pos0, { ffn: (layer, rs2, nTok) => s.streamed.run(layer, rs2, nTok) });
    const { chunks, reads } = s.streamed.takeSpans();
    return { logits, reads: s.streamed.stats.bytes - before, chunks, readSpans: reads };
  } finally {
    s.streamed.recordSpans = false;
    s.streamed.takeSpans(); // a failed pass: nothing kept
  }
}
