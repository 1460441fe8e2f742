// `neuronpipe serve`: an OpenAI-compatible HTTP server over one loaded model (node:http; the
// routes are few and fixed, so no framework). Requests wait for one of the model's sessions in
// arrival order (slots.ts); a client that goes away cancels its generation; a full waiting line
// answers 503. Endpoints as llama-server: /v1/chat/completions, /v1/completions (SSE when
// `stream`), /v1/models, /health, /metrics (Prometheus), /tokenize, /detokenize.
import { randomBytes, randomInt } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { basename } from "node:path";
import { ChatTemplate } from "../api/chat-template.js";
import type { Model } from "../api/model.js";
import type { GenerateOptions, GenerationStats, Session } from "../api/session.js";
import { ServerMetrics } from "./metrics.js";
import { chatRequest, completionRequest, errorBody, finishReason, RequestError, usage, type Sampling } from "./openai.js";
import { QueueFullError, SessionSlots } from "./slots.js";

export interface ServerOptions {
  /** Interface to listen on (default 127.0.0.1, as llama-server). */
  host?: string;
  /** Port (default 8080; 0: any free port). */
  port?: number;
  /** Sessions generating at once (default 1; a neuron pack holds one). */
  parallel?: number;
  /** Requests that may wait for a session; one more gets 503 (default 16). */
  queueLimit?: number;
  /** Context of each session, tokens (default: the model's, capped as loadModel caps it). */
  contextSize?: number;
  /** The model's id in /v1/models and in answers (default: its file name). */
  modelName?: string;
  /** /v1/completions' max_tokens when a request gives none (OpenAI's default, 16). */
  defaultCompletionTokens?: number;
}

/** Largest request body read (a prompt of ~1M characters). */
const MAX_BODY = 4 * 2 ** 20;

export class Server {
  private readonly running = new Set<AbortController>();
  private closing?: Promise<void>;

  constructor(
    private readonly http: ReturnType<typeof createServer>,
    private readonly slots: SessionSlots,
    readonly metrics: ServerMetrics,
    readonly url: string,
  ) {}

  /** @internal a generation in flight (aborted when the server closes). */
  track(ac: AbortController): () => void {
    this.running.add(ac);
    return () => this.running.delete(ac);
  }

  /** Stop listening, cancel every generation, dispose the sessions (the model stays the caller's). */
  close(): Promise<void> {
    this.closing ??= (async () => {
      const done = new Promise<void>((r) => this.http.close(() => r()));
      this.slots.close(new Error("server closing"));
      for (const ac of this.running) ac.abort(new Error("server closing"));
      this.http.closeAllConnections();
      await done;
      // generations finish their step before the sessions go
      while (this.running.size > 0) await new Promise((r) => setTimeout(r, 5));
      for (const s of this.slots.sessions) s.dispose();
    })();
    return this.closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Serve `model` over HTTP until `close()`. */
export async function startServer(model: Model, opts: ServerOptions = {}): Promise<Server> {
  const parallel = opts.parallel ?? 1;
  if (!(Number.isInteger(parallel) && parallel >= 1)) throw new RangeError(`parallel must be a whole number ≥ 1, got ${parallel}`);
  if (model.sparse && parallel > 1) throw new RangeError(`parallel: the memory plan of a neuron pack holds one session; give 1, got ${parallel}`);
  const queueLimit = opts.queueLimit ?? 16;
  if (!(Number.isInteger(queueLimit) && queueLimit >= 0)) throw new RangeError(`queueLimit must be a whole number ≥ 0, got ${queueLimit}`);
  const modelName = opts.modelName ?? basename(model.path);
  const template = ChatTemplate.of(model.file, model.tokenizer);
  const sessions = Array.from({ length: parallel }, () => model.createSession({ contextSize: opts.contextSize }));
  const slots = new SessionSlots(sessions, queueLimit);
  const metrics = new ServerMetrics();
  const created = Math.floor(Date.now() / 1000);
  const defaultCompletionTokens = opts.defaultCompletionTokens ?? 16;
  const contextSize = sessions[0]!.contextSize;
  let server: Server; // assigned once listening; requests arrive only after

  const http = createServer((req, res) => {
    const endpoint = routeName(req.url ?? "/");
    const t0 = performance.now();
    res.on("close", () => {
      const status = res.writableFinished ? String(res.statusCode) : "499"; // 499: the client went away first
      metrics.requests.inc({ endpoint, status });
      metrics.duration.observe({ endpoint }, (performance.now() - t0) / 1000);
    });
    handle(req, res, endpoint).catch((e: unknown) => {
      const err = e as Error;
      if (res.headersSent) {
        if (!res.writableEnded) res.end();
        return;
      }
      if (e instanceof RequestError) send(res, e.status, errorBody(e.message, "invalid_request_error", e.param));
      else send(res, 500, errorBody(`internal error: ${err?.message ?? String(e)}`, "server_error"));
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse, endpoint: string): Promise<void> {
    const method = req.method ?? "GET";
    const want = (m: string) => {
      if (method !== m) throw new RequestError(`${endpoint} takes ${m}, not ${method}`, undefined, 405);
    };
    switch (endpoint) {
      case "/health":
        want("GET");
        return send(res, 200, { status: "ok" });
      case "/metrics":
        want("GET");
        metrics.waiting.set(slots.waiting);
        metrics.busy.set(slots.busy);
        res.writeHead(200, { "content-type": metrics.registry.contentType });
        res.end(await metrics.registry.metrics());
        return;
      case "/v1/models":
        want("GET");
        return send(res, 200, { object: "list", data: [{ id: modelName, object: "model", created, owned_by: "neuronpipe", meta: { n_ctx: contextSize, n_vocab: model.config.nVocab, path: model.path } }] });
      case "/tokenize": {
        want("POST");
        const b = await body(req);
        if (typeof b.content !== "string") throw new RequestError("content must be a string", "content");
        const addSpecial = b.add_special === undefined ? false : b.add_special === true;
        return send(res, 200, { tokens: model.tokenizer.encode(b.content, { addBos: addSpecial ? undefined : false, parseSpecial: b.parse_special === true }) });
      }
      case "/detokenize": {
        want("POST");
        const b = await body(req);
        const V = model.config.nVocab;
        if (!Array.isArray(b.tokens) || b.tokens.some((t) => !Number.isInteger(t) || (t as number) < 0 || (t as number) >= V)) {
          throw new RequestError(`tokens must be an array of token ids from 0 to ${V - 1}`, "tokens");
        }
        return send(res, 200, { content: model.tokenizer.decode(b.tokens as number[]) });
      }
      case "/v1/completions": {
        want("POST");
        const r = completionRequest(await body(req));
        const tokens = model.tokenizer.encode(r.prompt);
        return generate(req, res, "completion", tokens, r, r.stream, r.includeUsage, r.maxTokens ?? defaultCompletionTokens, []);
      }
      case "/v1/chat/completions": {
        want("POST");
        const r = chatRequest(await body(req));
        const tokens = template.tokens(r.messages, model.tokenizer);
        return generate(req, res, "chat", tokens, r, r.stream, r.includeUsage, r.maxTokens, template.stops);
      }
      default:
        throw new RequestError(`no endpoint ${req.url?.slice(0, 100)} (see docs/server.md)`, undefined, 404);
    }
  }

  async function generate(
    req: IncomingMessage,
    res: ServerResponse,
    kind: "completion" | "chat",
    tokens: number[],
    s: Sampling,
    stream: boolean,
    includeUsage: boolean,
    maxTokens: number | undefined,
    templateStops: readonly string[],
  ): Promise<void> {
    const t0 = performance.now();
    if (tokens.length >= contextSize) throw new RequestError(`the prompt is ${tokens.length} tokens; the context holds ${contextSize}`, kind === "chat" ? "messages" : "prompt");
    const ac = new AbortController();
    const untrack = server.track(ac);
    res.on("close", () => {
      if (!res.writableFinished) ac.abort(new Error("client disconnected"));
    });
    let session: Session;
    try {
      session = await slots.acquire(tokens, ac.signal);
    } catch (e) {
      untrack();
      if (e instanceof QueueFullError) {
        metrics.rejected.inc();
        res.setHeader("retry-after", "1");
        return send(res, 503, errorBody(e.message, "server_busy", undefined, 503));
      }
      if (ac.signal.aborted) return;
      throw e;
    }
    const id = `${kind === "chat" ? "chatcmpl" : "cmpl"}-${randomBytes(12).toString("hex")}`;
    const object = kind === "chat" ? "chat.completion" : "text_completion";
    const base = { id, object: stream ? `${object}${kind === "chat" ? ".chunk" : ""}` : object, created: Math.floor(Date.now() / 1000), model: modelName };
    const chunk = (text: string, finish: string | null, first = false) =>
      kind === "chat"
        ? { ...base, choices: [{ index: 0, delta: first ? { role: "assistant", content: text } : finish ? {} : { content: text }, finish_reason: finish, logprobs: null }] }
        : { ...base, choices: [{ index: 0, text, finish_reason: finish, logprobs: null }] };
    try {
      metrics.busy.set(slots.busy);
      const rest = session.reuse(tokens);
      const options: GenerateOptions = {
        maxTokens: Math.min(maxTokens ?? contextSize, contextSize - tokens.length - 1),
        temperature: s.temperature,
        topP: s.topP,
        topK: s.topK,
        minP: s.minP,
        repeatPenalty: s.repeatPenalty,
        seed: s.seed ?? randomInt(2 ** 31), // OpenAI's: a request without a seed is not repeatable
        stop: [...s.stop, ...templateStops],
        signal: ac.signal,
      };
      if (stream) {
        res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
        if (kind === "chat") sse(res, chunk("", null, true));
      }
      let text = "";
      let first = true;
      const it = session.generate(rest, options);
      let r = await it.next();
      while (!r.done) {
        if (first) {
          metrics.firstToken.observe((performance.now() - t0) / 1000);
          first = false;
        }
        text += r.value.text;
        if (stream && r.value.text) sse(res, chunk(r.value.text, null));
        r = await it.next();
      }
      const stats: GenerationStats = r.value;
      metrics.promptTokens.inc(tokens.length);
      metrics.generatedTokens.inc(stats.generatedTokens);
      if (stats.decodeTokensPerSecond > 0) metrics.decodeRate.observe(stats.decodeTokensPerSecond);
      const finish = finishReason(stats);
      const use = usage(tokens.length, stats);
      const timings = { prompt_n: stats.promptTokens, prompt_ms: stats.prefillSeconds * 1000, predicted_n: stats.generatedTokens, predicted_per_second: stats.decodeTokensPerSecond, stop_reason: stats.stopReason };
      if (stream) {
        sse(res, { ...chunk("", finish), ...(kind === "completion" && { choices: [{ index: 0, text: "", finish_reason: finish, logprobs: null }] }), timings });
        if (includeUsage) sse(res, { ...base, choices: [], usage: use });
        res.end("data: [DONE]\n\n");
      } else {
        const choice = kind === "chat" ? { index: 0, message: { role: "assistant", content: text }, finish_reason: finish, logprobs: null } : { index: 0, text, finish_reason: finish, logprobs: null };
        send(res, 200, { ...base, choices: [choice], usage: use, timings });
      }
    } catch (e) {
      if (ac.signal.aborted) {
        metrics.cancelled.inc();
        if (!res.writableEnded) res.end();
        return;
      }
      if (stream && res.headersSent) {
        sse(res, errorBody(`generation failed: ${(e as Error).message}`, "server_error"));
        res.end();
        return;
      }
      throw e;
    } finally {
      slots.release(session);
      metrics.busy.set(slots.busy);
      untrack();
    }
  }

  await new Promise<void>((resolve, reject) => {
    http.once("error", reject);
    http.listen(opts.port ?? 8080, opts.host ?? "127.0.0.1", () => {
      http.off("error", reject);
      resolve();
    });
  }).catch((e: NodeJS.ErrnoException) => {
    for (const s of sessions) s.dispose();
    throw new Error(e.code === "EADDRINUSE" ? `port ${opts.port ?? 8080} on ${opts.host ?? "127.0.0.1"} is in use (--port another)` : `cannot listen on ${opts.host ?? "127.0.0.1"}:${opts.port ?? 8080}: ${e.message}`);
  });
  const a = http.address() as AddressInfo;
  server = new Server(http, slots, metrics, `http://${a.family === "IPv6" ? `[${a.address}]` : a.address}:${a.port}`);
  return server;
}

/** The endpoint a URL names (query dropped; the OpenAI paths without /v1 accepted, as llama-server). */
function routeName(url: string): string {
  const path = url.split("?")[0]!.replace(/\/+$/, "") || "/";
  if (path === "/models" || path === "/completions" || path === "/chat/completions") return `/v1${path}`;
  return ["/health", "/metrics", "/tokenize", "/detokenize", "/v1/models", "/v1/completions", "/v1/chat/completions"].includes(path) ? path : "other";
}

function send(res: ServerResponse, status: number, value: unknown): void {
  const text = JSON.stringify(value);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

function sse(res: ServerResponse, value: unknown): void {
  res.write(`data: ${JSON.stringify(value)}\n\n`);
}

async function body(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > MAX_BODY) throw new RequestError(`request body over ${MAX_BODY} bytes`, undefined, 413);
    chunks.push(c as Buffer);
  }
  let v: unknown;
  try {
    v = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch (e) {
    throw new RequestError(`the body is not JSON: ${(e as Error).message.slice(0, 100)}`);
  }
  if (!v || typeof v !== "object" || Array.isArray(v)) throw new RequestError("the body must be a JSON object");
  return v as Record<string, unknown>;
}
