// Disposing a session or its model while a generation runs stops the generation with a clear
// error, frees the context only after a decoder pass that was running, and leaves the model (or
// the process) usable — on the dense decoder and on a neuron pack's pipeline of worker threads.
import { describe, expect, it } from "vitest";
import { loadModel } from "../../src/index.js";
import { defaultModel, scratchDefaultPack } from "../helpers/default-pack.js";

const { packPath } = scratchDefaultPack("np-dispose-");

async function drain(it: AsyncGenerator<{ text: string }, unknown>, after: number, act: () => void): Promise<{ pieces: number; error?: Error }> {
  let pieces = 0;
  try {
    for (;;) {
      const r = await it.next();
      if (r.done) return { pieces };
      if (++pieces === after) act();
    }
  } catch (e) {
    return { pieces, error: e as Error };
  }
}

describe("dispose during a generation", () => {
  it("dense: session.dispose() after 3 pieces stops it with a clear error; the model generates on", async () => {
    const model = await loadModel(defaultModel);
    const s = model.createSession({ contextSize: 256 });
    const r = await drain(s.generate("The whale", { maxTokens: 50, temperature: 0 }), 3, () => s.dispose());
    expect(r.pieces).toBe(3);
    expect(r.error?.message).toBe("the session was disposed during the generation");
    expect(() => s.reset()).toThrow(/session is disposed/);
    // the model is fine: a new session's greedy text equals a fresh model's
    const t = model.createSession({ contextSize: 256 });
    let a = "";
    for await (const p of t.generate("The whale", { maxTokens: 10, temperature: 0 })) a += p.text;
    t.dispose();
    await model.close();
    const fresh = await loadModel(defaultModel);
    const u = fresh.createSession({ contextSize: 256 });
    let b = "";
    for await (const p of u.generate("The whale", { maxTokens: 10, temperature: 0 })) b += p.text;
    await fresh.close();
    expect(a).toBe(b);
  });

  it("pipeline pack: model.dispose() while decoder passes run on the workers stops it; close() resolves; no native error", async () => {
    for (const when of ["between", "during"] as const) {
      const model = await loadModel(packPath, { memory: "26MiB", decoder: "pipeline", contextSize: 256 });
      const s = model.createSession({ contextSize: 256 });
      const r = await drain(s.generate("The whale", { maxTokens: 60, temperature: 0 }), 3, () => (when === "between" ? model.dispose() : setTimeout(() => model.dispose(), 0)));
      expect(r.error?.message).toBe("the session was disposed during the generation");
      expect(r.pieces).toBeLessThan(60);
      await model.close();
      expect(() => model.createSession()).toThrow(/model is disposed/);
    }
  });
});
