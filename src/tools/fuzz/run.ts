// The mutation fuzzer's runner: mutants of seed files (models and neuron packs) checked in child
// processes (child.ts), so that a crash kills only a child — recorded against the mutant it was
// running, and a new child goes on from the next — and a mutant that runs past the time limit is a
// hang (its child is killed). Mutant k of a seed is reproducible: `fuzz({ start: k, count: 1 })`.
import { fork, type ChildProcess } from "node:child_process";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { packageRoot } from "../../util/package-files.js";
import type { Outcome } from "./check.js";

export interface FuzzSeed {
  path: string;
  /** A neuron pack is loaded under this budget (bytes). */
  memory?: number;
  label: string;
}

export interface FuzzOptions {
  seeds: FuzzSeed[];
  /** Mutants per seed. */
  count: number;
  /** First mutant number (default 0). */
  start?: number;
  /** Child processes (default 1). */
  workers?: number;
  /** A mutant running longer is a hang (default 20 s). */
  timeoutMs?: number;
  /** Scratch folder for the mutant files. */
  dir: string;
  onProgress?: (done: number, total: number, defects: number) => void;
}

export interface FuzzDefect {
  seed: string;
  mutant: number;
  what: string;
  defect: string;
  message: string;
}

export interface FuzzReport {
  seeds: { label: string; mutants: number; ok: number; refused: number; defects: number }[];
  mutants: number;
  ok: number;
  refused: number;
  defects: FuzzDefect[];
  /** Longest refusal message (characters). */
  longestMessage: number;
  /** The most frequent refusals, their text up to the first digit run normalised. */
  commonRefusals: { message: string; count: number }[];
  seconds: number;
}

interface Task {
  seed: FuzzSeed;
  from: number;
  to: number;
}

// the built child (dist/): it runs as JavaScript even when the runner runs from sources (tests)
const childFile = () => join(packageRoot(), "dist", "src", "tools", "fuzz", "child.js");

export async function fuzz(o: FuzzOptions): Promise<FuzzReport> {
  mkdirSync(o.dir, { recursive: true });
  const t0 = performance.now();
  const start = o.start ?? 0;
  const timeoutMs = o.timeoutMs ?? 20_000;
  const workers = Math.max(1, o.workers ?? 1);
  const total = o.count * o.seeds.length;
  const report: FuzzReport = { seeds: o.seeds.map((s) => ({ label: s.label, mutants: 0, ok: 0, refused: 0, defects: 0 })), mutants: 0, ok: 0, refused: 0, defects: [], longestMessage: 0, commonRefusals: [], seconds: 0 };
  const refusals = new Map<string, number>();
  // tasks: each seed's range cut into pieces the children take in turn
  const tasks: Task[] = [];
  const piece = Math.max(1, Math.ceil(o.count / (workers * 4)));
  for (const seed of o.seeds) for (let k = start; k < start + o.count; k += piece) tasks.push({ seed, from: k, to: Math.min(start + o.count, k + piece) });

  const record = (seed: FuzzSeed, k: number, what: string, out: Outcome) => {
    const s = report.seeds[o.seeds.indexOf(seed)]!;
    s.mutants++;
    report.mutants++;
    if (out.result === "ok") {
      s.ok++;
      report.ok++;
    } else if (out.result === "refused") {
      s.refused++;
      report.refused++;
      report.longestMessage = Math.max(report.longestMessage, out.message.length);
      const norm = out.message.replace(/^[^:]*\.gguf: /, "").replace(/\d+/g, "N").slice(0, 120);
      refusals.set(norm, (refusals.get(norm) ?? 0) + 1);
    } else {
      s.defects++;
      report.defects.push({ seed: seed.label, mutant: k, what, defect: out.defect, message: out.message });
    }
    o.onProgress?.(report.mutants, total, report.defects.length);
  };

  const runTask = (task: Task, id: number): Promise<void> =>
    new Promise((resolve) => {
      let next = task.from; // the next mutant not yet reported
      let current: { k: number; what: string } | undefined;
      let child: ChildProcess | undefined;
      let timer: NodeJS.Timeout | undefined;
      const launch = () => {
        if (next >= task.to) return resolve();
        const c = fork(childFile(), [], { stdio: ["ignore", "ignore", "pipe", "ipc"], execArgv: [] });
        child = c;
        let stderr = "";
        c.stderr?.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
        c.on("message", (m: { k: number; what: string; outcome?: Outcome }) => {
          if (m.outcome === undefined) {
            current = { k: m.k, what: m.what };
            clearTimeout(timer);
            timer = setTimeout(() => {
              record(task.seed, m.k, m.what, { result: "defect", defect: "hang", message: `no answer within ${timeoutMs} ms` });
              next = m.k + 1;
              current = undefined;
              c.removeAllListeners("exit");
              c.kill("SIGKILL");
              launch();
            }, timeoutMs);
            return;
          }
          clearTimeout(timer);
          record(task.seed, m.k, m.what, m.outcome);
          next = m.k + 1;
          current = undefined;
        });
        c.on("exit", (code, signal) => {
          clearTimeout(timer);
          if (current) {
            record(task.seed, current.k, current.what, { result: "defect", defect: "crash", message: `the process ended (${signal ?? `exit code ${code}`}) while checking it: ${stderr.trim().split("\n").slice(-3).join(" | ")}` });
            next = current.k + 1;
            current = undefined;
          } else if (next < task.to && (code !== 0 || signal)) {
            // died between mutants: count the next one against it, so the run always moves on
            record(task.seed, next, "(between mutants)", { result: "defect", defect: "crash", message: `the process ended (${signal ?? `exit code ${code}`}): ${stderr.trim().split("\n").slice(-3).join(" | ")}` });
            next++;
          }
          launch();
        });
        c.send({ seed: task.seed.path, memory: task.seed.memory, from: next, to: task.to, file: join(o.dir, `mutant-${id}.gguf`) });
      };
      launch();
      void child;
    });

  const queue = [...tasks];
  await Promise.all(
    Array.from({ length: workers }, async (_, id) => {
      for (let t = queue.shift(); t; t = queue.shift()) await runTask(t, id);
    }),
  );
  report.commonRefusals = [...refusals.entries()].sort((a, b) => b[1] - a[1]).slice(0, 25).map(([message, count]) => ({ message, count }));
  report.seconds = (performance.now() - t0) / 1000;
  return report;
}

/** The seed file's bytes (read once per child). */
export function seedBytes(path: string): Buffer {
  return readFileSync(path);
}
