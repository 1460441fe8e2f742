// neuronpipe plan: the execution plan of a neuron pack on this machine — from the cached probe,
// the pack's profile and the limits given — printed in words and written as JSON
// (docs/formats.md, "Execution plan"); `--min-speed` names the smallest budget predicted to reach
// a speed, `--sweep` predicts speed across budgets.
import { existsSync, statSync } from "node:fs";
import { availableParallelism } from "node:os";
import { machineForPlan, packPlannerInput } from "../../decode/planned.js";
import { atPhase, PhaseMeter } from "../../plan/phase.js";
import { writePlanFile } from "../../plan/plan-file.js";
import { budgetForSpeed, describeExecutionPlan, makePlan, sweepPlans, type ExecutionPlan, type PlanLimits } from "../../plan/planner.js";
import { openPack } from "../../sparse/pack/open.js";
import { formatBytes, parseBytes } from "../../util/bytes.js";
import { num, UsageError, type Command } from "../command.js";

export const plan: Command = {
  summary: "choose the fastest decode plan for a neuron pack under a memory budget, predict its speed, write it as JSON",
  usage: "neuronpipe plan --model PACK [--memory B] [--cores N] [--ctx N] [--min-speed TOK/S | --sweep] [--phase] [--out FILE] [--json]",
  options: {
    model: { type: "string", short: "m" },
    memory: { type: "string" },
    cores: { type: "string" },
    ctx: { type: "string" },
    "min-speed": { type: "string" },
    sweep: { type: "boolean" },
    phase: { type: "boolean" },
    out: { type: "string" },
    json: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  },
  help: {
    model: "the neuron pack (`neuronpipe pack`)",
    memory: "hard bound on the memory held for the model, e.g. 2GiB (default: everything resident)",
    cores: "cores the decode may use (default: all)",
    ctx: "context size the session reserves (default min(model's, 2048))",
    "min-speed": "the smallest budget predicted to decode at least this many tokens per second (or: none does)",
    sweep: "predicted speed from the smallest workable budget to everything resident",
    phase: "check how fast the machine runs now against its probe (~0.5 s: a matvec and 4 KiB reads) and predict at that speed; the plan records the check",
    out: "write the plan as JSON to this file (use it with `generate --plan FILE`)",
    json: "print JSON",
  },
  async run(v, pos) {
    if (pos.length > 0) throw new UsageError(`plan takes no positional arguments, got: ${pos.join(" ")}`);
    const path = v.model as string | undefined;
    if (!path) throw new UsageError("--model PACK is required (a neuron pack: `neuronpipe pack`)");
    if (!existsSync(path)) throw new UsageError(`--model ${path} does not exist`);
    const cores = num(v.cores, "cores", { int: true, min: 1 }) ?? availableParallelism();
    const contextSize = num(v.ctx, "ctx", { int: true, min: 1 });
    const minSpeed = num(v["min-speed"], "min-speed", { min: 0 });
    if (minSpeed !== undefined && v.sweep) throw new UsageError("--min-speed and --sweep exclude each other");
    let memory: number | undefined;
    if (v.memory !== undefined) {
      try {
        memory = parseBytes(v.memory as string);
      } catch (e) {
        throw new UsageError(`--memory: ${(e as Error).message}`);
      }
    }
    const pack = openPack(path);
    let m = machineForPlan(path, pack);
    if (v.phase) {
      const meter = new PhaseMeter(m, statSync(path).size);
      try {
        m = atPhase(m, meter.measure());
      } finally {
        meter.dispose();
      }
    }
    const inp = packPlannerInput(pack, { contextSize });
    const limits: PlanLimits = { memory, cores, contextSize };
    if (v.sweep) {
      const plans = sweepPlans(inp, m, limits);
      if (v.json) return void process.stdout.write(JSON.stringify(plans) + "\n");
      const lines = [`predicted decode speed of ${path} by memory budget (${m.cpu}, ${cores} cores):`, "   budget   FFN resident  decoder   tok/s  bound by"];
      for (const p of plans) lines.push(`${formatBytes(p.memory.budget ?? 0).padStart(9)} ${`${(100 * p.memory.ffnResident).toFixed(1)}%`.padStart(13)}  ${p.knobs.decoder.padEnd(8)} ${p.predicted.tokPerSec.toFixed(p.predicted.tokPerSec < 100 ? 2 : 0).padStart(7)}  ${p.predicted.bottleneck}`);
      return void process.stdout.write(lines.join("\n") + "\n");
    }
    let p: ExecutionPlan | undefined;
    if (minSpeed !== undefined) {
      p = budgetForSpeed(inp, m, limits, minSpeed);
      if (!p) {
        const top = makePlan(inp, m, { ...limits, memory: undefined });
        const msg = `no budget is predicted to reach ${minSpeed} tok/s: with everything resident the plan predicts ${top.predicted.tokPerSec.toFixed(2)} tok/s`;
        process.stdout.write((v.json ? JSON.stringify({ minSpeed, plan: null, message: msg }) : msg) + "\n");
        return 1;
      }
    } else p = makePlan(inp, m, limits);
    if (v.out) writePlanFile(v.out as string, p);
    if (v.json) return void process.stdout.write(JSON.stringify(p) + "\n");
    const head = minSpeed !== undefined ? `the smallest budget predicted to reach ${minSpeed} tok/s: ${formatBytes(p.memory.budget ?? 0)} (${p.memory.budget} bytes; --memory ${p.memory.budget})\n` : "";
    process.stdout.write(head + describeExecutionPlan(p) + (v.out ? `\nplan written to ${v.out as string} (neuronpipe generate --model ${path} --plan ${v.out as string})` : "") + "\n");
  },
};
