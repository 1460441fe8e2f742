// The session protocol: idle → prefilling → decoding → done | cancelled | failed.
// The machine owns *what happens next*; the work itself (prefill a prompt, decode one token)
// is injected as promise actors by the session (src/session.ts), so the same chart runs the
// dense engine today and the actor pipeline later, and a recorded trace can be replayed
// against stubs.
import { assign, fromPromise, setup } from "xstate";

export type StopReason = "eos" | "max-tokens" | "context-full" | "stop-sequence";

export interface PrefillInput {
  tokens: number[];
}
export interface DecodeStepInput {
  step: number;
}
export interface DecodeStepOutput {
  token: number;
  stop?: StopReason;
}

export interface SessionContext {
  promptTokens: number;
  generated: number;
  stopReason?: StopReason;
  error?: string;
}

export type SessionEvent =
  | { type: "START"; tokens: number[] }
  | { type: "ABORT"; reason?: string };

export const sessionMachine = setup({
  types: {
    context: {} as SessionContext,
    events: {} as SessionEvent,
  },
  actors: {
    // Implementations are injected with sessionMachine.provide({ actors: { ... } }).
    prefill: fromPromise<void, PrefillInput>(async () => {
      throw new Error("session machine: no prefill actor provided");
    }),
    decodeStep: fromPromise<DecodeStepOutput, DecodeStepInput>(async () => {
      throw new Error("session machine: no decodeStep actor provided");
    }),
  },
  guards: {
    stopped: (_, out: DecodeStepOutput) => out.stop !== undefined,
  },
}).createMachine({
  id: "session",
  context: { promptTokens: 0, generated: 0 },
  initial: "idle",
  states: {
    idle: {
      on: {
        START: {
          target: "prefilling",
          actions: assign({ promptTokens: ({ event }) => event.tokens.length }),
        },
        ABORT: "cancelled",
      },
    },
    prefilling: {
      invoke: {
        id: "prefill",
        src: "prefill",
        input: ({ event }) => ({ tokens: event.type === "START" ? event.tokens : [] }),
        onDone: "decoding",
        onError: {
          target: "failed",
          actions: assign({ error: ({ event }) => String((event.error as Error)?.message ?? event.error) }),
        },
      },
      on: { ABORT: { target: "cancelled", actions: assign({ error: ({ event }) => event.reason }) } },
    },
    decoding: {
      invoke: {
        id: "decodeStep",
        src: "decodeStep",
        input: ({ context }) => ({ step: context.generated }),
        onDone: [
          {
            guard: { type: "stopped", params: ({ event }) => event.output },
            target: "done",
            actions: assign({
              // the token that stops counts unless it is the end of generation or none (max-tokens reached before sampling)
              generated: ({ context, event }) => context.generated + (event.output.stop === "eos" || event.output.token < 0 ? 0 : 1),
              stopReason: ({ event }) => event.output.stop,
            }),
          },
          {
            target: "decoding",
            reenter: true,
            actions: assign({ generated: ({ context }) => context.generated + 1 }),
          },
        ],
        onError: {
          target: "failed",
          actions: assign({ error: ({ event }) => String((event.error as Error)?.message ?? event.error) }),
        },
      },
      on: { ABORT: { target: "cancelled", actions: assign({ error: ({ event }) => event.reason }) } },
    },
    done: { type: "final" },
    cancelled: { type: "final" },
    failed: { type: "final" },
  },
});

export type SessionMachine = typeof sessionMachine;
