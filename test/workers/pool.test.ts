// Generation on a worker thread gives the same tokens as in-process generation, and can be aborted.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { GenerationPool, loadModel, synthModel } from "../../src/index.js";

const dir = mkdtempSync(join(tmpdir(), "np-pool-"));
const path = join(dir, "m.gguf");
beforeAll(async () => {
  await synthModel({ shape: { embd: 64, ff: 192, layers: 2, heads: 4, kvHeads: 4, ctx: 128 }, type: "q8_0", seed: 9 }).write(path);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it("a worker-thread generation streams the same tokens as the in-process one", async () => {
  const opts = { maxTokens: 16, temperature: 0.9, seed: 77 };
  const model = await loadModel(path);
  const local: number[] = [];
  for await (const p of model.createSession({ contextSize: 128 }).generate("The whale", opts)) local.push(p.token);
  model.dispose();

  await using pool = new GenerationPool({ threads: 1 });
  const remote: number[] = [];
  const it = pool.generate(path, "The whale", { ...opts, contextSize: 128 });
  let r = await it.next();
  while (!r.done) {
    remote.push(r.value.token);
    r = await it.next();
  }
  expect(remote).toEqual(local);
  expect(r.value.generatedTokens).toBe(16);

  // abort mid-way: the worker reports the cancellation as an error
  const ac = new AbortController();
  const seen: number[] = [];
  await expect(
    (async () => {
      for await (const p of pool.generate(path, "The whale", { ...opts, maxTokens: 500, contextSize: 128, signal: ac.signal })) {
        seen.push(p.token);
        if (seen.length === 2) ac.abort();
      }
    })(),
  ).rejects.toThrow(/aborted by the caller/);
  expect(seen.length).toBeLessThan(500);
});
