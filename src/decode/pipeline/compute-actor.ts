// A compute actor, scheduler side: posts task descriptors to a worker thread of one role
// (workers/compute-worker.ts) and records each task's interval in the trace. Piscina runs the
// worker and delivers the init task, which carries a direct channel (worker-channel.ts) for
// every task after it. The worker runs tasks in the order they are posted, so the scheduler
// keeps the worker busy without waiting for each answer.
import type { Piscina } from "piscina";
import type { ComputeResult, ComputeTask } from "../../../actors/protocol.js";
import type { Lane, SpanName, TraceRecorder } from "../../trace/recorder.js";
import { openChannel, type WorkerChannel } from "./worker-channel.js";

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
  private lost = false; // the worker thread exited since the last init
  private channel?: WorkerChannel<ComputeTask, ComputeResult>;

  constructor(
    private readonly pool: Piscina,
    readonly role: "big" | "little",
  ) {
    pool.on("workerDestroy", () => (this.lost = true));
  }

  /** Close the channel (the pool is destroyed by its owner). */
  close(): void {
    this.channel?.close("compute actor closed");
    this.channel = undefined;
  }

  /** Run a task; its interval becomes a span (one per step for a task doing several: r.cuts). */
  async run(task: Task, span: SpanInfo | SpanInfo[]): Promise<ComputeResult> {
    if (this.lost) throw new Error(`compute worker (${this.role}): its thread exited (crashed or killed) and was replaced; this generation's work on it is lost`);
    if (!this.channel) throw new Error(`compute worker (${this.role}): not initialised`);
    const r = await this.channel.request({ ...task, key: this.key } as ComputeTask); // its errors name the worker
    if (this.trace) this.record(r, span);
    return r;
  }

  /** Spans of an answer: one for the task, or one per step ([start, end] pairs in r.cuts). */
  record(r: ComputeResult, span: SpanInfo | SpanInfo[]): void {
    const spans = Array.isArray(span) ? span : [span];
    spans.forEach((sp, i) => {
      const [t0, t1] = r.cuts && r.cuts.length >= 2 * spans.length ? [r.cuts[2 * i]!, r.cuts[2 * i + 1]!] : [r.t0, r.t1];
      this.trace?.span({ ...sp, t0, t1, token: this.token, neurons: sp.neurons ?? r.nP });
    });
  }

  /** Send the session's descriptors (a new session, or a worker that replaced a crashed one). */
  async init(init: Extract<ComputeTask, { op: "init" }>): Promise<void> {
    this.key = init.key;
    this.channel?.close("replaced by a new session's channel");
    this.channel = undefined;
    try {
      this.channel = await openChannel<ComputeTask, ComputeResult>(this.pool, `compute worker (${this.role})`, (port) => ({ ...init, port }));
      this.lost = false; // a live worker answered the init
    } catch (e) {
      this.key = "";
      throw new Error(`compute worker (${this.role}): ${(e as Error)?.message ?? String(e)}`, { cause: e });
    }
  }
}
