// The peer: llama.cpp through node-llama-cpp, our independent reference for tokenisation,
// logits and speed. CPU only, offline, thread count explicit. Installed separately from the
// main tree: `bash bench/install.sh`.
//
// Two builds of the same llama.cpp release (PEERS below), chosen per call with `peer`:
// - "prebuilt": the CPU binary of @node-llama-cpp/linux-x64. It repacks Q4_0 weights at load
//   into anonymous memory (REPACK in its system info): the fastest in memory, but under a
//   memory cgroup smaller than the model those copies cannot be evicted and it never produces
//   a token. The reference for parity and for in-memory speed.
// - "norepack": built by bench/install.sh from the llama.cpp source that node-llama-cpp ships
//   (a git bundle; offline) with GGML_CPU_REPACK=OFF and GGML_NATIVE=ON. Its weights stay in
//   the page cache (mmap), as llama.cpp's own `--no-repack`: the peer to run under a memory
//   limit. node-llama-cpp finds that build only with the same CMake options and
//   `usePrebuiltBinaries: false`.
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

/**
 * The builds of llama.cpp the bench can load. `cmakeOptions` are what install.sh builds with
 * (passed to `node-llama-cpp source download` as NODE_LLAMA_CPP_CMAKE_OPTION_<NAME> variables)
 * and what getLlama needs to find that build again: node-llama-cpp names a local build's folder
 * by a hash of its CMake options.
 */
export const PEERS = Object.freeze({
  prebuilt: Object.freeze({ usePrebuiltBinaries: true, cmakeOptions: Object.freeze({}), buildType: "prebuilt", repack: true }),
  norepack: Object.freeze({
    usePrebuiltBinaries: false,
    cmakeOptions: Object.freeze({ GGML_CPU_REPACK: "OFF", GGML_NATIVE: "ON" }),
    buildType: "localBuild",
    repack: false,
  }),
});
export const DEFAULT_PEER = "prebuilt";

const cmakeEnvPrefix = "NODE_LLAMA_CPP_CMAKE_OPTION_";

/** Resolve a peer name ("prebuilt" | "norepack"; default: $NEURONPIPE_PEER or "prebuilt"). */
export function peerKind(kind) {
  const k = kind ?? process.env.NEURONPIPE_PEER ?? DEFAULT_PEER;
  if (!Object.hasOwn(PEERS, k)) throw new RangeError(`unknown llama.cpp peer "${k}": use ${Object.keys(PEERS).join(" or ")}`);
  return k;
}

/** The environment variables that make `node-llama-cpp source download` build this peer. */
export function peerBuildEnv(kind) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith(cmakeEnvPrefix)) env[k] = v;
  for (const [k, v] of Object.entries(PEERS[peerKind(kind)].cmakeOptions)) env[cmakeEnvPrefix + k] = v;
  return env;
}

const llamaPromises = new Map();
async function getPeerLlama(kind) {
  kind = peerKind(kind);
  let llamaPromise = llamaPromises.get(kind);
  if (!llamaPromise) {
    llamaPromise = (async () => {
      const nlc = await importNodeLlamaCpp();
      const spec = PEERS[kind];
      // node-llama-cpp adds NODE_LLAMA_CPP_CMAKE_OPTION_* variables to the options (and so to
      // the build folder's hash): stray ones would make it look for another build.
      const stray = Object.keys(process.env).filter((k) => k.startsWith(cmakeEnvPrefix) && process.env[k] !== spec.cmakeOptions[k.slice(cmakeEnvPrefix.length)]);
      if (stray.length > 0 && !spec.usePrebuiltBinaries) throw new Error(`llama.cpp peer "${kind}": unset ${stray.join(", ")} (they change which build node-llama-cpp looks for)`);
      const llama = await nlc.getLlama({
        gpu: false,
        build: "never",
        skipDownload: true,
        usePrebuiltBinaries: spec.usePrebuiltBinaries,
        cmakeOptions: { ...spec.cmakeOptions },
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
      // never fall back silently to the other build
      if (llama.buildType !== spec.buildType) throw new Error(`llama.cpp peer "${kind}": node-llama-cpp loaded a ${llama.buildType} binary, expected ${spec.buildType}`);
      return llama;
    })();
    llamaPromises.set(kind, llamaPromise);
    llamaPromise.catch(() => llamaPromises.delete(kind));
  }
  return llamaPromise;
}

/** Version and build facts of a peer ("prebuilt" by default), for reports. */
export async function peerInfo(kind) {
  kind = peerKind(kind);
  const nlc = await importNodeLlamaCpp();
  const llama = await getPeerLlama(kind);
  const systemInfo = llama.systemInfo;
  return {
    peer: kind,
    nodeLlamaCpp: (await nlc.getModuleVersion?.()) ?? "3.22.1",
    llamaCppRelease: llama.llamaCppRelease?.release,
    buildType: llama.buildType,
    gpu: llama.gpu,
    cmakeOptions: { ...PEERS[kind].cmakeOptions },
    repack: /\bREPACK = 1\b/.test(systemInfo),
    systemInfo,
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
  const kind = peerKind(options.peer);
  const llama = await getPeerLlama(kind);
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
    peer: kind,
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
