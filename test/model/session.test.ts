// Generation through the public API: streaming, stats, stop conditions, cancellation,
// reproducibility across runs and thread counts.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, native, synthModel, type GenerateOptions, type Model } from "../../src/index.js";
import { argmax } from "../../src/api/sampling.js";

/** What a stream of these tokens reads as: the pieces' bytes, decoded as UTF-8 (WHATWG replacement). */
function piecesText(model: Model, ids: number[]): string {
  return new TextDecoder().decode(Buffer.concat(ids.map((id) => model.tokenizer.tokenToPiece(id, false))));
}

const dir = mkdtempSync(join(tmpdir(), "np-session-"));
let path: string;
beforeAll(async () => {
  path = join(dir, "m.gguf");
  await synthModel({ shape: { embd: 128, ff: 352, layers: 3, heads: 4, kvHeads: 2, ctx: 256 }, type: "q4_0", seed: 5 }).write(path);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function generate(model: Model, prompt: string, opts: GenerateOptions) {
  const s = model.createSession({ contextSize: 256 });
  let text = "";
  const ids: number[] = [];
  const it = s.generate(prompt, opts);
  let r = await it.next();
  while (!r.done) {
    text += r.value.text;
    if (r.value.token >= 0) ids.push(r.value.token);
    r = await it.next();
  }
  s.dispose();
  return { text, ids, stats: r.value };
}

describe("Session.generate", () => {
  it("streams maxTokens pieces whose text is the decoded ids, and reports stats", async () => {
    const model = await loadModel(path);
    const { text, ids, stats } = await generate(model, "The quick brown fox", { maxTokens: 12 });
    expect(ids).toHaveLength(12);
    expect(text).toBe(piecesText(model, ids));
    expect(stats.generatedTokens).toBe(12);
    expect(stats.stopReason).toBe("max-tokens");
    expect(stats.promptTokens).toBe(model.tokenizer.encode("The quick brown fox").length);
    expect(stats.decodeTokensPerSecond).toBeGreaterThan(0);
    expect(stats.prefillTokensPerSecond).toBeGreaterThan(0);
    expect(stats.peakRssBytes).toBeGreaterThan(1e6);
    model.dispose();
  });

  it("stop sequences end generation before the stop string, which is never yielded; maxTokens 0 generates none", async () => {
    const model = await loadModel(path);
    // the reference: the same greedy generation without stop strings, decoded by the tokenizer
    const full = await generate(model, "The quick brown fox", { maxTokens: 40, temperature: 0 });
    const text = piecesText(model, full.ids);
    // a stop string from the middle of the reference text (3 characters at its 60% mark)
    const at = Math.floor(text.length * 0.6);
    const stop = text.slice(at, at + 3);
    const first = text.indexOf(stop);
    const cut = await generate(model, "The quick brown fox", { maxTokens: 40, temperature: 0, stop: ["\u0000never", stop] });
    expect(cut.stats.stopReason).toBe("stop-sequence");
    expect(cut.text).toBe(text.slice(0, first));
    // every token up to the one completing the stop string was generated, none after
    const tokensToStop = full.ids.findIndex((_, i) => piecesText(model, full.ids.slice(0, i + 1)).includes(stop)) + 1;
    expect(cut.ids).toEqual(full.ids.slice(0, tokensToStop));
    expect(cut.stats.generatedTokens).toBe(tokensToStop);
    // a stop string that never occurs changes nothing
    const none = await generate(model, "The quick brown fox", { maxTokens: 40, temperature: 0, stop: ["\u0000never"] });
    expect(none.text).toBe(full.text);
    const zero = await generate(model, "The quick brown fox", { maxTokens: 0 });
    expect([zero.ids.length, zero.stats.generatedTokens, zero.stats.stopReason]).toEqual([0, 0, "max-tokens"]);
    model.dispose();
  });

  it("greedy decoding equals argmax over teacher-forced logits (incremental KV cache = full recompute)", async () => {
    const model = await loadModel(path);
    const { ids } = await generate(model, "Hello world", { maxTokens: 8, temperature: 0 }); // greedy (the default samples at 0.8, as the CLI)
    const prompt = model.tokenizer.encode("Hello world");
    // recompute from scratch: one batch through the whole sequence, logits at every position
    const s = model.createSession({ contextSize: 256 });
    const all = s.evaluate([...prompt, ...ids.slice(0, -1)], true);
    const V = model.config.nVocab;
    const expected = ids.map((_, i) => argmax(all.subarray((prompt.length - 1 + i) * V, (prompt.length + i) * V)));
    expect(ids).toEqual(expected);
    s.dispose();
    model.dispose();
  });

  it("same seed, same text — across runs and across 1 and 2 threads", async () => {
    const opts = { maxTokens: 24, temperature: 1.2, topK: 0, topP: 1, minP: 0, seed: 1234 };
    const model = await loadModel(path, { threads: 2 });
    const a = await generate(model, "Call me Ishmael.", opts);
    const b = await generate(model, "Call me Ishmael.", opts);
    native().setThreads(1);
    const c = await generate(model, "Call me Ishmael.", opts);
    native().setThreads(2);
    const d = await generate(model, "Call me Ishmael.", { ...opts, seed: 4321 });
    expect(b.text).toBe(a.text);
    expect(c.text).toBe(a.text);
    expect(c.ids).toEqual(a.ids);
    expect(d.ids).not.toEqual(a.ids); // the seed matters
    model.dispose();
  });

  it("logits are bit-identical with 1 and 2 threads (prefill batch and decode)", async () => {
    const model = await loadModel(path);
    const toks = model.tokenizer.encode("It was the best of times, it was the worst of times");
    const run = (threads: number) => {
      native().setThreads(threads);
      const s = model.createSession({ contextSize: 256, batchSize: 7 }); // batches of 7: matmul and matvec paths
      const l = s.evaluate(toks, true);
      s.dispose();
      return l;
    };
    const one = run(1);
    const two = run(2);
    expect(Buffer.from(two.buffer).equals(Buffer.from(one.buffer))).toBe(true);
    model.dispose();
  });

  it("an AbortSignal stops generation with an AbortError-like rejection; the session stays usable", async () => {
    const model = await loadModel(path);
    const s = model.createSession({ contextSize: 256 });
    const ac = new AbortController();
    const got: number[] = [];
    await expect(
      (async () => {
        for await (const p of s.generate("Once", { maxTokens: 100, signal: ac.signal })) {
          got.push(p.token);
          if (got.length === 3) ac.abort(new Error("stop now"));
        }
      })(),
    ).rejects.toThrow("stop now");
    expect(got.length).toBeLessThanOrEqual(4);
    expect(s.lastStats?.stopReason).toBe("cancelled");
    // next generation on the same session works
    const after: number[] = [];
    for await (const p of s.generate(" again", { maxTokens: 3 })) after.push(p.token);
    expect(after).toHaveLength(3);
    s.dispose();
    model.dispose();
  });

  it("stops at the context size and on bad input names the problem", async () => {
    const model = await loadModel(path);
    const s = model.createSession({ contextSize: 12 });
    const ids: number[] = [];
    const it = s.generate("a b", { maxTokens: 100 });
    let r = await it.next();
    while (!r.done) {
      ids.push(r.value.token);
      r = await it.next();
    }
    expect(r.value.stopReason).toBe("context-full");
    expect(s.tokens.length).toBe(11);
    expect(() => s.evaluate([model.config.nVocab + 5])).toThrow(/token id \d+ outside the vocabulary/);
    s.dispose();
    expect(() => s.evaluate([1])).toThrow(/disposed/);
    await expect(loadModel(join(dir, "missing.gguf"))).rejects.toThrow(/missing\.gguf: cannot open/);
    model.dispose();
  });
});
