// neuronpipe serve: an OpenAI-compatible HTTP server over one model (src/server/), until Ctrl-C.
import { startServer } from "../../server/server.js";
import { MAX_THREADS, num, UsageError, type Command } from "../command.js";
import { defaultModelPath, modelFlags, modelFlagsHelp, openFromFlags } from "../model-flags.js";

export const serve: Command = {
  summary: "serve the model over HTTP: OpenAI-compatible /v1/chat/completions and /v1/completions, /metrics",
  usage: "neuronpipe serve [-m PATH] [--host 127.0.0.1] [--port 8080] [--parallel 1] [--queue-limit 16] [options]",
  options: {
    model: { type: "string", short: "m" },
    host: { type: "string" },
    port: { type: "string" },
    parallel: { type: "string" },
    "queue-limit": { type: "string" },
    alias: { type: "string", short: "a" },
    threads: { type: "string", short: "t" },
    ctx: { type: "string", short: "c" },
    ...modelFlags,
    help: { type: "boolean", short: "h" },
  },
  help: {
    model: "GGUF model file or neuron pack (default: the embedded default model)",
    host: "interface to listen on (default 127.0.0.1; 0.0.0.0 for every interface)",
    port: "port (default 8080; 0 = any free port, printed)",
    parallel: "requests generating at once, each in its own session (default 1; a neuron pack holds one)",
    "queue-limit": "requests that may wait for a session; one more is answered 503 (default 16)",
    alias: "the model's id in /v1/models and in answers (default: the file name)",
    threads: "compute threads (default: all CPUs)",
    ctx: "context of each session, tokens (default min(model's, 2048))",
    ...modelFlagsHelp,
  },
  async run(v, pos) {
    if (pos.length > 0) throw new UsageError(`serve takes no positional arguments, got: ${pos.join(" ")}`);
    const port = num(v.port, "port", { int: true, min: 0, max: 65535 }) ?? 8080;
    const parallel = num(v.parallel, "parallel", { int: true, min: 1, max: 64 });
    const queueLimit = num(v["queue-limit"], "queue-limit", { int: true, min: 0 });
    const threads = num(v.threads, "threads", { int: true, min: 1, max: MAX_THREADS });
    const contextSize = num(v.ctx, "ctx", { int: true, min: 1 });
    const path = (v.model as string | undefined) ?? defaultModelPath();
    const model = await openFromFlags(path, v, { threads, contextSize });
    try {
      if (model.sparse && parallel !== undefined && parallel > 1) throw new UsageError(`--parallel: the memory plan of a neuron pack holds one session; give 1, got ${parallel}`);
      process.stderr.write(model.decoder.describe() + "\n");
      if (model.sparse) process.stderr.write(model.sparse.describe() + "\n");
      const server = await startServer(model, { host: v.host as string | undefined, port, parallel, queueLimit, contextSize, modelName: v.alias as string | undefined });
      process.stderr.write(`neuronpipe serve: ${path} at ${server.url} (OpenAI API under ${server.url}/v1; /health, /metrics) — Ctrl-C stops\n`);
      await new Promise<void>((r) => {
        process.once("SIGINT", () => r());
        process.once("SIGTERM", () => r());
      });
      process.stderr.write("neuronpipe serve: stopping\n");
      await server.close();
    } finally {
      await model[Symbol.asyncDispose]();
    }
  },
};
