// neuronpipe synth: a random-weight GGUF model of a named shape or explicit dimensions (planted sparsity on request).
import { synthModel, synthShapes, type SynthShape } from "../../tools/synth/synth.js";
import { formatBytes } from "../../util/bytes.js";
import { checkOverwrite, forceHelp, forceOption, num, UsageError, type Command } from "../command.js";
import { progressBar } from "../progress.js";

export const synth: Command = {
  summary: "write a random-weight GGUF model of a named shape or explicit dimensions",
  usage: "neuronpipe synth --out PATH [--shape NAME | --embd N --ff N --layers N --heads N --kv-heads N --vocab-from llama2] [--type q4_0] [--activation swiglu] [--seed S]",
  options: {
    out: { type: "string", short: "o" },
    ...forceOption,
    shape: { type: "string" },
    embd: { type: "string" },
    ff: { type: "string" },
    layers: { type: "string" },
    heads: { type: "string" },
    "kv-heads": { type: "string" },
    ctx: { type: "string" },
    type: { type: "string" },
    activation: { type: "string" },
    tokenizer: { type: "string" },
    tied: { type: "boolean" },
    seed: { type: "string" },
    "active-fraction": { type: "string" },
    "hot-neurons": { type: "string" },
    "hot-share": { type: "string" },
    "gate-rank": { type: "string" },
    "cofire-group": { type: "string" },
    "cofire-share": { type: "string" },
    help: { type: "boolean", short: "h" },
  },
  help: {
    out: "output GGUF path (required)",
    ...forceHelp,
    "gate-rank": "with --active-fraction: gate rows = rank-R structure + 1% noise, so activations are predictable from x as in trained models (default 0: independent random rows)",
    "cofire-group": "with --gate-rank: plant co-firing groups of N neurons, scattered over each layer, that share most of their gate direction (default 0: none)",
    "cofire-share": "with --cofire-group: share of a member's gate structure its group gives, the correlation of two members' pre-activations (default 0.9)",
    "active-fraction": "plant ReLU sparsity (reglu/drelu): mean share of FFN neurons firing per token, e.g. 0.1",
    "hot-neurons": "with --active-fraction: share of neurons that give --hot-share of activations (default 0.2)",
    "hot-share": "with --active-fraction: default 0.8",
    shape: `named shape: ${Object.keys(synthShapes).join(", ")} (default tiny); explicit dimensions override its fields`,
    embd: "model width",
    ff: "FFN hidden width",
    layers: "number of layers",
    heads: "attention heads",
    "kv-heads": "key/value heads (grouped-query attention when fewer than --heads)",
    ctx: "training context length recorded in the file",
    type: "weight type: f32, f16, q8_0, q4_0 (default q4_0)",
    activation: "FFN activation: swiglu, reglu, drelu (default swiglu)",
    tokenizer: "vocabulary: llama2 (SentencePiece, 32000), llama3 (BPE, 128256) or bytes (SentencePiece, 291: byte tokens and a few words, for small test files) (default llama2)",
    tied: "tie the output projection to the token embedding",
    seed: "random seed (default 1)",
  },
  async run(v) {
    const out = v.out as string | undefined;
    if (!out) throw new UsageError("synth needs --out PATH");
    checkOverwrite(out, v);
    const shapeName = (v.shape as string | undefined) ?? "tiny";
    const base = synthShapes[shapeName];
    if (!base) throw new UsageError(`unknown shape "${shapeName}" (known: ${Object.keys(synthShapes).join(", ")})`);
    const shape: SynthShape = {
      embd: num(v.embd, "embd", { int: true, min: 1 }) ?? base.embd,
      ff: num(v.ff, "ff", { int: true, min: 1 }) ?? base.ff,
      layers: num(v.layers, "layers", { int: true, min: 1 }) ?? base.layers,
      heads: num(v.heads, "heads", { int: true, min: 1 }) ?? base.heads,
      kvHeads: num(v["kv-heads"], "kv-heads", { int: true, min: 1 }) ?? (v.heads ? Number(v.heads) : base.kvHeads),
      ctx: num(v.ctx, "ctx", { int: true, min: 1 }) ?? base.ctx,
    };
    const activation = (v.activation as string | undefined) ?? "swiglu";
    if (!["swiglu", "reglu", "drelu"].includes(activation)) throw new UsageError(`--activation must be swiglu, reglu or drelu`);
    const tokenizer = (v.tokenizer as string | undefined) ?? "llama2";
    if (tokenizer !== "llama2" && tokenizer !== "llama3" && tokenizer !== "bytes") throw new UsageError(`--tokenizer must be llama2, llama3 or bytes`);
    for (const k of ["gate-rank", "cofire-group", "cofire-share", "hot-neurons", "hot-share"]) {
      if (v[k] !== undefined && v["active-fraction"] === undefined) throw new UsageError(`--${k} plants sparsity: it needs --active-fraction`);
    }
    if (v["cofire-share"] !== undefined && v["cofire-group"] === undefined) throw new UsageError("--cofire-share shapes the groups of --cofire-group: give both");
    const w = synthModel({
      shape,
      type: ((v.type as string | undefined) ?? "q4_0").toLowerCase(),
      activation: activation as "swiglu",
      seed: num(v.seed, "seed", { int: true }) ?? 1,
      tokenizer,
      tiedOutput: Boolean(v.tied),
      sparsity:
        v["active-fraction"] === undefined
          ? undefined
          : {
              activeFraction: num(v["active-fraction"], "active-fraction", { min: 0 })!,
              hotNeurons: num(v["hot-neurons"], "hot-neurons", { min: 0 }) ?? 0.2,
              hotShare: num(v["hot-share"], "hot-share", { min: 0 }) ?? 0.8,
              gateRank: num(v["gate-rank"], "gate-rank", { int: true, min: 0 }) ?? 0,
              cofireGroup: num(v["cofire-group"], "cofire-group", { int: true, min: 0 }) ?? 0,
              cofireShare: num(v["cofire-share"], "cofire-share", { min: 0, max: 1 }),
            },
    });
    const bytes = await w.write(out, { onProgress: progressBar(`writing ${out}`) });
    process.stderr.write(`wrote ${out}: ${formatBytes(bytes)}\n`);
  },
};
