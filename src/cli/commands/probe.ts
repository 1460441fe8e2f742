// neuronpipe probe: measure this machine once for the planner — memory on 1..N threads, reads by
// block size and queue depth on a file's storage, each kernel per weight type, message round
// trips — and keep it in the cache (docs/formats.md, "machine.json").
import { existsSync } from "node:fs";
import { dirname } from "node:path";
import { cachedMachine, keepMachine, machineCachePath, readsPerCall, type MachineBounds } from "../../plan/machine.js";
import { KernelSampler, probeMachine } from "../../plan/probe.js";
import { fileDenseShapes } from "../../decode/planned.js";
import { CALIBRATION_ROUNDS, calibrateDecoders } from "../../tools/calibrate.js";
import { UsageError, type Command } from "../command.js";
import { progressBar } from "../progress.js";

export const probe: Command = {
  summary: "measure this machine for the planner: memory, reads by block size and depth, kernels, messages, the decoders' own costs",
  usage: "neuronpipe probe [--file PATH] [--refresh] [--rounds N] [--json]",
  options: { file: { type: "string" }, refresh: { type: "boolean" }, rounds: { type: "string" }, json: { type: "boolean" }, help: { type: "boolean", short: "h" } },
  help: {
    file: "a file on the storage to measure with direct I/O (a model or pack you run: its dense steps are timed too); without it, no storage figures",
    refresh: "measure again even when this host's probe is cached (a cached probe is used only when complete: kernels, messages, the decoders' costs and, with --file, its read rates; an incomplete one is measured again, minutes on a small machine)",
    rounds: `rounds of the decoders' calibration runs, each run's cost the median of its rounds (default ${CALIBRATION_ROUNDS}; more for a noisy machine: each adds about a minute on a 2-core VM)`,
    json: "print JSON",
  },
  async run(v, pos) {
    if (pos.length > 0) throw new UsageError(`probe takes no positional arguments, got: ${pos.join(" ")}`);
    const file = v.file as string | undefined;
    if (file !== undefined && !existsSync(file)) throw new UsageError(`--file ${file} does not exist`);
    // a model's or pack's dense steps are timed in every calibration round, as the shipped
    // model's are (read before probing: a broken GGUF stops the probe before its minutes)
    const alsoTime = file === undefined ? undefined : fileDenseShapes(file);
    const rounds = v.rounds === undefined ? CALIBRATION_ROUNDS : Number(v.rounds);
    if (!Number.isInteger(rounds) || rounds < 1 || rounds > 99) throw new UsageError(`--rounds must be a whole number from 1 to 99, got: ${v.rounds}`);
    let b: MachineBounds | undefined = v.refresh ? undefined : cachedMachine();
    const missing = b && [!b.kernels && "kernel rates", !b.messages && "message round trips", !b.decoders && "the decoders' costs", file && !b.disk?.rates && "read rates"].filter(Boolean);
    if (missing && missing.length > 0) {
      if (!v.json) process.stderr.write(`probe: this host's cached probe lacks ${missing.join(", ")}: measuring again\n`);
      b = undefined;
    }
    const measured = !b;
    if (!b) {
      const bar = v.json ? undefined : progressBar("probing");
      // the kernels are measured again after each calibration round: their rates are medians
      // over the whole probe (KernelSampler)
      const sampler = new KernelSampler();
      try {
        const probed = await probeMachine({ diskFile: file, sampler, onProgress: bar && ((d, t) => bar(d, t)) });
        // the decoders' own costs, on the shipped model (tools/calibrate.ts)
        const cal = v.json ? undefined : progressBar("calibrating the decoders");
        let steps = 0;
        const { decoders, attention, denseSteps } = await calibrateDecoders(probed, dirname(machineCachePath()), {
          onStep: (_what, done, total) => cal?.(done, (steps = total)),
          afterRound: () => {
            sampler.pass();
            probed.kernels = sampler.rates();
            probed.workingSets = sampler.workingSetRates();
            probed.shapes = sampler.shapeRates();
          },
          rounds,
          alsoTime: alsoTime && [alsoTime],
        });
        cal?.(steps, steps);
        probed.decoders = decoders;
        probed.attention = attention;
        probed.denseSteps = denseSteps;
        probed.calibrationRounds = rounds;
        b = probed;
      } finally {
        sampler.dispose();
      }
      keepMachine(b, machineCachePath());
    }
    if (v.json) {
      process.stdout.write(JSON.stringify(b) + "\n");
      return;
    }
    process.stdout.write(formatProbe(b, measured) + "\n");
  },
};

export function formatProbe(b: MachineBounds, measured: boolean): string {
  const lines = [`${b.host}: ${b.cpu} (${measured ? "measured now" : `cached, measured ${b.measuredAt}`}; ${machineCachePath()})`];
  lines.push(`memory read: ${b.memory.map((m) => `${m.readGBps.toFixed(1)} GB/s on ${m.threads}`).join(", ")} thread(s)`);
  if (b.disk?.rates) {
    lines.push(`reads (${b.disk.backend}${b.disk.directIO ? ", O_DIRECT" : ""}; ${b.disk.path}):`);
    // per call: reads submitted together and waited for (a full queue's refills, or a decoder's batch)
    lines.push("  kind        block   depth  per call   reads/s     GB/s");
    for (const r of b.disk.rates)
      lines.push(
        `  ${r.kind.padEnd(10)} ${`${r.blockBytes / 1024} KiB`.padStart(8)} ${String(r.queueDepth).padStart(6)} ${String(readsPerCall(r)).padStart(9)} ${Math.round(r.readsPerSecond).toString().padStart(9)} ${r.GBps.toFixed(2).padStart(8)}`,
      );
  } else lines.push("reads: not measured (--file PATH)");
  if (b.kernels) {
    lines.push(`kernels (${b.kernels[0]?.threads ?? "?"} threads): GB/s of weights (matvec, gather and axpy over 10% of the rows), GFLOP/s (matmul, 64 tokens)`);
    lines.push("  type    matvec   gather     axpy   matmul");
    for (const t of [...new Set(b.kernels.map((k) => k.type))]) {
      const f = (k: string) => b.kernels!.find((x) => x.type === t && x.kernel === k);
      lines.push(`  ${t.padEnd(5)} ${[f("matvec")?.GBps, f("gather")?.GBps, f("axpy")?.GBps, f("matmul")?.GFLOPs].map((x) => (x === undefined ? "-" : x.toFixed(1)).padStart(8)).join(" ")}`);
    }
  }
  if (b.workingSets?.length) lines.push(`Q4_0 matvec by working set: ${b.workingSets.map((w) => `${(w.bytes / 2 ** 20).toFixed(0)} MiB ${w.GBps.toFixed(1)}`).join(", ")} GB/s`);
  if (b.shapes?.length) lines.push(`Q4_0 matvec by matrix shape (128 MiB cycled): ${b.shapes.map((r) => `${r.rows}×${r.cols} ${r.GBps.toFixed(1)}`).join(", ")} GB/s`);
  if (b.decoders) {
    lines.push(`decoders' own costs (fitted on the shipped model: tools/calibrate.ts${b.calibrationRounds ? `; each run the median of ${b.calibrationRounds} rounds` : ""}):`);
    for (const [d, c] of Object.entries(b.decoders)) lines.push(`  ${d.padEnd(9)} ${c.layerUs.toFixed(1).padStart(7)} µs per layer, ${c.neuronNs.toFixed(1).padStart(6)} ns per flagged neuron, ${(c.batchUs ?? 0).toFixed(1).padStart(6)} µs per read batch, ${c.requestUs.toFixed(1).padStart(5)} µs per read${c.aheadNeuronNs !== undefined ? `, ${c.aheadNeuronNs.toFixed(0)} ns per flagged neuron looked ahead` : ""}${c.pinnedLayerUs !== undefined ? `, ${c.pinnedLayerUs.toFixed(1)} µs per layer with gate rows pinned` : ""}`);
  }
  if (b.attention) lines.push(`attention beyond its KV bytes: ${b.attention.headPositionNs.toFixed(1)} ns per head per position (fitted on the shipped model at positions ${b.attention.runs.map((r) => Math.round(r.position)).join(" and ")})`);
  for (const d of b.denseSteps ?? []) lines.push(`dense steps of ${d.key} on ${d.threads} thread(s): attention's matvecs ${d.attentionUs.toFixed(1)} µs${d.positionUs === undefined ? "" : `, scores and sums ${(d.scoresUs ?? 0).toFixed(1)} µs + ${(d.positionUs * 1000).toFixed(0)} ns per position of the context`}, classifier ${d.outputUs.toFixed(1)} µs${d.predictorUs === undefined ? "" : `, predictor ${d.predictorUs.toFixed(1)} µs`}${d.gateUs === undefined || d.upDownUs === undefined ? "" : `, gates ${d.gateUs.toFixed(1)} µs, up/down ${d.upDownUs.toFixed(1)} µs`} per token`);
  if (b.messages) lines.push(`messages to a worker thread and back: postMessage ${b.messages.postMessageUs.toFixed(1)} µs, Atomics wait/notify ${b.messages.atomicsUs.toFixed(1)} µs (median)`);
  return lines.join("\n");
}
