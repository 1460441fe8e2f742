// The scheduler of one token's layers: for each layer, attention → predictor → FFN, then the
// logits. The work is injected (src/pipeline/runtime.ts provides it): one `steps` actor, alive
// for the whole token, receives a request as each state is entered and answers `step.done` or
// `step.error` — no actor is created per step (at 7B a token has 97 steps; spawning an actor
// for each cost ~0.15 ms of the scheduler thread per step, on the critical path). The FFN step
// is the neuron-cluster pipeline in `pipeline` mode and load-everything-then-compute in
// `blocking` mode; `prefetchNext` starts reading layer L+1's hot clusters as layer L's
// attention begins. Cancellation is checked as each layer starts, so a generation stops
// within one layer; the machine ends in done, cancelled or failed.
import { assign, fromCallback, sendTo, setup } from "xstate";

export interface TokenInput {
  nLayer: number;
  pos: number; // position of the token in the context
  step: number; // decode step (trace records)
}

export interface TokenContext extends TokenInput {
  layer: number;
  nP: number; // neurons the predictor flagged in the current layer
  logits: number; // offset of the logits in the run state, once computed
  error?: string;
}

/** What the machine asks the steps actor for (one at a time). */
export type StepRequest =
  | { type: "attention"; layer: number }
  | { type: "predict"; layer: number }
  | { type: "ffn"; layer: number; nP: number }
  | { type: "logits"; layer: number };

/** What the steps actor answers: the step's output (nP for predict, the logits' offset for logits). */
export type StepEvent = { type: "step.done"; output: number } | { type: "step.error"; error: unknown };

/** The default steps actor: no implementation provided. */
const missingSteps = fromCallback<StepRequest, TokenInput, StepEvent>(({ sendBack, receive }) => {
  receive(() => sendBack({ type: "step.error", error: new Error("token machine: no steps actor provided") }));
});

/**
 * A steps actor from async functions: each request runs its function and answers with the
 * result or the error (runtime.ts provides the functions).
 */
export function stepsActor(run: { [K in StepRequest["type"]]: (req: Extract<StepRequest, { type: K }>) => Promise<number> }) {
  return fromCallback<StepRequest, TokenInput, StepEvent>(({ sendBack, receive }) => {
    receive((req) => {
      (run[req.type] as (r: StepRequest) => Promise<number>)(req).then(
        (output) => sendBack({ type: "step.done", output }),
        (error: unknown) => sendBack({ type: "step.error", error }),
      );
    });
  });
}

const onError = [
  { guard: { type: "aborted" as const, params: ({ event }: { event: StepEvent }) => ({ error: (event as { error?: unknown }).error }) }, target: ".cancelled" },
  { target: ".failed", actions: "recordError" as const },
];

export const tokenMachine = setup({
  types: {
    input: {} as TokenInput,
    context: {} as TokenContext,
    events: {} as StepEvent,
    output: {} as { logits: number; error?: string; cancelled: boolean },
  },
  actors: {
    steps: missingSteps,
  },
  actions: {
    // Implementation injected: start reading the next layer's hot clusters (no-op by default).
    prefetchNext: (_, _params: { layer: number }) => {},
    recordError: assign({ error: ({ event }) => String(((event as { error?: Error }).error)?.message ?? (event as { error?: unknown }).error) }),
    request: sendTo("steps", (_, params: StepRequest) => params),
  },
  guards: {
    lastLayer: ({ context }) => context.layer + 1 >= context.nLayer,
    aborted: (_, params: { error: unknown }) => (params.error as Error)?.name === "AbortError",
  },
}).createMachine({
  id: "token",
  context: ({ input }) => ({ ...input, layer: 0, nP: 0, logits: -1 }),
  invoke: { id: "steps", src: "steps", input: ({ context }) => ({ nLayer: context.nLayer, pos: context.pos, step: context.step }) },
  initial: "attention",
  on: { "step.error": onError },
  states: {
    attention: {
      entry: [
        { type: "prefetchNext", params: ({ context }) => ({ layer: context.layer + 1 }) },
        { type: "request", params: ({ context }) => ({ type: "attention", layer: context.layer }) },
      ],
      on: { "step.done": "predicting" },
    },
    predicting: {
      entry: { type: "request", params: ({ context }) => ({ type: "predict", layer: context.layer }) },
      on: { "step.done": { target: "ffn", actions: assign({ nP: ({ event }) => (event as { output: number }).output }) } },
    },
    ffn: {
      entry: { type: "request", params: ({ context }) => ({ type: "ffn", layer: context.layer, nP: context.nP }) },
      on: { "step.done": [{ guard: "lastLayer", target: "logits" }, { target: "attention", actions: assign({ layer: ({ context }) => context.layer + 1 }) }] },
    },
    logits: {
      entry: { type: "request", params: ({ context }) => ({ type: "logits", layer: context.layer }) },
      on: { "step.done": { target: "done", actions: assign({ logits: ({ event }) => (event as { output: number }).output }) } },
    },
    done: { type: "final" },
    cancelled: { type: "final" },
    failed: { type: "final" },
  },
  output: ({ context, self }) => ({
    logits: context.logits,
    error: context.error,
    cancelled: self.getSnapshot().value === "cancelled",
  }),
});

export type TokenMachine = typeof tokenMachine;
