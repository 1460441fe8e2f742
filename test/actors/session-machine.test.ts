// The session protocol with stub actors: the chart alone decides the states.
import { describe, expect, it } from "vitest";
import { createActor, fromPromise, waitFor } from "xstate";
import { type DecodeStepOutput, sessionMachine } from "../../actors/session-machine.js";

function run(steps: DecodeStepOutput[], opts: { failPrefill?: boolean } = {}) {
  let i = 0;
  const m = sessionMachine.provide({
    actors: {
      prefill: fromPromise(async () => {
        if (opts.failPrefill) throw new Error("disk on fire");
      }),
      decodeStep: fromPromise(async () => steps[i++]!),
    },
  });
  return createActor(m).start();
}

describe("session machine", () => {
  it("idle → prefilling → decoding → done, counting tokens, stopping on max-tokens", async () => {
    const a = run([{ token: 5 }, { token: 6 }, { token: 7, stop: "max-tokens" }]);
    expect(a.getSnapshot().value).toBe("idle");
    a.send({ type: "START", tokens: [1, 2, 3] });
    expect(a.getSnapshot().value).toBe("prefilling");
    const s = await waitFor(a, (x) => x.status === "done");
    expect(s.value).toBe("done");
    expect(s.context).toMatchObject({ promptTokens: 3, generated: 3, stopReason: "max-tokens" });
  });

  it("an end-of-generation token is not counted", async () => {
    const a = run([{ token: 5 }, { token: 2, stop: "eos" }]);
    a.send({ type: "START", tokens: [1] });
    const s = await waitFor(a, (x) => x.status === "done");
    expect(s.context).toMatchObject({ generated: 1, stopReason: "eos" });
  });

  it("a failing prefill ends in failed with the cause", async () => {
    const a = run([], { failPrefill: true });
    a.send({ type: "START", tokens: [1] });
    const s = await waitFor(a, (x) => x.status === "done");
    expect(s.value).toBe("failed");
    expect(s.context.error).toBe("disk on fire");
  });

  it("ABORT while decoding ends in cancelled", async () => {
    const m = sessionMachine.provide({
      actors: {
        prefill: fromPromise(async () => {}),
        decodeStep: fromPromise(() => new Promise<DecodeStepOutput>(() => {})), // never finishes
      },
    });
    const a = createActor(m).start();
    a.send({ type: "START", tokens: [1] });
    await waitFor(a, (x) => x.value === "decoding");
    a.send({ type: "ABORT", reason: "user" });
    expect(a.getSnapshot().value).toBe("cancelled");
    expect(a.getSnapshot().context.error).toBe("user");
  });
});
