// The compute worker's thread, behind a direct channel: the actions the compute actor
// (actors/compute-machine.ts) is given to reach it. Replay leaves them out.
import type { Piscina } from "piscina";
import { type AnyActorRef } from "xstate";
import type { ChannelEvent, ComputeReply, PostParams } from "../protocol/events.js";
import type { ComputeInit, ComputeResult, ComputeTask } from "../protocol/tasks.js";
import { type TraceRecorder } from "../trace/recorder.js";
import { openChannel, type WorkerChannel } from "../util/worker-channel.js";

import { recordSpans } from "./spans.js";

/**
 * The compute worker's thread, behind a direct channel: the compute actor's injected actions
 * (postToWorker, initWorker) post tasks with the session's key and record their spans; answers
 * come back to the actor as channel.* events.
 */
export function computeWorkerActions(pool: Piscina, role: "big" | "little", trace: () => TraceRecorder | undefined) {
  const what = `compute worker (${role})`;
  let ch: WorkerChannel<ComputeTask, ComputeResult> | undefined;
  let key = "";
  let outstanding = 0; // posted, not answered
  let answered = 0; // since the worker last drained
  type Args = { self: { send(ev: ChannelEvent): void }; system: { get(id: string): unknown } };
  const reply = (system: Args["system"], to: string, ev: ComputeReply) => (system.get(to) as AnyActorRef | undefined)?.send(ev);
  const settle = (self: Args["self"]) => {
    outstanding--;
    answered++;
    if (outstanding === 0) {
      self.send({ type: "channel.drained", answered });
      answered = 0;
    }
  };
  return {
    initWorker({ self }: Args, { init }: { init: Omit<ComputeInit, "port"> }): void {
      ch?.close("replaced by a new session's channel");
      ch = undefined;
      key = init.key;
      openChannel<ComputeTask, ComputeResult>(pool, what, (port) => ({ ...init, port }) satisfies ComputeInit).then(
        (c) => {
          ch = c;
          self.send({ type: "channel.ready", key: init.key });
        },
        (e: unknown) => self.send({ type: "channel.initFailed", error: `${what}: ${(e as Error)?.message ?? String(e)}` }),
      );
    },
    postToWorker({ self, system }: Args, p: PostParams): void {
      outstanding++;
      const c = ch;
      const failed = (error: string, exited: boolean) => {
        // the answer first (the asker's cause), then the actor learns the thread is gone
        reply(system, p.replyTo, { type: "compute.failed", id: p.id, op: p.task.op, error });
        if (exited) self.send({ type: "channel.exited", error });
        settle(self);
      };
      if (!c) {
        queueMicrotask(() => failed(`${what}: not initialised`, true));
        return;
      }
      c.request({ ...p.task, key } as ComputeTask).then(
        (result) => {
          const t = trace();
          if (t) recordSpans(t, p.task.op, p.hint, result);
          reply(system, p.replyTo, { type: "compute.done", id: p.id, op: p.task.op, result });
          settle(self);
        },
        (e: unknown) => failed((e as Error)?.message ?? String(e), c.closed),
      );
    },
    close(): void {
      ch?.close("compute actor stopped");
    },
  };
}

