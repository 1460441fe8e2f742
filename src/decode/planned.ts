// Which knobs a pack is decoded with: the execution plan's (plan/planner.ts) — made at load from
// this machine's cached probe, or read from a saved plan — with every knob given explicitly
// overriding it. The overrides are recorded in the plan that the model, its traces and the
// benchmarks carry.
import { closeSync, openSync, readSync } from "node:fs";
import { availableParallelism } from "node:os";
import { native } from "../native.js";
import { cachedMachine, keepMachine, machineCachePath, measureBounds, type MachineBounds } from "../plan/machine.js";
import { readPlanFile } from "../plan/plan-file.js";
import { makePlan, plannerInput, type ExecutionPlan, type PlanKnobs, type PlannerInput } from "../plan/planner.js";
import { measureKernels, measureReadRates } from "../plan/probe.js";
import { denseShapes, packDenseShapes, timeDenseSteps, type DenseShapes } from "../plan/dense-steps.js";
import { readGGUF, type GGUFFile } from "../gguf/reader.js";
import { readConfig } from "../model/config.js";
import { planOptions, type PlanOptions } from "../sparse/memory-plan.js";
import { isPackFile, type Pack } from "../sparse/pack/format.js";
import { openPack } from "../sparse/pack/open.js";
import type { DecoderKind } from "./decoder.js";
import type { OpenOptions } from "./options.js";

/** The memory plan's options of a pack opened with `kind` under `budget` (the planner sizes its candidates with the same). */
export function sparsePlanOptions(p: Pack, kind: DecoderKind, budget: number, o: OpenOptions): PlanOptions {
  // 1% of the budget, 256..2048 neurons: the actor decoders keep several read batches in flight,
  // each filling the loader's queue; a prompt streams the dense FFN through it in chunks as large
  // as half of it (fewer, larger GEMM calls and reads)
  const stagingNeurons = o.stagingNeurons ?? Math.min(2048, Math.max(256, Math.floor((0.01 * budget) / p.bundleBytes)));
  const pinGates = kind === "blocking" ? false : o.pinGates;
  const predictor = (o.predictor ?? "trained") === "trained";
  return planOptions(p.config, { ...o, stagingNeurons, pinGates, predictor, readAheadNeurons: kind === "inline" ? o.readAhead : 0, readAheadMaxShare: o.readAhead !== undefined ? 1 : undefined, readAheadBundles: kind === "inline" && (o.readAhead ?? 0) > 0 });
}

/** The planner's view of `pack` opened with options `o`: its candidates' memory plans derived as the loader derives them (the knobs searched replace o's). */
export function packPlannerInput(pack: Pack, o: OpenOptions): PlannerInput {
  return plannerInput(pack, (d, b, k) => sparsePlanOptions(pack, d, b, { ...o, pinGates: k.pinGates, hotShare: k.hotShare, clusterSize: k.clusterSize, readAhead: k.readAhead, coldKeep: k.coldKeep }), o.predictor ?? "trained");
}

/**
 * This host's probe: the cached one, else a brief one now (memory, the model's storage, kernels;
 * ~5 s, kept for the next load), with the model's dense steps timed (dense-steps.ts: the first
 * plan of a model shape on this machine, ~1.5 s for the shipped model, ~4 s for a 7B; kept with
 * the probe). Decoder costs are calibrated only by `neuronpipe probe`; until then the planner
 * uses the reference machine's (time-model.ts, UNCALIBRATED).
 */
export function machineForPlan(modelPath: string, pack?: Pack): MachineBounds {
  let m = cachedMachine();
  if (!m) {
    m = measureBounds(modelPath);
    if (m.disk) m.disk.rates = measureReadRates(m.disk.path, 0.03);
    m.kernels = measureKernels(0.03);
    keepMachine(m, machineCachePath());
  }
  return withDenseSteps(m, pack ? packDenseShapes(pack) : plainDenseShapes(readGGUF(modelPath)), machineCachePath());
}

/** A plain model's dense shapes (no predictor). */
const plainDenseShapes = (file: GGUFFile) => denseShapes(file, readConfig(file));

/** The dense shapes a plan of the model at `path` times (a pack's or a plain model's); undefined for a file that is not a GGUF (the probe's `--file` may be any file on the storage). */
export function fileDenseShapes(path: string): DenseShapes | undefined {
  const magic = Buffer.alloc(4);
  const fd = openSync(path, "r");
  try {
    if (readSync(fd, magic, 0, 4, 0) < 4 || magic.toString("latin1") !== "GGUF") return undefined;
  } finally {
    closeSync(fd);
  }
  const file = readGGUF(path);
  return isPackFile(file) ? packDenseShapes(openPack(path)) : plainDenseShapes(file);
}

/** `m` with the dense steps of `shapes` timed on the pool's threads (once: kept in the probe's cache at `cachePath`; undefined shapes: `m` as it is). */
export function withDenseSteps(m: MachineBounds, shapes: DenseShapes | undefined, cachePath: string): MachineBounds {
  const threads = native().getThreads();
  if (!shapes || m.denseSteps?.some((d) => d.key === shapes.key && d.threads === threads)) return m;
  const timed = { ...m, denseSteps: [...(m.denseSteps ?? []), timeDenseSteps(shapes)] };
  keepMachine(timed, cachePath);
  return timed;
}

/** The knobs given explicitly, as plan knobs. */
function explicitKnobs(o: OpenOptions): Partial<PlanKnobs> {
  const k: Partial<PlanKnobs> = {};
  if (o.decoder !== undefined && o.decoder !== "auto" && (o.decoder === "inline" || o.decoder === "pipeline" || o.decoder === "blocking")) k.decoder = o.decoder;
  if (o.threads !== undefined) k.threads = o.threads;
  if (typeof o.pinGates === "boolean") k.pinGates = o.pinGates;
  if (o.hotShare !== undefined) k.hotShare = o.hotShare;
  if (o.clusterSize !== undefined) k.clusterSize = o.clusterSize;
  if (o.readAhead !== undefined) k.readAhead = o.readAhead;
  if (o.coldKeep !== undefined) k.coldKeep = o.coldKeep;
  if (o.io?.queueDepth !== undefined) k.queueDepth = o.io.queueDepth;
  return k;
}

/**
 * The plan for opening `pack` with options `o` under `budget`, and the options with the plan's
 * knobs filled in where `o` leaves them open. `o.plan` false: no plan (the fixed defaults).
 */
export function planForLoad(pack: Pack, budget: number, o: OpenOptions): { plan?: ExecutionPlan; options: OpenOptions } {
  if (o.plan === false) return { options: o };
  const given = explicitKnobs(o);
  let plan: ExecutionPlan;
  if (typeof o.plan === "string" || (o.plan && typeof o.plan === "object")) {
    const where = typeof o.plan === "string" ? o.plan : "the plan given";
    plan = typeof o.plan === "string" ? readPlanFile(o.plan) : o.plan;
    if (plan.model.fingerprint !== pack.source.fingerprint) {
      throw new RangeError(`plan: ${where} was made for ${plan.model.path} (model fingerprint ${plan.model.fingerprint.slice(0, 12)}), not ${pack.path} (${pack.source.fingerprint.slice(0, 12)}); make one with \`neuronpipe plan --model ${pack.path}\``);
    }
    plan = structuredClone(plan);
    if (o.memory === undefined && plan.limits.memory !== null) budget = plan.limits.memory;
  } else {
    const m = machineForPlan(pack.path, pack);
    const predictor = o.predictor ?? "trained";
    const inp = packPlannerInput(pack, o);
    const cores = o.threads ?? native().getThreads() ?? availableParallelism();
    plan = makePlan(inp, m, { memory: budget >= Number.MAX_SAFE_INTEGER ? undefined : budget, cores, contextSize: o.contextSize, predictor }, given);
  }
  const overrides: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(given)) if ((plan.knobs as unknown as Record<string, unknown>)[key] !== v || typeof o.plan !== "string") overrides[key] = v;
  if (Object.keys(overrides).length) plan.overrides = overrides;
  const k = { ...plan.knobs, ...given };
  const options: OpenOptions = {
    ...o,
    memory: o.memory ?? (budget >= Number.MAX_SAFE_INTEGER ? undefined : budget),
    decoder: k.decoder,
    threads: k.threads,
    pinGates: o.pinGates ?? k.pinGates,
    hotShare: k.hotShare,
    clusterSize: k.clusterSize,
    readAhead: k.decoder === "inline" ? k.readAhead : undefined,
    coldKeep: k.coldKeep ?? 0,
    io: { ...o.io, queueDepth: k.queueDepth },
  };
  return { plan, options };
}
