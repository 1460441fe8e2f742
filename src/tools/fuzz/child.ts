// A fuzz child process (run.ts forks it): for each mutant number of its range, build the mutant
// of the seed, write it, say which one it starts (so a crash or a hang is pinned on it), check
// it and report the outcome; exit when the range is done.
import { writeFileSync } from "node:fs";
import { checkMutant } from "./check.js";
import { layoutOf } from "./fields.js";
import { mutate } from "./mutate.js";
import { seedBytes } from "./run.js";

interface Job {
  seed: string;
  memory?: number;
  from: number;
  to: number;
  file: string;
}

process.once("message", (job: Job) => {
  void (async () => {
    const seed = seedBytes(job.seed);
    const layout = layoutOf(seed);
    for (let k = job.from; k < job.to; k++) {
      const m = mutate(seed, layout, k);
      writeFileSync(job.file, m.bytes);
      process.send!({ k, what: m.what });
      const outcome = await checkMutant(job.file, job.memory === undefined ? {} : { memory: job.memory });
      await new Promise<void>((r) => process.send!({ k, what: m.what, outcome }, () => r()));
    }
    process.disconnect();
  })();
});
