// neuronpipe machine: measure what this machine can move per second (the bounds of the per-token
// time budget that `trace stats` prints) and keep them in the cache.
import { existsSync } from "node:fs";
import { cachedMachine, machineCachePath, measureMachine, type MachineBounds } from "../../plan/machine.js";
import { UsageError, type Command } from "../command.js";

export const machine: Command = {
  summary: "measure memory and storage bandwidth (the bounds trace stats compares steps with)",
  usage: "neuronpipe machine [--file PATH] [--refresh] [--json]",
  options: { file: { type: "string" }, refresh: { type: "boolean" }, json: { type: "boolean" }, help: { type: "boolean", short: "h" } },
  help: {
    file: "a file on the storage to measure (direct I/O: sequential 4 MiB reads and random 4 KiB reads at depth 32); a model or pack you run",
    refresh: "measure again even when this host's bounds are cached",
    json: "print JSON",
  },
  async run(v, pos) {
    if (pos.length > 0) throw new UsageError(`machine takes no positional arguments, got: ${pos.join(" ")}`);
    const file = v.file as string | undefined;
    if (file !== undefined && !existsSync(file)) throw new UsageError(`--file ${file} does not exist`);
    let b: MachineBounds | undefined = v.refresh ? undefined : cachedMachine();
    if (b && file && !b.disk) b = undefined;
    const measured = !b;
    if (!b) {
      process.stderr.write(`measuring memory${file ? ` and ${file}` : ""} …\n`);
      b = measureMachine({ diskFile: file });
    }
    if (v.json) {
      process.stdout.write(JSON.stringify(b) + "\n");
      return;
    }
    const lines = [`${b.host}: ${b.cpu} (${measured ? "measured now" : `cached, measured ${b.measuredAt}`}; ${machineCachePath()})`];
    for (const m of b.memory) lines.push(`  memory read   ${m.readGBps.toFixed(1)} GB/s on ${m.threads} thread${m.threads > 1 ? "s" : ""}`);
    if (b.disk) {
      lines.push(`  storage       ${b.disk.sequentialGBps.toFixed(2)} GB/s sequential (4 MiB reads), ${(b.disk.random4kIops / 1000).toFixed(1)}K reads/s of 4 KiB at depth ${b.disk.queueDepth} (${b.disk.backend}${b.disk.directIO ? ", O_DIRECT" : ""}; ${b.disk.path})`);
    } else lines.push("  storage       not measured (--file PATH)");
    process.stdout.write(lines.join("\n") + "\n");
  },
};
