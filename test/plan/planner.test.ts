// The offline planner against independent references: the cache model against closed forms and
// against a simulated LRU cache; the time model against a hand computation from a machine whose
// rates are set by the test; the planner's plans against the loader (they fit the budget they
// name, explicit options override them and are recorded, a saved plan is used and a plan for
// another model refused), against its own inverse (--min-speed names the smallest budget that
// reaches the speed), and the measured reads of a decode against the reads it predicts.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadModel } from "../../src/api/model.js";
import { packPlannerInput } from "../../src/decode/planned.js";
import { forecastCache, type ProfileRates } from "../../src/plan/cache-model.js";
import type { MachineBounds } from "../../src/plan/machine.js";
import { readPlanFile, writePlanFile } from "../../src/plan/plan-file.js";
import { budgetForSpeed, makePlan, smallestBudget, sweepPlans, wholeBudget, type PlannerInput } from "../../src/plan/planner.js";
import { batchReadUs, callCosts, kernelRate, shapeFactor, workingSetFactor } from "../../src/plan/rates.js";
import { AHEAD_EXTRA_BUNDLES, AHEAD_EXTRA_READS, AHEAD_SHARE, tokenTime } from "../../src/plan/time-model.js";
import { native } from "../../src/native.js";
import { ReuseCounter } from "../../src/sparse/reuse.js";
import { budgetForFfnFraction, planMemory, planOptions } from "../../src/sparse/memory-plan.js";
import { openPack } from "../../src/sparse/pack/open.js";
import { runCli } from "../helpers/cli.js";
import { fakeMachine } from "../helpers/fake-machine.js";
import { countedReads } from "../helpers/counted-reads.js";
import { defaultModel, scratchDefaultPack } from "../helpers/default-pack.js";

const { dir, packPath } = scratchDefaultPack("np-plan-");
const ctx = 128;

function rates(fire: number[], flagRatio = 1): ProfileRates {
  return { nLayer: 1, nFF: fire.length, fire: Float32Array.from(fire), flagRatio: Float32Array.of(flagRatio), firedPerToken: fire.reduce((a, b) => a + b, 0), flaggedPerToken: fire.reduce((a, b) => a + Math.min(1, b * flagRatio), 0), oracle: false };
}

const lcg = (seed: number) => () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32);

/** Misses per token of an LRU cache of S slots over n neurons, 4000 tokens (the first 500 not counted); `fires(i)` says whether neuron i is used this token (asked in order i = 0..n-1, token after token). */
function simulatedLruMisses(n: number, S: number, fires: (i: number) => boolean): number {
  const lastUse = new Float64Array(n).fill(-1);
  const resident = new Set<number>();
  let misses = 0;
  const T = 4000;
  for (let t = 0; t < T; t++) {
    for (let i = 0; i < n; i++) {
      if (!fires(i)) continue;
      if (!resident.has(i)) {
        if (t >= 500) misses++;
        if (resident.size >= S) {
          let victim = -1;
          for (const r of resident) if (victim < 0 || lastUse[r]! < lastUse[victim]!) victim = r;
          resident.delete(victim);
        }
        resident.add(i);
      }
      lastUse[i] = t + i / n;
    }
  }
  return misses / (T - 500);
}

function input(predictor: "trained" | "oracle" = "trained"): PlannerInput {
  const pack = openPack(packPath);
  return packPlannerInput(pack, { contextSize: ctx, predictor });
}

describe("cache model", () => {
  it("equal rates: an LRU of S slots over n neurons hits S/n of them (closed form); everything resident misses nothing", () => {
    const a = 0.3;
    const n = 64;
    for (const S of [8, 16, 48]) {
      const f = forecastCache(rates(new Array(n).fill(a)), { slots: S, hotSlots: 0, clusterSize: 8, gatesPinned: true });
      expect(f.missesPerToken).toBeCloseTo(a * (n - S), 4);
      expect(f.hitRate).toBeCloseTo(S / n, 4);
    }
    const all = forecastCache(rates(new Array(n).fill(a)), { slots: n, hotSlots: 0, clusterSize: 8, gatesPinned: true });
    expect(all.missesPerToken).toBe(0);
  });

  it("whole bundles: a flagged neuron found absent reads its gate block, and up+down only if it fires; a window of w tokens keeps at most what was used in the last w", () => {
    // flag ratio 2: each neuron flagged at 0.4, firing at 0.2; demotion keeps what fired
    const n = 32;
    const f = forecastCache(rates(new Array(n).fill(0.2), 2), { slots: 8, hotSlots: 0, clusterSize: 8, gatesPinned: false });
    expect(f.gateMisses[0]).toBeCloseTo(0.4 * (n - 8), 4);
    expect(f.upDownMisses[0]).toBeCloseTo(0.2 * (n - 8), 4);
    // LLMFlash: plenty of slots, window 1: a neuron is there only if it was used last token
    const w = forecastCache(rates([0.5, 0.25, 0.1]), { slots: 100, hotSlots: 0, clusterSize: 1, gatesPinned: false, window: 1 });
    expect(w.bundleMisses[0]).toBeCloseTo(0.5 * 0.5 + 0.25 * 0.75 + 0.1 * 0.9, 4);
    // a run of consecutive missing positions is one request: Σ m_i·(1 − m_(i−1))
    expect(w.requestsPerToken).toBeCloseTo(0.25 + 0.1875 * (1 - 0.25) + 0.09 * (1 - 0.1875), 4);
  });

  it("skewed rates: within 5% of a simulated LRU cache under independent accesses", () => {
    // Zipf-like rates, 512 neurons, 96 slots; the simulation draws each neuron per token with its rate
    const n = 512;
    const fire = Array.from({ length: n }, (_, i) => Math.min(1, 0.9 / Math.pow(i + 1, 0.8)));
    const S = 96;
    const model = forecastCache(rates(fire), { slots: S, hotSlots: 0, clusterSize: 8, gatesPinned: true });
    const rnd = lcg(7);
    const simulated = simulatedLruMisses(n, S, (i) => rnd() < fire[i]!);
    expect(Math.abs(model.missesPerToken / simulated - 1)).toBeLessThan(0.05);
  });
});

describe("cache model: cold neurons kept", () => {
  it("the K most-fired neurons outside the hot region never miss and the LRU of the other slots runs over the rest: within 5% of a simulated cache that does the same", () => {
    const n = 512;
    const fire = Array.from({ length: n }, (_, i) => Math.min(1, 0.9 / Math.pow(((i * 37) % n) + 1, 0.8))); // rates in no order
    const S = 160;
    const K = 64;
    const model = forecastCache(rates(fire), { slots: S, hotSlots: 0, clusterSize: 8, gatesPinned: true, coldKept: K });
    const keptSet = new Set(Array.from(fire.keys()).sort((a, b) => fire[b]! - fire[a]! || a - b).slice(0, K));
    const rnd = lcg(11);
    // the others through an LRU of S − K slots
    const others = Array.from(fire.keys()).filter((i) => !keptSet.has(i));
    const simulated = simulatedLruMisses(others.length, S - K, (j) => rnd() < fire[others[j]!]!);
    expect(Math.abs(model.missesPerToken / simulated - 1)).toBeLessThan(0.05);
    // keeping them beats an LRU of all S slots here (rates fixed, no reuse to exploit)
    const lru = forecastCache(rates(fire), { slots: S, hotSlots: 0, clusterSize: 8, gatesPinned: true });
    expect(model.missesPerToken).toBeLessThan(lru.missesPerToken);
  });
});

describe("cache model: firings that persist from token to token", () => {
  it("within 5% of a simulated LRU cache whose neurons fire as two-state chains (ρ 0.4), and fewer misses than independent tokens", () => {
    // a neuron that fired fires again with p + ρ(1 − p), one that did not with p(1 − ρ): rate p
    const n = 512;
    const fire = Array.from({ length: n }, (_, i) => Math.min(0.9, 0.6 / Math.pow(i + 1, 0.7)));
    const rho = 0.4;
    const S = 96;
    const r = { ...rates(fire), persist: Float32Array.of(rho) };
    const model = forecastCache(r, { slots: S, hotSlots: 0, clusterSize: 8, gatesPinned: true });
    const independent = forecastCache(rates(fire), { slots: S, hotSlots: 0, clusterSize: 8, gatesPinned: true });
    const rnd = lcg(11);
    const on = fire.map((p) => rnd() < p);
    let fired = 0;
    const simulated = simulatedLruMisses(n, S, (i) => {
      const p = fire[i]!;
      on[i] = rnd() < (on[i] ? p + rho * (1 - p) : p * (1 - rho));
      if (on[i]) fired++;
      return on[i]!;
    });
    expect(fired / 4000 / fire.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 1); // the chain keeps rate p
    expect(Math.abs(model.missesPerToken / simulated - 1)).toBeLessThan(0.05);
    expect(model.missesPerToken).toBeLessThan(0.85 * independent.missesPerToken);
  });
});

describe("cache model: firings that come back over many tokens", () => {
  it("with the profile's measured reuse, within 20% of a simulated LRU cache whose neurons fire in bursts; the one-token chain fitted to the same sequence is off by more than 100%", () => {
    // each neuron is in a slow "topic" state: active a share a of the tokens (leaving it with
    // probability 0.03 per token), firing with probability p/a while active and never otherwise
    const n = 512;
    const fire = Array.from({ length: n }, (_, i) => Math.min(0.5, 0.4 / Math.pow(i + 1, 0.7)));
    const share = fire.map((p) => Math.min(1, 4 * p));
    const burst = (rnd: () => number) => {
      const active = share.map((a) => rnd() < a);
      return {
        step(i: number) {
          const a = share[i]!;
          if (a < 1) active[i] = active[i] ? rnd() >= 0.03 : rnd() < (0.03 * a) / (1 - a);
          return active[i]! && rnd() < fire[i]! / a;
        },
      };
    };
    // the profile: 64 windows of 256 tokens, each from a fresh state
    const counter = new ReuseCounter(1, n, 256);
    const counts = new Uint32Array(n);
    const rnd = lcg(3);
    let both = 0;
    let before = 0;
    for (let w = 0; w < 64; w++) {
      const b = burst(rnd);
      const prev = new Uint8Array(n);
      counter.startWindow();
      for (let t = 0; t < 256; t++) {
        const on = Array.from({ length: n }, (_, i) => b.step(i));
        counter.addToken(0, (i) => on[i]!);
        on.forEach((x, i) => {
          if (x) counts[i]!++;
          if (t > 0 && prev[i]) {
            before++;
            if (x) both++;
          }
          prev[i] = x ? 1 : 0;
        });
      }
    }
    const measuredFire = Array.from(counts, (c) => c / (64 * 256));
    const reuse = counter.finish([counts], 64 * 256);
    // the chain with the same one-token persistence: P(fire | fired) = p + ρ(1 − p), pooled
    const P = measuredFire.reduce((a, b) => a + b, 0);
    const P2 = measuredFire.reduce((a, b) => a + b * b, 0);
    const rho = ((both / before) * P - P2) / (P - P2);
    for (const S of [32, 48, 64]) {
      const shape = { slots: S, hotSlots: 0, clusterSize: 8, gatesPinned: true };
      const withReuse = forecastCache({ ...rates(measuredFire), reuse }, shape).missesPerToken;
      const chain = forecastCache({ ...rates(measuredFire), persist: Float32Array.of(rho) }, shape).missesPerToken;
      const sim = burst(lcg(11));
      const simulated = simulatedLruMisses(n, S, (i) => sim.step(i));
      console.log(`[cache model] bursts, ${S} slots: simulated ${simulated.toFixed(2)} misses per token, measured reuse ${withReuse.toFixed(2)}, chain (ρ ${rho.toFixed(3)}) ${chain.toFixed(2)}`);
      expect(Math.abs(withReuse / simulated - 1)).toBeLessThan(0.2); // measured −15%, −1%, −2%
      expect(chain / simulated - 1).toBeGreaterThan(1); // measured +325% … +560%
    }
  });
});

describe("cache model: false positives as the trainer measured them", () => {
  it("LLMFlash's window with false flags spread evenly: within 5% of a simulated window cache, where the proportional rule is off by more than 20%", () => {
    // every neuron flagged on 3% of the tokens it does not fire on, whatever its rate; window 5
    const n = 512;
    const w = 5;
    const fire = Array.from({ length: n }, (_, i) => Math.min(0.9, 0.5 / Math.pow(i + 1, 0.9)));
    const falseFlag = new Float32Array(n).fill(0.03);
    const flagged = fire.reduce((a, p) => a + p + 0.03 * (1 - p), 0);
    const firedSum = fire.reduce((a, b) => a + b, 0);
    const measured: ProfileRates = { ...rates(fire), falseFlag, flaggedPerToken: flagged };
    const shape = { slots: n, hotSlots: 0, clusterSize: 1, gatesPinned: false, window: w };
    const forecast = forecastCache(measured, shape);
    const model = forecast.missesPerToken;
    // the rule with the same flagged/fired ratio puts the false flags on the frequent neurons
    const rule = forecastCache(rates(fire, flagged / firedSum), shape).missesPerToken;
    const rnd = lcg(5);
    const lastUse = new Float64Array(n).fill(-Infinity);
    let misses = 0;
    let runs = 0;
    const T = 4000;
    for (let t = 0; t < T; t++) {
      let before = false; // neuron i − 1 missed this token (a read in progress)
      for (let i = 0; i < n; i++) {
        const used = rnd() < fire[i]! || rnd() < 0.03;
        const miss = used && t - lastUse[i]! > w;
        if (miss && t >= 500) {
          misses++;
          if (!before) runs++;
        }
        before = miss;
        if (used) lastUse[i] = t;
      }
    }
    const simulated = misses / (T - 500);
    expect(Math.abs(model / simulated - 1)).toBeLessThan(0.05);
    expect(Math.abs(forecast.requestsPerToken / (runs / (T - 500)) - 1)).toBeLessThan(0.05);
    expect(forecast.requestsPerToken).toBeLessThan(model); // runs merge
    expect(Math.abs(rule / simulated - 1)).toBeGreaterThan(0.2);
  });
});

describe("time model", () => {
  it("a read's own cost adds to the batches' device time, per request, for every decoder; a calibration run's measured reads scale the forecast's", () => {
    const inp = input();
    const { pack } = inp;
    const quarter = budgetForFfnFraction(pack, 0.25, planOptions(pack.config, { contextSize: ctx }));
    const o = { threads: 2, queueDepth: 32, readAhead: false, position: 9, window: 5 } as const;
    for (const decoder of ["inline", "blocking"] as const) {
      const mem = planMemory(pack, quarter, inp.optionsFor(decoder, quarter, { pinGates: false, hotShare: 0.75, clusterSize: 32 }));
      const fc = forecastCache(inp.shape.rates, { slots: mem.slots, hotSlots: decoder === "blocking" ? 0 : mem.hotSlots, clusterSize: mem.clusterSize, gatesPinned: mem.gatesPinned, window: decoder === "blocking" ? 5 : undefined });
      const at = (requestUs: number, readScale = 1) => tokenTime(inp.shape, mem, fakeMachine({ [decoder]: { layerUs: 10, neuronNs: 0, batchUs: 7, requestUs } }), { ...o, decoder, readScale });
      for (const scale of [1, 10]) {
        // by hand: each layer's batches (runs of gate blocks, of up+down blocks, of bundles),
        // their requests scaled, every request's cost
        const ks = Array.from(fc.gateRequests).flatMap((g, l) => [g, fc.upDownRequests[l]!, fc.bundleRequests[l]!]).map((k) => k * scale).filter((k) => k > 0.01);
        const exposed = ks.reduce((a, k) => a + k, 0);
        const [none, small] = [at(0, scale), at(0.001, scale)];
        expect(none.readsPerToken).toBeCloseTo(scale * fc.requestsPerToken, 6);
        expect(none.readsPerToken).toBeGreaterThan(10);
        // no cost per read: the device time and the batches' cost
        expect(none.reads).toBeCloseTo(none.readThroughputUs + 7 * none.readBatches, 6);
        expect(small.reads - none.reads).toBeCloseTo(0.001 * exposed, 6);
      }
      // the device time grows with the reads (the batch table is not linear, so not by 10×)
      expect(at(0, 10).readThroughputUs).toBeGreaterThan(5 * at(0, 1).readThroughputUs);
    }
  });

  it("a batch's read time from the probe's batch rows, by hand: linear in reads, log depth and log block size; one wave the same at every depth; beyond the largest batch, the full queue's rate", () => {
    const m = fakeMachine();
    const rows = (blockBytes: number, queueDepth: number, us: [number, number][]) =>
      us.map(([batch, t]) => ({ kind: "random" as const, blockBytes, queueDepth, batch, readsPerSecond: (batch / t) * 1e6, GBps: 0 }));
    // 4 KiB at depth 32: batches of 1, 16, 32 take 100, 400, 600 µs; the full queue (128 a call) 80K/s: 1,600 µs
    // 4 KiB at depth 128: batches of 1, 64 take 100, 500 µs; the full queue (512 a call) 80K/s: 6,400 µs
    m.disk!.rates = [...m.disk!.rates!, ...rows(4096, 32, [[1, 100], [16, 400], [32, 600]]), ...rows(4096, 128, [[1, 100], [64, 500]])];
    expect(batchReadUs(m, 4096, 32, 0.5)).toBeCloseTo(50, 6);
    expect(batchReadUs(m, 4096, 32, 24)).toBeCloseTo(500, 6);
    expect(batchReadUs(m, 4096, 32, 64)).toBeCloseTo(600 + ((64 - 32) / (128 - 32)) * 1000, 6);
    expect(batchReadUs(m, 4096, 32, 200)).toBeCloseTo(1600 + 72 * 12.5, 6);
    // a batch no deeper than the queue is one wave at any depth: at depth 128 a batch of 16 or
    // 24 takes what depth 32 measured for it (the mean of both depths' batches of one: 100)
    expect(batchReadUs(m, 4096, 128, 16)).toBeCloseTo(400, 6);
    expect(batchReadUs(m, 4096, 128, 24)).toBeCloseTo(500, 6);
    // depth 64, halfway in log between 32 and 128: k = 64 is 933.3 and 500
    expect(batchReadUs(m, 4096, 64, 64)).toBeCloseTo((600 + (32 / 96) * 1000 + 500) / 2, 6);
    // only 4 KiB has batch rows: every block size reads as 4 KiB; held beyond the depths
    expect(batchReadUs(m, 65536, 8, 24)).toBeCloseTo(500, 6);
    // a probe without batch rows: k ÷ the rate at depth min(k, depth) (the test machine: 10K/s at 1, 80K/s from 8)
    const old = fakeMachine();
    expect(batchReadUs(old, 4096, 32, 1)).toBeCloseTo(100, 6);
    expect(batchReadUs(old, 4096, 32, 64)).toBeCloseTo(800, 6);
  });

  it("everything resident: the hand computation from the test machine's rates", () => {
    const inp = input();
    const { pack, costs } = { pack: inp.pack, costs: inp.shape.costs };
    const m = fakeMachine();
    const mem = planMemory(pack, Number.MAX_SAFE_INTEGER, inp.optionsFor("inline", Number.MAX_SAFE_INTEGER, { pinGates: false, hotShare: 0.75, clusterSize: 32 }));
    const t = tokenTime(inp.shape, mem, m, { decoder: "inline", threads: 2, queueDepth: 32, readAhead: false, position: 9, window: 5 });
    const { nLayer } = pack.config;
    const r = inp.shape.rates;
    const us = (bytes: number, GBps: number) => bytes / (GBps * 1e3);
    // by hand: every kernel 10 GB/s, memory 40 GB/s on 2 threads, 10 µs per layer
    const expected =
      us(nLayer * costs.attentionBytes, 10) +
      us(nLayer * costs.kvBytesPerPosition * 10, 40) +
      us(costs.predictorBytes!, 10) +
      us(r.flaggedPerToken * pack.gateBytes, 10) +
      us(r.firedPerToken * (pack.upBytes + pack.downBytes), 10) +
      us(costs.outputBytes, 10) +
      nLayer * 10;
    expect(t.reads).toBe(0);
    expect(t.total / expected).toBeCloseTo(1, 9);
    expect(t.tokPerSec * expected).toBeCloseTo(1e6, 0);
    // one thread: kernels scale with the memory bandwidth (20 of 40 GB/s): the compute takes twice as long
    const t1 = tokenTime(inp.shape, mem, m, { decoder: "inline", threads: 1, queueDepth: 32, readAhead: false, position: 9, window: 5 });
    expect(t1.total - t1.host).toBeCloseTo(2 * (t.total - t.host), 6);
  });

  it("working sets: kernels scale by the probe's Q4_0 matvec at the bytes a token touches, log-log between its points, against the 128 MiB of the kernel table", () => {
    const m = { ...fakeMachine(), workingSets: [{ bytes: 2 ** 24, GBps: 80 }, { bytes: 2 ** 27, GBps: 40 }, { bytes: 2 ** 30, GBps: 20 }] };
    expect(workingSetFactor(m, 2 ** 27)).toBeCloseTo(1, 12);
    expect(workingSetFactor(m, 2 ** 30)).toBeCloseTo(0.5, 12);
    expect(workingSetFactor(m, 2 ** 33)).toBeCloseTo(0.5, 12); // flat beyond the last point
    expect(workingSetFactor(m, 2 ** 20)).toBeCloseTo(2, 12);
    expect(workingSetFactor(m, 2 ** 28.5)).toBeCloseTo(Math.sqrt(40 * 20) / 40, 12);
    expect(workingSetFactor(fakeMachine(), 2 ** 33)).toBe(1); // no curve: the table as measured
    expect(kernelRate(m, 2, "gather", 2, 2 ** 30)).toBeCloseTo(5, 12); // Q4_0 gather 10 GB/s × 0.5
    // the default pack's resident token touches W bytes: every compute step takes 1/factor(W) as long
    const inp = input();
    const { pack, costs } = { pack: inp.pack, costs: inp.shape.costs };
    const r = inp.shape.rates;
    const W = pack.config.nLayer * costs.attentionBytes + costs.predictorBytes! + r.flaggedPerToken * pack.gateBytes + r.firedPerToken * (pack.upBytes + pack.downBytes) + costs.outputBytes;
    const curve = { ...fakeMachine(), workingSets: [{ bytes: 1000, GBps: 20 }, { bytes: 2 ** 27, GBps: 40 }] };
    const f = Math.exp(Math.log(20) + ((Math.log(W) - Math.log(1000)) / (Math.log(2 ** 27) - Math.log(1000))) * (Math.log(40) - Math.log(20))) / 40;
    expect(f).toBeGreaterThan(0.5);
    expect(f).toBeLessThan(1);
    const mem = planMemory(pack, Number.MAX_SAFE_INTEGER, inp.optionsFor("inline", Number.MAX_SAFE_INTEGER, { pinGates: false, hotShare: 0.75, clusterSize: 32 }));
    const o = { decoder: "inline", threads: 2, queueDepth: 32, readAhead: false, position: 9, window: 5 } as const;
    const [flat, scaled] = [tokenTime(inp.shape, mem, fakeMachine(), o), tokenTime(inp.shape, mem, curve, o)];
    for (const step of ["predictor", "gate", "upDown", "output"] as const) expect(scaled[step] * f, step).toBeCloseTo(flat[step], 9);
  });

  it("matrix shapes: the probe's rates by shape give back the byte, row and call costs they were made from; a step costs its calls and rows against the table's 4096×4096 call", () => {
    // rates made by hand from t = bytes·0.03 + rows·10 + 8000 ns (Q4_0: 18 bytes per 32 weights)
    const made = (rows: number, cols: number) => {
      const bytes = (rows * cols * 18) / 32;
      return { rows, cols, GBps: bytes / (bytes * 0.03 + rows * 10 + 8000) };
    };
    const shapes = [made(1024, 1024), made(4096, 1024), made(1024, 4096), made(4096, 4096), made(32000, 1024)];
    const c = callCosts(shapes)!;
    expect(c.byteNs).toBeCloseTo(0.03, 9);
    expect(c.rowNs).toBeCloseTo(10, 6);
    expect(c.callNs).toBeCloseTo(8000, 3);
    expect(callCosts(shapes.slice(0, 2))).toBeUndefined(); // two shapes cannot fix three costs
    // 80 calls of 1024×1024 against one 4096×4096 call, per byte, by hand
    const ref = { bytes: 4096 * 128 * 18, rows: 4096, calls: 1 };
    const small = { bytes: 80 * 1024 * 32 * 18, rows: 80 * 1024, calls: 80 };
    const perByte = (x: typeof ref) => (x.bytes * 0.03 + x.rows * 10 + x.calls * 8000) / x.bytes;
    expect(shapeFactor(c, small, ref)).toBeCloseTo(perByte(small) / perByte(ref), 6);
    expect(shapeFactor(c, small, ref)).toBeGreaterThan(1.3);
    expect(shapeFactor(undefined, small, ref)).toBe(1);
    // the default pack's attention (4 matvecs per layer of its rows) and output take that factor longer; the other steps too, each by its own
    const inp = input();
    const { pack, costs } = { pack: inp.pack, costs: inp.shape.costs };
    const mem = planMemory(pack, Number.MAX_SAFE_INTEGER, inp.optionsFor("inline", Number.MAX_SAFE_INTEGER, { pinGates: false, hotShare: 0.75, clusterSize: 32 }));
    const o = { decoder: "inline", threads: 2, queueDepth: 32, readAhead: false, position: 0, window: 5 } as const;
    const noKv = { ...inp.shape, costs: { ...costs, kvBytesPerPosition: 0 } };
    const [flat, shaped] = [tokenTime(noKv, mem, fakeMachine(), o), tokenTime(noKv, mem, { ...fakeMachine(), shapes }, o)];
    const { nLayer } = pack.config;
    expect(costs.attentionRows).toBe(256 + 128 + 128 + 256); // attn_q, attn_k, attn_v, attn_output rows of the default model
    const attention = shapeFactor(c, { bytes: nLayer * costs.attentionBytes, rows: nLayer * costs.attentionRows!, calls: 4 * nLayer }, ref);
    expect(shaped.attention / flat.attention).toBeCloseTo(attention, 9);
    expect(shaped.output / flat.output).toBeCloseTo(shapeFactor(c, { bytes: costs.outputBytes, rows: costs.outputRows!, calls: 1 }, ref), 9);
    for (const step of ["predictor", "gate", "upDown"] as const) expect(shaped[step], step).toBeGreaterThan(flat[step]);
  });

  it("reads: k requests per batch at depth k; the pipeline and inline (no reads ahead) both add them, none hidden", () => {
    const inp = input();
    const m = fakeMachine();
    const budget = budgetForFfnFraction(inp.pack, 0.3, planOptions(inp.pack.config, { contextSize: ctx }));
    const mem = planMemory(inp.pack, budget, inp.optionsFor("pipeline", budget, { pinGates: false, hotShare: 0.75, clusterSize: 32 }));
    const o = { threads: 2, queueDepth: 32, readAhead: false, position: 9, window: 5 } as const;
    const pipe = tokenTime(inp.shape, mem, m, { ...o, decoder: "pipeline" });
    const compute = pipe.attention + pipe.predictor + pipe.gate + pipe.upDown + pipe.output;
    expect(pipe.reads).toBeGreaterThan(0);
    // the test machine reads 80K/s from depth 8 on, 10K/s at depth 1 (interpolated between)
    expect(pipe.reads).toBeGreaterThan((pipe.readsPerToken / 80_000) * 1e6 * 0.999);
    // on 2 cores that all compute, the pipeline's loader takes their time: measured, nothing hid
    expect(pipe.hidden).toBe(0);
    expect(pipe.total).toBeCloseTo(compute + pipe.host + pipe.reads, 6);
    const inline = tokenTime(inp.shape, mem, m, { ...o, decoder: "inline" });
    expect(inline.hidden).toBe(0);
    expect(inline.total).toBeCloseTo(compute + inline.host + inline.reads, 6);
  });

  it("host: µs per layer, more by the calibrated pinned-layer cost when the plan pins gate rows, + ns per flagged neuron (by hand)", () => {
    const inp = input();
    const budget = budgetForFfnFraction(inp.pack, 0.6, planOptions(inp.pack.config, { contextSize: ctx }));
    const mem = (pinGates: boolean) => planMemory(inp.pack, budget, inp.optionsFor("inline", budget, { pinGates, hotShare: 0.5, clusterSize: 32 }));
    const [pinned, loose] = [mem(true), mem(false)];
    expect([pinned.gatesPinned, loose.gatesPinned]).toEqual([true, false]);
    const cal = { layerUs: 30, neuronNs: 2, batchUs: 0, requestUs: 0, pinnedLayerUs: 9 };
    const m = { ...fakeMachine(), decoders: { inline: cal } };
    const o = { decoder: "inline", threads: 2, queueDepth: 32, readAhead: false, position: 9, window: 5 } as const;
    const { nLayer } = inp.pack.config;
    const flagged = inp.shape.rates.flaggedPerToken;
    expect(tokenTime(inp.shape, pinned, m, o).host).toBeCloseTo(nLayer * (30 + 9) + (flagged * 2) / 1e3, 9);
    expect(tokenTime(inp.shape, loose, m, o).host).toBeCloseTo(nLayer * 30 + (flagged * 2) / 1e3, 9);
    // an older probe without the cost: pinned and not alike
    const { pinnedLayerUs: _, ...older } = cal;
    expect(tokenTime(inp.shape, pinned, { ...m, decoders: { inline: older } }, o).host).toBeCloseTo(nLayer * 30 + (flagged * 2) / 1e3, 9);
  });

  it("reads ahead (inline, pinned gate rows) read AHEAD_EXTRA_READS more up+down blocks than the cache model's misses, and hide AHEAD_SHARE of the reads' device time under compute", () => {
    const inp = input();
    const m = fakeMachine();
    const budget = budgetForFfnFraction(inp.pack, 0.6, planOptions(inp.pack.config, { contextSize: ctx }));
    const mem = planMemory(inp.pack, budget, inp.optionsFor("inline", budget, { pinGates: true, hotShare: 0.5, clusterSize: 32, readAhead: 64 }));
    expect(mem.gatesPinned).toBe(true);
    const fc = forecastCache(inp.shape.rates, { slots: mem.slots, hotSlots: mem.hotSlots, clusterSize: mem.clusterSize, gatesPinned: true });
    const upDown = fc.upDownMisses.reduce((a, b) => a + b, 0);
    const upDownRequests = fc.upDownRequests.reduce((a, b) => a + b, 0); // runs of adjacent misses
    expect(upDown).toBeGreaterThan(1);
    expect(upDownRequests).toBeLessThan(upDown);
    const o = { decoder: "inline", threads: 2, queueDepth: 32, position: 9, window: 5 } as const;
    const [off, on] = [tokenTime(inp.shape, mem, m, { ...o, readAhead: false }), tokenTime(inp.shape, mem, m, { ...o, readAhead: true })];
    expect(off.readsPerToken).toBeCloseTo(fc.requestsPerToken, 9);
    expect(on.readsPerToken).toBeCloseTo(fc.requestsPerToken + AHEAD_EXTRA_READS * upDownRequests, 9);
    // each run reads its first up+down rows (rounded up to the file's direct-I/O alignment) and a
    // whole bundle more for each neuron it goes on to
    const { upDownRows } = rowReads(inp);
    expect(on.readBytesPerToken - off.readBytesPerToken).toBeCloseTo(AHEAD_EXTRA_READS * (upDownRequests * upDownRows + (upDown - upDownRequests) * inp.pack.bundleBytes), 3);
    const compute = on.attention + on.predictor + on.gate + on.upDown + on.output;
    expect(AHEAD_SHARE * on.readThroughputUs).toBeLessThan(compute);
    expect(on.hidden).toBeCloseTo(AHEAD_SHARE * on.readThroughputUs, 9);
    // the decoder's own costs per read and batch run on the calling thread: none of them hides
    const own = { layerUs: 0, neuronNs: 0, batchUs: 50, requestUs: 10 };
    const costly = tokenTime(inp.shape, mem, { ...m, decoders: { inline: own } }, { ...o, readAhead: true });
    expect(costly.reads - costly.readThroughputUs).toBeCloseTo(50 * costly.readBatches + 10 * costly.readsPerToken, 6);
    expect(costly.hidden).toBeCloseTo(on.hidden, 9);
  });
});

/**
 * What a request starting with an up+down block or a bundle reads, by hand: the rows up to the
 * next multiple of the pack file's direct-I/O alignment (512 on a 512-byte-sector disk), not the
 * block's padding; the alignment is the loader's own for that file.
 */
function rowReads(inp: PlannerInput): { upDownRows: number; bundleRows: number } {
  const n = native();
  const id = n.openLoader(inp.pack.path, { backend: "pread", queueDepth: 1, directIO: true });
  const align = n.loaderInfo(id).align;
  n.closeLoader(id);
  expect(inp.shape.readAlign).toBe(align);
  const a = Math.max(512, align);
  const { upBytes, downBytes, upDownBlock, gateBlock } = inp.pack;
  const upDownRows = Math.min(upDownBlock, Math.ceil((upBytes + downBytes) / a) * a);
  return { upDownRows, bundleRows: gateBlock + upDownRows };
}

describe("time model: reads ahead of whole bundles", () => {
  it("without pinned gate rows, every flagged neuron found absent is read whole, AHEAD_EXTRA_BUNDLES more of them; no gate filter in the look-ahead", () => {
    const inp = input();
    const m = fakeMachine();
    const budget = budgetForFfnFraction(inp.pack, 0.6, planOptions(inp.pack.config, { contextSize: ctx }));
    const mem = planMemory(inp.pack, budget, inp.optionsFor("inline", budget, { pinGates: false, hotShare: 0.5, clusterSize: 32, readAhead: 64 }));
    expect(mem.gatesPinned).toBe(false);
    expect(Math.floor(mem.readAheadBytes / inp.pack.bundleBytes)).toBe(64);
    const fc = forecastCache(inp.shape.rates, { slots: mem.slots, hotSlots: mem.hotSlots, clusterSize: mem.clusterSize, gatesPinned: false, coldKept: mem.coldKept });
    const gateMisses = fc.gateMisses.reduce((a, b) => a + b, 0);
    const gateRequests = fc.gateRequests.reduce((a, b) => a + b, 0);
    expect(gateMisses).toBeGreaterThan(1);
    const o = { decoder: "inline", threads: 2, queueDepth: 32, position: 9, window: 5 } as const;
    const [off, on] = [tokenTime(inp.shape, mem, m, { ...o, readAhead: false }), tokenTime(inp.shape, mem, m, { ...o, readAhead: true })];
    expect(off.readsPerToken).toBeCloseTo(fc.requestsPerToken, 9);
    expect(on.readsPerToken).toBeCloseTo((1 + AHEAD_EXTRA_BUNDLES) * gateRequests, 9);
    // runs of whole bundles, nothing read along unused but the last one's padding, which is not read
    const { bundleRows } = rowReads(inp);
    expect(on.readBytesPerToken).toBeCloseTo((1 + AHEAD_EXTRA_BUNDLES) * (gateRequests * bundleRows + (gateMisses - gateRequests) * inp.pack.bundleBytes), 3);
    expect(on.hidden).toBeCloseTo(AHEAD_SHARE * on.readThroughputUs, 9);
    // the look-ahead costs one predictor pass more, and no gate rows (it has none to compute)
    const pinnedMem = planMemory(inp.pack, budget, inp.optionsFor("inline", budget, { pinGates: true, hotShare: 0.5, clusterSize: 32, readAhead: 64 }));
    const pinnedOff = tokenTime(inp.shape, pinnedMem, m, { ...o, readAhead: false });
    const pinnedOn = tokenTime(inp.shape, pinnedMem, m, { ...o, readAhead: true });
    expect(on.predictor - off.predictor).toBeLessThan(pinnedOn.predictor - pinnedOff.predictor);
    expect(on.predictor).toBeCloseTo(2 * off.predictor, 6);
  });
});

describe("planner", () => {
  it("the plan fits its budget: loaded with it, the model decodes within --memory and records the plan and what overrides it", async () => {
    const inp = input();
    const budget = budgetForFfnFraction(inp.pack, 0.5, planOptions(inp.pack.config, { contextSize: ctx }));
    const plan = makePlan(inp, fakeMachine(), { memory: budget, cores: 2, contextSize: ctx });
    expect(plan.memory.budget).toBe(budget);
    expect(plan.candidates).toBeGreaterThanOrEqual(12);
    const file = join(dir, "plan.json");
    writePlanFile(file, plan);
    const m = await loadModel(packPath, { plan: file, contextSize: ctx, decoder: "inline" });
    try {
      expect(m.sparse!.plan.budget).toBe(budget); // the saved plan's budget
      expect(m.sparse!.plan.gatesPinned).toBe(plan.knobs.pinGates);
      expect(m.plan!.overrides).toEqual(plan.knobs.decoder === "inline" ? undefined : { decoder: "inline" });
      const s = m.createSession({ contextSize: ctx });
      for await (const _ of s.generate("The whale", { maxTokens: 24, seed: 1 })) void _;
      s.dispose();
      expect(m.sparse!.peakResidentBytes).toBeLessThanOrEqual(budget);
      const rec = m.createTrace();
      const header = rec.records.find((r) => r.kind === "header") as { plan?: unknown } | undefined;
      expect(JSON.parse(JSON.stringify(header?.plan))).toEqual(JSON.parse(JSON.stringify(m.plan)));
    } finally {
      m.dispose();
    }
    // an explicit knob overrides a plan made at load, and is recorded
    const m2 = await loadModel(packPath, { memory: budget, contextSize: ctx, hotShare: 0.6, io: { queueDepth: 16 } });
    try {
      expect(m2.plan!.knobs.hotShare).toBe(0.6);
      expect(m2.plan!.knobs.queueDepth).toBe(16);
      expect(m2.plan!.overrides).toEqual({ hotShare: 0.6, queueDepth: 16 });
      expect(m2.sparse!.io.queueDepth).toBe(16);
    } finally {
      m2.dispose();
    }
  }, 60_000);

  it("a saved plan is checked: the file and the field named, a plan for another model refused", async () => {
    const inp = input();
    const plan = makePlan(inp, fakeMachine(), { cores: 2, contextSize: ctx });
    const bad = join(dir, "bad.json");
    writeFileSync(bad, JSON.stringify({ ...plan, knobs: { ...plan.knobs, decoder: "warp" } }));
    expect(() => readPlanFile(bad)).toThrow(`${bad}: not a usable plan: knobs.decoder is "warp", expected one of inline, pipeline, blocking`);
    writeFileSync(bad, "{");
    expect(() => readPlanFile(bad)).toThrow(new RegExp(`^${bad}: not a plan: `));
    expect(() => readPlanFile(join(dir, "missing.json"))).toThrow(/missing\.json: cannot read the plan \(ENOENT\)/);
    const other = join(dir, "other.json");
    writeFileSync(other, JSON.stringify({ ...plan, model: { ...plan.model, path: "x.pack.gguf", fingerprint: "0123456789abcdef" } }));
    await expect(loadModel(packPath, { plan: other, contextSize: ctx })).rejects.toThrow(/was made for x\.pack\.gguf .*not .*default\.pack\.gguf/);
    await expect(loadModel(defaultModel, { plan: other })).rejects.toThrow(/plain model .*plans are for neuron packs/);
  });

  it("--min-speed names the smallest budget predicted to reach the speed; none when not even everything resident does", () => {
    const inp = input();
    const m = fakeMachine();
    const limits = { cores: 2, contextSize: ctx };
    const lo = smallestBudget(inp, limits);
    const hi = wholeBudget(inp, limits);
    const sweep = sweepPlans(inp, m, limits, 6);
    expect(sweep[0]!.memory.budget).toBe(lo);
    expect(sweep.at(-1)!.memory.budget).toBe(hi);
    // the top of the sweep can hold the whole FFN (whole bundles, the loader's staging at that budget)
    expect(planMemory(inp.pack, hi, inp.optionsFor("inline", hi, { pinGates: false, hotShare: 0.75, clusterSize: 32 })).ffnResident).toBe(1);
    // a budget below the smallest workable one is refused by the memory plan
    expect(() => makePlan(inp, m, { ...limits, memory: lo - 8192 })).toThrow(/smallest workable budget/);
    const top = makePlan(inp, m, { ...limits, memory: hi }).predicted.tokPerSec;
    const target = top / 3;
    const named = budgetForSpeed(inp, m, limits, target)!;
    expect(named.predicted.tokPerSec).toBeGreaterThanOrEqual(target);
    const below = makePlan(inp, m, { ...limits, memory: named.memory.budget! - Math.max(65536, (hi - lo) / 256) });
    expect(below.predicted.tokPerSec).toBeLessThan(target);
    expect(budgetForSpeed(inp, m, limits, top * 1.5)).toBeUndefined();
  });

  it("among plans the model cannot tell apart, the deepest queue: on a machine whose reads are as fast at depth 8, 32 and 128, a budget with reads gets depth 128 at the time depth 32 would take", () => {
    const inp = input();
    const m = fakeMachine();
    const limits = { cores: 2, contextSize: ctx, memory: budgetForFfnFraction(inp.pack, 0.25, planOptions(inp.pack.config, { contextSize: ctx })) };
    const p = makePlan(inp, m, limits);
    expect(p.predicted.readsPerToken).toBeGreaterThan(1);
    expect(p.knobs.queueDepth).toBe(128);
    // the same knobs at depth 32: the same time (80K reads/s at both depths in this machine)
    const at32 = makePlan(inp, m, limits, { ...p.knobs, queueDepth: 32 });
    expect(at32.predicted.total).toBeCloseTo(p.predicted.total, 6);
  });

  it("everything resident, pinned and unpinned gate rows are the same time to the model: the plan leaves them unpinned; with reads, it takes the faster", () => {
    const inp = input();
    const m = fakeMachine();
    const resident = makePlan(inp, m, { cores: 2, contextSize: ctx });
    expect(resident.memory.ffnResident).toBe(1);
    expect(resident.knobs.pinGates).toBe(false);
    const pinned = makePlan(inp, m, { cores: 2, contextSize: ctx }, { decoder: resident.knobs.decoder, pinGates: true });
    expect(pinned.predicted.total).toBeCloseTo(resident.predicted.total, 6);
    // with reads the model tells them apart and the plan takes the faster (the preference only
    // breaks ties): on the test machine, at 60% of the FFN pinned gate rows save gate reads and
    // win (predicted 1,797 against 2,182 µs), at 70% the unpinned cache holding whole bundles
    // of more neurons does (1,423 against 1,724 µs); the cold region all LRU, no reads ahead
    const same = { decoder: "inline", readAhead: 0, coldKeep: 0 } as const;
    for (const [f, pinnedWins] of [[0.6, true], [0.7, false]] as const) {
      const limits = { cores: 2, contextSize: ctx, memory: budgetForFfnFraction(inp.pack, f, planOptions(inp.pack.config, { contextSize: ctx })) };
      const [pinnedT, unpinnedT] = [true, false].map((pinGates) => makePlan(inp, m, limits, { ...same, pinGates }).predicted.total);
      expect(Math.abs(pinnedT! / unpinnedT! - 1)).toBeGreaterThan(0.01);
      expect(pinnedT! < unpinnedT!).toBe(pinnedWins);
      expect(makePlan(inp, m, limits, same).knobs.pinGates).toBe(pinnedWins);
    }
  });

  it("a decoder is chosen over a simpler one only when predicted more than 5% faster: blocking set 3% faster than inline's best gets inline, 10% faster gets blocking", () => {
    const inp = input();
    const limits = { cores: 2, contextSize: ctx, memory: budgetForFfnFraction(inp.pack, 0.25, planOptions(inp.pack.config, { contextSize: ctx })) };
    const nLayer = inp.pack.config.nLayer;
    const cal = (blockingLayerUs: number) => ({ inline: { layerUs: 10, neuronNs: 0, requestUs: 0 }, pipeline: { layerUs: 5000, neuronNs: 0, requestUs: 0 }, blocking: { layerUs: blockingLayerUs, neuronNs: 0, requestUs: 0 } });
    const inline = makePlan(inp, fakeMachine(cal(10)), limits, { decoder: "inline" }).predicted.total;
    const blocking0 = makePlan(inp, fakeMachine(cal(0)), limits, { decoder: "blocking" }).predicted.total;
    // blocking's token is its time at no cost per layer + n_layer × its cost per layer: set it to a share of inline's
    const at = (share: number) => fakeMachine(cal((share * inline - blocking0) / nLayer));
    expect(0.97 * inline).toBeGreaterThan(blocking0); // reachable with a cost ≥ 0
    const close = makePlan(inp, at(0.97), limits);
    expect(makePlan(inp, at(0.97), limits, { decoder: "blocking" }).predicted.total / inline).toBeCloseTo(0.97, 9);
    expect(close.knobs.decoder).toBe("inline");
    const far = makePlan(inp, at(0.9), limits);
    expect(far.knobs.decoder).toBe("blocking");
    expect(far.predicted.total / inline).toBeCloseTo(0.9, 9);
  });

  it("predicted reads per token within 25% of a decode's measured reads at three budgets (default model, trained predictor)", async () => {
    for (const predictor of ["trained"] as const) {
      const inp = input(predictor);
      for (const f of [0.3, 0.5, 0.7]) {
        const budget = budgetForFfnFraction(inp.pack, f, planOptions(inp.pack.config, { contextSize: ctx, predictor: predictor === "trained" }));
        const r = await countedReads(packPath, { memory: budget, contextSize: ctx, predictor, decoder: "inline", pinGates: false, hotShare: 0.75, coldKeep: 0 });
        expect(Math.abs(r.predictedReads / r.reads - 1), `${r.predictedReads} reads predicted, ${r.reads} counted (${predictor}, ${f})`).toBeLessThan(0.25);
      }
    }
  }, 120_000);

  it.each([0.9, 0.99])("with %s of the cold region kept (0.99: the LRU list at its minimum): predicted reads per token within 25% of a decode's measured reads at two budgets (at 70% a token reads ~2)", async (coldKeep) => {
    // (keeping changes little on this model: 209.6 against 203.7 reads a token at 30% of the FFN,
    // 57.2 against 50.7 at 50%, 2.4 against 3.0 at 70%; on the 7B it cut them by a fifth, and
    // 0.99 by 4.4% more than 0.9)
    const inp = input();
    for (const f of [0.3, 0.5]) {
      const budget = budgetForFfnFraction(inp.pack, f, planOptions(inp.pack.config, { contextSize: ctx, predictor: true }));
      const kept = await countedReads(packPath, { memory: budget, contextSize: ctx, predictor: "trained", decoder: "inline", pinGates: false, hotShare: 0.75, readAhead: 0, coldKeep });
      expect(Math.abs(kept.predictedReads / kept.reads - 1), `${kept.predictedReads} reads predicted, ${kept.reads} counted (${f})`).toBeLessThan(0.25);
    }
  }, 120_000);

  it("neuronpipe plan prints the plan in words, writes it, and answers --min-speed (or says no budget reaches it)", async () => {
    const out = join(dir, "cli-plan.json");
    const r = await runCli(["plan", "--model", packPath, "--memory", "26MiB", "--ctx", String(ctx), "--out", out]);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/^plan for .*default\.pack\.gguf \(6 layers × 1024 neurons/);
    expect(r.out).toMatch(/memory: 26\.0 MiB; fixed region/);
    expect(r.out).toMatch(/predicted: [\d.]+ tok\/s .* — bound by (reads|compute|host)/);
    const saved = readPlanFile(out);
    expect(saved.limits.memory).toBe(26 * 2 ** 20);
    const none = await runCli(["plan", "--model", packPath, "--min-speed", "1e9", "--ctx", String(ctx)]);
    expect(none.code).toBe(1);
    expect(none.out).toMatch(/^no budget is predicted to reach 1000000000 tok\/s: with everything resident the plan predicts [\d.]+ tok\/s/);
    const usage = await runCli(["plan", "--memory", "1GiB"]);
    expect(usage.code).toBe(2);
    expect(usage.err).toMatch(/--model PACK is required/);
  }, 60_000);
});
