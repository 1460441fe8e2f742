// `neuronpipe serve` against the official `openai` npm client, on the shipped default model: every
// answer is checked against the same generation run through the library (greedy), with the
// chat prompt written out by hand as ChatML (the fallback for a model with no template).
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../../src/index.js";
import { startServer, type Server } from "../../src/server/server.js";
import { defaultModelPath } from "../../src/cli/model-flags.js";
import { scratchDefaultPack } from "../helpers/default-pack.js";

const { packPath } = scratchDefaultPack("np-serve-");

let model: Model;
let server: Server;
let client: OpenAI;
let generated = 0; // completion tokens the answers reported, summed

beforeAll(async () => {
  model = await loadModel(defaultModelPath(), { contextSize: 256 });
  server = await startServer(model, { port: 0, modelName: "default" });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
afterAll(async () => {
  await server?.close();
  model?.dispose();
});

/** Greedy text after `tokens`, through the library (a fresh session). */
async function reference(tokens: number[], maxTokens: number): Promise<string> {
  const s = model.createSession({ contextSize: 256 });
  let text = "";
  for await (const p of s.generate(tokens, { maxTokens, temperature: 0 })) text += p.text;
  s.dispose();
  return text;
}

const chatml = (messages: { role: string; content: string }[]) => messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join("") + "<|im_start|>assistant\n";

async function metrics(): Promise<string> {
  return (await fetch(`${server.url}/metrics`)).text();
}
const count = (text: string, name: string, labels: string) => Number(new RegExp(`^${name}\\{${labels}\\} (\\d+)`, "m").exec(text)?.[1] ?? 0);

describe("neuronpipe serve, through the openai client", () => {
  const messages = [
    { role: "system" as const, content: "You are a sailor." },
    { role: "user" as const, content: "Where is the whale?" },
  ];

  it("chat completion, streamed and not: the text the library generates from the ChatML prompt", async () => {
    const expected = await reference(model.tokenizer.encode(chatml(messages), { parseSpecial: true }), 12);
    const r = await client.chat.completions.create({ model: "default", messages, max_tokens: 12, temperature: 0 });
    expect(r.choices[0]!.message).toMatchObject({ role: "assistant", content: expected });
    expect(r.choices[0]!.finish_reason).toBe("length");
    generated += 2 * r.usage!.completion_tokens;
    expect(r.usage).toEqual({ prompt_tokens: model.tokenizer.encode(chatml(messages), { parseSpecial: true }).length, completion_tokens: 12, total_tokens: r.usage!.prompt_tokens + 12 });
    const stream = await client.chat.completions.create({ model: "default", messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } });
    let text = "";
    let finish: string | null = null;
    let usage: unknown;
    for await (const c of stream) {
      if (c.choices[0]) {
        text += c.choices[0].delta.content ?? "";
        finish = c.choices[0].finish_reason ?? finish;
      }
      if (c.usage) usage = c.usage;
    }
    expect(text).toBe(expected);
    expect(finish).toBe("length");
    expect(usage).toEqual(r.usage);
  });

  it("completion, models, stop sequence", async () => {
    const prompt = "The whale swam";
    const expected = await reference(model.tokenizer.encode(prompt), 20);
    const r = await client.completions.create({ model: "default", prompt, max_tokens: 20, temperature: 0 });
    expect(r.choices[0]!.text).toBe(expected);
    expect(r.usage?.completion_tokens).toBe(20);
    const list = await client.models.list();
    expect(list.data.map((m) => m.id)).toEqual(["default"]);
    // a stop string from the middle of the reference: the text before it, finish_reason "stop"
    const stop = expected.slice(Math.floor(expected.length / 2), Math.floor(expected.length / 2) + 3);
    const cut = await client.completions.create({ model: "default", prompt, max_tokens: 20, temperature: 0, stop: [stop] });
    expect(cut.choices[0]!.text).toBe(expected.slice(0, expected.indexOf(stop)));
    expect(cut.choices[0]!.finish_reason).toBe("stop");
    generated += r.usage!.completion_tokens + cut.usage!.completion_tokens;
    // a seed makes sampling repeatable
    const a = await client.completions.create({ model: "default", prompt, max_tokens: 10, temperature: 0.9, seed: 7 });
    const b = await client.completions.create({ model: "default", prompt, max_tokens: 10, temperature: 0.9, seed: 7 });
    expect(a.choices[0]!.text).toBe(b.choices[0]!.text);
    generated += a.usage!.completion_tokens + b.usage!.completion_tokens;
  });

  it("/metrics counts the requests answered, by endpoint and status", async () => {
    const m = await metrics();
    expect(count(m, "neuronpipe_requests_total", 'endpoint="/v1/chat/completions",status="200"')).toBe(2);
    expect(count(m, "neuronpipe_requests_total", 'endpoint="/v1/completions",status="200"')).toBe(4);
    expect(count(m, "neuronpipe_requests_total", 'endpoint="/v1/models",status="200"')).toBe(1);
    expect(Number(/^neuronpipe_generated_tokens_total (\d+)/m.exec(m)?.[1])).toBe(generated);
    expect(m).toMatch(/^neuronpipe_time_to_first_token_seconds_count 6$/m);
  });

  it("/tokenize, /detokenize and /health agree with the tokenizer", async () => {
    const post = async (path: string, body: unknown) => (await fetch(`${server.url}${path}`, { method: "POST", body: JSON.stringify(body) })).json();
    expect(await post("/tokenize", { content: "Call me Ishmael." })).toEqual({ tokens: model.tokenizer.encode("Call me Ishmael.", { addBos: false }) });
    const ids = model.tokenizer.encode("Call me Ishmael.", { addBos: false });
    expect(await post("/detokenize", { tokens: ids })).toEqual({ content: model.tokenizer.decode(ids) });
    expect(await (await fetch(`${server.url}/health`)).json()).toEqual({ status: "ok" });
  });

  it("bad requests get 400/404/405 with the field named, through the client's error type", async () => {
    await expect(client.completions.create({ model: "default", prompt: "x", max_tokens: -1 })).rejects.toMatchObject({ status: 400, error: { param: "max_tokens" } });
    await expect(client.chat.completions.create({ model: "default", messages: [] })).rejects.toMatchObject({ status: 400, error: { param: "messages" } });
    await expect(client.completions.create({ model: "default", prompt: "x", n: 2 })).rejects.toMatchObject({ status: 400, error: { param: "n" } });
    await expect(client.completions.create({ model: "default", prompt: "x ".repeat(400) })).rejects.toMatchObject({ status: 400, error: { message: expect.stringMatching(/context holds 256/) } });
    const notJson = await fetch(`${server.url}/v1/completions`, { method: "POST", body: "{nope" });
    expect([notJson.status, ((await notJson.json()) as { error: { message: string } }).error.message]).toEqual([400, expect.stringMatching(/not JSON/)]);
    expect((await fetch(`${server.url}/v1/nothing`)).status).toBe(404);
    expect((await fetch(`${server.url}/v1/completions`)).status).toBe(405);
  });
});

describe("neuronpipe serve: waiting line and disconnects", () => {
  it("a full waiting line answers 503 with a clear body; a client that goes away cancels its generation and frees the session", async () => {
    const s = await startServer(model, { port: 0, queueLimit: 0 });
    try {
      // a long streamed generation holds the one session
      const ac = new AbortController();
      const long = await fetch(`${s.url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt: "The sea", max_tokens: 200, stream: true }), signal: ac.signal });
      const reader = long.body!.getReader();
      await reader.read(); // its first piece: it is generating
      const busy = await fetch(`${s.url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt: "The sea", max_tokens: 2 }) });
      expect(busy.status).toBe(503);
      expect(busy.headers.get("retry-after")).toBe("1");
      expect(((await busy.json()) as { error: { type: string; message: string } }).error).toMatchObject({ type: "server_busy", message: expect.stringMatching(/server busy/) });
      ac.abort();
      // the cancellation is counted and the session is free again
      for (let k = 0; k < 200 && !/^neuronpipe_generations_cancelled_total 1$/m.test(await (await fetch(`${s.url}/metrics`)).text()); k++) await new Promise((r) => setTimeout(r, 10));
      const m = await (await fetch(`${s.url}/metrics`)).text();
      expect(m).toMatch(/^neuronpipe_generations_cancelled_total 1$/m);
      expect(m).toMatch(/^neuronpipe_requests_rejected_total 1$/m);
      const after = await fetch(`${s.url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt: "The sea", max_tokens: 3 }) });
      expect(after.status).toBe(200);
      expect(((await after.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(3);
    } finally {
      await s.close();
    }
  });

  it("requests beyond the sessions wait their turn in arrival order (none refused under the limit)", async () => {
    const s = await startServer(model, { port: 0, queueLimit: 8 });
    try {
      const done: number[] = [];
      const all = Array.from({ length: 6 }, (_, i) =>
        fetch(`${s.url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt: "The sea", max_tokens: 8, seed: i }) }).then(async (r) => {
          expect(r.status).toBe(200);
          await r.json();
          done.push(i);
        }),
      );
      await Promise.all(all);
      expect(done).toEqual([0, 1, 2, 3, 4, 5]);
    } finally {
      await s.close();
    }
  });
});

describe("neuronpipe serve over a neuron pack under a memory budget", () => {
  it("answers as the library does with the same pack, plan and budget; refuses a second session", async () => {
    const pack = await loadModel(packPath, { memory: "26MiB", contextSize: 256 });
    try {
      await expect(startServer(pack, { port: 0, parallel: 2 })).rejects.toThrow(/holds one session/);
      const s = await startServer(pack, { port: 0 });
      const prompt = "The whale swam";
      let r: { choices: { text: string }[] };
      try {
        r = (await (await fetch(`${s.url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt, max_tokens: 16, temperature: 0 }) })).json()) as typeof r;
      } finally {
        await s.close();
      }
      const session = pack.createSession({ contextSize: 256 });
      let text = "";
      for await (const p of session.generate(prompt, { maxTokens: 16, temperature: 0 })) text += p.text;
      session.dispose();
      expect(r.choices[0]!.text).toBe(text);
      expect(pack.sparse!.report()[0]!.tokens).toBeGreaterThan(16); // both ran sparse
    } finally {
      await pack[Symbol.asyncDispose]();
    }
  });
});
