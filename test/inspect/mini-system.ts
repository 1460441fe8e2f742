// A miniature of the actor system the inspector will show: a root `pipeline` with two
// long-lived children (systemIds `io-loader`, `compute:big`) and, every 50 ms, a short-lived
// `token` machine walking front → reads → back (per layer) → logits → done, with a context
// `{ token, layer }` that changes as it goes.
import { assign, createActor, sendTo, setup, spawnChild, type InspectionEvent, type Observer } from "xstate";

const N_LAYER = 2;
const STEP_MS = 4; // a token lives ~(2 + 2 * N_LAYER) steps, well under the 50 ms between tokens

const ioLoader = setup({
  types: { context: {} as { queued: number; inFlight: number } },
}).createMachine({
  id: "ioLoader",
  initial: "idle",
  context: { queued: 0, inFlight: 0 },
  states: {
    idle: { on: { READ: { target: "reading", actions: assign({ inFlight: ({ context }) => context.inFlight + 1 }) } } },
    reading: { after: { 3: { target: "idle", actions: assign({ inFlight: 0 }) } } },
  },
});

const computeBig = setup({
  types: { context: {} as { busy: boolean; layer: number } },
}).createMachine({
  id: "compute",
  initial: "idle",
  context: { busy: false, layer: 0 },
  states: {
    idle: { on: { COMPUTE: { target: "busy", actions: assign({ busy: true, layer: ({ event }) => (event as { layer?: number }).layer ?? 0 }) } } },
    busy: { after: { 3: { target: "idle", actions: assign({ busy: false }) } } },
  },
});

const tokenMachine = setup({
  types: { input: {} as { token: number }, context: {} as { token: number; layer: number } },
  guards: { lastLayer: ({ context }) => context.layer + 1 >= N_LAYER },
}).createMachine({
  id: "token",
  initial: "front",
  context: ({ input }) => ({ token: input.token, layer: 0 }),
  states: {
    front: { after: { [STEP_MS]: "reads" } },
    reads: {
      entry: sendTo(({ system }) => system.get("io-loader"), { type: "READ" }),
      after: { [STEP_MS]: "back" },
    },
    back: {
      entry: sendTo(({ system }) => system.get("compute:big"), ({ context }) => ({ type: "COMPUTE", layer: context.layer })),
      after: {
        [STEP_MS]: [
          { guard: "lastLayer", target: "logits" },
          { target: "reads", actions: assign({ layer: ({ context }) => context.layer + 1 }) },
        ],
      },
    },
    logits: { after: { [STEP_MS]: "done" } },
    done: { type: "final" },
  },
});

export const pipelineMachine = setup({
  types: { context: {} as { token: number; queued: number; busy: boolean } },
  actors: { ioLoader, computeBig, tokenMachine },
}).createMachine({
  id: "pipeline",
  initial: "decoding",
  context: { token: 0, queued: 0, busy: true },
  entry: [spawnChild("ioLoader", { systemId: "io-loader" }), spawnChild("computeBig", { systemId: "compute:big" })],
  states: {
    decoding: {
      after: {
        50: {
          target: "decoding",
          reenter: true,
          actions: [
            assign({ token: ({ context }) => context.token + 1 }),
            spawnChild("tokenMachine", { id: "token", input: ({ context }) => ({ token: context.token }) }),
          ],
        },
      },
    },
  },
});

/** Starts the mini system with the given inspection observer. */
export function startMiniSystem(inspect: Observer<InspectionEvent> | ((ev: InspectionEvent) => void)) {
  return createActor(pipelineMachine, { inspect }).start();
}

/** Resolves when `pred` holds, polling every 10 ms; rejects after `timeoutMs` with `what`. */
export async function waitFor(pred: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const t0 = Date.now();
  while (!pred()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
