// neuronpipe profile: per-neuron FFN activation statistics over a corpus (dense inference).
import { COACTIVATION_TOKENS, profileActivations } from "../../tools/profile.js";
import { writeProfile } from "../../sparse/profile-file.js";
import { modelFingerprint } from "../../sparse/pack/fingerprint.js";
import { checkOverwrite, forceHelp, forceOption, num, type Command } from "../command.js";
import { defaultModelPath } from "../model-flags.js";
import { reluModelAndCorpus } from "../corpus.js";
import { progressBar } from "../progress.js";

export const profile: Command = {
  summary: "record per-neuron FFN activation statistics over a corpus (dense inference)",
  usage: "neuronpipe profile [--model PATH] [--corpus FILE|DIR] [--ctx 256] [--max-tokens N] [--coactivation-tokens 8192] [--out PATH]",
  options: {
    model: { type: "string", short: "m" },
    corpus: { type: "string", short: "c" },
    ctx: { type: "string" },
    "max-tokens": { type: "string", short: "n" },
    "coactivation-tokens": { type: "string" },
    out: { type: "string", short: "o" },
    ...forceOption,
    threads: { type: "string" },
    json: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  },
  help: {
    model: "GGUF model (default: the default model)",
    corpus: "text file or directory of text files (default: the bundled held-out text, models/heldout.txt)",
    ctx: "window length in tokens; each window is a fresh context (default 256)",
    "max-tokens": "profile at most N tokens (default: all)",
    "coactivation-tokens": `learn the pack order of each layer's cold neurons by co-activation from the first N tokens (default ${COACTIVATION_TOKENS}; 0: hot-first by frequency only)`,
    out: "output file (default: MODEL.profile.gguf next to the model, e.g. models/neuronpipe-default.gguf.profile.gguf)",
    ...forceHelp,
    threads: "compute threads",
    json: "print the per-layer summary as JSON",
  },
  async run(v) {
    const ctx = num(v.ctx, "ctx", { int: true, min: 2 }) ?? 256;
    const coactivationTokens = num(v["coactivation-tokens"], "coactivation-tokens", { int: true, min: 0 }) ?? COACTIVATION_TOKENS;
    checkOverwrite((v.out as string | undefined) ?? `${(v.model as string | undefined) ?? defaultModelPath()}.profile.gguf`, v);
    const { model, path, corpus, tokens } = await reluModelAndCorpus(v, 1);
    const out = (v.out as string | undefined) ?? `${path}.profile.gguf`;
    try {
      const p = profileActivations(model, tokens, ctx, { corpus, coactivationTokens, onProgress: progressBar(`profiling ${tokens.length} tokens`) });
      p.modelFingerprint = modelFingerprint(path, model.file);
      await writeProfile(out, p);
      const rows = p.layers.map((l, i) => ({
        layer: i,
        sparsity: 1 - l.activeMean / p.nFF,
        activeMean: l.activeMean,
        activeP50: l.activeP50,
        activeP99: l.activeP99,
        overlap: l.overlap,
        hot80: l.hot80,
        ...(l.coldRequests && { coldRequests: l.coldRequests }),
      }));
      if (v.json) process.stdout.write(JSON.stringify({ out, tokens: p.tokens, layers: rows }) + "\n");
      else {
        process.stdout.write(`profiled ${p.tokens} tokens of ${corpus} → ${out}\n`);
        process.stdout.write("layer  sparsity  active/token (mean p50 p99)  overlap(t,t+1)  neurons for 80% of activations  cold reads per fired (hot-first → co-activation)\n");
        for (const r of rows) {
          const cold = r.coldRequests ? `${r.coldRequests.hotFirst.toFixed(2)} → ${r.coldRequests.coactivation.toFixed(2)}` : "-";
          process.stdout.write(
            `${String(r.layer).padStart(5)}  ${(100 * r.sparsity).toFixed(1).padStart(7)}%  ${r.activeMean.toFixed(1).padStart(8)} ${String(r.activeP50).padStart(5)} ${String(r.activeP99).padStart(5)}  ${r.overlap.toFixed(3).padStart(14)}  ${`${r.hot80} of ${p.nFF} (${((100 * r.hot80) / p.nFF).toFixed(1)}%)`.padEnd(30)}  ${cold}\n`,
          );
        }
      }
    } finally {
      model.dispose();
    }
  },
};
