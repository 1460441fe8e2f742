// Types for llama-peer.mjs (the llama.cpp reference through node-llama-cpp).

export declare const benchDir: string;

export declare class PeerNotInstalledError extends Error {
  constructor(cause?: unknown);
}

/** Whether bench/node_modules holds node-llama-cpp and its linux-x64 binary. */
export declare function peerInstalled(): boolean;

/** Import node-llama-cpp from bench/node_modules, or throw PeerNotInstalledError. */
export declare function importNodeLlamaCpp(): Promise<any>;

export interface PeerInfo {
  nodeLlamaCpp: string;
  llamaCppRelease?: string;
  buildType?: string;
  gpu: unknown;
  systemInfo: string;
}

export declare function peerInfo(): Promise<PeerInfo>;

export interface PeerOptions {
  /** CPU threads for evaluation (default 2; exactly this many are used). */
  threads?: number;
  /** Context length in tokens (default 512). */
  contextSize?: number;
  /** Tokens per llama_decode batch (default min(512, contextSize)). */
  batchSize?: number;
  /** Map the file (default true, as llama.cpp). */
  useMmap?: boolean;
  /** Flash attention (default false: the plain attention path, closest to a reference; "auto" is llama.cpp's own default). */
  flashAttention?: boolean | "auto";
}

export interface TokenizeOptions {
  /** Prepend the model's BOS token (default false). */
  addBos?: boolean;
  /** Parse special-token text such as "<s>" into special tokens (default false). */
  special?: boolean;
}

export interface PrefillTiming {
  tokens: number;
  seconds: number;
  tokensPerSecond: number;
}

export interface DecodeTiming {
  /** Generated (greedy) token ids. */
  tokens: number[];
  /** Time from the call to the first generated token (prompt prefill + sampling). */
  prefillSeconds: number;
  /** Single-token forward passes timed: tokens.length - 1. */
  decodePasses: number;
  /** Time from the first to the last generated token. */
  seconds: number;
  /** decodePasses / seconds. */
  tokensPerSecond: number;
}

export interface Peer {
  readonly modelPath: string;
  readonly threads: number;
  readonly contextSize: number;
  readonly bosToken: number | undefined;
  readonly eosToken: number | undefined;
  /** Vocabulary size (known after the first teacherForcedLogits call; 0 before). */
  readonly nVocab: number;
  /** node-llama-cpp objects, for anything the wrapper does not cover. */
  readonly llama: any;
  readonly model: any;
  readonly context: any;
  readonly sequence: any;

  /** llama.cpp's tokenisation (llama_tokenize with add_special = false), BOS prepended on request. */
  tokenize(text: string, options?: TokenizeOptions): number[];
  /** llama.cpp's detokenisation (special tokens rendered only with `special`). */
  detokenize(ids: readonly number[], options?: { special?: boolean }): string;
  /**
   * Clear the context, evaluate `ids` in one go and return the raw next-token logits after
   * each position (result[i] predicts ids[i + 1]); each vector has nVocab entries.
   */
  teacherForcedLogits(ids: readonly number[]): Promise<Float32Array[]>;
  /** Clear the context, evaluate the prompt and generate `n` tokens greedily (argmax). */
  greedy(ids: readonly number[], n: number): Promise<number[]>;
  /** Clear the context and time the evaluation of `ids` (no sampling). */
  timePrefill(ids: readonly number[]): Promise<PrefillTiming>;
  /** Clear the context, prefill `ids`, then time greedy generation of `n` tokens. */
  timeDecode(ids: readonly number[], n: number): Promise<DecodeTiming>;
  dispose(): Promise<void>;
}

export declare function openPeer(modelPath: string, options?: PeerOptions): Promise<Peer>;
