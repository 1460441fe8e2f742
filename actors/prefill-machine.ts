// The prefill role (the design's "NPU prefill"; this machine has no NPU, so the accelerator is
// the batched GEMM on a compute worker): a batch of prompt tokens through every layer at once,
// the whole FFN dense, streamed from the pack. It asks the compute actor it is given and
// answers whoever asked.
//
//   idle ──prefill.run──▶ busy ──compute.done──▶ idle      busy ──compute.failed──▶ idle (answered with the cause)
import type { PrefillReply, PrefillRequest } from "../src/protocol/events.js";
import { enqueueActions, setup, type AnyActorRef } from "xstate";
import type { ComputeReply, ComputeRequest } from "../src/protocol/events.js";

export interface PrefillContext {
  /** System ids of the compute actor that runs the batches, and of this actor. */
  compute: string;
  self: string;
  /** Tokens of the batch in progress (0 when idle), and prompt tokens done since start. */
  tokens: number;
  done: number;
  replyTo?: string;
  seq: number;
}

export const prefillMachine = setup({
  types: {
    input: {} as { compute: string; self: string },
    context: {} as PrefillContext,
    events: {} as PrefillRequest | ComputeReply,
  },
  actions: {
    run: enqueueActions(({ enqueue, context, event, system }) => {
      if (event.type !== "prefill.run") return;
      const compute = system.get(context.compute) as AnyActorRef;
      const seq = context.seq + 1;
      enqueue.sendTo(compute, {
        type: "compute.run",
        id: seq,
        task: { op: "prefill", key: "", tokens: event.tokens, pos0: event.pos0 }, // the channel stamps the session's key
        hint: { lane: "prefill", token: -1 },
        replyTo: context.self,
      } satisfies ComputeRequest);
      enqueue.assign({ seq, tokens: event.tokens.length, replyTo: event.replyTo });
    }),
    answer: enqueueActions(({ enqueue, context, event, system }) => {
      const target = context.replyTo ? (system.get(context.replyTo) as AnyActorRef | undefined) : undefined;
      if (event.type === "compute.done" && target) enqueue.sendTo(target, { type: "prefill.done", logits: event.result.logits! } satisfies PrefillReply);
      if (event.type === "compute.failed" && target) enqueue.sendTo(target, { type: "prefill.failed", error: event.error } satisfies PrefillReply);
      enqueue.assign({ done: context.done + (event.type === "compute.done" ? context.tokens : 0), tokens: 0, replyTo: undefined });
    }),
  },
}).createMachine({
  id: "prefill",
  context: ({ input }) => ({ compute: input.compute, self: input.self, tokens: 0, done: 0, seq: 0 }),
  initial: "idle",
  states: {
    idle: { on: { "prefill.run": { target: "busy", actions: "run" } } },
    busy: {
      on: {
        "compute.done": { target: "idle", actions: "answer" },
        "compute.failed": { target: "idle", actions: "answer" },
      },
    },
  },
});

export type PrefillMachine = typeof prefillMachine;
