// neuronpipe generate: text from a prompt, streamed (any model file; a neuron pack with its decoder and budget).
import { defaultSampling } from "../../api/sampling.js";
import { DEFAULT_MAX_TOKENS } from "../../api/session.js";
import { startInspector } from "../../inspect/server.js";
import { native } from "../../native.js";
import { formatBytes } from "../../util/bytes.js";
import { MAX_THREADS, num, oneOf, readPrompt, UsageError, type Command } from "../command.js";
import { chat } from "./chat.js";
import { defaultModelPath, modelFlags, modelFlagsHelp, openFromFlags, sparseSummary } from "../model-flags.js";

export const generate: Command = {
  summary: "generate text from a prompt",
  usage: "neuronpipe generate [--model PATH] --prompt TEXT [options]",
  options: {
    model: { type: "string", short: "m" },
    prompt: { type: "string", short: "p" },
    file: { type: "string", short: "f" },
    "max-tokens": { type: "string", short: "n" },
    temp: { type: "string" },
    temperature: { type: "string" },
    stop: { type: "string", multiple: true },
    "top-k": { type: "string" },
    "top-p": { type: "string" },
    "min-p": { type: "string" },
    "repeat-penalty": { type: "string" },
    seed: { type: "string", short: "s" },
    threads: { type: "string", short: "t" },
    ctx: { type: "string", short: "c" },
    "ctx-size": { type: "string" },
    ...modelFlags,
    inspect: { type: "string" },
    interactive: { type: "boolean", short: "i" },
    json: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  },
  help: {
    model: "GGUF model file or neuron pack (default: the embedded default model, models/neuronpipe-default.gguf)",
    ...modelFlagsHelp,
    prompt: "text to continue; - reads it from stdin (default: stdin when it is a pipe or a file, else \"The sea\")",
    file: "read the prompt from this file (- = stdin)",
    "max-tokens": `tokens to generate (default ${DEFAULT_MAX_TOKENS})`,
    temp: `sampling temperature; 0 = greedy (default ${defaultSampling.temperature}, as llama.cpp)`,
    temperature: "the same as --temp",
    stop: "stop when the text contains this string (not printed); repeat for several",
    "top-k": "keep the k most likely tokens (default 40; 0 = off)",
    "top-p": "nucleus sampling mass (default 0.95; 1 = off)",
    "min-p": "drop tokens below min-p × p(best) (default 0.05)",
    "repeat-penalty": "penalty for recently seen tokens (default 1 = off)",
    seed: "random seed: same seed, same output (default 0)",
    threads: "compute threads (default: all CPUs; output is identical for any count)",
    ctx: "context size in tokens (default min(model's, 2048))",
    "ctx-size": "the same as --ctx",
    inspect:
      "serve the live inspector page on 127.0.0.1:PORT (default 4000): every actor, its state, the token and layer, queue depths, the last events; generation starts once a page is open, and the page stays served until Ctrl-C",
    interactive: "a conversation in the terminal instead (as llama.cpp's -i): the same as `neuronpipe chat` with these flags",
    json: "print one JSON object (token ids, text, timings) instead of streaming text",
  },
  async run(v, positionals, io) {
    if (v.interactive) {
      // llama.cpp's -i: the chat command takes the model, sampling and context flags as they are
      if (v.prompt !== undefined || v.file !== undefined || v.json || v.inspect !== undefined || v.stop !== undefined) {
        throw new UsageError("-i (interactive) reads the messages from the terminal: drop --prompt, --file, --stop, --json and --inspect");
      }
      const { interactive: _i, "ctx-size": _c, ...rest } = v;
      void _i;
      void _c;
      return chat.run({ ...rest, ctx: oneOf(v, "ctx", "ctx-size") }, positionals, io);
    }
    // read every option before any work, so a typo fails fast
    const threads = num(v.threads, "threads", { int: true, min: 1, max: MAX_THREADS });
    const contextSize = num(oneOf(v, "ctx", "ctx-size"), "ctx", { int: true, min: 1 });
    const temp = oneOf(v, "temp", "temperature");
    const stop = v.stop as string[] | undefined;
    if (stop?.some((s) => s === "")) throw new UsageError("--stop needs a non-empty string");
    const prompt = await readPrompt(v, io);
    const sampling = {
      maxTokens: num(v["max-tokens"], "max-tokens", { int: true, min: 0 }) ?? DEFAULT_MAX_TOKENS,
      temperature: num(temp, "temp", { min: 0 }) ?? defaultSampling.temperature,
      topK: num(v["top-k"], "top-k", { int: true, min: 0 }),
      topP: num(v["top-p"], "top-p"),
      minP: num(v["min-p"], "min-p"),
      repeatPenalty: num(v["repeat-penalty"], "repeat-penalty"),
      seed: num(v.seed, "seed", { int: true }) ?? defaultSampling.seed,
    };
    const inspectPort = v.inspect === undefined ? undefined : num(v.inspect === "" ? "4000" : v.inspect, "inspect", { int: true, min: 0 });
    const path = (v.model as string | undefined) ?? defaultModelPath();
    const model = await openFromFlags(path, v, { threads, contextSize });
    try {
      if (model.sparse && !v.json) process.stderr.write(model.sparse.describe() + "\n");
      const session = model.createSession({ contextSize });
      const inspector = inspectPort === undefined ? undefined : await startInspector({ port: inspectPort, title: `neuronpipe generate — ${path}` });
      if (inspector) {
        process.stderr.write(`inspector: ${inspector.url} — open it in a browser; generation starts when a page connects\n`);
        await inspector.waitForViewer();
      }
      const ac = new AbortController();
      const onSigint = () => ac.abort(new Error("interrupted"));
      process.once("SIGINT", onSigint);
      const ids: number[] = [];
      let text = "";
      const it = session.generate(prompt, { ...sampling, stop, signal: ac.signal, trace: v.trace as string | undefined, inspect: inspector?.inspect });
      let r = await it.next();
      if (!v.json) process.stdout.write(prompt);
      while (!r.done) {
        if (r.value.token >= 0) ids.push(r.value.token);
        text += r.value.text;
        if (!v.json) process.stdout.write(r.value.text);
        r = await it.next();
      }
      process.off("SIGINT", onSigint);
      const st = r.value;
      if (v.json) {
        const out = {
          model: path,
          prompt,
          promptTokens: session.tokens.slice(0, st.promptTokens),
          tokens: ids,
          text,
          sampling,
          stats: st,
          ...(model.sparse && { sparse: { plan: model.sparse.plan, peakResidentBytes: model.sparse.peakResidentBytes, layers: model.sparse.report() } }),
        };
        process.stdout.write(JSON.stringify(out) + "\n");
      } else {
        process.stdout.write("\n");
        process.stderr.write(
          `[prompt ${st.promptTokens} tok, ${st.prefillTokensPerSecond.toFixed(1)} tok/s | generated ${st.generatedTokens} tok, ` +
            `${st.decodeTokensPerSecond.toFixed(2)} tok/s | stop: ${st.stopReason} | peak RSS ${formatBytes(st.peakRssBytes)} | ` +
            `threads ${st.threads} | ${native().getSimd()}]\n`,
        );
        if (model.sparse) process.stderr.write(sparseSummary(model.sparse, !!v["sparse-stats"]));
      }
      session.dispose();
      if (inspector) {
        process.stderr.write("generation done; the inspector keeps serving — Ctrl-C to stop\n");
        await new Promise<void>((res) => process.once("SIGINT", () => res()));
        await inspector.close();
      }
      if (v.trace && !v.json) process.stderr.write(`trace written to ${v.trace as string} (neuronpipe trace plot ${v.trace as string})\n`);
    } finally {
      await model[Symbol.asyncDispose]();
    }
  },
};
