// The CLI as a separate process, as a user runs it (bin/neuronpipe.js): what the in-process tests
// cannot reach — a prompt piped on the real stdin with no -p, and `neuronpipe serve` itself driven
// by the official `openai` client (stop on a chat, top_p, a saved --plan with --memory). Every
// answer is checked against the same generation run through the library.
import { spawn, spawnSync, type ChildProcessByStdio } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Readable } from "node:stream";
import OpenAI from "openai";
import { afterAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../../src/index.js";
import { defaultModel, root, scratchDefaultPack } from "../helpers/default-pack.js";

const bin = join(root, "bin", "neuronpipe.js");
const { dir, packPath } = scratchDefaultPack("np-process-");

/** Greedy text after `prompt` (a string or token ids) through the library. */
async function reference(model: Model, prompt: string | number[], maxTokens: number): Promise<string> {
  const s = model.createSession({ contextSize: 256 });
  let text = "";
  for await (const p of s.generate(prompt, { maxTokens, temperature: 0 })) text += p.text;
  s.dispose();
  return text;
}

type Server = { child: ChildProcessByStdio<null, Readable, Readable>; url: string; stderr: () => string };
const servers: Server[] = [];
afterAll(() => {
  for (const s of servers) s.child.kill("SIGKILL");
});

/** `neuronpipe serve --port 0 ARGS` as a child; resolves when it prints the address it listens on. */
function serve(args: string[]): Promise<Server> {
  const child = spawn(process.execPath, [bin, "serve", "--port", "0", ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let err = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not start in 60 s:\n${err}`)), 60_000);
    child.stderr.on("data", (d: Buffer) => {
      err += d.toString();
      const m = / at (http:\/\/127\.0\.0\.1:\d+) /.exec(err);
      if (m) {
        clearTimeout(timer);
        const s = { child, url: m[1]!, stderr: () => err };
        servers.push(s);
        resolve(s);
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`serve exited (${code}) before listening:\n${err}`));
    });
  });
}

/** SIGINT, as Ctrl-C: the server stops and the process exits 0. */
function stop(s: Server): Promise<number | null> {
  return new Promise((resolve) => {
    s.child.once("exit", (code) => resolve(code));
    s.child.kill("SIGINT");
  });
}

describe("the CLI as a process", () => {
  it("a prompt piped on stdin with no -p is the prompt (the same tokens as -p with that text)", async () => {
    const prompt = "The whale swam past the ship and";
    const run = (args: string[], input?: string) => {
      const r = spawnSync(process.execPath, [bin, "generate", "-n", "6", "--temp", "0", "--json", ...args], { input: input ?? "", encoding: "utf8" });
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as { prompt: string; promptTokens: number[]; text: string };
    };
    const piped = run([], prompt);
    const given = run(["-p", prompt]);
    expect(piped.prompt).toBe(prompt);
    expect(piped.promptTokens).toEqual(given.promptTokens);
    const model = await loadModel(defaultModel, { contextSize: 256 });
    try {
      expect(piped.text).toBe(await reference(model, prompt, 6));
    } finally {
      model.dispose();
    }
  });

  it("neuronpipe serve, through the openai client: stop on a chat, top_p, Ctrl-C ends it", async () => {
    const server = await serve(["-m", defaultModel, "--alias", "default"]);
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const messages = [{ role: "user" as const, content: "Tell me of the sea." }];
    const full = await client.chat.completions.create({ model: "default", messages, max_tokens: 24, temperature: 0 });
    const text = full.choices[0]!.message.content!;
    // a stop string taken from the middle of the greedy reply: the reply ends just before it
    const cut = text.slice(8, 11);
    expect(cut.length).toBe(3);
    const at = text.indexOf(cut);
    const stopped = await client.chat.completions.create({ model: "default", messages, max_tokens: 24, temperature: 0, stop: [cut] });
    expect(stopped.choices[0]!.message.content).toBe(text.slice(0, at));
    expect(stopped.choices[0]!.finish_reason).toBe("stop");
    // top_p so small that only the likeliest token is left: at temperature 1.5 the greedy reply
    const nucleus = await client.chat.completions.create({ model: "default", messages, max_tokens: 24, temperature: 1.5, top_p: 1e-6, seed: 7 });
    expect(nucleus.choices[0]!.message.content).toBe(text);
    // and without it, the same temperature and seed sample something else (top_p reached the sampler)
    const hot = await client.chat.completions.create({ model: "default", messages, max_tokens: 24, temperature: 1.5, top_p: 1, seed: 7 });
    expect(hot.choices[0]!.message.content).not.toBe(text);
    expect(await stop(server)).toBe(0);
    expect(server.stderr()).toMatch(/neuronpipe serve: stopping/);
  });

  it("neuronpipe serve of a pack with --memory and a saved --plan decodes as the library with that plan", async () => {
    const planPath = join(dir, "plan.json");
    const made = spawnSync(process.execPath, [bin, "plan", "--model", packPath, "--memory", "26MiB", "--out", planPath], { encoding: "utf8" });
    expect(made.status, made.stderr).toBe(0);
    // a plan the planner would not choose here, so the server visibly runs the file's decoder
    const plan = JSON.parse(readFileSync(planPath, "utf8")) as { knobs: { decoder: string } };
    plan.knobs.decoder = "blocking";
    writeFileSync(planPath, JSON.stringify(plan));
    const server = await serve(["-m", packPath, "--memory", "26MiB", "--plan", planPath, "--alias", "pack"]);
    expect(server.stderr()).toMatch(/decoder: blocking/);
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const r = await client.completions.create({ model: "pack", prompt: "Call me Ishmael.", max_tokens: 10, temperature: 0 });
    expect(await stop(server)).toBe(0);
    const model = await loadModel(packPath, { memory: "26MiB", plan: planPath, contextSize: 256 });
    try {
      expect(model.plan?.knobs.decoder).toBe("blocking");
      expect(r.choices[0]!.text).toBe(await reference(model, "Call me Ishmael.", 10));
    } finally {
      await model.close();
    }
  });
});
