// The peer: llama.cpp through node-llama-cpp, our independent reference for tokenisation,
// logits and speed. CPU only, offline (prebuilt binaries from @node-llama-cpp/linux-x64),
// thread count explicit. Installed separately from the main tree: `bash bench/install.sh`.
//
// Logits: node-llama-cpp 3 exposes raw next-token logits through
// LlamaContextSequence.controlledEvaluate([[token, { generateNext: { logits: true } }], ...]).
// They are llama.cpp's logits after the sampler chain; with the default configuration
// (temperature 0) the chain is a lone greedy sampler, which does not change them, so they are
// the model's raw output (checked: the returned map covers the whole vocabulary and its top
// entry is the greedy token). They arrive as a Map sorted by value; we scatter them into a
// Float32Array indexed by token id.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const benchDir = join(here, "..");

/** Thrown when node-llama-cpp is not installed under bench/. */
export class PeerNotInstalledError extends Error {
  constructor(cause) {
    super(
      "The llama.cpp peer (node-llama-cpp) is not installed: run `bash bench/install.sh` " +
        "(installs node-llama-cpp 3.22.1 with its CPU prebuilt binary into bench/node_modules)." +
        (cause ? ` Cause: ${cause instanceof Error ? cause.message : String(cause)}` : ""),
    );
    this.name = "PeerNotInstalledError";
  }
}

/** Whether bench/node_modules holds node-llama-cpp and its linux-x64 binary. */
export function peerInstalled() {
  return (
    existsSync(join(benchDir, "node_modules", "node-llama-cpp", "package.json")) &&
    existsSync(join(benchDir, "node_modules", "@node-llama-cpp", "linux-x64", "package.json"))
  );
}

let nlcPromise;
/** Import node-llama-cpp (from bench/node_modules), or throw PeerNotInstalledError. */
export async function importNodeLlamaCpp() {
  if (!nlcPromise) {
    nlcPromise = (async () => {
      if (!peerInstalled()) throw new PeerNotInstalledError();
      try {
        return await import("node-llama-cpp");
      } catch (e) {
        throw new PeerNotInstalledError(e);
      }
    })();
    nlcPromise.catch(() => (nlcPromise = undefined));
  }
  return nlcPromise;
}

let llamaPromise;
async function getPeerLlama() {
  if (!llamaPromise) {
    llamaPromise = (async () => {
      const nlc = await importNodeLlamaCpp();
      return nlc.getLlama({
        gpu: false,
        build: "never",
        skipDownload: true,
        usePrebuiltBinaries: true,
        progressLogs: false,
        // 0: a context's `threads` is the exact thread count used (no sharing heuristics)
        maxThreads: 0,
        logLevel: process.env.NEURONPIPE_PEER_LOG ? nlc.LlamaLogLevel.debug : nlc.LlamaLogLevel.error,
        logger: (level, message) => {
          if (process.env.NEURONPIPE_PEER_LOG || level === nlc.LlamaLogLevel.error || level === nlc.LlamaLogLevel.fatal) {
            process.stderr.write(`[llama.cpp ${level}] ${message}${message.endsWith("\n") ? "" : "\n"}`);
          }
        },
      });
    })();
    llamaPromise.catch(() => (llamaPromise = undefined));
  }
  return llamaPromise;
}

/** Version and build facts of the peer, for reports. */
export async function peerInfo() {
  const nlc = await importNodeLlamaCpp();
  const llama = await getPeerLlama();
  return {
    nodeLlamaCpp: (await nlc.getModuleVersion?.()) ?? "3.22.1",
    llamaCppRelease: llama.llamaCppRelease?.release,
    buildType: llama.buildType,
    gpu: llama.gpu,
    systemInfo: llama.systemInfo,
  };
}

/**
 * Open a GGUF model with llama.cpp (CPU only).
 * @param {string} modelPath
 * @param {import("./llama-peer.d.mts").PeerOptions} [options]
 * @returns {Promise<import("./llama-peer.d.mts").Peer>}
 */
export async function openPeer(modelPath, options = {}) {
  const threads = options.threads ?? 2;
  const contextSize = options.contextSize ?? 512;
  const batchSize = options.batchSize ?? Math.min(512, contextSize);
  if (!(Number.isInteger(threads) && threads >= 1)) throw new RangeError(`openPeer: threads must be a whole number ≥ 1, got ${threads}`);
  const llama = await getPeerLlama();
  const model = await llama.loadModel({
    modelPath,
    gpuLayers: 0,
    useMmap: options.useMmap ?? true,
    defaultContextFlashAttention: options.flashAttention ?? false,
  });
  let context;
  try {
    context = await model.createContext({
      contextSize,
      batchSize,
      sequences: 1,
      threads,
      flashAttention: options.flashAttention ?? false,
      ignoreMemorySafetyChecks: true,
    });
  } catch (e) {
    await model.dispose();
    throw e;
  }
  const sequence = context.getSequence();
  const bos = model.tokens.bos;
  const eos = model.tokens.eos;
  let nVocab = 0;
  let disposed = false;
  const check = () => {
    if (disposed) throw new Error("peer is disposed");
  };

  /** Scatter node-llama-cpp's sorted (token → logit) map into a dense vector. */
  const dense = (map) => {
    if (nVocab === 0) nVocab = map.size;
    const out = new Float32Array(nVocab).fill(Number.NEGATIVE_INFINITY);
    for (const [tok, v] of map) out[tok] = v;
    return out;
  };

  const peer = {
    modelPath,
    threads,
    contextSize,
    bosToken: bos ?? undefined,
    eosToken: eos ?? undefined,
    get nVocab() {
      return nVocab;
    },
    llama,
    model,
    context,
    sequence,

    tokenize(text, opts = {}) {
      check();
      const ids = Array.from(model.tokenize(text, opts.special ?? false));
      if (opts.addBos) {
        if (bos == null) throw new Error("peer: the model has no BOS token");
        ids.unshift(bos);
      }
      return ids;
    },

    detokenize(ids, opts = {}) {
      check();
      return model.detokenize(ids, opts.special ?? false);
    },

    async teacherForcedLogits(ids) {
      check();
      if (ids.length === 0) return [];
      if (ids.length > contextSize) throw new RangeError(`peer: ${ids.length} tokens exceed the context (${contextSize})`);
      await sequence.clearHistory();
      const res = await sequence.controlledEvaluate(ids.map((t) => [t, { generateNext: { logits: true } }]));
      const out = [];
      for (let i = 0; i < ids.length; i++) {
        const r = res[i];
        if (!r?.next.logits) throw new Error(`peer: no logits for position ${i}`);
        out.push(dense(r.next.logits));
      }
      return out;
    },

    async greedy(ids, n) {
      check();
      if (ids.length === 0) throw new Error("peer: greedy needs at least one prompt token");
      await sequence.clearHistory();
      const out = [];
      if (n <= 0) return out;
      // temperature 0 → llama.cpp's greedy sampler (argmax), no penalties
      for await (const t of sequence.evaluate(ids, { temperature: 0 })) {
        out.push(t);
        if (out.length >= n) break;
      }
      return out;
    },

    async timePrefill(ids) {
      check();
      await sequence.clearHistory();
      const t0 = performance.now();
      await sequence.evaluateWithoutGeneratingNewTokens(ids);
      const seconds = (performance.now() - t0) / 1000;
      return { tokens: ids.length, seconds, tokensPerSecond: ids.length / seconds };
    },

    async timeDecode(ids, n) {
      check();
      await sequence.clearHistory();
      const tokens = [];
      const t0 = performance.now();
      let tFirst = 0;
      // The first yielded token comes after the prompt's prefill; every later one costs one
      // single-token forward pass, which is what decode speed measures. We time from the first
      // token to the n-th: n - 1 decode passes (the n-th token's own pass is not needed).
      for await (const t of sequence.evaluate(ids, { temperature: 0 })) {
        tokens.push(t);
        if (tokens.length === 1) tFirst = performance.now();
        if (tokens.length >= n) break;
      }
      const t1 = performance.now();
      const passes = Math.max(0, tokens.length - 1);
      const seconds = (t1 - tFirst) / 1000;
      return {
        tokens,
        prefillSeconds: (tFirst - t0) / 1000,
        decodePasses: passes,
        seconds,
        tokensPerSecond: passes > 0 && seconds > 0 ? passes / seconds : 0,
      };
    },

    async dispose() {
      if (disposed) return;
      disposed = true;
      await context.dispose();
      await model.dispose();
    },
  };
  return peer;
}
