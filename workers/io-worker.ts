// The I/O loader actor's thread (piscina worker, the little role): one batch at a time, reads
// into a staging chunk (io_uring or the pread pool, at the loader's queue depth) and copies
// into the neuron cache's slots. It blocks in the kernel, not on a core, while reads are in
// flight; the compute worker keeps computing.
import { native } from "../src/native.js";
import type { IoResult, IoTask } from "../src/pipeline/protocol.js";
import { nowUs } from "../src/pipeline/trace.js";

let pinned = "";
let tid = 0;

export default function read(task: IoTask): IoResult {
  const n = native();
  const want = task.cores?.join(",") ?? "";
  if (want !== pinned) {
    if (task.cores) n.setAffinity(task.cores);
    pinned = want;
  }
  tid ||= n.threadInfo().tid;
  const t0 = nowUs();
  const bytes = n.readBatch(task.loader, task.reqs);
  n.copyBatch(task.arena, task.staging, task.copies);
  return { t0, t1: nowUs(), tid, bytes };
}
