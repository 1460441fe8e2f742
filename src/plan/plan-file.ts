// An execution plan as a file (`neuronpipe plan --out`, `--plan FILE`): the JSON of ExecutionPlan
// (docs/formats.md, "Execution plan"). Reading checks what the loader relies on and names the
// file and the field that is wrong.
import { readFileSync, writeFileSync } from "node:fs";
import type { ExecutionPlan } from "./planner.js";

const DECODERS = ["inline", "pipeline", "blocking"];

export function writePlanFile(path: string, plan: ExecutionPlan): void {
  writeFileSync(path, JSON.stringify(plan, null, 2) + "\n");
}

export function readPlanFile(path: string): ExecutionPlan {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new Error(`${path}: cannot read the plan (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  let p: ExecutionPlan;
  try {
    p = JSON.parse(text) as ExecutionPlan;
  } catch (e) {
    throw new Error(`${path}: not a plan: ${(e as Error).message}`);
  }
  const bad = (what: string) => new Error(`${path}: not a usable plan: ${what}`);
  if (p?.format !== "neuronpipe.plan") throw bad(`"format" is ${JSON.stringify(p?.format)}, expected "neuronpipe.plan"`);
  if (p.version !== 1) throw bad(`"version" is ${JSON.stringify(p.version)}; this build reads version 1`);
  const k = p.knobs;
  if (!k || typeof k !== "object") throw bad(`no "knobs"`);
  if (!DECODERS.includes(k.decoder)) throw bad(`knobs.decoder is ${JSON.stringify(k.decoder)}, expected one of ${DECODERS.join(", ")}`);
  const int = (name: keyof typeof k, min: number, max: number) => {
    const v = k[name];
    if (!(typeof v === "number" && Number.isInteger(v) && v >= min && v <= max)) throw bad(`knobs.${name} is ${JSON.stringify(v)}, expected a whole number in [${min}, ${max}]`);
  };
  int("threads", 1, 1024);
  int("clusterSize", 1, 65536);
  int("readAhead", 0, 65536);
  int("queueDepth", 1, 4096);
  if (typeof k.pinGates !== "boolean") throw bad(`knobs.pinGates is ${JSON.stringify(k.pinGates)}, expected true or false`);
  if (!(typeof k.hotShare === "number" && k.hotShare >= 0 && k.hotShare <= 1)) throw bad(`knobs.hotShare is ${JSON.stringify(k.hotShare)}, expected a number in [0, 1]`);
  k.coldKeep ??= 0; // plans written before the knob
  if (!(typeof k.coldKeep === "number" && k.coldKeep >= 0 && k.coldKeep < 1)) throw bad(`knobs.coldKeep is ${JSON.stringify(k.coldKeep)}, expected a number in [0, 1)`);
  if (p.limits?.memory !== null && !(typeof p.limits?.memory === "number" && p.limits.memory > 0)) throw bad(`limits.memory is ${JSON.stringify(p.limits?.memory)}, expected bytes or null`);
  if (typeof p.model?.fingerprint !== "string") throw bad(`no model.fingerprint`);
  return p;
}
