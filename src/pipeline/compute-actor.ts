// A compute actor, scheduler side: posts task descriptors to a worker thread of one role
// (workers/compute-worker.ts) and records each task's interval in the trace. The worker runs
// tasks in the order they are posted (piscina, one thread, several tasks queued), so the
// scheduler keeps the worker busy without waiting for each answer.
import type { Piscina } from "piscina";
import type { ComputeResult, ComputeTask } from "./protocol.js";
import type { Lane, SpanName, TraceRecorder } from "./trace.js";

type Task = ComputeTask extends infer T ? (T extends { key: string } ? Omit<T, "key"> : never) : never;

export interface SpanInfo {
  lane: Lane;
  name: SpanName;
  layer?: number;
  cluster?: number;
  neurons?: number;
}

export class ComputeActor {
  key = "";
  trace?: TraceRecorder;
  token = -1;
  busyUs = 0; // sum of task intervals (kernels and the worker's own bookkeeping)
  private lost = false; // the worker thread exited since the last init

  constructor(
    private readonly pool: Piscina,
    readonly role: "big" | "little",
  ) {
    pool.on("workerDestroy", () => (this.lost = true));
  }

  async run(task: Task, span: SpanInfo): Promise<ComputeResult> {
    let r: ComputeResult;
    if (this.lost) throw new Error(`compute worker (${this.role}): its thread exited (crashed or killed) and was replaced; this generation's work on it is lost`);
    try {
      r = (await this.pool.run({ ...task, key: this.key })) as ComputeResult;
    } catch (e) {
      const exited = this.lost ? " (its thread exited: crashed or killed)" : "";
      throw new Error(`compute worker (${this.role})${exited}: ${(e as Error)?.message ?? String(e)}`, { cause: e });
    }
    this.busyUs += r.t1 - r.t0;
    this.trace?.span({ ...span, t0: r.t0, t1: r.t1, token: this.token, neurons: span.neurons ?? r.nP });
    return r;
  }

  /** Send the session's descriptors (a new session, or a worker that replaced a crashed one). */
  async init(init: Extract<ComputeTask, { op: "init" }>): Promise<void> {
    this.key = init.key;
    this.lost = false;
    try {
      await this.pool.run(init);
    } catch (e) {
      this.key = "";
      throw new Error(`compute worker (${this.role}): ${(e as Error)?.message ?? String(e)}`, { cause: e });
    }
  }
}
