// The OpenAI API's request bodies, checked field by field into generation options, and the
// shapes of its answers (https://platform.openai.com/docs/api-reference, as llama-server
// implements them). A field we do not implement is refused by name rather than ignored when
// ignoring it would change the answer (n > 1, logprobs); harmless ones (user, …) are ignored.
import type { ChatMessage } from "../api/chat-template.js";
import type { GenerationStats } from "../api/session.js";

/** A request the server refuses with 400, naming the field. */
export class RequestError extends Error {
  constructor(
    message: string,
    readonly param?: string,
    readonly status = 400,
  ) {
    super(message);
  }
}

export interface Sampling {
  maxTokens?: number;
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
  repeatPenalty?: number;
  seed?: number;
  stop: string[];
}

export interface CompletionRequest extends Sampling {
  prompt: string;
  stream: boolean;
  includeUsage: boolean;
}

export interface ChatRequest extends Sampling {
  messages: ChatMessage[];
  stream: boolean;
  includeUsage: boolean;
}

type Body = Record<string, unknown>;

function number(b: Body, key: string, { min = -Infinity, max = Infinity, int = false } = {}): number | undefined {
  const v = b[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isFinite(v) || (int && !Number.isInteger(v)) || v < min || v > max) {
    const range = max < Infinity ? ` from ${min} to ${max}` : min > -Infinity ? ` ≥ ${min}` : "";
    throw new RequestError(`${key} must be ${int ? "an integer" : "a number"}${range}, got ${JSON.stringify(v)?.slice(0, 40)}`, key);
  }
  return v;
}

function bool(b: Body, key: string): boolean {
  const v = b[key];
  if (v === undefined || v === null) return false;
  if (typeof v !== "boolean") throw new RequestError(`${key} must be true or false`, key);
  return v;
}

function sampling(b: Body): Sampling {
  const n = number(b, "n", { min: 1, int: true });
  if (n !== undefined && n !== 1) throw new RequestError("n must be 1: one choice per request", "n");
  if (b.logprobs !== undefined && b.logprobs !== null && b.logprobs !== false) throw new RequestError("logprobs are not supported", "logprobs");
  let stop: string[] = [];
  if (typeof b.stop === "string") stop = [b.stop];
  else if (Array.isArray(b.stop)) stop = b.stop;
  else if (b.stop !== undefined && b.stop !== null) throw new RequestError("stop must be a string or an array of strings", "stop");
  if (stop.length > 16 || stop.some((s) => typeof s !== "string" || s.length === 0 || s.length > 256)) {
    throw new RequestError("stop must hold at most 16 non-empty strings of at most 256 characters", "stop");
  }
  const maxTokens = number(b, "max_completion_tokens", { min: 0, int: true }) ?? number(b, "max_tokens", { min: 0, int: true });
  return {
    maxTokens,
    temperature: number(b, "temperature", { min: 0, max: 2 }),
    topP: number(b, "top_p", { min: 0, max: 1 }),
    topK: number(b, "top_k", { min: 0, int: true }),
    minP: number(b, "min_p", { min: 0, max: 1 }),
    repeatPenalty: number(b, "repeat_penalty", { min: 0 }),
    seed: number(b, "seed", { int: true, min: -(2 ** 53), max: 2 ** 53 }),
    stop,
  };
}

function streamOptions(b: Body): { stream: boolean; includeUsage: boolean } {
  const stream = bool(b, "stream");
  const so = b.stream_options;
  if (so !== undefined && so !== null && (typeof so !== "object" || Array.isArray(so))) throw new RequestError("stream_options must be an object", "stream_options");
  return { stream, includeUsage: stream && !!so && (so as Body).include_usage === true };
}

export function completionRequest(b: Body): CompletionRequest {
  let prompt = b.prompt;
  if (Array.isArray(prompt) && prompt.length === 1 && typeof prompt[0] === "string") prompt = prompt[0];
  if (typeof prompt !== "string") throw new RequestError("prompt must be a string", "prompt");
  if (prompt.length === 0) throw new RequestError("prompt is empty", "prompt");
  return { prompt, ...sampling(b), ...streamOptions(b) };
}

function content(v: unknown, i: number): string {
  if (typeof v === "string") return v;
  // the array form: text parts only
  if (Array.isArray(v) && v.every((p) => p && typeof p === "object" && (p as Body).type === "text" && typeof (p as Body).text === "string")) {
    return v.map((p) => (p as Body).text as string).join("");
  }
  throw new RequestError(`messages[${i}].content must be a string or an array of text parts`, `messages[${i}].content`);
}

export function chatRequest(b: Body): ChatRequest {
  if (!Array.isArray(b.messages) || b.messages.length === 0) throw new RequestError("messages must be a non-empty array", "messages");
  const messages = b.messages.map((m, i): ChatMessage => {
    if (!m || typeof m !== "object") throw new RequestError(`messages[${i}] must be an object`, `messages[${i}]`);
    const role = (m as Body).role;
    if (typeof role !== "string" || !["system", "developer", "user", "assistant"].includes(role)) {
      throw new RequestError(`messages[${i}].role must be system, developer, user or assistant`, `messages[${i}].role`);
    }
    return { role: role === "developer" ? "system" : role, content: content((m as Body).content, i) };
  });
  return { messages, ...sampling(b), ...streamOptions(b) };
}

/** OpenAI's finish_reason for a stop reason: "stop" at the end of text or a stop string, "length" at a limit. */
export function finishReason(stats: GenerationStats): "stop" | "length" {
  return stats.stopReason === "eos" || stats.stopReason === "stop-sequence" ? "stop" : "length";
}

export function usage(promptTokens: number, stats: GenerationStats) {
  return { prompt_tokens: promptTokens, completion_tokens: stats.generatedTokens, total_tokens: promptTokens + stats.generatedTokens };
}

export function errorBody(message: string, type: string, param?: string, code?: string | number) {
  return { error: { message, type, param: param ?? null, code: code ?? null } };
}
