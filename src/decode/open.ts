// Opening any model file — a plain GGUF model or a neuron pack — with its decoder. This is the
// one place where load options are checked and their defaults chosen; the library (loadModel)
// and the CLI both come through here.
import { GGUFError, readGGUF, type GGUFFile } from "../gguf/reader.js";
import { readConfig, type ModelConfig } from "../model/config.js";
import { vocabFromGGUF } from "../model/vocab.js";
import { bindWeights } from "../model/weights.js";
import { native } from "../native.js";
import type { ExecutionPlan } from "../plan/planner.js";
import type { OpenOptions } from "./options.js";
import { planForLoad, sparsePlanOptions } from "./planned.js";
import { isPackFile } from "../sparse/pack/format.js";
import { openPack } from "../sparse/pack/open.js";
import { createTokenizer, type Tokenizer } from "../tokenizer/index.js";
import { parseBytes } from "../util/bytes.js";
import { DECODER_KINDS, type Decoder, type DecoderKind } from "./decoder.js";
import { DenseDecoder } from "./dense.js";
import { InlineDecoder } from "./inline.js";
import { MmapDecoder } from "./mmap.js";
import { PipelineDecoder } from "./pipeline/pipeline.js";
import { openSparseParts, type SparseParts } from "../sparse/parts.js";

export type { OpenOptions };


/** The decoder a model gets when none is asked for. */
export const DEFAULT_DECODER = { plain: "dense", pack: "inline" } as const satisfies Record<string, DecoderKind>;

/** Options that only a neuron pack takes. */
export const PACK_ONLY_OPTIONS = ["memory", "predictor", "io", "clusterSize", "hotShare", "clusterAdmit", "stagingNeurons", "pinGates", "readAhead", "coldKeep", "pipeline"] as const;

/** A model file, opened: what Model wraps. */
export interface OpenedModel {
  path: string;
  file: GGUFFile;
  config: ModelConfig;
  tokenizer: Tokenizer;
  decoder: Decoder;
  /** The memory plan, neuron cache and statistics of a pack opened under a budget (inline, pipeline, blocking). */
  sparse?: SparseParts;
  /** The execution plan the pack was opened with (its knobs, overrides and predicted speed). */
  plan?: ExecutionPlan;
}

/** Set the native pool's thread count from a load option (checked; `who` names the caller in the error). */
export function applyThreads(who: string, threads: number | undefined): void {
  if (threads === undefined) return;
  if (!(Number.isInteger(threads) && threads >= 1)) throw new RangeError(`${who}: threads must be a whole number ≥ 1, got ${threads}`);
  native().setThreads(threads);
}

/** The decoder and checked options for a file; throws naming the option and the file. */
export function resolveDecoder(path: string, pack: boolean, o: OpenOptions): DecoderKind {
  const asked = o.decoder ?? "auto";
  if (asked !== "auto" && !DECODER_KINDS.includes(asked)) {
    throw new RangeError(`decoder must be one of auto, ${DECODER_KINDS.join(", ")}; got ${String(asked)}`);
  }
  const kind: DecoderKind = asked === "auto" ? (pack ? DEFAULT_DECODER.pack : DEFAULT_DECODER.plain) : asked;
  const given = PACK_ONLY_OPTIONS.filter((k) => o[k] !== undefined);
  if (!pack) {
    const what = kind !== "dense" ? `decoder "${kind}"` : given[0];
    if (!what && o.plan) throw new RangeError(`plan: ${path} is a plain model (a GGUF that is not a neuron pack); plans are for neuron packs (\`neuronpipe pack --model ${path}\`)`);
    if (what) throw new RangeError(`${what} needs a neuron pack, and ${path} is a plain model (a GGUF that is not a neuron pack); create one with \`neuronpipe pack --model ${path}\``);
    return kind;
  }
  if (kind === "dense") throw new RangeError(`${path} is a neuron pack: its FFN is stored as neuron bundles; decode it with inline, pipeline, blocking or mmap`);
  if (kind === "mmap") {
    const extra = given.filter((k) => k !== "pipeline");
    if (extra.length) throw new RangeError(`${extra[0]} does not apply to the mmap decoder (dense over a mapping; limit its memory with a cgroup)`);
  }
  if (o.predictor !== undefined && o.predictor !== "trained" && o.predictor !== "oracle") throw new RangeError(`predictor must be "trained" or "oracle", got ${String(o.predictor)}`);
  if (kind === "blocking" && o.pinGates === true) throw new RangeError("pinGates: the blocking decoder (LLMFlash) caches whole bundles; it cannot pin gate rows");
  if (o.readAhead !== undefined) {
    if (!(Number.isInteger(o.readAhead) && o.readAhead >= 0 && o.readAhead <= 65536)) throw new RangeError(`readAhead must be a whole number of neurons in [0, 65536], got ${o.readAhead}`);
    if (kind !== "inline") throw new RangeError(`readAhead applies to the inline decoder, not ${kind} (the pipeline overlaps its reads on the I/O worker)`);
  }
  if (o.coldKeep !== undefined) {
    if (!(typeof o.coldKeep === "number" && o.coldKeep >= 0 && o.coldKeep < 1)) throw new RangeError(`coldKeep must be a share of the cold region in [0, 1), got ${String(o.coldKeep)}`);
    if (kind === "blocking") throw new RangeError("coldKeep: the blocking decoder (LLMFlash) has a window cache, no cold region to keep");
  }
  if (o.pipeline !== undefined && kind !== "pipeline" && kind !== "blocking") throw new RangeError(`pipeline options apply to the pipeline and blocking decoders, not ${kind}`);
  return kind;
}

/** The file's tokenizer; a vocabulary the tokenizer refuses is reported against the file. */
function tokenizerOf(file: GGUFFile): Tokenizer {
  try {
    return createTokenizer(vocabFromGGUF(file));
  } catch (e) {
    if (e instanceof GGUFError) throw e;
    throw new GGUFError(file.path, (e as Error).message);
  }
}

/** Open a plain GGUF model or a neuron pack with the decoder the options ask for. */
export async function openModelFile(path: string, o: OpenOptions = {}): Promise<OpenedModel> {
  o.signal?.throwIfAborted();
  applyThreads("loadModel", o.threads);
  const file = readGGUF(path); // a missing or malformed file fails here, by name
  const pack = isPackFile(file);
  let kind = resolveDecoder(path, pack, o);
  if (!pack) {
    const config = readConfig(file);
    const tokenizer = tokenizerOf(file);
    o.signal?.throwIfAborted();
    const mapped = native().mapFile(path);
    try {
      const weights = bindWeights(file, config, mapped.id);
      return { path, file, config, tokenizer, decoder: new DenseDecoder(config, weights) };
    } catch (e) {
      native().free(mapped.id);
      throw e;
    }
  }
  const p = openPack(path);
  const cfg = p.config;
  const tokenizer = tokenizerOf(p.file);
  if (kind === "mmap") return { path, file: p.file, config: cfg, tokenizer, decoder: new MmapDecoder(p) };
  let budget = o.memory === undefined ? Number.MAX_SAFE_INTEGER : typeof o.memory === "number" ? o.memory : parseBytes(o.memory);
  // the plan's knobs where the options leave them open (explicit ones override it)
  const planned = planForLoad(p, budget, o);
  const plan = planned.plan;
  o = planned.options;
  if (plan) {
    kind = o.decoder as DecoderKind;
    applyThreads("loadModel", o.threads);
    if (o.memory !== undefined) budget = typeof o.memory === "number" ? o.memory : parseBytes(o.memory);
  }
  const predictor = o.predictor ?? "trained";
  if (predictor === "trained" && !p.predictor) {
    throw new Error(
      `${path}: the pack has no predictors (blk.N.fc1.weight / blk.N.fc2.weight); train them with \`neuronpipe train-predictor\` and pack again, or use the oracle predictor`,
    );
  }
  const actors = kind === "pipeline" || kind === "blocking";
  const io = { backend: o.io?.backend ?? "auto", queueDepth: o.io?.queueDepth ?? 32, directIO: o.io?.directIO ?? true, directIOAsked: o.io?.directIO === true, readLane: o.io?.readLane } as const;
  const parts = openSparseParts(path, p, {
    budget,
    predictor,
    io,
    plan: sparsePlanOptions(p, kind, budget, o),
    preload: kind !== "blocking", // LLMFlash's window cache starts empty
    onProgress: o.onProgress,
    signal: o.signal,
  });
  try {
    const decoder = actors ? new PipelineDecoder(parts, kind as "pipeline" | "blocking", o.pipeline) : new InlineDecoder(parts);
    return { path, file: p.file, config: cfg, tokenizer, decoder, sparse: parts, plan };
  } catch (e) {
    parts.dispose();
    throw e;
  }
}
