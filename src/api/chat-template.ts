// A model's chat template: the GGUF's `tokenizer.chat_template` (Jinja, as Hugging Face writes
// them), rendered by @huggingface/jinja — a maintained implementation of the subset chat
// templates use — with the variables transformers passes (messages, add_generation_prompt,
// bos_token, eos_token). A model without a template gets ChatML, as llama-server does.
import { Template } from "@huggingface/jinja";
import type { GGUFFile } from "../gguf/reader.js";
import type { Tokenizer } from "../tokenizer/index.js";

export interface ChatMessage {
  role: "system" | "user" | "assistant" | (string & {});
  content: string;
}

/** ChatML (`<|im_start|>role\ncontent<|im_end|>\n`), the fallback for a model with no template. */
export const CHATML_TEMPLATE =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

export class ChatTemplate {
  private readonly template: Template;

  /**
   * @param source the Jinja text
   * @param origin where it came from, for messages (`tokenizer.chat_template of m.gguf`, `ChatML (fallback)`)
   * @param stops text that ends an assistant turn when the model writes it as text rather than
   *   as its end-of-generation token (ChatML's markers for the fallback)
   */
  constructor(
    readonly source: string,
    readonly origin: string,
    private readonly special: { bos: string; eos: string },
    readonly stops: readonly string[] = [],
  ) {
    try {
      this.template = new Template(source);
    } catch (e) {
      throw new Error(`chat template (${origin}) does not parse: ${(e as Error).message.slice(0, 200)}`);
    }
  }

  /** The template of `file` (its `tokenizer.chat_template`), or ChatML when it has none. */
  static of(file: GGUFFile, tokenizer: Tokenizer): ChatTemplate {
    const text = (id: number | undefined) => (id === undefined ? "" : tokenizer.tokenText(id));
    const special = { bos: text(tokenizer.bosId), eos: text(tokenizer.eosId) };
    const kv = file.metadata.get("tokenizer.chat_template");
    if (kv && typeof kv.value === "string" && kv.value.trim() !== "") return new ChatTemplate(kv.value, `tokenizer.chat_template of ${file.path}`, special);
    return new ChatTemplate(CHATML_TEMPLATE, "ChatML (the model has no tokenizer.chat_template)", special, ["<|im_end|>", "<|im_start|>"]);
  }

  /** The conversation's prompt tokens: control tokens in the text read as such, BOS added unless the template writes it. */
  tokens(messages: readonly ChatMessage[], tokenizer: Tokenizer): number[] {
    const text = this.render(messages, true);
    const bos = tokenizer.bosId === undefined ? "" : tokenizer.tokenText(tokenizer.bosId);
    return tokenizer.encode(text, { parseSpecial: true, addBos: bos !== "" && text.startsWith(bos) ? false : undefined });
  }

  /** The conversation as the model's prompt text; `addGenerationPrompt` opens the assistant's turn. */
  render(messages: readonly ChatMessage[], addGenerationPrompt = true): string {
    for (const [i, m] of messages.entries()) {
      if (!m || typeof m.role !== "string" || typeof m.content !== "string") throw new TypeError(`messages[${i}] must have a string role and content`);
    }
    try {
      return this.template.render({ messages, add_generation_prompt: addGenerationPrompt, bos_token: this.special.bos, eos_token: this.special.eos });
    } catch (e) {
      throw new Error(`chat template (${this.origin}) failed: ${(e as Error).message.slice(0, 200)}`);
    }
  }
}
