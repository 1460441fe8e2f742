// The planner's model of one decode token's time, from the bytes and reads each step needs and
// the rates this machine measured (`neuronpipe probe`); of the model itself its dense steps and
// sparse FFN's gathers are timed layer by layer as a decode runs them, on copies of its shapes
// (dense-steps.ts, once per shape set).
//
//   attention   n_layer × attention weights: their matvecs as timed for these shapes (else ÷ the
//               matvec rate of their type), + the scores and sums as timed for these heads at
//               position 0 and per position (else the KV cache ÷ memory + n_layer × heads × positions
//               × the calibrated cost of a head at a position)
//   predictor   its matvecs and flagging as timed for its shapes (else its weights ÷ matvec rate,
//               linear: Q8_0; mlp: F32); with reads ahead
//               (inline) also a pass for a layer ahead, the gate rows of its flagged neurons not
//               resident, and the decoder's calibrated cost per flagged neuron looked ahead
//   gate        as timed between the dense steps at the profile's rates (dense-steps.ts), else
//               flagged neurons × gate row ÷ gather rate (oracle: every gate row ÷ matvec rate)
//   up/down     as timed likewise, else fired neurons × (up row ÷ gather rate + down column ÷ axpy rate)
//   output      the classifier's matvec as timed (else output norm + classifier ÷ matvec rate)
//   (each rate at the working set of the weights the token touches: the probe's Q4_0 matvec by
//   working set scales its kernel table, measured over 128 MiB — on this VM 9 MiB read at ~70
//   GB/s and 1.4 GiB at ~41; and each step's calls and rows cost what the probe's matvec by
//   matrix shape says beyond their bytes, against the shape the kernel table was measured on —
//   a 1024×1024 matrix reads at about half the rate of a 4096×4096 one)
//   host        the decoder's own cost on the calling thread: µs per layer (more with gate rows
//               pinned) + ns per flagged neuron (cache lookups, chunking, task messages),
//               calibrated by the probe on the shipped model (tools/calibrate.ts)
//   reads       per layer, the cache model's misses (cache-model.ts) as requests of a gate block,
//               an up+down block or a bundle, each kind one batch: the time the probe measured
//               for a batch of that many reads of that block size at the queue's depth, + the
//               decoder's calibrated costs per batch (handing it over, waking for it) and per
//               request (choosing a slot, queueing, placing it);
//               reads ahead add AHEAD_EXTRA_READS of the up+down reads
//
// How the decoders combine them:
//   inline      compute + host + reads − hidden; with reads ahead, the reads of the likely-firing
//               neurons of later layers overlap this layer's compute: hidden = min(ahead share ×
//               the reads' device time, compute) (the decoder's own costs per read and batch run
//               on the calling thread, so none of them hides)
//   pipeline    compute + host + reads: its reads run on the I/O loader's worker while compute
//               runs on the others, but on a machine whose cores all compute that worker takes
//               their time, and a layer waits for its own reads: nothing measured hides
//   blocking    (LLMFlash) every read before compute: compute + host + reads
import type { GGUFFile } from "../gguf/reader.js";
import { classifierTensor } from "../model/config.js";
import type { StepCosts } from "../trace/recorder.js";
import type { DecoderCalibration, KernelRate, MachineBounds } from "./machine.js";
import { blockReads, PACK_ALIGNMENT, type Pack } from "../sparse/pack/format.js";
import type { MemoryPlan } from "../sparse/memory-plan.js";
import { forecastCache, type ProfileRates } from "./cache-model.js";
import { packDenseShapes, type DenseShapes } from "./dense-steps.js";
import { batchReadUs, callCosts, gatherTableCall, kernelRate, MATVEC_TABLE_CALL, shapeFactor, type CallShape } from "./rates.js";

export type PlannedDecoder = "inline" | "pipeline" | "blocking";

/** The share of an inline token's reads that reads ahead start before the layer needs them (measured on the 7B at 50%: 40–43% of the I/O hidden). */
export const AHEAD_SHARE = 0.45;

/**
 * The up+down reads reads ahead add (inline, pinned gate rows): neurons the look-ahead picks that
 * then do not fire, and neurons that fire but were evicted for the slots reads ahead hold. On the
 * 7B at 50% of the FFN: 7,069 requests per token without reads ahead, 8,051 with (430 read ahead
 * and not fired, 552 more misses); on another machine 54.5 → 61.8 MiB per token (+13%).
 */
export const AHEAD_EXTRA_READS = 0.14;
/**
 * Reads ahead of whole bundles (no pinned gate rows) take the look-ahead's predicted neurons as
 * they are, with no gate to filter them: this many more requests than the cache model's misses
 * of flagged neurons. Measured: the 7B at half its FFN +2% (3,799 requests a token against
 * 3,736 flagged neurons found absent without reads ahead), the default model at 30% and 50%
 * +40% and +67% (its look-ahead is far less precise). 0.25: with it the planner reads whole
 * bundles ahead on the 7B (measured 12.5–13.2 tok/s against 10.2–10.6 without) and not on the
 * default model (where they read more than they save).
 */
export const AHEAD_EXTRA_BUNDLES = 0.25;

/**
 * A decoder's own costs before `neuronpipe probe` has calibrated them on this machine: the
 * calibration of the machine this was written on (2 vCPU Zen 5; docs/benchmarks.md, "planner").
 */
export const UNCALIBRATED: Record<PlannedDecoder, DecoderCalibration> = {
  inline: { layerUs: 35, neuronNs: 0, requestUs: 5 },
  pipeline: { layerUs: 240, neuronNs: 0, requestUs: 25 },
  blocking: { layerUs: 250, neuronNs: 0, requestUs: 5 },
};

export interface TokenTime {
  /** µs per token, by step. */
  attention: number;
  predictor: number;
  gate: number;
  upDown: number;
  output: number;
  host: number;
  reads: number;
  /** µs of the reads hidden under compute. */
  hidden: number;
  /** The reads' parts before calibration: µs at the probe's rates, and batches per token. */
  readThroughputUs: number;
  readBatches: number;
  total: number;
  tokPerSec: number;
  /** The step that bounds the token. */
  bottleneck: "compute" | "reads" | "host";
  /** Per token: expected read requests, bytes read, neurons flagged and fired, hit rate. */
  readsPerToken: number;
  readBytesPerToken: number;
  flagged: number;
  fired: number;
  hitRate: number;
}

export interface ModelShape {
  pack: Pack;
  costs: StepCosts;
  /** GGML types of the attention weights, the classifier and the predictor. */
  attentionType: number;
  outputType: number;
  predictorType: number;
  rates: ProfileRates;
  /** The dense matrices (attention, classifier, the pack's predictor) whose time machine.json's `denseSteps` may hold. */
  dense?: DenseShapes;
  /** The pack file's direct-I/O alignment (read-native.ts directReadAlign): reads stop at their rows rounded up to it (blockReads). */
  readAlign: number;
}

export function modelShape(pack: Pack, costs: StepCosts, rates: ProfileRates, readAlign = PACK_ALIGNMENT): ModelShape {
  const t = (name: string) => pack.file.tensorsByName.get(name)?.type ?? 0;
  const f: GGUFFile = pack.file;
  return {
    pack,
    costs,
    attentionType: t("blk.0.attn_q.weight"),
    outputType: t(classifierTensor(f)),
    predictorType: pack.predictor?.[0]?.type ?? 0,
    rates,
    dense: packDenseShapes(pack),
    readAlign,
  };
}

export interface TimeOptions {
  decoder: PlannedDecoder;
  threads: number;
  queueDepth: number;
  /** Inline: reads ahead staged (the plan's readAheadBytes > 0). */
  readAhead: boolean;
  /** Position in the context the token is decoded at (KV cache bytes). */
  position: number;
  /** LLMFlash's window (blocking). */
  window: number;
  /**
   * The calibration's runs: the reads this run measured ÷ the cache model's forecast (default 1),
   * so a decoder's fitted costs are its own and not the cache model's error.
   */
  readScale?: number;
}

/** The predicted time of a decode token under a memory plan. */
export function tokenTime(s: ModelShape, plan: MemoryPlan, m: MachineBounds, o: TimeOptions): TokenTime {
  const { pack, costs, rates } = s;
  const { nLayer, nFF } = pack.config;
  const us = (bytes: number, GBps: number) => bytes / (GBps * 1e3);
  const flagged = rates.flaggedPerToken;
  const fired = rates.firedPerToken;
  const gateBytes = rates.oracle ? nLayer * nFF * pack.gateBytes : flagged * pack.gateBytes;
  // the weights a token touches: kernels run at the probe's rate for a working set of that size
  const workingSet = nLayer * costs.attentionBytes + (rates.oracle ? 0 : (costs.predictorBytes ?? 0)) + gateBytes + fired * (pack.upBytes + pack.downBytes) + costs.outputBytes;
  const rate = (type: number, kernel: KernelRate["kernel"]) => kernelRate(m, type, kernel, o.threads, workingSet);
  const mv = (type: number) => rate(type, "matvec");
  // calls and rows beyond bytes, against the shapes the kernel table was measured on
  const cc = callCosts(m.shapes);
  const memGBps = m.memory.find((x) => x.threads === o.threads)?.readGBps ?? m.memory[0]!.readGBps;
  const positions = o.position + 1;
  /** µs of `bytes` at `GBps`, and of its rows and calls beyond them against the kernel table's call `reference` (rows unknown: its bytes only). */
  const kernel = (bytes: number, GBps: number, rows: number | undefined, calls: number, reference: CallShape) =>
    us(bytes, GBps) * (rows === undefined ? 1 : shapeFactor(cc, { bytes, rows, calls }, reference));
  // the model's own dense matvecs as timed on this machine, else from the kernel table
  const dense = s.dense && m.denseSteps?.find((d) => d.key === s.dense!.key && d.threads === o.threads);
  // and its scores and sums over the KV cache as timed per position, else the cache's bytes and
  // the calibrated cost of a head at a position
  const attention =
    (dense ? dense.attentionUs : kernel(nLayer * costs.attentionBytes, mv(s.attentionType), costs.attentionRows ? nLayer * costs.attentionRows : undefined, 4 * nLayer, MATVEC_TABLE_CALL)) +
    (dense?.positionUs !== undefined
      ? (dense.scoresUs ?? 0) + o.position * dense.positionUs // timed at the position a token is decoded at
      : us(nLayer * costs.kvBytesPerPosition * positions, memGBps) + (nLayer * (costs.attentionHeads ?? 0) * positions * (m.attention?.headPositionNs ?? 0)) / 1e3);
  // the predictor as timed for its shapes (dense-steps.ts), else from its bytes and calls (its
  // short rows go through a blocked kernel whose cost per row the kernel table does not measure)
  const predictorPass = rates.oracle ? 0 : (dense?.predictorUs ?? kernel(costs.predictorBytes ?? 0, mv(s.predictorType), 0, 2 * nLayer, MATVEC_TABLE_CALL));
  // the sparse FFN's gathers as timed between the layers' dense steps at the trained predictor's
  // rates (dense-steps.ts; not the oracle's), else from their bytes at the kernel table's gather
  // and axpy rates
  const gathers = rates.oracle ? undefined : dense;
  const gate = rates.oracle
    ? kernel(gateBytes, mv(pack.gateType), nLayer * nFF, nLayer, MATVEC_TABLE_CALL)
    : (gathers?.gateUs ?? kernel(gateBytes, rate(pack.gateType, "gather"), flagged, nLayer, gatherTableCall(pack.gateType)));
  const upDown =
    gathers?.upDownUs ??
    kernel(fired * pack.upBytes, rate(pack.upType, "gather"), fired, nLayer, gatherTableCall(pack.upType)) +
      kernel(fired * pack.downBytes, rate(pack.downType, "axpy"), fired, nLayer, gatherTableCall(pack.downType));
  const output = dense ? dense.outputUs : kernel(costs.outputBytes, mv(s.outputType), costs.outputRows || undefined, 1, MATVEC_TABLE_CALL);
  const cal: DecoderCalibration = m.decoders?.[o.decoder] ?? UNCALIBRATED[o.decoder];
  const host = nLayer * (cal.layerUs + (plan.gatesPinned ? (cal.pinnedLayerUs ?? 0) : 0)) + (flagged * cal.neuronNs) / 1e3;
  // reads: the cache model's misses, a request each
  const blocking = o.decoder === "blocking";
  const fc = forecastCache(rates, {
    slots: plan.slots,
    hotSlots: blocking ? 0 : plan.hotSlots,
    clusterSize: plan.clusterSize,
    gatesPinned: plan.gatesPinned,
    window: blocking ? o.window : undefined,
    coldKept: blocking ? 0 : plan.coldKept,
  });
  // per layer, each kind of read is one batch (gate blocks, then up+down blocks of those that
  // fire), submitted together and waited for: the time the probe measured for a batch of that
  // many reads of that block size at the queue's depth (rates.ts batchReadUs: a batch deeper than
  // the queue refills it as reads complete, and its last reads land late), + the decoder's own
  // cost per batch and per request (choosing a slot, queueing it, placing it: on the calling
  // thread, before the batch is submitted or after it is read, so it adds; in the bench's rounds
  // on the 7B at 25% of the FFN it was 2–3 µs a request beyond the batch table where the shipped
  // model's small batches fit 4–8, and charging it for only 32 requests a batch, as a device busy
  // with the rest would hide it, predicted 2.88 tok/s where 2.24 was measured: docs/benchmarks.md,
  // 2026-11-27 (afternoon))
  // reads ahead (inline): the look-ahead's reads start early, and add some; with pinned gate rows
  // they read the up+down blocks of neurons that will fire, else whole bundles of flagged ones
  const ahead = o.decoder === "inline" && o.readAhead;
  const bundlesAhead = ahead && !plan.gatesPinned;
  const upDownMisses = fc.upDownMisses.reduce((a, b) => a + b, 0);
  let throughput = 0;
  let batches = 0;
  let readBytes = 0;
  let requests = 0;
  const scale = o.readScale ?? 1;
  const batch = (k0: number, block: number) => {
    const k = k0 * scale;
    if (k <= 0.01) return;
    throughput += batchReadUs(m, block, o.queueDepth, k);
    requests += k;
    batches += Math.min(1, k);
    readBytes += k * block;
  };
  // a run of adjacent misses is one request reaching from the first block to the last one's rows,
  // the bundles between read along: `requests` requests for `misses` blocks, each request `first`
  // bytes (blockReads: the rows, not the block's padding) and a bundle more for each neuron after
  const rows = blockReads(pack, s.readAlign);
  const merged = (misses: number, requests: number, first: number) => {
    if (requests > 0) batch(requests, (requests * first + (misses - requests) * pack.bundleBytes) / requests);
  };
  const aheadFactor = bundlesAhead ? 1 + AHEAD_EXTRA_BUNDLES : ahead ? 1 + AHEAD_EXTRA_READS : 1;
  for (let l = 0; l < nLayer; l++) {
    if (bundlesAhead) {
      // a flagged neuron found absent is read whole, its up+down along: runs of bundles
      merged(fc.gateMisses[l]! * aheadFactor, fc.gateRequests[l]! * aheadFactor, rows.bundle);
      continue;
    }
    merged(fc.gateMisses[l]!, fc.gateRequests[l]!, rows.gate);
    merged(fc.upDownMisses[l]! * aheadFactor, fc.upDownRequests[l]! * aheadFactor, rows.upDown);
    // the window cache's runs of bundles: fewer, longer requests
    merged(fc.bundleMisses[l]!, fc.bundleRequests[l]!, rows.bundle);
  }
  const reads = throughput + batches * (cal.batchUs ?? 0) + requests * cal.requestUs;
  // reads ahead (inline, pinned gate rows): every layer also runs the predictor of a layer ahead,
  // computes the pinned gate rows of its flagged neurons that are not resident, and chooses
  // which to read (the decoder's cost per flagged neuron looked ahead)
  const missShare = fired > 0 ? (scale * upDownMisses) / fired : 0;
  const gateFilter = bundlesAhead ? 0 : us(flagged * missShare * pack.gateBytes, rate(pack.gateType, "gather"));
  const lookAhead = ahead ? predictorPass + gateFilter + (flagged * (cal.aheadNeuronNs ?? 0)) / 1e3 : 0;
  const predictor = predictorPass + lookAhead;
  const compute = attention + predictor + gate + upDown + output;
  // only reads ahead hide, and of them the device's time, not the calling thread's own cost per
  // read and batch (hiding those too predicted the 7B at 50% 20% fast on a Zen 5 where reads cost
  // the decoder 2.4 µs each). The pipeline hides none: it was modelled hiding half of the shorter
  // of reads and compute, and on the 7B at 50% of the FFN (2 cores, both computing) every
  // configuration decoded slower than compute + host + reads with nothing hidden (6.12–6.83 tok/s
  // against 6.90–7.78), where the overlap predicted 8.41–9.76; its trace waited 85.7 ms a token
  // for reads the model put at 76.4 (docs/benchmarks.md, 2026-11-28 (morning))
  const hidden = ahead ? Math.min(AHEAD_SHARE * throughput, compute) : 0;
  const total = compute + host + reads - hidden;
  const exposed = reads - hidden;
  const bottleneck = exposed > compute && exposed > host ? "reads" : host > compute ? "host" : "compute";
  return {
    attention,
    predictor,
    gate,
    upDown,
    output,
    host,
    reads,
    hidden,
    readThroughputUs: throughput,
    readBatches: batches,
    total,
    tokPerSec: 1e6 / total,
    bottleneck,
    readsPerToken: scale * (bundlesAhead ? aheadFactor * fc.gateRequests.reduce((a, b) => a + b, 0) : fc.requestsPerToken + (ahead ? AHEAD_EXTRA_READS * fc.upDownRequests.reduce((a, b) => a + b, 0) : 0)),
    readBytesPerToken: readBytes,
    flagged,
    fired,
    hitRate: fc.hitRate,
  };
}
