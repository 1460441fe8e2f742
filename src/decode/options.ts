// The options of opening a model file (loadModel's LoadOptions): what a user may set, checked and
// defaulted in open.ts; the knobs a neuron pack's plan fills in where they are left open (planned.ts).
import type { ExecutionPlan } from "../plan/planner.js";
import type { IoOptions, PredictorMode } from "../sparse/parts.js";
import type { DecoderKind } from "./decoder.js";
import type { PipelineOptions } from "./pipeline/pipeline.js";

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
  /**
   * Share of a non-resident hot cluster that must be predicted to read it whole (e.g. 0.5: one
   * sequential read of C bundles costs about C/2 random 4 KiB reads at queue depth 32 here).
   * Default: none is read after the load; the hot region keeps the clusters the load put there
   * (on the shipped model at 25% of the FFN 5–10% faster than 0.5, docs/benchmarks.md).
   */
  clusterAdmit?: number;
  /** Neurons per I/O staging buffer (default 1% of the budget, 256..2048). */
  stagingNeurons?: number;
  /** Keep every gate row resident and cache up+down only: true, false, or "auto" (default: when the gate rows take ≤ 75% of the neuron cache; never in the blocking decoder, whose LLMFlash cache holds whole bundles). */
  pinGates?: boolean | "auto";
  /** Neurons per batch of reads ahead (inline decoder: the next layers' likely-firing neurons are read in the background while this layer computes — up+down rows with pinned gate rows, else whole bundles); default: the plan's, or without a plan min(1024, n_ff/8) up+down blocks with pinned gate rows when that staging is at most 5% of the up+down cache (on a small model it would cost more hits than reading ahead saves), else none; given explicitly it is used whatever its share; 0 turns reads ahead off. */
  readAhead?: number;
  /** Share of the cold region that keeps the most-used cold neurons (by the profile: most flagged with whole bundles and a trained predictor, else most fired) for good, loaded at start; the rest is the LRU list misses go through (default 0: all LRU). */
  coldKeep?: number;
  /** Knobs of the pipeline and blocking decoders (docs/pipeline.md). */
  pipeline?: Omit<PipelineOptions, "mode">;
  /** Progress of the hot-region preload. */
  onProgress?: (done: number, total: number) => void;
  /**
   * The execution plan (neuron packs): a plan (`neuronpipe plan`, ExecutionPlan) or the path of a
   * saved one; by default one is made at load from this machine's probe (src/plan/planner.ts).
   * Every knob given explicitly overrides the plan's. false: no plan, the fixed defaults.
   */
  plan?: ExecutionPlan | string | false;
}
