// Opening any model file — a plain GGUF model or a neuron pack — with its decoder. This is the
// one place where load options are checked and their defaults chosen; the library (loadModel)
// and the CLI both come through here.
import { readGGUF, type GGUFFile } from "../gguf/reader.js";
import { readConfig, type ModelConfig } from "../model/config.js";
import { vocabFromGGUF } from "../model/vocab.js";
import { bindWeights } from "../model/weights.js";
import { native } from "../native.js";
import { planOptions } from "../sparse/memory-plan.js";
import { openPack } from "../sparse/pack/open.js";
import { createTokenizer, type Tokenizer } from "../tokenizer/index.js";
import { parseBytes } from "../util/bytes.js";
import { DECODER_KINDS, type Decoder, type DecoderKind } from "./decoder.js";
import { DenseDecoder } from "./dense.js";
import { InlineDecoder } from "./inline.js";
import { MmapDecoder } from "./mmap.js";
import { PipelineDecoder, type PipelineOptions } from "./pipeline/pipeline.js";
import { openSparseParts, type IoOptions, type PredictorMode, type SparseParts } from "../sparse/parts.js";

export interface OpenOptions {
  /** Native compute threads (default: all online CPUs). Results are identical for any count. */
  threads?: number;
  /** Abort loading (checked between steps). */
  signal?: AbortSignal;
  /**
   * How tokens run through the layers (src/decode/decoder.ts). "auto" (default): dense for a
   * plain model, inline for a neuron pack. A pack also takes "pipeline", "blocking" and "mmap".
   */
  decoder?: "auto" | DecoderKind;

  // ---- neuron packs only ----
  /** Hard bound on the bytes held for the model, e.g. "2GiB" or a number of bytes (default: everything resident). */
  memory?: number | string;
  /** "trained" (the pack's predictors, default) or "oracle" (compute every gate; testing). */
  predictor?: PredictorMode;
  /** Storage reads: io_uring or a pread pool, queue depth, O_DIRECT (default auto, 32, true). */
  io?: IoOptions;
  /** Context length and batch size the plan reserves for the one session (defaults min(train ctx, 2048) and 32). */
  contextSize?: number;
  batchSize?: number;
  /** Neurons per hot cluster (default 32), hot-region share of the cache (0.75). */
  clusterSize?: number;
  hotShare?: number;
  /** Share of a non-resident hot cluster that must be predicted to read it whole (default 0.5: one sequential read of C bundles costs about C/2 random 4 KiB reads at queue depth 32 here). */
  clusterAdmit?: number;
  /** Neurons per I/O staging buffer (default 1% of the budget, 256..2048). */
  stagingNeurons?: number;
  /** Keep every gate row resident and cache up+down only: true, false, or "auto" (default: when the gate rows take ≤ 75% of the neuron cache; never in the blocking decoder, whose LLMFlash cache holds whole bundles). */
  pinGates?: boolean | "auto";
  /** Neurons per batch of reads ahead (inline decoder with pinned gates: the next layer's likely-firing neurons are read in the background while this layer computes); default min(1024, n_ff/8) when that staging is at most 5% of the up+down cache (on a small model it would cost more hits than reading ahead saves), else none; given explicitly it is used whatever its share; 0 turns reads ahead off. */
  readAhead?: number;
  /** Knobs of the pipeline and blocking decoders (docs/pipeline.md). */
  pipeline?: Omit<PipelineOptions, "mode">;
  /** Progress of the hot-region preload. */
  onProgress?: (done: number, total: number) => void;
}

/** The decoder a model gets when none is asked for. */
export const DEFAULT_DECODER = { plain: "dense", pack: "inline" } as const satisfies Record<string, DecoderKind>;

/** Options that only a neuron pack takes. */
export const PACK_ONLY_OPTIONS = ["memory", "predictor", "io", "clusterSize", "hotShare", "clusterAdmit", "stagingNeurons", "pinGates", "readAhead", "pipeline"] as const;

/** A model file, opened: what Model wraps. */
export interface OpenedModel {
  path: string;
  file: GGUFFile;
  config: ModelConfig;
  tokenizer: Tokenizer;
  decoder: Decoder;
  /** The memory plan, neuron cache and statistics of a pack opened under a budget (inline, pipeline, blocking). */
  sparse?: SparseParts;
}

/** Is this GGUF a neuron pack (`neuronpipe pack`)? */
export function isPackFile(file: GGUFFile): boolean {
  return file.metadata.has("neuronpipe.pack.version");
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
  if (o.pipeline !== undefined && kind !== "pipeline" && kind !== "blocking") throw new RangeError(`pipeline options apply to the pipeline and blocking decoders, not ${kind}`);
  return kind;
}

/** Open a plain GGUF model or a neuron pack with the decoder the options ask for. */
export async function openModelFile(path: string, o: OpenOptions = {}): Promise<OpenedModel> {
  o.signal?.throwIfAborted();
  applyThreads("loadModel", o.threads);
  const file = readGGUF(path); // a missing or malformed file fails here, by name
  const pack = isPackFile(file);
  const kind = resolveDecoder(path, pack, o);
  if (!pack) {
    const config = readConfig(file);
    const tokenizer = createTokenizer(vocabFromGGUF(file));
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
  const tokenizer = createTokenizer(vocabFromGGUF(p.file));
  if (kind === "mmap") return { path, file: p.file, config: cfg, tokenizer, decoder: new MmapDecoder(p) };
  const budget = o.memory === undefined ? Number.MAX_SAFE_INTEGER : typeof o.memory === "number" ? o.memory : parseBytes(o.memory);
  const predictor = o.predictor ?? "trained";
  if (predictor === "trained" && !p.predictor) {
    throw new Error(
      `${path}: the pack has no predictors (blk.N.fc1.weight / blk.N.fc2.weight); train them with \`neuronpipe train-predictor\` and pack again, or use the oracle predictor`,
    );
  }
  // 1% of the budget, 256..2048 neurons: the actor decoders keep several read batches in flight,
  // each filling the loader's queue; a prompt streams the dense FFN through it in chunks as large
  // as half of it (fewer, larger GEMM calls and reads)
  const actors = kind === "pipeline" || kind === "blocking";
  const stagingNeurons = o.stagingNeurons ?? Math.min(2048, Math.max(256, Math.floor((0.01 * budget) / p.bundleBytes)));
  const pinGates = kind === "blocking" ? false : o.pinGates;
  const io = { backend: o.io?.backend ?? "auto", queueDepth: o.io?.queueDepth ?? 32, directIO: o.io?.directIO ?? true, directIOAsked: o.io?.directIO === true } as const;
  const parts = openSparseParts(path, p, {
    budget,
    predictor,
    io,
    plan: planOptions(cfg, { ...o, stagingNeurons, pinGates, predictor: predictor === "trained", readAheadNeurons: kind === "inline" ? o.readAhead : 0, readAheadMaxShare: o.readAhead !== undefined ? 1 : undefined }),
    preload: kind !== "blocking", // LLMFlash's window cache starts empty
    onProgress: o.onProgress,
    signal: o.signal,
  });
  try {
    const decoder = actors ? new PipelineDecoder(parts, kind, o.pipeline) : new InlineDecoder(parts);
    return { path, file: p.file, config: cfg, tokenizer, decoder, sparse: parts };
  } catch (e) {
    parts.dispose();
    throw e;
  }
}
