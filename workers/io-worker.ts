// The I/O loader actor's thread (piscina worker, the little role): one batch at a time, reads
// into a staging chunk (io_uring or the pread pool, at the loader's queue depth) and copies
// into the neuron cache's slots. It blocks in the kernel, not on a core, while reads are in
// flight; the compute worker keeps computing.
import { native } from "../src/native.js";
import type { IoInit, IoResult, IoTask } from "../src/pipeline/protocol.js";
import { nowUs } from "../src/pipeline/trace.js";
import { serveChannel } from "../src/pipeline/worker-channel.js";
import { markBatch } from "../src/pipeline/io-flags.js";

let pinned = "";
let tid = 0;
let flags: Int32Array | undefined;

/** Piscina task: the init (pin, then serve the direct channel the batches come through) or one batch. */
export default function handle(task: IoTask | IoInit): IoResult | { tid: number } {
  if (task.op === "init") {
    pin(task.cores);
    flags = new Int32Array(task.ioDone);
    serveChannel(task.port, read);
    return { tid };
  }
  return read(task);
}

function pin(cores?: number[]): void {
  const n = native();
  const want = cores?.join(",") ?? "";
  if (want !== pinned) {
    if (cores) n.setAffinity(cores);
    pinned = want;
  }
  tid ||= n.threadInfo().tid;
}

function read(task: IoTask): IoResult {
  const n = native();
  pin(task.cores);
  const t0 = nowUs();
  let bytes: number;
  try {
    bytes = n.readBatch(task.loader, task.reqs);
    n.copyBatch(task.arena, task.staging, task.copies);
  } catch (e) {
    if (flags) markBatch(flags, task.batch, false);
    throw e;
  }
  if (flags) markBatch(flags, task.batch, true);
  return { t0, t1: nowUs(), tid, bytes };
}
