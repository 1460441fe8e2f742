// neuronpipe chat: a conversation in the terminal (a ChatSession: the model's chat template, the
// history kept in one session). Ctrl-C during a reply stops the reply, not the program; Ctrl-C or
// Ctrl-D at an empty prompt, or /exit, ends the chat; /reset starts over.
import { createInterface } from "node:readline";
import { ChatSession } from "../../api/chat.js";
import { defaultSampling } from "../../api/sampling.js";
import { MAX_THREADS, num, oneOf, UsageError, type Command } from "../command.js";
import { defaultModelPath, modelFlags, modelFlagsHelp, openFromFlags } from "../model-flags.js";

export const chat: Command = {
  summary: "chat with the model in the terminal (its chat template; Ctrl-C stops a reply)",
  usage: "neuronpipe chat [-m PATH] [--system TEXT] [-n N] [--temp T] [options]",
  options: {
    model: { type: "string", short: "m" },
    system: { type: "string" },
    "max-tokens": { type: "string", short: "n" },
    temp: { type: "string" },
    temperature: { type: "string" },
    "top-k": { type: "string" },
    "top-p": { type: "string" },
    "min-p": { type: "string" },
    seed: { type: "string", short: "s" },
    threads: { type: "string", short: "t" },
    ctx: { type: "string", short: "c" },
    ...modelFlags,
    help: { type: "boolean", short: "h" },
  },
  help: {
    model: "GGUF model file or neuron pack (default: the embedded default model)",
    system: "a system message that opens the conversation",
    "max-tokens": "tokens per reply at most (default: until the model ends its turn or the context is full)",
    temp: `sampling temperature; 0 = greedy (default ${defaultSampling.temperature})`,
    temperature: "the same as --temp",
    "top-k": "keep the k most likely tokens (default 40; 0 = off)",
    "top-p": "nucleus sampling mass (default 0.95; 1 = off)",
    "min-p": "drop tokens below min-p × p(best) (default 0.05)",
    seed: "random seed of the first reply; each reply after uses the next (default 0)",
    threads: "compute threads (default: all CPUs)",
    ctx: "context size in tokens: the whole conversation must fit (default min(model's, 2048))",
    ...modelFlagsHelp,
  },
  async run(v, pos, io) {
    if (pos.length > 0) throw new UsageError(`chat takes no positional arguments (type the messages), got: ${pos.join(" ")}`);
    const threads = num(v.threads, "threads", { int: true, min: 1, max: MAX_THREADS });
    const contextSize = num(v.ctx, "ctx", { int: true, min: 1 });
    const maxTokens = num(v["max-tokens"], "max-tokens", { int: true, min: 1 });
    const sampling = {
      temperature: num(oneOf(v, "temp", "temperature"), "temp", { min: 0 }),
      topK: num(v["top-k"], "top-k", { int: true, min: 0 }),
      topP: num(v["top-p"], "top-p"),
      minP: num(v["min-p"], "min-p"),
    };
    let seed = num(v.seed, "seed", { int: true }) ?? defaultSampling.seed;
    const path = (v.model as string | undefined) ?? defaultModelPath();
    const model = await openFromFlags(path, { ...v, json: true }, { threads, contextSize });
    const conversation = new ChatSession(model, { contextSize, systemPrompt: v.system as string | undefined });
    const input = io.stdin ?? process.stdin;
    const rl = createInterface({ input, output: process.stdout, prompt: "> ", terminal: !!input.isTTY });
    let replying: AbortController | undefined;
    rl.on("SIGINT", () => {
      if (replying) replying.abort(new Error("stopped"));
      else rl.close();
    });
    process.stderr.write(`neuronpipe chat — ${path}, chat template: ${conversation.template.origin}\n(Ctrl-C stops a reply; /reset starts over; /exit or Ctrl-D ends)\n`);
    try {
      const lines = rl[Symbol.asyncIterator]();
      for (;;) {
        rl.prompt();
        const next = await lines.next();
        if (next.done) break;
        const text = next.value.trim();
        if (text === "") continue;
        if (text === "/exit" || text === "/quit") break;
        if (text === "/reset") {
          conversation.reset();
          process.stdout.write("(conversation cleared)\n");
          continue;
        }
        replying = new AbortController();
        try {
          const left = conversation.contextSize - 1;
          for await (const piece of conversation.prompt(text, { ...sampling, seed: seed++, maxTokens: maxTokens ?? left, signal: replying.signal })) process.stdout.write(piece.text);
          process.stdout.write("\n");
        } catch (e) {
          if (replying.signal.aborted) process.stdout.write(" [stopped]\n");
          else process.stdout.write(`\n[error: ${(e as Error).message}]\n`);
        } finally {
          replying = undefined;
        }
      }
    } finally {
      rl.close();
      conversation.dispose();
      await model[Symbol.asyncDispose]();
    }
  },
};
