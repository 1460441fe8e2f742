// A chat with a model: the conversation's messages, rendered by the model's chat template into
// one session. Each turn tokenizes the whole conversation and evaluates only what the session
// does not already hold (the longest common prefix of tokens is kept), so a conversation costs
// its new tokens, not its history, while the text the model sees is exactly the template's.
import { ChatTemplate, type ChatMessage } from "./chat-template.js";
import type { Model } from "./model.js";
import type { GeneratedPiece, GenerateOptions, GenerationStats, Session, SessionOptions } from "./session.js";

export type { ChatMessage } from "./chat-template.js";

export interface ChatSessionOptions extends SessionOptions {
  /** A system message that opens the conversation. */
  systemPrompt?: string;
  /** The template (Jinja text, or a ChatTemplate); default: the model's, else ChatML. */
  template?: string | ChatTemplate;
}

export type ChatPromptOptions = Omit<GenerateOptions, "addBos" | "parseSpecial">;

export interface ChatReply {
  text: string;
  stats: GenerationStats;
}

export class ChatSession {
  readonly template: ChatTemplate;
  /** The conversation so far (a reply cut short by a signal is kept as far as it went). */
  readonly messages: ChatMessage[] = [];
  private readonly session: Session;
  private readonly systemPrompt?: string;

  constructor(
    readonly model: Model,
    opts: ChatSessionOptions = {},
  ) {
    const { systemPrompt, template, ...sessionOptions } = opts;
    this.template =
      template instanceof ChatTemplate ? template : typeof template === "string" ? new ChatTemplate(template, "the template given", { bos: "", eos: "" }) : ChatTemplate.of(model.file, model.tokenizer);
    this.systemPrompt = systemPrompt;
    if (systemPrompt !== undefined) this.messages.push({ role: "system", content: systemPrompt });
    this.session = model.createSession(sessionOptions);
  }

  get contextSize(): number {
    return this.session.contextSize;
  }

  /** Send a user message; streams the reply's pieces and returns the reply. */
  async *prompt(text: string, opts: ChatPromptOptions = {}): AsyncGenerator<GeneratedPiece, ChatReply> {
    const messages: ChatMessage[] = [...this.messages, { role: "user", content: text }];
    const tokens = this.template.tokens(messages, this.model.tokenizer);
    const rest = this.session.reuse(tokens); // evaluate only what the session does not hold
    const stop = [...(opts.stop ?? []), ...this.template.stops];
    this.messages.push({ role: "user", content: text });
    const reply: ChatMessage = { role: "assistant", content: "" };
    this.messages.push(reply);
    const it = this.session.generate(rest, { ...opts, stop });
    let started = false;
    for (;;) {
      let r: IteratorResult<GeneratedPiece, GenerationStats>;
      try {
        r = await it.next();
      } catch (e) {
        // refused before any token (the conversation does not fit, say): the turn did not happen
        if (!started) this.messages.splice(this.messages.length - 2, 2);
        throw e;
      }
      if (r.done) return { text: reply.content, stats: r.value };
      started = true;
      reply.content += r.value.text;
      yield r.value;
    }
  }

  /** Send a user message and wait for the whole reply. */
  async reply(text: string, opts: ChatPromptOptions = {}): Promise<ChatReply> {
    const it = this.prompt(text, opts);
    for (;;) {
      const r = await it.next();
      if (r.done) return r.value;
    }
  }

  /** Start over (the system prompt stays). */
  reset(): void {
    this.session.reset();
    this.messages.length = 0;
    if (this.systemPrompt !== undefined) this.messages.push({ role: "system", content: this.systemPrompt });
  }

  dispose(): void {
    this.session.dispose();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.dispose();
  }
}
