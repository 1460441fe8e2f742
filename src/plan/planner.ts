// The offline planner (PowerInfer-2 §5): from the machine's probe, the pack's profile and the
// user's limits (memory, cores, a minimum speed), choose the knobs that maximise the predicted
// decode speed (time-model.ts).
//
// The search is exhaustive: decoder × gate rows pinned or not × hot share × reads ahead
// × queue depth is at most a few hundred candidates, each a memory plan (planMemory) and a time
// prediction of a few milliseconds, so trying them all takes well under a second and needs no
// solver (PowerInfer-2's first version used Z3 for a larger, coupled space; here the memory plan
// already places every byte once the knobs are chosen, so the knobs are the only unknowns).
import type { Pack } from "../sparse/pack/format.js";
import { planMemory, clusterSizeFor, budgetForFfnFraction, formatBytes, READ_AHEAD_MAX_SHARE, defaultReadAheadNeurons, type MemoryPlan, type PlanOptions } from "../sparse/memory-plan.js";
import { stepCosts } from "./step-costs.js";
import { directReadAlign } from "../sparse/read-native.js";
import type { MachineBounds, MachinePhase } from "./machine.js";
import { profileRates } from "./cache-model.js";
import { modelShape, tokenTime, type ModelShape, type PlannedDecoder, type TokenTime } from "./time-model.js";

/** The decode knobs a plan sets (each is a load option of the same name; docs/formats.md, "Execution plan"). */
export interface PlanKnobs {
  decoder: PlannedDecoder;
  threads: number;
  pinGates: boolean;
  hotShare: number;
  clusterSize: number;
  /** Inline: neurons per batch of reads ahead (0: none): up+down blocks with pinned gate rows, else whole bundles. */
  readAhead: number;
  queueDepth: number;
  /** Share of the cold region keeping the most-used cold neurons for good (0: all of it LRU; plans written before it: 0). */
  coldKeep: number;
}

export interface PlanLimits {
  /** Bytes the model may hold (undefined: no bound; everything resident). */
  memory?: number;
  /** Cores the decode may use (kernel threads). */
  cores: number;
  /** Context the one session reserves (KV cache). */
  contextSize?: number;
  predictor?: "trained" | "oracle";
  /** The context position the predicted token is decoded at (default min(contextSize, 128)): attention reads the KV cache up to it. */
  position?: number;
}

const positionOf = (limits: PlanLimits) => limits.position ?? Math.min(limits.contextSize ?? 2048, 128);

export interface ExecutionPlan {
  format: "neuronpipe.plan";
  version: 1;
  createdAt: string;
  model: { path: string; name: string; fingerprint: string; nLayer: number; nFF: number; ffnBytes: number };
  machine: { host: string; cpu: string; measuredAt: string; calibrated: boolean; phase?: MachinePhase };
  limits: { memory: number | null; cores: number; contextSize: number };
  knobs: PlanKnobs;
  /** Where the budget goes under these knobs. */
  memory: { budget: number | null; fixedBytes: number; ffnResident: number; gatesPinned: boolean; neuronSlots: number; hotClusters: number; readAheadNeurons: number };
  predicted: TokenTime & { position: number };
  /** Candidates tried and refused (they did not fit the budget). */
  candidates: number;
  refused: number;
  /** Knobs given explicitly that override the plan's (set at load, recorded in traces). */
  overrides?: Partial<Record<string, unknown>>;
}

/** The memory-plan options of a pack decoded with `knobs` (as the loader derives them: decode/open.ts sparsePlanOptions). */
export type PlanOptionsFor = (decoder: PlannedDecoder, budget: number, knobs: { pinGates: boolean | "auto"; hotShare: number; clusterSize: number; readAhead?: number; coldKeep?: number }) => PlanOptions;

// below half, the hot region measured slower than the cache model says (default model, 75%: 0.25 ran at 0.3× of 0.5)
const HOT_SHARES = [0.5, 0.75, 0.9];
/** How much faster a decoder's best plan must be predicted than a simpler decoder's to be chosen over it (makePlan). */
export const DECODER_MARGIN = 0.05;
const QUEUE_DEPTHS = [8, 32, 128];
// the cold region all LRU, or keeping its most-used neurons in 90% of it, or in all of it but the
// LRU list's minimum (memory-plan.ts: staging and two batches of reads ahead): on the 7B at half
// its FFN, gate rows cached, keeping 90% cut the misses of flagged neurons from 4,871 to 3,736 a
// token, and the most (0.99) the neurons read from 4,827 to 4,606 (docs/benchmarks.md)
const COLD_KEEPS = [0, 0.9, 0.99];
const UNBOUNDED = Number.MAX_SAFE_INTEGER;

interface Candidate {
  knobs: PlanKnobs;
  mem: MemoryPlan;
  time: TokenTime;
}

/** What the planner needs of a model, computed once per pack. */
export interface PlannerInput {
  pack: Pack;
  shape: ModelShape;
  optionsFor: PlanOptionsFor;
}

export function plannerInput(pack: Pack, optionsFor: PlanOptionsFor, predictor: "trained" | "oracle" = "trained"): PlannerInput {
  const oracle = predictor === "oracle" || !pack.predictor;
  const costs = stepCosts(pack.file, pack.config, { pack, predictor: oracle ? "oracle" : "trained" });
  return { pack, shape: modelShape(pack, costs, profileRates(pack, oracle), directReadAlign(pack.path)), optionsFor };
}

/** Every candidate under the limits that fits, with its predicted time. */
function candidates(inp: PlannerInput, m: MachineBounds, limits: PlanLimits, fixed: Partial<PlanKnobs> = {}): { fit: Candidate[]; refused: number; firstError?: unknown } {
  const budget = limits.memory ?? UNBOUNDED;
  const { pack } = inp;
  const position = positionOf(limits);
  const fit: Candidate[] = [];
  let refused = 0;
  let firstError: unknown;
  const decoders: PlannedDecoder[] = fixed.decoder ? [fixed.decoder] : ["inline", "pipeline", "blocking"];
  // kernels use every core the limits allow (their results are the same for any count; fewer
  // threads only leave a core idle)
  const threadsList = [fixed.threads ?? Math.max(1, limits.cores)];
  const clusterSize = clusterSizeFor(pack.config.nFF, fixed.clusterSize ?? 32);
  const seen = new Set<string>();
  for (const decoder of decoders) {
    for (const pinGates of fixed.pinGates !== undefined ? [fixed.pinGates] : decoder === "blocking" ? [false] : [true, false]) {
      for (const hotShare of fixed.hotShare !== undefined ? [fixed.hotShare] : decoder === "blocking" ? [0.75] : HOT_SHARES) {
        // reads ahead (inline): pinned gate rows take the default count (undefined), whole bundles must be asked for
        const aheads = fixed.readAhead !== undefined ? [fixed.readAhead] : decoder !== "inline" ? [0] : pinGates ? [undefined, 0] : [defaultReadAheadNeurons(pack.config), 0];
        for (const ahead of aheads) {
          for (const coldKeep of fixed.coldKeep !== undefined ? [fixed.coldKeep] : decoder === "inline" ? COLD_KEEPS : [0]) {
            let mem: MemoryPlan;
            try {
              mem = planMemory(pack, budget, inp.optionsFor(decoder, budget, { pinGates, hotShare, clusterSize, readAhead: ahead, coldKeep }));
            } catch (e) {
              firstError ??= e;
              refused++;
              continue;
            }
            // a plan with everything resident is the same whatever the cache knobs: keep one
            const key = `${decoder}/${mem.gatesPinned}/${mem.hotFrames}/${mem.slots}/${mem.readAheadBytes}/${mem.coldKept}`;
            if (seen.has(key)) continue;
            // everything resident: nothing to read ahead
            if (mem.ffnResident >= 1 && mem.readAheadBytes > 0 && fixed.readAhead === undefined) continue;
            // whole bundles ahead only where their staging is a small share of the cache, as the
            // memory plan's default rule for up+down blocks (on a small model it costs more hits)
            if (!mem.gatesPinned && mem.readAheadBytes > READ_AHEAD_MAX_SHARE * mem.slots * mem.slotBytes && fixed.readAhead === undefined) continue;
            seen.add(key);
            const readAhead = mem.readAheadBytes > 0 ? Math.floor(mem.readAheadBytes / (mem.gatesPinned ? pack.upDownBlock : pack.bundleBytes)) : 0;
            for (const threads of threadsList) {
              for (const queueDepth of fixed.queueDepth !== undefined ? [fixed.queueDepth] : mem.ffnResident >= 1 ? [32] : QUEUE_DEPTHS) {
                const time = tokenTime(inp.shape, mem, m, { decoder, threads, queueDepth, readAhead: readAhead > 0, position, window: 5 });
                fit.push({ knobs: { decoder, threads, pinGates: mem.gatesPinned, hotShare, clusterSize, readAhead, queueDepth, coldKeep: mem.coldKept > 0 ? coldKeep : 0 }, mem, time });
              }
            }
          }
        }
      }
    }
  }
  return { fit, refused, firstError };
}

/** The fastest plan under the limits (knobs in `fixed` are not searched), or throws when nothing fits the budget. */
export function makePlan(inp: PlannerInput, m: MachineBounds, limits: PlanLimits, fixed: Partial<PlanKnobs> = {}): ExecutionPlan {
  const { fit, refused, firstError } = candidates(inp, m, limits, fixed);
  if (fit.length === 0) {
    // nothing fits: the refusal the loader gives without a plan (it names the smallest workable budget)
    const budget = limits.memory ?? UNBOUNDED;
    planMemory(inp.pack, budget, inp.optionsFor(fixed.decoder ?? "inline", budget, { pinGates: fixed.pinGates ?? "auto", hotShare: fixed.hotShare ?? 0.75, clusterSize: fixed.clusterSize ?? 32, readAhead: fixed.readAhead }));
    throw firstError;
  }
  // the decoder first: the simplest (inline < pipeline < blocking) whose best plan is within
  // DECODER_MARGIN of the fastest. Each decoder's own costs are fitted on the shipped model (~200
  // reads per token) and carried to models with a hundred times more: three probes within an hour
  // put blocking on the 7B at 25% of the FFN at 1.62, 2.26 and 2.59 tok/s (measured 1.85–2.0) and
  // inline at 1.93, 2.19 and 2.54 (measured 2.44–2.55). Then, among that decoder's plans within
  // 1% of its fastest (the model cannot tell them apart), the deepest queue and the hot share
  // nearest the default 0.75. A deeper queue costs nothing the model sees, and where the model
  // could not tell depths apart it measured faster: the default model at 25% of the FFN, 21 turns
  // side by side, depth 128 decoded 3% faster than 32 (docs/benchmarks.md, "2026-11-26 (night)").
  // Then gate rows not pinned: pinning saves gate reads, which the model sees, and costs what it
  // does not: the shipped model resident, pinned, decoded 857 µs a token against 774 not pinned
  // (10 turns side by side), and the probe's calibration runs say the same (1,212 against 905)
  const order: PlannedDecoder[] = ["inline", "pipeline", "blocking"];
  const best = Math.min(...fit.map((c) => c.time.total));
  const bestOf = (d: PlannedDecoder) => Math.min(...fit.filter((c) => c.knobs.decoder === d).map((c) => c.time.total));
  const decoder = order.find((d) => bestOf(d) <= best * (1 + DECODER_MARGIN))!;
  const near = fit.filter((c) => c.knobs.decoder === decoder && c.time.total <= bestOf(decoder) * 1.01);
  const distance = (c: Candidate) => Math.abs(c.knobs.hotShare - 0.75);
  near.sort((a, b) => b.knobs.queueDepth - a.knobs.queueDepth || distance(a) - distance(b) || Number(a.knobs.pinGates) - Number(b.knobs.pinGates) || a.time.total - b.time.total);
  return toPlan(inp, m, limits, near[0]!, fit.length + refused, refused);
}

function toPlan(inp: PlannerInput, m: MachineBounds, limits: PlanLimits, c: Candidate, count: number, refused: number): ExecutionPlan {
  const { pack } = inp;
  const { nLayer, nFF } = pack.config;
  const bounded = limits.memory !== undefined && limits.memory < UNBOUNDED;
  return {
    format: "neuronpipe.plan",
    version: 1,
    createdAt: new Date().toISOString(),
    model: { path: pack.path, name: pack.source.name, fingerprint: pack.source.fingerprint, nLayer, nFF, ffnBytes: nLayer * nFF * (pack.gateBytes + pack.upBytes + pack.downBytes) },
    machine: { host: m.host, cpu: m.cpu, measuredAt: m.measuredAt, calibrated: m.decoders !== undefined, ...(m.phase ? { phase: m.phase } : {}) },
    limits: { memory: bounded ? limits.memory! : null, cores: limits.cores, contextSize: c.mem.options.contextSize },
    knobs: c.knobs,
    memory: {
      budget: bounded ? limits.memory! : null,
      fixedBytes: c.mem.fixedTotal,
      ffnResident: c.mem.ffnResident,
      gatesPinned: c.mem.gatesPinned,
      neuronSlots: c.mem.slots,
      hotClusters: c.mem.hotFrames,
      readAheadNeurons: c.knobs.readAhead,
    },
    predicted: { ...c.time, position: positionOf(limits) },
    candidates: count,
    refused,
  };
}

/** The smallest budget the memory plan accepts for this pack (bisection on planMemory with the planner's most frugal knobs). */
export function smallestBudget(inp: PlannerInput, limits: PlanLimits): number {
  const fits = (b: number) => candidates(inp, { version: 2, measuredAt: "", host: "", cpu: "", memory: [{ threads: 1, readGBps: 1 }] }, { ...limits, memory: b, cores: 1 }).fit.length > 0;
  let hi = wholeBudget(inp, limits);
  let lo = 0;
  while (hi - lo > 4096) {
    const mid = Math.floor((lo + hi) / 2);
    if (fits(mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}

/** The budget that holds the whole FFN (everything resident). */
export function wholeBudget(inp: PlannerInput, limits: PlanLimits): number {
  // the loader's staging grows with the budget (1%): size with the staging of the budget found, twice
  const at = (b: number) => budgetForFfnFraction(inp.pack, 1, inp.optionsFor("inline", b, { pinGates: false, hotShare: 0.75, clusterSize: 32 }));
  return at(at(at(0))) + 16 * 4096;
}

/** Predicted plans across budgets, from the smallest workable one to everything resident. */
export function sweepPlans(inp: PlannerInput, m: MachineBounds, limits: PlanLimits, points = 8): ExecutionPlan[] {
  const lo = smallestBudget(inp, limits);
  const hi = wholeBudget(inp, limits);
  const out: ExecutionPlan[] = [];
  for (let i = 0; i < points; i++) {
    const b = Math.round(lo + ((hi - lo) * i) / (points - 1));
    out.push(makePlan(inp, m, { ...limits, memory: b }));
  }
  return out;
}

/** The smallest budget predicted to reach `tokPerSec` (bisection: predicted speed grows with the budget), or undefined when not even everything resident does. */
export function budgetForSpeed(inp: PlannerInput, m: MachineBounds, limits: PlanLimits, tokPerSec: number): ExecutionPlan | undefined {
  const hi = wholeBudget(inp, limits);
  const top = makePlan(inp, m, { ...limits, memory: hi });
  if (top.predicted.tokPerSec < tokPerSec) return undefined;
  let lo = smallestBudget(inp, limits);
  const first = makePlan(inp, m, { ...limits, memory: lo });
  if (first.predicted.tokPerSec >= tokPerSec) return first;
  let best = top;
  let h = hi;
  while (h - lo > Math.max(65536, (hi - lo) / 512)) {
    const mid = Math.floor((lo + h) / 2);
    const p = makePlan(inp, m, { ...limits, memory: mid });
    if (p.predicted.tokPerSec >= tokPerSec) {
      best = p;
      h = mid;
    } else lo = mid;
  }
  return best;
}

/** The plan in words: what is resident, what is read per token, which core does what, the predicted speed and its bottleneck. */
export function describeExecutionPlan(p: ExecutionPlan): string {
  const k = p.knobs;
  const t = p.predicted;
  const mb = (b: number) => formatBytes(b);
  const ms = (us: number) => (us / 1000).toFixed(us < 10_000 ? 2 : 1);
  const cores =
    k.decoder === "inline"
      ? `the calling thread runs every step with ${k.threads} kernel thread${k.threads > 1 ? "s" : ""}; reads are submitted from it (queue depth ${k.queueDepth})${k.readAhead ? `, ${k.readAhead} neurons per batch of reads ahead (${p.memory.gatesPinned ? "up+down blocks" : "whole bundles"}) on their own ring while it computes` : ""}`
      : `a compute worker runs the kernels with ${k.threads} thread${k.threads > 1 ? "s" : ""}, an I/O worker submits and completes reads (queue depth ${k.queueDepth})${k.decoder === "blocking" ? "; every read of a layer before its compute (LLMFlash's window cache of 5 tokens)" : "; reads overlap compute"}`;
  return [
    `plan for ${p.model.path} (${p.model.nLayer} layers × ${p.model.nFF} neurons, FFN ${mb(p.model.ffnBytes)}) on ${p.machine.cpu}${p.machine.calibrated ? "" : " (decoders not calibrated: run `neuronpipe probe`)"}${p.machine.phase ? `; the machine runs at ${p.machine.phase.memory.toFixed(2)}× its probe's memory speed and ${p.machine.phase.reads.toFixed(2)}× its read rate now` : ""}`,
    `  memory: ${p.memory.budget === null ? "no bound" : mb(p.memory.budget)}; fixed region ${mb(p.memory.fixedBytes)}; ${(100 * p.memory.ffnResident).toFixed(1)}% of the FFN resident${p.memory.gatesPinned ? " (every gate row pinned, up+down cached)" : " (whole bundles cached)"}, ${p.memory.hotClusters} hot clusters of ${k.clusterSize} (hot share ${k.hotShare})${k.coldKeep ? `; ${Math.round(100 * k.coldKeep)}% of the cold region keeps its most-used neurons, the rest is LRU` : ""}`,
    `  decoder: ${k.decoder}: ${cores}`,
    `  per token: ${t.flagged.toFixed(0)} neurons flagged, ${t.fired.toFixed(0)} fired; ${t.readsPerToken.toFixed(1)} reads (${mb(t.readBytesPerToken)}), hit rate ${(100 * t.hitRate).toFixed(1)}%`,
    `  predicted: ${t.tokPerSec.toFixed(t.tokPerSec < 100 ? 2 : 0)} tok/s (${ms(t.total)} ms/token; attention ${ms(t.attention)}, predictor ${ms(t.predictor)}, gate ${ms(t.gate)}, up/down ${ms(t.upDown)}, output ${ms(t.output)}, decoder ${ms(t.host)}, reads ${ms(t.reads)} of which ${ms(t.hidden)} hidden) — bound by ${t.bottleneck}`,
    `  chosen from ${p.candidates} candidates (${p.refused} did not fit)${p.overrides && Object.keys(p.overrides).length ? `; overridden: ${Object.entries(p.overrides).map(([a, b]) => `${a}=${String(b)}`).join(", ")}` : ""}`,
  ].join("\n");
}
