// neuronpipe eval: held-out perplexity and FFN activation sparsity of a model on a text file.
import { readFileSync } from "node:fs";
import { activationSparsity, perplexity } from "../../tools/evaluate.js";
import { MAX_THREADS, num, type Command } from "../command.js";
import { bundledHeldout, defaultModelPath, modelFlags, modelFlagsHelp, openFromFlags, sparseSummary } from "../model-flags.js";
import { progressBar } from "../progress.js";

export const evaluate: Command = {
  summary: "held-out perplexity and FFN activation sparsity of a model on a text file",
  usage: "neuronpipe eval [--model PATH] [--file TEXT] [--ctx 256] [--max-tokens N] [--json]",
  options: {
    model: { type: "string", short: "m" },
    file: { type: "string", short: "f" },
    ctx: { type: "string" },
    "max-tokens": { type: "string", short: "n" },
    threads: { type: "string" },
    ...modelFlags,
    json: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  },
  help: {
    model: "GGUF model or neuron pack (default: the default model)",
    ...modelFlagsHelp,
    file: "UTF-8 text to evaluate on (default: the bundled held-out text, models/heldout.txt)",
    ctx: "window length in tokens; each window is a fresh context (default 256)",
    "max-tokens": "evaluate at most N tokens of the file (default 20000)",
    threads: "compute threads",
    json: "print JSON",
  },
  async run(v) {
    const file = (v.file as string | undefined) ?? bundledHeldout();
    const ctx = num(v.ctx, "ctx", { int: true, min: 2 }) ?? 256;
    const maxTokens = num(v["max-tokens"], "max-tokens", { int: true, min: 2 }) ?? 20000;
    const threads = num(v.threads, "threads", { int: true, min: 1, max: MAX_THREADS });
    const path = (v.model as string | undefined) ?? defaultModelPath();
    const model = await openFromFlags(path, v, { threads, contextSize: ctx });
    try {
      const tokens = model.tokenizer.encode(readFileSync(file, "utf8"), { addBos: false }).slice(0, maxTokens);
      const ppl = perplexity(model, tokens, ctx, progressBar("perplexity"));
      // a pack has no dense FFN to observe; its own statistics say what fired
      const sp = model.config.activation === "swiglu" || model.sparse ? undefined : activationSparsity(model, tokens, ctx);
      const out = { model: path, file, ctx, ...ppl, sparsity: sp, ...(model.sparse && { sparse: model.sparse.report() }) };
      if (v.json) process.stdout.write(JSON.stringify(out) + "\n");
      else {
        process.stdout.write(`perplexity ${ppl.perplexity.toFixed(3)} over ${ppl.tokens} predicted tokens (${ppl.windows} windows of ${ctx})\n`);
        if (sp) process.stdout.write(`FFN sparsity (zero activations per token): mean ${(sp.mean * 100).toFixed(2)}%; per layer ${sp.perLayer.map((x) => (x * 100).toFixed(1) + "%").join(" ")}\n`);
        if (model.sparse) process.stdout.write(sparseSummary(model.sparse, !!v["sparse-stats"]));
      }
    } finally {
      model.dispose();
    }
  },
};
