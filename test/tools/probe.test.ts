// neuronpipe probe (src/tools/probe.ts): what the planner will read about this machine. Speeds
// cannot be hand-computed, so each figure is held to an independent measurement of the same
// resource: kernels that stream weights far larger than the caches against the memory read
// probe (a plain sum of the same bytes), direct-I/O reads by block size against their own bytes
// moved and the device's 4 KiB rate from measureDisk; messages against a bound; the CLI keeps the
// probe, answers from the cache, draws its progress and refuses bad input by name.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runCli } from "../helpers/cli.js";
import { shippedFile } from "../../src/util/package-files.js";
import { decoderCosts, measureDisk, measureMemory, type MachineBounds } from "../../src/plan/machine.js";
import { callCosts } from "../../src/plan/rates.js";
import { KernelSampler, measureKernels, measureMessages, measureReadRates, medianReadRates } from "../../src/plan/probe.js";

const dir = mkdtempSync(join(tmpdir(), "np-probe-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
// a 96 MiB file of noise on the storage the tests run on
const file = join(dir, "data.bin");
{
  const b = Buffer.alloc(96 * 2 ** 20);
  for (let i = 0; i < b.length; i += 4) b.writeUInt32LE((Math.imul(i, 2654435761) ^ 0x5bd1e995) >>> 0, i);
  writeFileSync(file, b);
}

describe("probe", () => {
  it("kernels: every kernel and weight type measured; dense matvec streams its weights (128 MiB, 4x the last-level cache) no faster than twice the memory probe's bandwidth (a plain sum, ~10% pessimistic) and faster than a tenth of it", () => {
    const mem = Math.max(...measureMemory({ bytes: 256 * 2 ** 20, reps: 3 }).map((m) => m.readGBps));
    const k = measureKernels(0.05);
    expect(k.length).toBe(16);
    for (const t of ["Q4_0", "Q8_0", "F16", "F32"]) for (const kernel of ["matvec", "gather", "axpy", "matmul"]) expect(k.some((x) => x.type === t && x.kernel === kernel), `${t} ${kernel}`).toBe(true);
    for (const x of k.filter((x) => x.kernel === "matvec")) {
      expect(x.GBps!, x.type).toBeLessThan(2 * mem);
      expect(x.GBps!, x.type).toBeGreaterThan(0.1 * mem);
    }
    for (const x of k.filter((x) => x.kernel === "gather" || x.kernel === "axpy")) expect(x.GBps!).toBeGreaterThan(0);
    for (const x of k.filter((x) => x.kernel === "matmul")) expect(x.GFLOPs!).toBeGreaterThan(1);
  }, 120_000);

  it("kernels in passes (KernelSampler): each point's rate is the median of what its passes measured, the Q4_0 matvec by working set and by shape too", () => {
    const s = new KernelSampler(0.03, ["Q4_0", "F32"]);
    try {
      for (let i = 0; i < 3; i++) s.pass();
      expect([...s.samples.keys()].sort()).toEqual(["F32 axpy", "F32 gather", "F32 matmul", "F32 matvec", "Q4_0 axpy", "Q4_0 gather", "Q4_0 matmul", "Q4_0 matvec"]);
      // the Q4_0 matvec by working set: 4096×4096 matrices of 4096 rows × 128 blocks of 18 bytes
      const ws = s.workingSetRates();
      expect(ws.map((w) => w.bytes)).toEqual([1, 3, 8, 14, 56, 160].map((k) => k * 4096 * 128 * 18));
      for (const w of ws) expect(w.GBps).toBe([...s.workingSetSamples.get(w.bytes)!].sort((a, b) => a - b)[1]);
      // and by matrix shape
      const shapes = s.shapeRates();
      expect(shapes.length).toBe(6);
      for (const r of shapes) expect(r.GBps).toBe([...s.shapeSamples.get(`${r.rows}×${r.cols}`)!].sort((a, b) => a - b)[1]);
      const rates = s.rates();
      for (const [key, samples] of s.samples) {
        expect(samples.length).toBe(3);
        const v = samples.map((r) => r.GBps ?? r.GFLOPs!);
        const middle = [...v].sort((a, b) => a - b)[1];
        const r = rates.find((x) => `${x.type} ${x.kernel}` === key)!;
        expect(r.GBps ?? r.GFLOPs, key).toBe(middle);
      }
    } finally {
      s.dispose();
    }
  }, 120_000);

  it("reads: sequential by block size, random by block size x depth and by batch size, each rate = its reads x block; the 4 KiB depth-32 rate within 3x of measureDisk's", () => {
    const rates = measureReadRates(file, 0.05);
    const seq = rates.filter((r) => r.kind === "sequential"), rnd = rates.filter((r) => r.kind === "random");
    expect(seq.map((r) => r.blockBytes)).toEqual([128 * 1024, 2 ** 20, 4 * 2 ** 20]);
    // random: 4 block sizes × 4 depths of full queues, and batches of 1–256 below a full queue's
    // 4 × depth at 4, 8 and 64 KiB × depths 8, 32, 128 (3 + 5 + 7 each)
    expect(rnd.filter((r) => r.batch === undefined).length).toBe(16);
    expect(rnd.filter((r) => r.batch !== undefined).map((r) => `${r.blockBytes}/${r.queueDepth}/${r.batch}`)).toEqual(
      [4096, 8192, 65536].flatMap((b) => [8, 32, 128].flatMap((d) => [1, 4, 16, 32, 64, 128, 256].filter((k) => k < Math.max(4 * d, 16)).map((k) => `${b}/${d}/${k}`))),
    );
    // a batch of one read has one in flight, as the full queue of depth 1 does: within 3x
    const one = rnd.find((r) => r.blockBytes === 4096 && r.queueDepth === 8 && r.batch === 1)!;
    const depth1 = rnd.find((r) => r.blockBytes === 4096 && r.queueDepth === 1 && r.batch === undefined)!;
    expect(one.readsPerSecond / depth1.readsPerSecond).toBeGreaterThan(1 / 3);
    expect(one.readsPerSecond / depth1.readsPerSecond).toBeLessThan(3);
    for (const r of rates) {
      expect(r.readsPerSecond).toBeGreaterThan(0);
      expect(r.GBps).toBeCloseTo((r.readsPerSecond * r.blockBytes) / 1e9, 9);
    }
    const d = measureDisk(file, { seqBytes: 32 * 2 ** 20, randomReads: 4000 });
    const r4 = rnd.find((r) => r.blockBytes === 4096 && r.queueDepth === 32 && r.batch === undefined)!;
    expect(r4.readsPerSecond).toBeGreaterThan(d.random4kIops / 3);
    expect(r4.readsPerSecond).toBeLessThan(d.random4kIops * 3);
  }, 120_000);

  it("reads in passes: each point keeps the pass with its median reads per second (the lower middle of an even count)", () => {
    const point = (blockBytes: number, readsPerSecond: number) => ({ kind: "random" as const, blockBytes, queueDepth: 32, readsPerSecond, GBps: (readsPerSecond * blockBytes) / 1e9 });
    const passes = [
      [point(4096, 60_000), point(8192, 40_000)],
      [point(4096, 70_000), point(8192, 55_000)],
      [point(4096, 50_000), point(8192, 52_000)],
    ];
    expect(medianReadRates(passes)).toEqual([point(4096, 60_000), point(8192, 52_000)]);
    expect(medianReadRates(passes.slice(0, 2))).toEqual([point(4096, 60_000), point(8192, 40_000)]);
  });

  it("messages: a round trip to a worker thread takes more than 0 and less than 10 ms, both ways of sending", async () => {
    const m = await measureMessages(300);
    for (const v of [m.postMessageUs, m.atomicsUs]) {
      expect(v).toBeGreaterThan(0);
      expect(v).toBeLessThan(10_000);
    }
  }, 60_000);
});

describe("neuronpipe probe", () => {
  const cli = (args: string[], env: Record<string, string> = {}) => runCli(args, { NEURONPIPE_CACHE_DIR: join(dir, "cache"), NEURONPIPE_PROGRESS: undefined, ...env });

  it("probes once with a progress bar and keeps what it measured; answers from the cache the next times, as text and as the same JSON", async () => {
    // one probe of two calibration rounds, not the default five: the decodes take most of its
    // time (3–5 minutes by machine at two rounds; five rounds came within 4% of this timeout on a
    // 2-core AVX2 VM, and past it on CI's)
    const first = await cli(["probe", "--file", file, "--rounds", "2"], { NEURONPIPE_PROGRESS: "1" });
    expect(first.code).toBe(0);
    expect(first.err).toMatch(/probing \[=+\] 100% \| \d+\/\d+ \| [\d.]+\/s \| ETA /);
    expect(first.out).toMatch(/measured now/);
    const b = JSON.parse(readFileSync(join(dir, "cache", "machine.json"), "utf8")) as MachineBounds;
    expect(b.version).toBe(2);
    expect(b.calibrationRounds).toBe(2);
    expect(b.memory.map((m) => m.threads)[0]).toBe(1);
    expect(b.disk?.rates?.length).toBe(64); // 3 sequential, 16 random full queues, 45 random batches
    expect(b.kernels?.length).toBe(16);
    expect(b.workingSets?.length).toBe(6);
    // the matvec by shape: every shape measured, and the costs the time model fits from them are
    // the least-squares solution (its residuals are orthogonal to bytes, rows and calls)
    expect(b.shapes?.map((r) => `${r.rows}×${r.cols}`)).toEqual(["1024×1024", "4096×1024", "1024×4096", "2048×2048", "4096×4096", "32000×1024"]);
    const cc = callCosts(b.shapes)!;
    const pts = b.shapes!.map((r) => ({ bytes: (r.rows * r.cols * 18) / 32, rows: r.rows }));
    const resid = pts.map((p, i) => p.bytes / b.shapes![i]!.GBps - (p.bytes * cc.byteNs + p.rows * cc.rowNs + cc.callNs));
    const scale = pts.reduce((a, p, i) => a + p.bytes / b.shapes![i]!.GBps, 0);
    if (cc.rowNs > 0 && cc.callNs > 0) for (const w of [(p: (typeof pts)[number]) => p.bytes / 1e6, (p: (typeof pts)[number]) => p.rows / 1e3, () => 1]) expect(Math.abs(pts.reduce((a, p, i) => a + w(p) * resid[i]!, 0)) / scale).toBeLessThan(1e-6);
    // attention per head and position: the slope of its two runs beyond the modelled slope, per head of the shipped model (6 layers × 8 heads)
    const [e, l] = b.attention!.runs;
    const slope = (l!.measuredUs - e!.measuredUs - (l!.modelledUs - e!.modelledUs)) / (l!.position - e!.position);
    expect(l!.position - e!.position).toBe(96);
    expect(b.attention!.headPositionNs).toBeCloseTo(Math.max(0, (slope / 48) * 1e3), 9);
    // each decoder's costs: the least-squares fit, every cost ≥ 0, of its runs' measured − modelled
    // µs to how much one unit of each cost adds to the run, each run's equation divided by its
    // measured µs (relative errors); where a cost is > 0 the residuals are orthogonal to its
    // column, where it is 0 raising it would not fit better
    for (const [d, c] of Object.entries(b.decoders!)) {
      const costs = decoderCosts(d);
      const runs = c.runs!;
      // inline: resident ×2, with reads ×2, reads ahead on and off, gate rows not pinned; the
      // pipeline: resident ×2, with reads ×2, gate rows not pinned; blocking: the first four
      expect(runs.length).toBe({ inline: 7, pipeline: 5, blocking: 4 }[d]);
      // resident inline runs: a µs per layer is 6 µs of the token (6 layers), a ns per flagged neuron flagged/1000 µs
      if (d === "inline") for (const r of [runs[0]!, runs[1]!]) expect([r.perUnit!.layerUs, r.perUnit!.neuronNs * 1e3]).toEqual([expect.closeTo(6, 6), expect.closeTo(r.flagged, 3)]);
      // each run modelled with the reads it counted: none resident; with reads, the cache model's
      // forecast within 35% of them (it is the planner's, measured in test/plan/planner.test.ts),
      // and a request's cost counted for no more requests than were read
      for (const r of runs) {
        if (r.perUnit!.batchUs === 0) expect(r.measuredReads).toBe(0);
        else {
          expect(r.measuredReads! / r.forecastReads! - 1).toBeGreaterThan(-0.35);
          expect(r.measuredReads! / r.forecastReads! - 1).toBeLessThan(0.35);
          expect(r.perUnit!.requestUs).toBeLessThanOrEqual(r.measuredReads! + 1e-6);
        }
      }
      const resid = runs.map((r) => (r.measuredUs - r.modelledUs - costs.reduce((a, k) => a + (c[k] ?? 0) * r.perUnit![k], 0)) / r.measuredUs);
      const norm = (v: number[]) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));
      const yNorm = norm(runs.map((r) => (r.measuredUs - r.modelledUs) / r.measuredUs));
      for (const k of costs) {
        const col = runs.map((r) => r.perUnit![k] / r.measuredUs);
        if (norm(col) === 0) continue;
        const g = col.reduce((a, x, n) => a + x * resid[n]!, 0) / (norm(col) * yNorm);
        // the pipeline's cost per read is at least inline's (the fit's lower bound there)
        const lower = d === "pipeline" && k === "requestUs" ? b.decoders!.inline!.requestUs : 0;
        if ((c[k] ?? 0) > lower + 1e-9) expect(Math.abs(g)).toBeLessThan(1e-6);
        else expect(g).toBeLessThan(1e-6);
      }
    }
    // the shipped model's dense steps with its pack's linear predictor, timed over the calibration rounds (plan/dense-steps.ts)
    expect(b.denseSteps?.map((d) => d.key)).toEqual([expect.stringMatching(/^6 × \(F32 256×256, F32 128×256, F32 128×256, F32 256×256; 8 heads of 32, 4 KV\); F32 4096×256; predictor linear Q8_0 192×256, Q8_0 1024×192; ffn \d+ flagged, \d+ fired of 1024 \(F32\/F32\/F32, 256 wide\)$/)]);
    expect(b.denseSteps![0]!.gateUs).toBeGreaterThan(0);
    expect(b.denseSteps![0]!.upDownUs).toBeGreaterThan(0);
    expect(b.denseSteps![0]!.positionUs).toBeGreaterThan(0);
    expect(b.denseSteps![0]!.attentionUs).toBeGreaterThan(0);
    expect(b.denseSteps![0]!.outputUs).toBeGreaterThan(0);
    expect(b.denseSteps![0]!.predictorUs).toBeGreaterThan(0);
    expect(b.messages?.postMessageUs).toBeGreaterThan(0);
    const json = await cli(["probe", "--json"]);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.out)).toEqual(b);
    const second = await cli(["probe"], { NEURONPIPE_PROGRESS: "1" });
    expect(second.code).toBe(0);
    expect(second.out).toMatch(new RegExp(`cached, measured ${b.measuredAt}`));
    expect(second.out).toMatch(/Q4_0 +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+/);
    expect(second.out).toMatch(/random +4 KiB +32 +\d+/);
    expect(second.out).toMatch(/decoders' own costs \(fitted on the shipped model: tools\/calibrate\.ts; each run the median of 2 rounds\)/);
    expect(second.out).toMatch(/Q4_0 matvec by working set: 9 MiB [\d.]+, .*, 1440 MiB [\d.]+ GB\/s/);
    expect(second.out).toMatch(/Q4_0 matvec by matrix shape \(128 MiB cycled\): 1024×1024 [\d.]+, .*, 32000×1024 [\d.]+ GB\/s/);
    expect(second.out).toMatch(
      /dense steps of 6 × \(F32 256×256, .*; 8 heads of 32, 4 KV\); F32 4096×256; predictor linear Q8_0 192×256, Q8_0 1024×192; ffn \d+ flagged, \d+ fired of 1024 \(F32\/F32\/F32, 256 wide\) on \d thread\(s\): attention's matvecs [\d.]+ µs, scores and sums [\d.]+ µs \+ \d+ ns per position of the context, classifier [\d.]+ µs, predictor [\d.]+ µs, gates [\d.]+ µs, up\/down [\d.]+ µs per token/,
    );
    expect(second.err).toBe(""); // nothing measured, no bar
  }, 600_000);

  it("refuses a missing file, stray arguments and a bad --rounds by name", async () => {
    const missing = await cli(["probe", "--file", join(dir, "nope.gguf")]);
    expect(missing.code).not.toBe(0);
    expect(missing.err).toMatch(/--file .*nope\.gguf does not exist/);
    const stray = await cli(["probe", "extra"]);
    expect(stray.err).toMatch(/probe takes no positional arguments, got: extra/);
    const rounds = await cli(["probe", "--refresh", "--rounds", "0"]);
    expect(rounds.code).not.toBe(0);
    expect(rounds.err).toMatch(/--rounds must be a whole number from 1 to 99, got: 0/);
    // a GGUF cut short as --file: refused by name before anything is measured (its dense steps are read first)
    const cut = join(dir, "cut.gguf");
    writeFileSync(cut, readFileSync(shippedFile("neuronpipe-default.gguf")).subarray(0, 64));
    const broken = await cli(["probe", "--refresh", "--file", cut], { NEURONPIPE_PROGRESS: "1" });
    expect(broken.code).not.toBe(0);
    expect(broken.err).toMatch(/cut\.gguf/);
    expect(broken.err).not.toMatch(/probing/);
  });
});
