// The I/O loader actor's thread (piscina worker, the little role): one batch at a time, reads
// into a staging chunk (io_uring or the pread pool, at the loader's queue depth) and copies
// into the neuron cache's slots. It blocks in the kernel, not on a core, while reads are in
// flight; the compute worker keeps computing.
import { native } from "../src/native.js";
import type { IoInit, IoResult, IoTask } from "../src/protocol/tasks.js";
import { nowUs } from "../src/trace/recorder.js";
import { serveChannel } from "../src/util/worker-channel.js";
import { markSlots } from "../src/sparse/cache/slot-flags.js";

let tid = 0;
let flags: Int32Array | undefined;

/** The piscina task: the init — pin the thread, then serve the direct channel the batches come through. */
export default function init(task: IoInit): { tid: number } {
  const n = native();
  if (task.cores) n.setAffinity(task.cores);
  tid = n.threadInfo().tid;
  flags = new Int32Array(task.ready);
  serveChannel(task.port, read);
  return { tid };
}

function read(task: IoTask): IoResult {
  const n = native();
  const t0 = nowUs();
  let bytes: number;
  try {
    bytes = n.readBatch(task.loader, task.reqs);
    n.copyBatch(task.arena, task.staging, task.copies);
  } catch (e) {
    if (flags) markSlots(flags, task.copies, task.slotBytes, task.batch, false);
    throw e;
  }
  // the end is stamped before the slots are flagged ready: a compute worker woken by the flags
  // must not start before the read it waited for ends in the trace (stamped after, a worker
  // descheduled between the two under a loaded CI machine showed 8% of blocking's reads as hidden)
  const t1 = nowUs();
  if (flags) markSlots(flags, task.copies, task.slotBytes, task.batch, true);
  return { t0, t1, tid, bytes };
}
