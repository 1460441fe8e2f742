// The README's JavaScript examples, extracted and run as written (plain ESM on this Node, through
// the package's own name), each checked against the library doing the same thing.
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { loadModel, startServer } from "../../src/index.js";
import { defaultModel, root, scratchDefaultPack } from "../helpers/default-pack.js";

const { dir, packPath } = scratchDefaultPack("np-readme-");
const snippets = [...readFileSync(join(root, "README.md"), "utf8").matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);

/** Runs a snippet as an .mjs file in a folder where `neuronpipe` and `openai` resolve and models/ holds the pack. */
async function runSnippet(i: number): Promise<string> {
  const app = join(dir, `app-${i}`);
  mkdirSync(join(app, "node_modules"), { recursive: true });
  mkdirSync(join(app, "models"));
  symlinkSync(root, join(app, "node_modules", "neuronpipe"));
  symlinkSync(join(root, "node_modules", "openai"), join(app, "node_modules", "openai"));
  symlinkSync(packPath, join(app, "models", "neuronpipe-default.pack.gguf"));
  writeFileSync(join(app, "snippet.mjs"), snippets[i]!);
  const { stdout } = await promisify(execFile)(process.execPath, ["snippet.mjs"], { cwd: app, timeout: 120_000, maxBuffer: 16 * 2 ** 20 });
  return stdout;
}

describe("README examples", () => {
  it("there are the three JavaScript examples this test checks", () => {
    expect(snippets.map((s) => /loadModel\("models\/neuronpipe-default\.pack\.gguf"|defaultModelPath\(\)|new OpenAI/.exec(s)?.[0])).toEqual([
      'loadModel("models/neuronpipe-default.pack.gguf"',
      "defaultModelPath()",
      "new OpenAI",
    ]);
  });

  it("a pack under a budget: prints the memory plan and the decoder the library reports for it", async () => {
    const out = await runSnippet(0);
    const model = await loadModel(packPath, { memory: "26MiB", predictor: "trained", decoder: "pipeline", io: { backend: "auto", queueDepth: 32 } });
    const plan = model.sparse!.describe();
    await model.close();
    expect(out.startsWith(plan + "\n")).toBe(true);
    expect(out).toMatch(/hitRate/);
  }, 120_000);

  it("the library example prints the text the library generates with those options", async () => {
    const out = await runSnippet(1);
    const model = await loadModel(defaultModel);
    const s = model.createSession({ contextSize: 256 });
    let text = "";
    for await (const p of s.generate("The sea was", { maxTokens: 64, temperature: 0.8, topK: 40, seed: 1 })) text += p.text;
    s.dispose();
    model.dispose();
    expect(out.startsWith(text)).toBe(true);
    expect(out.slice(text.length)).toMatch(/stopReason: 'max-tokens'/);
  }, 120_000);

  it("the openai client example gets a chat completion from `neuronpipe serve` on 127.0.0.1:8080", async () => {
    const model = await loadModel(defaultModel, { contextSize: 256 });
    const server = await startServer(model, { port: 8080 }).catch((e: Error) => {
      throw new Error(`the README's example talks to port 8080, which this test could not take: ${e.message}`);
    });
    try {
      await runSnippet(2);
      expect(await (await fetch(`${server.url}/metrics`)).text()).toMatch(/^neuronpipe_requests_total\{endpoint="\/v1\/chat\/completions",status="200"\} 1$/m);
    } finally {
      await server.close();
      model.dispose();
    }
  }, 120_000);
});
