// The phase check (plan/phase.ts) against hand computations: a machine at half its probe's memory
// speed takes exactly twice as long for every compute step and every fixed cost of the time model,
// and its reads take as long as before; at half its read rate only the reads' throughput doubles.
// The meter against a hand computation: on a clock that moves only in its matvecs, at the time
// 10 GB/s would take, a probe of 20 GB/s gives a phase of 0.5 (a rate measured by the test
// itself moved by tens of percent between seconds: the meter's speed is the benchmark's to show).
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { packPlannerInput } from "../../src/decode/planned.js";
import { machineIdentity, type MachineBounds } from "../../src/plan/machine.js";
import { atPhase, meanPhase, PhaseMeter } from "../../src/plan/phase.js";
import { tokenTime } from "../../src/plan/time-model.js";
import { GGMLType, native } from "../../src/native.js";
import { tensorTypeName } from "../../src/gguf/types.js";
import { budgetForFfnFraction, planMemory, planOptions } from "../../src/sparse/memory-plan.js";
import { openPack } from "../../src/sparse/pack/open.js";
import { runCli } from "../helpers/cli.js";
import { scratchDefaultPack } from "../helpers/default-pack.js";
import { fakeMachine } from "../helpers/fake-machine.js";

const { dir, packPath } = scratchDefaultPack("np-phase-");

/** The planner tests' machine, with a cost per layer, per neuron, per batch and per read, working-set rates and a head cost (its probe file "/x" does not exist). */
function machine(): MachineBounds {
  const cal = { layerUs: 10, neuronNs: 3, batchUs: 20, requestUs: 2 };
  return {
    ...fakeMachine({ inline: cal, pipeline: cal, blocking: cal }),
    workingSets: [
      { bytes: 9437184, GBps: 12 },
      { bytes: 132120576, GBps: 10 },
    ],
    attention: { headPositionNs: 40, runs: [] },
  };
}

describe("machine phase", () => {
  // blocking: its cost per read adds to the reads' device time (inline's hides under it)
  const o = { decoder: "blocking", threads: 2, queueDepth: 32, readAhead: false, position: 60, window: 5 } as const;
  /** The default pack's shape, and its memory plan at a quarter of the FFN (the pack is written before the tests). */
  const quarterOfTheFfn = () => {
    const pack = openPack(packPath);
    const inp = packPlannerInput(pack, { contextSize: 128 });
    const quarter = budgetForFfnFraction(pack, 0.25, planOptions(pack.config, { contextSize: 128 }));
    return { inp, mem: planMemory(pack, quarter, inp.optionsFor("blocking", quarter, { pinGates: false, hotShare: 0.75, clusterSize: 32 })) };
  };
  const phase = (memory: number, reads: number) => ({ memory, reads, workingSet: 2 ** 25, measuredAt: "now" });

  it("at half the memory speed every compute step and fixed cost takes twice as long, the reads' throughput as long as before", () => {
    const { inp, mem } = quarterOfTheFfn();
    const m = machine();
    const t = tokenTime(inp.shape, mem, m, o);
    const h = tokenTime(inp.shape, mem, atPhase(m, phase(0.5, 1)), o);
    expect(t.readsPerToken).toBeGreaterThan(1); // a quarter of the FFN: the token reads
    for (const step of ["attention", "predictor", "gate", "upDown", "output", "host"] as const) expect(h[step] / t[step], step).toBeCloseTo(2, 9);
    expect(h.readThroughputUs).toBeCloseTo(t.readThroughputUs, 9);
    // the decoder's own costs per batch and per read are CPU time: twice as long
    const cpu = (x: typeof t) => x.readBatches * 20 + x.readsPerToken * 2;
    expect(h.reads - h.readThroughputUs).toBeCloseTo(2 * (t.reads - t.readThroughputUs), 6);
    expect(t.reads - t.readThroughputUs).toBeCloseTo(cpu(t), 6);
  });

  it("at half the read rate only the reads' throughput doubles; phase 1 changes nothing", () => {
    const { inp, mem } = quarterOfTheFfn();
    const m = machine();
    const t = tokenTime(inp.shape, mem, m, o);
    const r = tokenTime(inp.shape, mem, atPhase(m, phase(1, 0.5)), o);
    expect(r.readThroughputUs / t.readThroughputUs).toBeCloseTo(2, 9);
    for (const step of ["attention", "predictor", "gate", "upDown", "output", "host"] as const) expect(r[step]).toBeCloseTo(t[step], 9);
    const same = tokenTime(inp.shape, mem, atPhase(m, phase(1, 1)), o);
    expect(same.total).toBeCloseTo(t.total, 9);
    expect(atPhase(m, phase(0.8, 1.25)).phase).toEqual(phase(0.8, 1.25)); // the plan records the check
  });

  it("meanPhase is the geometric mean of the ratios", () => {
    const p = meanPhase([phase(0.5, 2), phase(2, 0.5), phase(1, 1)]);
    expect(p.memory).toBeCloseTo(1, 12);
    expect(p.reads).toBeCloseTo(1, 12);
    expect(meanPhase([phase(0.64, 1), phase(1, 1)]).memory).toBeCloseTo(0.8, 12);
  });

  it("the meter: at a clock where each matvec of its working set takes as long as 10 GB/s, against a probe's 20 GB/s, the phase is 0.5; it reads the probe's working set; no probe file, no read check", () => {
    const n = native();
    const cols = 4096;
    const matrixBytes = n.rowBytes(GGMLType.Q4_0, cols) * cols;
    const count = 3;
    const m = machine();
    const threads = n.getThreads();
    m.memory = [{ threads, readGBps: 40 }];
    m.kernels = [{ type: "Q4_0", kernel: "matvec", threads, GBps: 20 }];
    m.workingSets = [
      { bytes: count * matrixBytes, GBps: 1 }, // the curve is flat here: the table's rate is the model's
      { bytes: 2 ** 27, GBps: 1 },
    ];
    // the clock the meter reads moves only in the matvecs (each still run): a matrix's bytes at 10 GB/s
    let clock = 0;
    const now = vi.spyOn(performance, "now").mockImplementation(() => clock);
    const matvec = n.matvec;
    const matrices = new Set<string>();
    n.matvec = (...a: Parameters<typeof matvec>) => {
      matrices.add(`${tensorTypeName(a[0])} ${a[3]}×${a[4]} at ${a[1]}:${a[2]}`);
      clock += (a[3] * n.rowBytes(a[0], a[4])) / 10e9 * 1e3;
      return matvec(...a);
    };
    const meter = new PhaseMeter(m, 2 ** 25);
    try {
      expect(meter.workingSet).toBe(count * matrixBytes); // the probe's point nearest 32 MiB
      const p = meter.measure(0.05);
      expect(p.memory).toBeCloseTo(0.5, 9);
      expect(p.reads).toBe(1); // the probe's file does not exist
      // every matrix of the working set, and nothing else
      expect(matrices.size).toBe(count);
      for (const k of matrices) expect(k).toMatch(/^Q4_0 4096×4096 at /);
    } finally {
      n.matvec = matvec;
      now.mockRestore();
      meter.dispose();
    }
    expect(() => meter.measure()).toThrow(/after dispose/);
  });

  it("plan --phase: the plan records the check and predicts at it; a probe without working sets is named", async () => {
    // this host's cache holds the test machine (its identity, so the planner takes it)
    const m = { ...machine(), ...machineIdentity() };
    const cache = join(dir, "cache");
    mkdirSync(cache, { recursive: true });
    writeFileSync(join(cache, "machine.json"), JSON.stringify(m));
    const env = { NEURONPIPE_CACHE_DIR: cache };
    const plain = await runCli(["plan", "--model", packPath, "--ctx", "128", "--json"], env);
    const checked = await runCli(["plan", "--model", packPath, "--ctx", "128", "--json", "--phase"], env);
    expect(plain.code, plain.err).toBe(0);
    expect(checked.code, checked.err).toBe(0);
    const [p, c] = [JSON.parse(plain.out), JSON.parse(checked.out)];
    expect(p.machine.phase).toBeUndefined();
    const ph = c.machine.phase;
    expect(ph.reads).toBe(1); // the test machine's probe file does not exist
    expect(ph.memory).toBeGreaterThan(0);
    // the default pack (~60 MiB) is nearer the probe's 126 MiB point than its 9 MiB one, in log
    expect(ph.workingSet).toBe(132120576);
    // everything resident: no reads, so every µs of the token scales by 1 / phase
    expect(p.predicted.reads).toBe(0);
    expect(c.predicted.total * ph.memory).toBeCloseTo(p.predicted.total, 6);
    writeFileSync(join(cache, "machine.json"), JSON.stringify({ ...m, workingSets: undefined }));
    const bare = await runCli(["plan", "--model", packPath, "--ctx", "128", "--phase"], env);
    expect(bare.code).not.toBe(0);
    expect(bare.err).toMatch(/no working-set rates: run `neuronpipe probe --refresh`/);
  });
});
