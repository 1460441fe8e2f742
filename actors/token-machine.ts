// The scheduler of one token's layers: for each layer, attention → predictor → FFN, then the
// logits. The work is injected (src/pipeline/runtime.ts provides the actors): the FFN actor is
// the neuron-cluster pipeline in `pipeline` mode and load-everything-then-compute in
// `blocking` mode; `prefetchNext` starts reading layer L+1's hot clusters as layer L's
// attention begins. Cancellation is checked as each layer starts, so a generation stops
// within one layer; the machine ends in done, cancelled or failed.
import { assign, fromPromise, setup } from "xstate";

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

export interface LayerInput {
  layer: number;
  pos: number;
  step: number;
}

function missing<T, I>(name: string) {
  return fromPromise<T, I>(async () => {
    throw new Error(`token machine: no ${name} actor provided`);
  });
}

export const tokenMachine = setup({
  types: {
    input: {} as TokenInput,
    context: {} as TokenContext,
    output: {} as { logits: number; error?: string; cancelled: boolean },
  },
  actors: {
    attention: missing<void, LayerInput>("attention"),
    predictor: missing<number, LayerInput>("predictor"),
    ffn: missing<void, LayerInput & { nP: number }>("ffn"),
    logits: missing<number, LayerInput>("logits"),
  },
  actions: {
    // Implementation injected: start reading the next layer's hot clusters (no-op by default).
    prefetchNext: (_, _params: { layer: number }) => {},
    recordError: assign({ error: ({ event }) => String(((event as { error?: Error }).error)?.message ?? (event as { error?: unknown }).error) }),
  },
  guards: {
    lastLayer: ({ context }) => context.layer + 1 >= context.nLayer,
    aborted: (_, params: { error: unknown }) => (params.error as Error)?.name === "AbortError",
  },
}).createMachine({
  id: "token",
  context: ({ input }) => ({ ...input, layer: 0, nP: 0, logits: -1 }),
  initial: "attention",
  states: {
    attention: {
      entry: { type: "prefetchNext", params: ({ context }) => ({ layer: context.layer + 1 }) },
      invoke: {
        src: "attention",
        input: ({ context }) => ({ layer: context.layer, pos: context.pos, step: context.step }),
        onDone: "predicting",
        onError: [{ guard: { type: "aborted", params: ({ event }) => ({ error: event.error }) }, target: "cancelled" }, { target: "failed", actions: "recordError" }],
      },
    },
    predicting: {
      invoke: {
        src: "predictor",
        input: ({ context }) => ({ layer: context.layer, pos: context.pos, step: context.step }),
        onDone: { target: "ffn", actions: assign({ nP: ({ event }) => event.output }) },
        onError: { target: "failed", actions: "recordError" },
      },
    },
    ffn: {
      invoke: {
        src: "ffn",
        input: ({ context }) => ({ layer: context.layer, pos: context.pos, step: context.step, nP: context.nP }),
        onDone: [{ guard: "lastLayer", target: "logits" }, { target: "attention", actions: assign({ layer: ({ context }) => context.layer + 1 }) }],
        onError: [{ guard: { type: "aborted", params: ({ event }) => ({ error: event.error }) }, target: "cancelled" }, { target: "failed", actions: "recordError" }],
      },
    },
    logits: {
      invoke: {
        src: "logits",
        input: ({ context }) => ({ layer: context.layer, pos: context.pos, step: context.step }),
        onDone: { target: "done", actions: assign({ logits: ({ event }) => event.output }) },
        onError: { target: "failed", actions: "recordError" },
      },
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
