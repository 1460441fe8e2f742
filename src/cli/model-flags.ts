// The flags of every command that runs a model, turned into load options (src/decode/open.ts
// checks them and picks the defaults, for the library and the CLI alike), and the summary of a
// neuron pack's statistics printed after a run.
import { loadModel, type Model } from "../api/model.js";
import { DECODER_KINDS } from "../decode/decoder.js";
import type { OpenOptions } from "../decode/open.js";
import type { SparseLayerReport, SparseParts } from "../sparse/parts.js";
import { formatBytes } from "../util/bytes.js";
import { shippedFile } from "../util/package-files.js";
import { num, UsageError, type Values } from "./command.js";
import { progressBar } from "./progress.js";

export { defaultModelPath } from "../api/default-model.js";

/** The default model's held-out text (eval and profile default corpus). */
export function bundledHeldout(): string {
  return shippedFile("heldout.txt");
}

/** Flags of every command that runs a model (read by openFromFlags). */
export const modelFlags = {
  decoder: { type: "string" },
  mode: { type: "string" }, // the old name of --decoder
  memory: { type: "string" },
  predictor: { type: "string" },
  io: { type: "string" },
  "queue-depth": { type: "string" },
  "read-lane": { type: "string" },
  "pin-gates": { type: "string" },
  "read-ahead": { type: "string" },
  "sparse-stats": { type: "boolean" },
  trace: { type: "string" },
  plan: { type: "string" },
} as const;

export const modelFlagsHelp: Record<keyof typeof modelFlags, string> = {
  decoder:
    "how tokens run through the layers: auto (default: dense for a plain model, inline for a neuron pack); for a pack also pipeline (actors on worker threads, reads overlap compute), blocking (LLMFlash: window cache, every read before compute) or mmap (dense over a memory-mapped file, as llama.cpp)",
  mode: "the same as --decoder (its old name; sync is inline)",
  memory: "neuron pack only: hard bound on the memory held for the model, e.g. 2GiB (default: the whole pack resident)",
  predictor: "neuron pack only: trained (the pack's predictors, default) or oracle (compute every gate)",
  io: "neuron pack only: storage reads through uring, pread or auto (default auto)",
  "queue-depth": "neuron pack only: reads in flight (default 32)",
  "read-lane":
    "neuron pack only: caller (default with io_uring) or background: the reads ahead are submitted and reaped by the decoding thread, or run on a thread of their own woken for each batch (the pread backend's way)",
  "pin-gates":
    "neuron pack only: auto (default: keep every gate row resident when they take ≤ 75% of the neuron cache), on or off; with pinned gate rows a predicted neuron costs a read only if it fires",
  "read-ahead":
    "neuron pack, inline decoder: neurons per batch of reads ahead (default: the plan's; without a plan min(1024, n_ff/8) with pinned gate rows when that staging is ≤ 5% of the up+down cache, else none; 0 off): the next layers' likely-firing neurons are read in the background while this layer computes (up+down rows with pinned gate rows, else whole bundles)",
  "sparse-stats": "neuron pack only: print per-layer hit rate and bytes read per token",
  plan: "neuron pack only: decode with this saved plan (`neuronpipe plan --out FILE`); by default a plan is made at load from this machine's probe, and every flag given overrides its knob",
  trace: "record actor events and I/O/kernel intervals as JSON lines to this file (`neuronpipe trace export|plot|stats|replay`)",
};

/** Open the model a command names with the flags given; a refused option is a usage error. */
export async function openFromFlags(path: string, v: Values, o: { threads?: number; contextSize?: number }): Promise<Model> {
  const decoder = (v.decoder ?? v.mode) as string | undefined;
  if (v.decoder !== undefined && v.mode !== undefined) throw new UsageError("--mode is the old name of --decoder: give one of them");
  const kind = decoder === "sync" ? "inline" : decoder;
  if (kind !== undefined && kind !== "auto" && !(DECODER_KINDS as readonly string[]).includes(kind)) {
    throw new UsageError(`--decoder must be auto, ${DECODER_KINDS.join(", ")}, got "${decoder}"`);
  }
  const predictor = v.predictor as string | undefined;
  if (predictor !== undefined && predictor !== "trained" && predictor !== "oracle") throw new UsageError(`--predictor must be trained or oracle, got "${predictor}"`);
  const backend = v.io as string | undefined;
  if (backend !== undefined && backend !== "auto" && backend !== "uring" && backend !== "pread") throw new UsageError(`--io must be auto, uring or pread, got "${backend}"`);
  const queueDepth = num(v["queue-depth"], "queue-depth", { int: true, min: 1 });
  const readLane = v["read-lane"] as string | undefined;
  if (readLane !== undefined && readLane !== "caller" && readLane !== "background") throw new UsageError(`--read-lane must be caller or background, got "${readLane}"`);
  const readAhead = num(v["read-ahead"], "read-ahead", { int: true, min: 0 });
  const pin = v["pin-gates"] as string | undefined;
  if (pin !== undefined && pin !== "auto" && pin !== "on" && pin !== "off") throw new UsageError(`--pin-gates must be auto, on or off, got "${pin}"`);
  const opts: OpenOptions = {
    threads: o.threads,
    decoder: kind as OpenOptions["decoder"],
    memory: v.memory as string | undefined,
    predictor,
    io: backend !== undefined || queueDepth !== undefined || readLane !== undefined ? { backend, queueDepth, readLane } : undefined,
    pinGates: pin === undefined ? undefined : pin === "auto" ? "auto" : pin === "on",
    readAhead,
    plan: v.plan as string | undefined,
    onProgress: v.json ? undefined : progressBar("loading the hot region"),
  };
  // the plan's context is the session's (a pack's memory plan holds one session)
  if (o.contextSize !== undefined) opts.contextSize = o.contextSize;
  try {
    return await loadModel(path, opts);
  } catch (e) {
    // options refused by name are the command line's mistakes: say which flag
    if (e instanceof RangeError) throw new UsageError(flagNames(e.message));
    throw e;
  }
}

/** Library option names in a message → the flags a CLI user typed. */
function flagNames(msg: string): string {
  const names: Record<string, string> = { plan: "--plan", memory: "--memory", predictor: "--predictor", io: "--io", "io.readLane": "--read-lane", pinGates: "--pin-gates", readAhead: "--read-ahead", decoder: "--decoder", contextSize: "--ctx", threads: "--threads" };
  return msg.replace(/^([\w.]+)(?= )/, (w) => names[w] ?? w).replace(/decoder "(\w+)"/, "--decoder $1");
}

/** One line (or a table with `perLayer`) of a pack's statistics: hit rate, reads, predicted and fired neurons, peak memory. */
export function sparseSummary(rt: SparseParts, perLayer: boolean): string {
  const rep = rt.report();
  const sum = (f: (r: SparseLayerReport) => number) => rep.reduce((a, r) => a + f(r), 0);
  const tokens = rep[0]?.tokens ?? 0;
  const acc = sum((r) => r.gateAccesses + r.upDownAccesses);
  const hits = sum((r) => r.gateHits + r.upDownHits);
  const lines = [
    `[sparse FFN: ${tokens} tokens | hit rate ${acc ? ((100 * hits) / acc).toFixed(1) : "100.0"}% | read ${formatBytes(tokens ? sum((r) => r.bytesRead) / tokens : 0)}/token | ` +
      `predicted ${tokens ? (sum((r) => r.predicted) / tokens).toFixed(0) : 0}, fired ${tokens ? (sum((r) => r.fired) / tokens).toFixed(0) : 0} neurons/token | ` +
      // without a budget there is no "of": the bytes held now leave out the sessions already let go (their KV caches), which the peak counts
      `peak resident ${formatBytes(rt.peakResidentBytes)} ${rt.plan.budget > 2 ** 52 ? "(no memory budget)" : `of ${formatBytes(rt.plan.budget)}`}]`,
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
