// The `neuronpipe` command line: generate, inspect, synth. Every command has --help.
import { existsSync, realpathSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs, type ParseArgsConfig } from "node:util";
import { readGGUF } from "../gguf/reader.js";
import { tensorTypeName, valueTypeName } from "../gguf/types.js";
import { loadModel } from "../api/model.js";
import { readConfig } from "../model/config.js";
import { native } from "../native.js";
import { synthModel, synthShapes, weightTypeIds, type SynthShape } from "../tools/synth/synth.js";
import { convertTrainerExport } from "../tools/convert/from-trainer.js";
import { requantize } from "../tools/convert/requantize.js";
import { activationSparsity, perplexity } from "../tools/evaluate.js";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { profileActivations } from "../tools/profile.js";
import { writeProfile } from "../sparse/profile-file.js";
import { formatReport, trainPredictors } from "../tools/train-predictor.js";
import { writePredictors } from "../sparse/predictor-file.js";
import { modelFingerprint } from "../sparse/pack/fingerprint.js";
import { openPack } from "../sparse/pack/open.js";
import { writePack } from "../sparse/pack/write.js";
import { loadSparseModel, type SparseLayerReport, type SparseRuntime } from "../decode/sparse-model.js";
import { parseBytes, formatBytes } from "../util/bytes.js";
import { progressBar } from "./progress.js";
import { shippedFile } from "../util/package-files.js";
import { loadMappedPack } from "../decode/mmap.js";
import { traceCommand } from "./commands/trace.js";

type Options = NonNullable<ParseArgsConfig["options"]>;

interface Command {
  summary: string;
  usage: string;
  options: Options;
  help: Record<string, string>;
  run(values: Record<string, string | boolean | undefined>, positionals: string[]): Promise<void>;
}

class UsageError extends Error {}

const num = (v: unknown, name: string, { int = false, min = -Infinity } = {}): number | undefined => {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || (int && !Number.isInteger(n)) || n < min) {
    throw new UsageError(`--${name} must be ${int ? "a whole number" : "a number"}${min > -Infinity ? ` ≥ ${min}` : ""}, got "${v}"`);
  }
  return n;
};

/** The embedded default model (models/neuronpipe-default.gguf, trained by tools/train). */
export async function defaultModelPath(): Promise<string> {
  return shippedFile("neuronpipe-default.gguf");
}

/** The default model's held-out text (eval and profile default corpus). */
function bundledHeldout(): string {
  return shippedFile("heldout.txt");
}

/** Options of every command that runs a model, for neuron packs (read by loadAnyModel). */
const packOptions = {
  memory: { type: "string" },
  predictor: { type: "string" },
  io: { type: "string" },
  "queue-depth": { type: "string" },
  "sparse-stats": { type: "boolean" },
  mode: { type: "string" },
  "pin-gates": { type: "string" },
  trace: { type: "string" },
} as const;
const packHelp = {
  memory: "neuron pack only: hard bound on the memory held for the model, e.g. 2GiB (default: the whole pack resident)",
  predictor: "neuron pack only: trained (the pack's predictors, default) or oracle (compute every gate)",
  io: "neuron pack only: storage reads through uring, pread or auto (default auto)",
  "queue-depth": "neuron pack only: reads in flight (default 32)",
  "sparse-stats": "neuron pack only: print per-layer hit rate and bytes read per token",
  mode:
    "neuron pack only: pipeline (actor pipeline, reads overlap compute; default for generate), blocking (LLMFlash: window cache, all reads before compute), sync (sparse FFN inline on one thread; default for eval) or mmap (dense over a memory-mapped file, as llama.cpp)",
  "pin-gates":
    "neuron pack only: auto (default: keep every gate row resident when they take ≤ 75% of the neuron cache), on or off; with pinned gate rows a predicted neuron costs a read only if it fires",
  trace: "neuron pack, pipeline/blocking only: record actor events and I/O/kernel intervals as JSON lines to this file (`neuronpipe trace export|plot|stats`)",
};

/** A GGUF model (dense), or a neuron pack (sparse, under --memory). */
async function loadAnyModel(path: string, v: Record<string, string | boolean | undefined>, o: { threads?: number; contextSize?: number; defaultMode?: "pipeline" | "sync" }) {
  const sparseFlags = Object.keys(packOptions).filter((k) => v[k] !== undefined);
  if (!isPack(path)) {
    if (sparseFlags.length > 0) throw new UsageError(`--${sparseFlags[0]} needs a neuron pack, and ${path} is a plain model; create one with \`neuronpipe pack --model ${path}\``);
    return loadModel(path, o);
  }
  const predictor = (v.predictor as string | undefined) ?? "trained";
  if (predictor !== "trained" && predictor !== "oracle") throw new UsageError(`--predictor must be trained or oracle, got "${predictor}"`);
  const backend = (v.io as string | undefined) ?? "auto";
  if (backend !== "auto" && backend !== "uring" && backend !== "pread") throw new UsageError(`--io must be auto, uring or pread, got "${backend}"`);
  const queueDepth = num(v["queue-depth"], "queue-depth", { int: true, min: 1 }) ?? 32;
  const mode = (v.mode as string | undefined) ?? o.defaultMode ?? "sync";
  if (mode !== "pipeline" && mode !== "blocking" && mode !== "sync" && mode !== "mmap") throw new UsageError(`--mode must be pipeline, blocking, sync or mmap, got "${mode}"`);
  if (v.trace !== undefined && mode !== "pipeline" && mode !== "blocking") throw new UsageError(`--trace records the actor pipeline: use it with --mode pipeline or blocking, not ${mode}`);
  const pin = (v["pin-gates"] as string | undefined) ?? "auto";
  if (pin !== "auto" && pin !== "on" && pin !== "off") throw new UsageError(`--pin-gates must be auto, on or off, got "${pin}"`);
  if (pin === "on" && mode === "blocking") throw new UsageError("--pin-gates on does not apply to --mode blocking (LLMFlash caches whole bundles)");
  if (mode === "mmap") {
    const extra = ["memory", "predictor", "io", "queue-depth", "pin-gates"].filter((k) => v[k] !== undefined);
    if (extra.length) throw new UsageError(`--${extra[0]} does not apply to --mode mmap (dense over a mapping; limit its memory with a cgroup)`);
    return loadMappedPack(path, o);
  }
  return loadSparseModel(path, {
    engine: mode,
    pinGates: pin === "auto" ? "auto" : pin === "on",
    memory: (v.memory as string | undefined) ?? Number.MAX_SAFE_INTEGER,
    predictor,
    io: { backend, queueDepth },
    threads: o.threads,
    contextSize: o.contextSize,
    onProgress: v.json ? undefined : progressBar("loading the hot region"),
  });
}

function isPack(path: string): boolean {
  try {
    return readGGUF(path).metadata.has("neuronpipe.pack.version");
  } catch {
    return false; // loadModel reports what is wrong with the file
  }
}

function sparseSummary(rt: SparseRuntime, perLayer: boolean): string {
  const rep = rt.report();
  const sum = (f: (r: SparseLayerReport) => number) => rep.reduce((a, r) => a + f(r), 0);
  const tokens = rep[0]?.tokens ?? 0;
  const acc = sum((r) => r.gateAccesses + r.upDownAccesses);
  const hits = sum((r) => r.gateHits + r.upDownHits);
  const lines = [
    `[sparse FFN: ${tokens} tokens | hit rate ${acc ? ((100 * hits) / acc).toFixed(1) : "100.0"}% | read ${formatBytes(tokens ? sum((r) => r.bytesRead) / tokens : 0)}/token | ` +
      `predicted ${tokens ? (sum((r) => r.predicted) / tokens).toFixed(0) : 0}, fired ${tokens ? (sum((r) => r.fired) / tokens).toFixed(0) : 0} neurons/token | ` +
      `peak resident ${formatBytes(rt.peakResidentBytes)} of ${formatBytes(rt.plan.budget > 2 ** 52 ? rt.allocatedBytes() : rt.plan.budget)}]`,
  ];
  if (perLayer) {
    lines.push("layer  hit rate  bytes/token  predicted/token  fired/token");
    for (const r of rep) {
      const t = Math.max(1, r.tokens);
      lines.push(
        `${String(r.layer).padStart(5)}  ${(100 * r.hitRate).toFixed(1).padStart(7)}%  ${formatBytes(r.bytesPerToken).padStart(11)}  ${(r.predicted / t).toFixed(1).padStart(15)}  ${(r.fired / t).toFixed(1).padStart(11)}`,
      );
    }
  }
  return lines.join("\n") + "\n";
}

const commands: Record<string, Command> = {
  generate: {
    summary: "generate text from a prompt",
    usage: "neuronpipe generate [--model PATH] --prompt TEXT [options]",
    options: {
      model: { type: "string", short: "m" },
      prompt: { type: "string", short: "p" },
      "max-tokens": { type: "string", short: "n" },
      temperature: { type: "string", short: "t" },
      "top-k": { type: "string" },
      "top-p": { type: "string" },
      "min-p": { type: "string" },
      "repeat-penalty": { type: "string" },
      seed: { type: "string", short: "s" },
      threads: { type: "string" },
      ctx: { type: "string" },
      ...packOptions,
      json: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
    help: {
      model: "GGUF model file or neuron pack (default: the embedded default model, models/neuronpipe-default.gguf)",
      ...packHelp,
      prompt: "text to continue (default: \"The sea\")",
      "max-tokens": "tokens to generate (default 64)",
      temperature: "sampling temperature; 0 = greedy (default 0.8, as llama.cpp)",
      "top-k": "keep the k most likely tokens (default 40; 0 = off)",
      "top-p": "nucleus sampling mass (default 0.95; 1 = off)",
      "min-p": "drop tokens below min-p × p(best) (default 0.05)",
      "repeat-penalty": "penalty for recently seen tokens (default 1 = off)",
      seed: "random seed: same seed, same output (default 0)",
      threads: "compute threads (default: all CPUs; output is identical for any count)",
      ctx: "context size in tokens (default min(model's, 2048))",
      json: "print one JSON object (token ids, text, timings) instead of streaming text",
    },
    async run(v) {
      // read every option before any work, so a typo fails fast
      const threads = num(v.threads, "threads", { int: true, min: 1 });
      const contextSize = num(v.ctx, "ctx", { int: true, min: 1 });
      const prompt = (v.prompt as string | undefined) ?? "The sea";
      const sampling = {
        maxTokens: num(v["max-tokens"], "max-tokens", { int: true, min: 0 }) ?? 64,
        temperature: num(v.temperature, "temperature", { min: 0 }) ?? 0.8,
        topK: num(v["top-k"], "top-k", { int: true, min: 0 }),
        topP: num(v["top-p"], "top-p"),
        minP: num(v["min-p"], "min-p"),
        repeatPenalty: num(v["repeat-penalty"], "repeat-penalty"),
        seed: num(v.seed, "seed", { int: true }) ?? 0,
      };
      const path = (v.model as string | undefined) ?? (await defaultModelPath());
      const model = await loadAnyModel(path, v, { threads, contextSize, defaultMode: "pipeline" });
      try {
        if (model.sparse && !v.json) process.stderr.write(model.sparse.describe() + "\n");
        const session = model.createSession({ contextSize });
        const ac = new AbortController();
        const onSigint = () => ac.abort(new Error("interrupted"));
        process.once("SIGINT", onSigint);
        const ids: number[] = [];
        let text = "";
        const it = session.generate(prompt, { ...sampling, signal: ac.signal, trace: v.trace as string | undefined });
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
        if (v.trace && !v.json) process.stderr.write(`trace written to ${v.trace as string} (neuronpipe trace plot ${v.trace as string})\n`);
      } finally {
        await model[Symbol.asyncDispose]();
      }
    },
  },

  inspect: {
    summary: "summarise a GGUF file's metadata and tensors",
    usage: "neuronpipe inspect PATH [--json] [--tensors]",
    options: { json: { type: "boolean" }, tensors: { type: "boolean" }, help: { type: "boolean", short: "h" } },
    help: { json: "print JSON", tensors: "list every tensor (default: first 20 and a summary)" },
    async run(v, pos) {
      const path = pos[0];
      if (!path) throw new UsageError("inspect needs a file path");
      const f = readGGUF(path);
      const meta: Record<string, unknown> = {};
      for (const [k, m] of f.metadata) {
        const val = m.value;
        meta[k] =
          typeof val === "object" && val !== null && "length" in val
            ? `[${valueTypeName[m.elemType ?? 0]} × ${(val as ArrayLike<unknown>).length}]`
            : typeof val === "bigint"
              ? val.toString()
              : val;
      }
      const byType = new Map<string, { n: number; bytes: number }>();
      for (const t of f.tensors) {
        const e = byType.get(tensorTypeName(t.type)) ?? { n: 0, bytes: 0 };
        e.n++;
        e.bytes += t.nbytes;
        byType.set(tensorTypeName(t.type), e);
      }
      let config: unknown;
      try {
        config = readConfig(f);
      } catch (e) {
        config = `not runnable: ${(e as Error).message}`;
      }
      if (v.json) {
        process.stdout.write(
          JSON.stringify({
            path,
            magic: f.magic,
            version: f.version,
            alignment: f.alignment,
            fileSize: f.fileSize,
            metadata: meta,
            config,
            tensors: f.tensors.map((t) => ({ name: t.name, type: tensorTypeName(t.type), ne: t.ne, offset: t.offset, bytes: t.nbytes })),
          }) + "\n",
        );
        return;
      }
      const out: string[] = [];
      out.push(`${path}: ${f.magic} v${f.version}, ${formatBytes(f.fileSize)}, ${f.metadata.size} keys, ${f.tensors.length} tensors, alignment ${f.alignment}`);
      out.push("metadata:");
      for (const [k, val] of Object.entries(meta)) out.push(`  ${k} = ${typeof val === "string" ? val : JSON.stringify(val)}`);
      out.push(`model: ${typeof config === "string" ? config : JSON.stringify(config)}`);
      out.push("tensor types:");
      for (const [t, e] of byType) out.push(`  ${t}: ${e.n} tensors, ${formatBytes(e.bytes)}`);
      const shown = v.tensors ? f.tensors : f.tensors.slice(0, 20);
      out.push("tensors:");
      for (const t of shown) out.push(`  ${t.name}  ${tensorTypeName(t.type)}  [${t.ne.join(", ")}]  ${formatBytes(t.nbytes)} @ ${t.offset}`);
      if (shown.length < f.tensors.length) out.push(`  … ${f.tensors.length - shown.length} more (--tensors lists all)`);
      process.stdout.write(out.join("\n") + "\n");
    },
  },

  synth: {
    summary: "write a random-weight GGUF model of a named shape or explicit dimensions",
    usage: "neuronpipe synth --out PATH [--shape NAME | --embd N --ff N --layers N --heads N --kv-heads N --vocab-from llama2] [--type q4_0] [--activation swiglu] [--seed S]",
    options: {
      out: { type: "string", short: "o" },
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
      help: { type: "boolean", short: "h" },
    },
    help: {
      out: "output GGUF path (required)",
      "gate-rank": "with --active-fraction: gate rows = rank-R structure + 5% noise, so activations are predictable from x as in trained models (default 0: independent random rows)",
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
      tokenizer: "vocabulary: llama2 (SentencePiece, 32000) or llama3 (BPE, 128256) (default llama2)",
      tied: "tie the output projection to the token embedding",
      seed: "random seed (default 1)",
    },
    async run(v) {
      const out = v.out as string | undefined;
      if (!out) throw new UsageError("synth needs --out PATH");
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
      if (tokenizer !== "llama2" && tokenizer !== "llama3") throw new UsageError(`--tokenizer must be llama2 or llama3`);
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
              },
      });
      const bytes = await w.write(out, { onProgress: progressBar(`writing ${out}`) });
      process.stderr.write(`wrote ${out}: ${formatBytes(bytes)}\n`);
    },
  },
};

commands.trace = traceCommand;

commands.quantize = {
  summary: "re-encode a GGUF's weight matrices as f32, f16, q8_0 or q4_0",
  usage: "neuronpipe quantize INPUT OUTPUT --type q4_0",
  options: { type: { type: "string" }, help: { type: "boolean", short: "h" } },
  help: { type: "target type: f32, f16, q8_0, q4_0 (norms stay f32)" },
  async run(v, pos) {
    const [input, output] = pos;
    if (!input || !output) throw new UsageError("quantize needs INPUT and OUTPUT paths");
    const t = weightTypeIds[((v.type as string | undefined) ?? "").toLowerCase()];
    if (t === undefined) throw new UsageError(`--type must be f32, f16, q8_0 or q4_0`);
    const { bytes } = await requantize(input, output, t, progressBar(`writing ${output}`));
    process.stderr.write(`wrote ${output}: ${formatBytes(bytes)}\n`);
  },
};

commands.convert = {
  summary: "write a GGUF from the trainer's export (tools/train/out)",
  usage: "neuronpipe convert DIR --out PATH [--arch smallthinker|llama] [--type f32]",
  options: { out: { type: "string", short: "o" }, arch: { type: "string" }, type: { type: "string" }, help: { type: "boolean", short: "h" } },
  help: {
    out: "output GGUF path",
    arch: "smallthinker (default: one-expert ReGLU that llama.cpp also runs) or llama (+ neuronpipe.ffn_activation)",
    type: "weight type: f32 (default), f16, q8_0, q4_0",
  },
  async run(v, pos) {
    const dir = pos[0];
    const out = v.out as string | undefined;
    if (!dir || !out) throw new UsageError("convert needs the export directory and --out PATH");
    const arch = (v.arch as string | undefined) ?? "smallthinker";
    if (arch !== "smallthinker" && arch !== "llama") throw new UsageError("--arch must be smallthinker or llama");
    const t = weightTypeIds[((v.type as string | undefined) ?? "f32").toLowerCase()];
    if (t === undefined) throw new UsageError(`--type must be f32, f16, q8_0 or q4_0`);
    const bytes = await convertTrainerExport(dir, { arch, type: t }).write(out, { onProgress: progressBar(`writing ${out}`) });
    process.stderr.write(`wrote ${out}: ${formatBytes(bytes)}\n`);
  },
};

commands.eval = {
  summary: "held-out perplexity and FFN activation sparsity of a model on a text file",
  usage: "neuronpipe eval [--model PATH] [--file TEXT] [--ctx 256] [--max-tokens N] [--json]",
  options: {
    model: { type: "string", short: "m" },
    file: { type: "string", short: "f" },
    ctx: { type: "string" },
    "max-tokens": { type: "string", short: "n" },
    threads: { type: "string" },
    ...packOptions,
    json: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  },
  help: {
    model: "GGUF model or neuron pack (default: the default model)",
    ...packHelp,
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
    const threads = num(v.threads, "threads", { int: true, min: 1 });
    const path = (v.model as string | undefined) ?? (await defaultModelPath());
    const model = await loadAnyModel(path, v, { threads, contextSize: ctx });
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

/** Token ids of a text file, or of every file in a directory (each a document with BOS). */
function corpusTokens(model: Awaited<ReturnType<typeof loadModel>>, path: string): number[] {
  if (!existsSync(path)) throw new Error(`corpus ${path}: no such file or directory`);
  const files = statSync(path).isDirectory()
    ? readdirSync(path)
        .sort()
        .map((f) => join(path, f))
        .filter((f) => statSync(f).isFile())
    : [path];
  if (files.length === 0) throw new Error(`${path}: no files to read`);
  return files.flatMap((f) => model.tokenizer.encode(readFileSync(f, "utf8")));
}

/** Load a ReLU-family model and the corpus tokens for the profile/predictor commands. */
async function reluModelAndCorpus(v: Record<string, string | boolean | undefined>, minTokens: number) {
  const maxTokens = num(v["max-tokens"], "max-tokens", { int: true, min: minTokens });
  const threads = num(v.threads, "threads", { int: true, min: 1 });
  const path = (v.model as string | undefined) ?? (await defaultModelPath());
  const corpus = (v.corpus as string | undefined) ?? bundledHeldout();
  const model = await loadModel(path, { threads });
  try {
    if (model.config.activation === "swiglu") throw new Error(`${path}: SwiGLU FFNs have no exact zeros (ReGLU/dReLU models only)`);
    let tokens = corpusTokens(model, corpus);
    if (maxTokens !== undefined) tokens = tokens.slice(0, maxTokens);
    return { model, path, corpus, tokens };
  } catch (e) {
    model.dispose();
    throw e;
  }
}

commands.profile = {
  summary: "record per-neuron FFN activation statistics over a corpus (dense inference)",
  usage: "neuronpipe profile [--model PATH] [--corpus FILE|DIR] [--ctx 256] [--max-tokens N] [--out PATH]",
  options: {
    model: { type: "string", short: "m" },
    corpus: { type: "string", short: "c" },
    ctx: { type: "string" },
    "max-tokens": { type: "string", short: "n" },
    out: { type: "string", short: "o" },
    threads: { type: "string" },
    json: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  },
  help: {
    model: "GGUF model (default: the default model)",
    corpus: "text file or directory of text files (default: the bundled held-out text, models/heldout.txt)",
    ctx: "window length in tokens; each window is a fresh context (default 256)",
    "max-tokens": "profile at most N tokens (default: all)",
    out: "output file (default: MODEL.profile.gguf next to the model)",
    threads: "compute threads",
    json: "print the per-layer summary as JSON",
  },
  async run(v) {
    const ctx = num(v.ctx, "ctx", { int: true, min: 2 }) ?? 256;
    const { model, path, corpus, tokens } = await reluModelAndCorpus(v, 1);
    const out = (v.out as string | undefined) ?? `${path}.profile.gguf`;
    try {
      const p = profileActivations(model, tokens, ctx, { corpus, onProgress: progressBar(`profiling ${tokens.length} tokens`) });
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
      }));
      if (v.json) process.stdout.write(JSON.stringify({ out, tokens: p.tokens, layers: rows }) + "\n");
      else {
        process.stdout.write(`profiled ${p.tokens} tokens of ${corpus} → ${out}\n`);
        process.stdout.write("layer  sparsity  active/token (mean p50 p99)  overlap(t,t+1)  neurons for 80% of activations\n");
        for (const r of rows) {
          process.stdout.write(
            `${String(r.layer).padStart(5)}  ${(100 * r.sparsity).toFixed(1).padStart(7)}%  ${r.activeMean.toFixed(1).padStart(8)} ${String(r.activeP50).padStart(5)} ${String(r.activeP99).padStart(5)}  ${r.overlap.toFixed(3).padStart(14)}  ${r.hot80} of ${p.nFF} (${((100 * r.hot80) / p.nFF).toFixed(1)}%)\n`,
          );
        }
      }
    } finally {
      model.dispose();
    }
  },
};

commands["train-predictor"] = {
  summary: "train per-layer activation predictors fc2(relu(fc1(x))) in native code on collected activations",
  usage: "neuronpipe train-predictor [--model PATH] [--corpus FILE|DIR] [--out PATH] [--epochs 3] [--target-recall 0.998]",
  options: {
    model: { type: "string", short: "m" },
    corpus: { type: "string", short: "c" },
    out: { type: "string", short: "o" },
    epochs: { type: "string" },
    "target-recall": { type: "string" },
    "train-fraction": { type: "string" },
    "max-hidden": { type: "string" },
    calibration: { type: "string" },
    "max-tokens": { type: "string", short: "n" },
    seed: { type: "string" },
    threads: { type: "string" },
    json: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  },
  help: {
    model: "GGUF model (default: the default model)",
    corpus: "text file or directory (default: the bundled held-out text); the first --train-fraction trains, the rest evaluates",
    out: "output file (default: MODEL.predictor.gguf next to the model)",
    epochs: "passes over the training activations (default 3)",
    "target-recall": "each layer's threshold is the largest reaching this recall on the training split (default 0.998)",
    "train-fraction": "share of the corpus tokens used for training (default 0.8)",
    calibration: "share of the training tokens held out of fitting to choose the thresholds (default 0: chosen on the fitting tokens)",
    "max-hidden": "upper bound of a layer's hidden width (default 256; the width is 0.75 × active neurons per token, rounded to 32)",
    "max-tokens": "use at most N corpus tokens",
    seed: "initialisation and shuffling seed (default 1); training is deterministic",
    threads: "compute threads for the collection passes",
    json: "print the report as JSON",
  },
  async run(v) {
    const epochs = num(v.epochs, "epochs", { int: true, min: 1 });
    const targetRecall = num(v["target-recall"], "target-recall", { min: 0 });
    const trainFraction = num(v["train-fraction"], "train-fraction", { min: 0 });
    const seed = num(v.seed, "seed", { int: true });
    const { model, path, corpus, tokens } = await reluModelAndCorpus(v, 2);
    const out = (v.out as string | undefined) ?? `${path}.predictor.gguf`;
    try {
      const bars: Record<string, (d: number, t: number) => void> = {};
      const r = trainPredictors(model, tokens, {
        epochs,
        targetRecall,
        trainFraction,
        seed,
        maxHidden: num(v["max-hidden"], "max-hidden", { int: true, min: 32 }),
        calibrationFraction: num(v.calibration, "calibration", { min: 0 }),
        onProgress: (phase, d, t) => (bars[phase] ??= progressBar(phase))(d, t),
      });
      await writePredictors(out, r, {
        modelName: String(model.file.metadata.get("general.name")?.value ?? path),
        corpus,
        modelFingerprint: modelFingerprint(path, model.file),
      });
      if (v.json) process.stdout.write(JSON.stringify({ out, report: r.report, meanRecall: r.meanRecall, predictorParams: r.predictorParams, ffnParams: r.ffnParams }) + "\n");
      else process.stdout.write(`${formatReport(r)}\nwrote ${out}\n`);
    } finally {
      model.dispose();
    }
  },
};

commands.pack = {
  summary: "write the neuron pack: FFN neurons as 4 KiB-aligned bundles in hot-first order, plus the predictor",
  usage: "neuronpipe pack [--model PATH] [--profile PATH] [--predictor PATH | --no-predictor] [--down-type same|q8_0|…] [--out PATH]",
  options: {
    model: { type: "string", short: "m" },
    profile: { type: "string" },
    predictor: { type: "string" },
    "no-predictor": { type: "boolean" },
    "down-type": { type: "string" },
    out: { type: "string", short: "o" },
    json: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  },
  help: {
    model: "GGUF model (default: the default model)",
    profile: "activation profile (default: MODEL.profile.gguf, written by `neuronpipe profile`)",
    "down-type": "type of the re-laid down columns: same (default), f32, f16, q8_0, q4_0 (q8_0 for a Q4_0 model: ~12× less re-layout error, same reads at n_embd 4096)",
    predictor: "predictor file (default: MODEL.predictor.gguf if it exists, written by `neuronpipe train-predictor`)",
    "no-predictor": "pack without a predictor",
    out: "output file (default: MODEL without .gguf + .pack.gguf)",
    json: "print the summary as JSON",
  },
  async run(v) {
    if (v.predictor !== undefined && v["no-predictor"]) throw new UsageError("--predictor and --no-predictor exclude each other");
    const model = (v.model as string | undefined) ?? (await defaultModelPath());
    if (!existsSync(model)) throw new Error(`${model}: no such model file`);
    const profile = (v.profile as string | undefined) ?? `${model}.profile.gguf`;
    if (!existsSync(profile)) {
      throw new Error(`${profile}: no activation profile; run \`neuronpipe profile --model ${model}\` first${v.profile ? "" : " (or pass --profile PATH)"}`);
    }
    let predictor = v["no-predictor"] ? undefined : (v.predictor as string | undefined);
    let note = v["no-predictor"] ? "without a predictor (--no-predictor)" : "";
    if (!v["no-predictor"] && predictor === undefined) {
      const def = `${model}.predictor.gguf`;
      if (existsSync(def)) predictor = def;
      else note = `without a predictor: ${def} does not exist (train one with \`neuronpipe train-predictor\`)`;
    }
    if (predictor !== undefined && !existsSync(predictor)) throw new Error(`${predictor}: no such predictor file`);
    const out = (v.out as string | undefined) ?? `${model.replace(/\.gguf$/i, "")}.pack.gguf`;
    if (resolve(out) === resolve(model) || (existsSync(out) && realpathSync(out) === realpathSync(model))) {
      throw new UsageError(`--out ${out} is the input model; choose another output path`);
    }
    if (note && !v.json) process.stderr.write(`packing ${note}\n`);
    const t0 = performance.now();
    const dt = ((v["down-type"] as string | undefined) ?? "same").toLowerCase();
    if (dt !== "same" && weightTypeIds[dt] === undefined) throw new UsageError(`--down-type must be same, f32, f16, q8_0 or q4_0, got "${dt}"`);
    const r = await writePack(model, out, { profile, predictor, downType: dt === "same" ? undefined : weightTypeIds[dt], onProgress: progressBar(`writing ${out}`) });
    const seconds = (performance.now() - t0) / 1000;
    const pack = openPack(out);
    const rows = pack.layers.map((l, i) => ({ layer: i, hotCount: l.hotCount, downRelayoutError: r.downRelayoutError[i]! }));
    if (v.json) {
      process.stdout.write(
        JSON.stringify({
          out,
          bytes: r.bytes,
          seconds,
          model,
          profile,
          predictor: predictor ?? null,
          gateBlock: pack.gateBlock,
          upDownBlock: pack.upDownBlock,
          bundleBytes: pack.bundleBytes,
          layers: rows,
        }) + "\n",
      );
      return;
    }
    const tn = (t: number) => tensorTypeName(t);
    const o: string[] = [];
    o.push(`wrote ${out}: ${formatBytes(r.bytes)} in ${seconds.toFixed(1)} s (from ${model}, profile ${profile}, ${predictor ? `predictor ${predictor}` : "no predictor"})`);
    o.push(
      `bundle: gate ${tn(pack.gateType)} ${pack.gateBytes} B → ${pack.gateBlock} B block, up ${tn(pack.upType)} ${pack.upBytes} B + down column ${tn(pack.downType)} ${pack.downBytes} B → ${pack.upDownBlock} B block; ${pack.bundleBytes} B per neuron`,
    );
    o.push("layer  hot neurons (80% of firings)  down re-layout error ‖D'−D‖/‖D‖");
    for (const row of rows) {
      o.push(`${String(row.layer).padStart(5)}  ${`${row.hotCount} of ${pack.config.nFF}`.padStart(28)}  ${row.downRelayoutError === 0 ? "0 (exact)" : row.downRelayoutError.toExponential(3)}`);
    }
    process.stdout.write(o.join("\n") + "\n");
  },
};

function helpText(name: string, c: Command): string {
  const lines = [`neuronpipe ${name} — ${c.summary}`, "", `usage: ${c.usage}`, "", "options:"];
  for (const [k, o] of Object.entries(c.options)) {
    if (k === "help") continue;
    const flag = `${o.short ? `-${o.short}, ` : "    "}--${k}${o.type === "string" ? " VALUE" : ""}`;
    lines.push(`  ${flag.padEnd(28)} ${c.help[k] ?? ""}`);
  }
  lines.push(`  ${"-h, --help".padEnd(28)} this help`);
  return lines.join("\n") + "\n";
}

function mainHelp(): string {
  const lines = ["neuronpipe — run LLMs bigger than memory, fast, by exploiting activation sparsity", "", "usage: neuronpipe COMMAND [options]", "", "commands:"];
  for (const [k, c] of Object.entries(commands)) lines.push(`  ${k.padEnd(10)} ${c.summary}`);
  lines.push("", "`neuronpipe COMMAND --help` describes a command's options.");
  return lines.join("\n") + "\n";
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === "--help" || name === "-h" || name === "help") {
    process.stdout.write(mainHelp());
    return name ? 0 : 1;
  }
  const cmd = commands[name];
  if (!cmd) {
    process.stderr.write(`neuronpipe: unknown command "${name}"\n\n${mainHelp()}`);
    return 2;
  }
  try {
    const { values, positionals } = parseArgs({ args: rest, options: cmd.options, allowPositionals: true, strict: true });
    if (values.help) {
      process.stdout.write(helpText(name, cmd));
      return 0;
    }
    await cmd.run(values as Record<string, string | boolean | undefined>, positionals);
    return 0;
  } catch (e) {
    const err = e as Error;
    const usage = e instanceof UsageError || (err as { code?: string }).code?.startsWith("ERR_PARSE_ARGS");
    process.stderr.write(`neuronpipe ${name}: ${err.message}\n${usage ? `\n${helpText(name, cmd)}` : ""}`);
    return usage ? 2 : 1;
  }
}

export { parseBytes };
