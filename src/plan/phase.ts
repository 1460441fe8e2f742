// This machine's phase: how fast it runs now against its probe. A VM's memory bandwidth and disk
// move in phases: the 7B's attention read at 21–25 GB/s in one hour and 36 in another, against
// a probe's 36 at the same working set, and the probe's 4 KiB reads moved by ~30% between two
// probes an hour apart. A prediction from the probe alone is then off by as much as the machine
// moved. A phase check measures two of the probe's own points again, briefly: the Q4_0 matvec at
// the working set nearest the model's, and 4 KiB random reads at depth 32 on the probe's file
// (not the model's: this VM's disk caches on the host, and a small file's blocks read 23K/s
// once and 41K/s on the third pass, where the probe's 2 GiB span reads alike each time);
// `atPhase` scales the probe's rates by what they read now ÷ what they read when probed.
import { existsSync } from "node:fs";
import { GGMLType, native } from "../native.js";
import { DECODER_COSTS, DENSE_STEP_TIMES, type MachineBounds, type MachinePhase } from "./machine.js";
import { measureReadRates, rate } from "./probe.js";
import { kernelRate } from "./rates.js";

/** Working sets above this are measured at the largest probe point below it: beyond the last-level cache they read alike (this VM: 528 MiB at 37.8 GB/s, 1.4 GiB at 35.9) and a check should not take a model's worth of memory. */
const MAX_CHECK_BYTES = 600 * 2 ** 20;

/** The 4 KiB, depth-32 random-read point of the probe's table. */
const READ_POINT = { kind: "random" as const, blockBytes: 4096, queueDepth: 32 };

/**
 * Measures the phase of `m`'s machine for a model that touches about `workingSet` bytes per token.
 * Holds the matvec's matrices between checks; `dispose()` frees them.
 */
export class PhaseMeter {
  private readonly n = native();
  private readonly cols = 4096;
  private readonly matrices: number;
  private readonly x: number;
  private readonly y: number;
  private readonly count: number;
  private readonly matrixBytes: number;
  private disposed = false;
  /** The probe's working set this meter measures at, and what the time model takes the matvec to read there (GB/s). */
  readonly workingSet: number;
  private readonly probedGBps: number;
  private readonly probedReads: number | undefined;

  constructor(
    readonly m: MachineBounds,
    workingSet: number,
  ) {
    const ws = (m.workingSets ?? []).filter((w) => w.bytes <= MAX_CHECK_BYTES);
    if (ws.length === 0) throw new Error("the machine's probe has no working-set rates: run `neuronpipe probe --refresh`");
    const near = ws.reduce((a, w) => (Math.abs(Math.log(w.bytes / workingSet)) < Math.abs(Math.log(a.bytes / workingSet)) ? w : a));
    this.workingSet = near.bytes;
    // against the rate the time model takes for this matvec (the kernel table scaled by the
    // working-set curve), not the curve's own point: the two are separate passes of the probe and
    // differ (this VM: 32.7 and 37.8 GB/s at 528 MiB), and the check corrects the model's rate
    this.probedGBps = kernelRate(m, GGMLType.Q4_0, "matvec", native().getThreads(), near.bytes);
    this.probedReads = m.disk?.rates?.find((r) => r.kind === READ_POINT.kind && r.blockBytes === READ_POINT.blockBytes && r.queueDepth === READ_POINT.queueDepth && r.batch === undefined)?.readsPerSecond;
    const { n, cols } = this;
    const t = GGMLType.Q4_0;
    this.matrixBytes = n.rowBytes(t, cols) * cols;
    this.count = Math.max(1, Math.round(near.bytes / this.matrixBytes)); // the probe's working sets are whole matrices
    this.x = n.alloc(cols * 4);
    this.y = n.alloc(cols * 4);
    this.matrices = n.alloc(this.count * this.matrixBytes);
    // one matrix quantised once and copied, as the probe does: the rate does not depend on the values
    const src = n.alloc(cols * 64 * 4);
    try {
      n.fillUniform(src, 0, cols * 64, 1n, 1);
      n.fillUniform(this.x, 0, cols, 2n, 1);
      for (let r = 0; r < cols; r += 64) n.quantize(t, src, 0, this.matrices, r * n.rowBytes(t, cols), 64, cols);
      for (let i = 1; i < this.count; i++) n.copy(this.matrices, i * this.matrixBytes, this.matrices, 0, this.matrixBytes);
    } catch (e) {
      this.dispose();
      throw e;
    } finally {
      n.free(src);
    }
  }

  /** The phase now: the matvec for `seconds`, then the reads for `seconds`. */
  measure(seconds = 0.2): MachinePhase {
    if (this.disposed) throw new Error("PhaseMeter: measure after dispose()");
    const { n, cols, count, matrixBytes } = this;
    const pass = () => {
      for (let i = 0; i < count; i++) n.matvec(GGMLType.Q4_0, this.matrices, i * matrixBytes, cols, cols, this.x, 0, this.y, 0);
    };
    // warm for a third of the time, not counted: a fresh process's first tenth of a second reads
    // ~25% slower (page faults, the kernel threads waking)
    for (const w = performance.now(); performance.now() - w < (seconds * 1000) / 3; ) pass();
    const GBps = (rate(pass, seconds) * count * matrixBytes) / 1e9;
    let reads = 1;
    const file = this.m.disk?.path;
    if (file && this.probedReads && existsSync(file)) {
      const now = measureReadRates(file, seconds, [READ_POINT])[0];
      if (now) reads = now.readsPerSecond / this.probedReads;
    }
    return { memory: GBps / this.probedGBps, workingSet: this.workingSet, reads, measuredAt: new Date().toISOString() };
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const id of [this.matrices, this.x, this.y]) this.n.free(id);
  }
}

/** The mean of phases (geometric: a phase is a ratio), e.g. one before a measurement and one after. */
export function meanPhase(phases: readonly MachinePhase[]): MachinePhase {
  const g = (f: (p: MachinePhase) => number) => Math.exp(phases.reduce((a, p) => a + Math.log(f(p)), 0) / phases.length);
  return { memory: g((p) => p.memory), workingSet: phases[0]!.workingSet, reads: g((p) => p.reads), measuredAt: phases.at(-1)!.measuredAt };
}

/**
 * `m` at phase `p`: every compute rate (memory bandwidth, kernels, working sets, shapes) times
 * p.memory, every time (the models' dense steps, the decoders' and attention's calibration,
 * messages) divided by it, every read rate times p.reads. One ratio for all of a side: the check measures one point
 * of each, at the model's working set, and a phase moves the machine as a whole.
 */
export function atPhase(m: MachineBounds, p: MachinePhase): MachineBounds {
  const fast = p.memory;
  const slow = (x: number) => x / fast;
  // every decoder cost is a time: each slower (an absent one stays absent)
  const decoders = m.decoders && Object.fromEntries(Object.entries(m.decoders).map(([k, d]) => [k, d && { ...d, ...Object.fromEntries(DECODER_COSTS.map((c) => [c, d[c] === undefined ? undefined : slow(d[c])])) }]));
  return {
    ...m,
    memory: m.memory.map((x) => ({ ...x, readGBps: x.readGBps * fast })),
    kernels: m.kernels?.map((k) => ({ ...k, GBps: k.GBps === undefined ? undefined : k.GBps * fast, GFLOPs: k.GFLOPs === undefined ? undefined : k.GFLOPs * fast })),
    workingSets: m.workingSets?.map((w) => ({ ...w, GBps: w.GBps * fast })),
    shapes: m.shapes?.map((s) => ({ ...s, GBps: s.GBps * fast })),
    messages: m.messages && { postMessageUs: slow(m.messages.postMessageUs), atomicsUs: slow(m.messages.atomicsUs) },
    decoders: decoders as MachineBounds["decoders"],
    attention: m.attention && { ...m.attention, headPositionNs: slow(m.attention.headPositionNs) },
    denseSteps: m.denseSteps?.map((d) => ({ ...d, ...Object.fromEntries(DENSE_STEP_TIMES.map((k) => [k, d[k] === undefined ? undefined : slow(d[k])])) })),
    disk: m.disk && {
      ...m.disk,
      sequentialGBps: m.disk.sequentialGBps * p.reads,
      random4kIops: m.disk.random4kIops * p.reads,
      rates: m.disk.rates?.map((r) => ({ ...r, readsPerSecond: r.readsPerSecond * p.reads, GBps: r.GBps * p.reads })),
    },
    phase: p,
  };
}
