// Chat templates (hand-rendered expectations) and ChatSession (its replies against a fresh
// session given the whole conversation: keeping the KV cache between turns changes nothing).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChatSession } from "../../src/api/chat.js";
import { CHATML_TEMPLATE, ChatTemplate } from "../../src/api/chat-template.js";
import { loadModel, synthModel, type Model } from "../../src/index.js";

// Meta's Llama 3 instruct template, as its tokenizer_config.json ships it
const LLAMA3 =
  "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

const dir = mkdtempSync(join(tmpdir(), "np-chat-api-"));
let withTemplate: string;
let plain: string;
beforeAll(async () => {
  const shape = { embd: 128, ff: 352, layers: 2, heads: 4, kvHeads: 2, ctx: 512 };
  plain = join(dir, "plain.gguf");
  await synthModel({ shape, type: "q8_0", seed: 2 }).write(plain);
  withTemplate = join(dir, "templated.gguf");
  const w = synthModel({ shape, type: "q8_0", seed: 2, tokenizer: "llama3" });
  w.setString("tokenizer.chat_template", LLAMA3);
  await w.write(withTemplate);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const conversation = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "  Hi!  " },
];

describe("ChatTemplate", () => {
  it("renders a real template (Llama 3) as transformers would: bos_token, trim, add_generation_prompt", () => {
    const t = new ChatTemplate(LLAMA3, "test", { bos: "<|begin_of_text|>", eos: "<|end_of_text|>" });
    expect(t.render(conversation)).toBe(
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    );
    expect(t.render(conversation, false).endsWith("Hi!<|eot_id|>")).toBe(true);
  });

  it("takes the GGUF's tokenizer.chat_template, and ChatML when there is none", async () => {
    const m = await loadModel(withTemplate);
    const t = ChatTemplate.of(m.file, m.tokenizer);
    expect(t.origin).toMatch(/tokenizer\.chat_template of .*templated\.gguf/);
    expect(t.render(conversation)).toMatch(/^<\|begin_of_text\|><\|start_header_id\|>system/);
    // the template writes BOS: it is not added twice; its control tokens are read as tokens
    const ids = t.tokens(conversation, m.tokenizer);
    expect(ids.filter((id) => id === m.tokenizer.bosId)).toHaveLength(1);
    expect(ids).toContain(m.tokenizer.tokenId("<|eot_id|>"));
    m.dispose();
    const p = await loadModel(plain);
    const c = ChatTemplate.of(p.file, p.tokenizer);
    expect(c.source).toBe(CHATML_TEMPLATE);
    expect(c.render(conversation)).toBe("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n  Hi!  <|im_end|>\n<|im_start|>assistant\n");
    expect(c.stops).toEqual(["<|im_end|>", "<|im_start|>"]);
    p.dispose();
  });

  it("a template that does not parse or fails names itself", () => {
    expect(() => new ChatTemplate("{% for %}", "tokenizer.chat_template of x.gguf", { bos: "", eos: "" })).toThrow(/chat template \(tokenizer\.chat_template of x\.gguf\) does not parse/);
    const t = new ChatTemplate("{{ raise_exception('roles must alternate') }}", "t.gguf", { bos: "", eos: "" });
    expect(() => t.render(conversation)).toThrow(/chat template \(t\.gguf\) failed: .*roles must alternate/);
  });
});

describe("ChatSession", () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(plain);
  });
  afterAll(() => model.dispose());

  /** The reply a fresh session gives to the whole conversation's prompt (greedy). */
  async function fresh(messages: { role: string; content: string }[], maxTokens: number): Promise<string> {
    const t = ChatTemplate.of(model.file, model.tokenizer);
    const s = model.createSession({ contextSize: 512 });
    let text = "";
    for await (const p of s.generate(t.tokens(messages, model.tokenizer), { maxTokens, temperature: 0, stop: t.stops })) text += p.text;
    s.dispose();
    return text;
  }

  it("each turn's reply equals a fresh session's reply to the whole conversation; the history is kept", async () => {
    const chat = new ChatSession(model, { contextSize: 512, systemPrompt: "Be brief." });
    const a = await chat.reply("Hello", { maxTokens: 12, temperature: 0 });
    expect(a.text).toBe(await fresh([{ role: "system", content: "Be brief." }, { role: "user", content: "Hello" }], 12));
    const b = await chat.reply("And then?", { maxTokens: 12, temperature: 0 });
    const history = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hello" },
      { role: "assistant", content: a.text },
      { role: "user", content: "And then?" },
    ];
    expect(b.text).toBe(await fresh(history, 12));
    expect(chat.messages).toEqual([...history, { role: "assistant", content: b.text }]);
    // the second turn evaluated only what the session did not hold
    expect(b.stats.promptTokens).toBeLessThan(ChatTemplate.of(model.file, model.tokenizer).tokens(history, model.tokenizer).length - 12);
    chat.reset();
    expect(chat.messages).toEqual([{ role: "system", content: "Be brief." }]);
    chat.dispose();
  });

  it("a turn refused before any token (the conversation does not fit) leaves the history as it was", async () => {
    const chat = new ChatSession(model, { contextSize: 64 });
    await expect(chat.reply("word ".repeat(100))).rejects.toThrow(/does not fit the context/);
    expect(chat.messages).toEqual([]);
    chat.dispose();
  });
});
