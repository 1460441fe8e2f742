// The dense forward pass of a llama-family model, top to bottom, in the spirit of llama2.c's
// run.c: plain structs for the weights (weights.ts) and the run state (below), every buffer
// commented with its shape. The math runs in native kernels; this file only says what is
// computed, in which order, on which buffers. Activations live in one native scratch buffer.
import { GGMLType, GateKind, native, type NativeAddon } from "../native.js";
import type { ModelConfig } from "./config.js";
import type { Tensor, Weights } from "./weights.js";

/** Scratch activations for a batch of up to `maxBatch` tokens, all f32 in one native buffer. */
export interface RunState {
  buf: number; // native buffer holding all of the below
  maxBatch: number;
  x: number; // (maxBatch, dim) residual stream
  xb: number; // (maxBatch, dim) normed input of a block
  q: number; // (maxBatch, nHead*headDim)
  k: number; // (maxBatch, nHeadKv*headDim)
  v: number; // (maxBatch, nHeadKv*headDim)
  att: number; // (maxBatch, nHead*headDim) attention output
  o: number; // (maxBatch, dim) projection of a block's output
  gate: number; // (maxBatch, hidden_dim)
  up: number; // (maxBatch, hidden_dim)
  hb: number; // (maxBatch, hidden_dim) gated activation
  logits: number; // (maxBatch, vocab)
  tokens: number; // (maxBatch) int32 ids of the batch
  bytes: number;
}

/** Key/value cache: per layer, (ctx, nHeadKv*headDim) in F16 (llama.cpp's default) or F32. */
export interface KVCache {
  buf: number;
  ctx: number;
  type: number; // GGMLType.F16 | GGMLType.F32
  rowLen: number; // nHeadKv*headDim
  layerBytes: number; // bytes of one layer's K (same for V)
  bytes: number;
}

function runStateLayout(cfg: ModelConfig, maxBatch: number, denseFfn: boolean) {
  const { nEmbd: dim, nHead, nHeadKv, headDim, nVocab } = cfg;
  const hidden = denseFfn ? cfg.nFF : 0; // a sparse FFN keeps its own per-token scratch
  const sizes = {
    x: maxBatch * dim,
    xb: maxBatch * dim,
    q: maxBatch * nHead * headDim,
    k: maxBatch * nHeadKv * headDim,
    v: maxBatch * nHeadKv * headDim,
    att: maxBatch * nHead * headDim,
    o: maxBatch * dim,
    gate: maxBatch * hidden,
    up: maxBatch * hidden,
    hb: maxBatch * hidden,
    logits: maxBatch * nVocab,
    tokens: maxBatch,
  };
  let off = 0;
  const offs: Record<string, number> = {};
  for (const [k, n] of Object.entries(sizes)) {
    offs[k] = off;
    off += Math.ceil((n * 4) / 64) * 64; // 64-byte aligned slices
  }
  return { offs, bytes: off };
}

/** Bytes createRunState allocates (memory plans). */
export function runStateBytes(cfg: ModelConfig, maxBatch: number, denseFfn = true): number {
  return runStateLayout(cfg, maxBatch, denseFfn).bytes;
}

export function createRunState(cfg: ModelConfig, maxBatch: number, denseFfn = true): RunState {
  const { offs, bytes: off } = runStateLayout(cfg, maxBatch, denseFfn);
  const buf = native().alloc(off);
  return { buf, maxBatch, bytes: off, ...(offs as Omit<RunState, "buf" | "maxBatch" | "bytes">) };
}

/** Bytes createKVCache allocates (memory plans). */
export function kvCacheBytes(cfg: ModelConfig, ctx: number, type: number = GGMLType.F16): number {
  const elt = type === GGMLType.F16 ? 2 : 4;
  return Math.ceil((ctx * cfg.nHeadKv * cfg.headDim * elt) / 4096) * 4096 * 2 * cfg.nLayer;
}

/** Bytes of the KV cache touched at a time when it is created. */
const TOUCH_CHUNK = 64 * 2 ** 20;

/**
 * A KV cache of `ctx` positions, every page of it touched now: left to the decode, each layer's
 * K and V pages were first touched by the token that reached them, and on this VM the token at
 * context position 64 took 350–430 ms instead of ~90 on the 7B (docs/benchmarks.md,
 * "2026-11-29 (evening)"). The memory plans count the whole cache already.
 */
export function createKVCache(cfg: ModelConfig, ctx: number, type: number = GGMLType.F16): KVCache {
  const n = native();
  const rowLen = cfg.nHeadKv * cfg.headDim;
  const bytes = kvCacheBytes(cfg, ctx, type);
  const layerBytes = bytes / (2 * cfg.nLayer);
  const buf = n.alloc(bytes);
  for (let at = 0; at < bytes; at += TOUCH_CHUNK) n.viewF32(buf, at, Math.min(TOUCH_CHUNK, bytes - at) / 4).fill(0);
  return { buf, ctx, type, rowLen, layerBytes, bytes };
}

const gateKind = { swiglu: GateKind.SwiGLU, reglu: GateKind.ReGLU, drelu: GateKind.dReLU } as const;

/** Y = W · X for nTok rows of X (matvec for one token: the decode path). */
function linear(n: NativeAddon, w: Tensor, rs: RunState, x: number, y: number, nTok: number) {
  if (nTok === 1) n.matvec(w.type, w.buf, w.off, w.rows, w.cols, rs.buf, x, rs.buf, y);
  else n.matmul(w.type, w.buf, w.off, w.rows, w.cols, rs.buf, x, nTok, rs.buf, y);
}

/** An FFN computed outside the dense path (a sparse FFN, bundles of a pack): reads rs.x and rs.xb, writes rs.o for nTok tokens. */
export type FfnBlock = (layer: number, rs: RunState, nTok: number) => void;

export interface ForwardOptions {
  /** Compute logits for every token of the batch (teacher forcing), not only the last. */
  allLogits?: boolean;
  /** Called after each layer with the layer index (progress, cancellation checks). */
  onLayer?: (layer: number) => void;
  /** Called with the gated FFN activations of a layer: rs.hb holds (nTok, hidden_dim) f32 (profiling). */
  onFfnActivations?: (layer: number, rs: RunState, nTok: number) => void;
  /**
   * A neuron pack's inline decoder: how a batch of tokens takes the FFN — "dense" (every neuron,
   * streamed from the pack: a prompt; the default) or "sparse" (each token as a decode step
   * takes it: predictor and neuron cache; what perplexity of the sparse decoder measures).
   */
  batchFfn?: "dense" | "sparse";
  /** Compute each layer's FFN with this block instead of the dense matrices (decoders over a pack). */
  ffn?: FfnBlock;
}

/**
 * Run `tokens` (at positions pos0..pos0+n-1) through the model, appending to the KV cache.
 * Returns the offset of the logits in the run state: (n, vocab) with allLogits, else (1, vocab) of the last token.
 */
export function forward(
  cfg: ModelConfig,
  w: Weights,
  rs: RunState,
  kv: KVCache,
  tokens: ArrayLike<number>,
  pos0: number,
  opts: ForwardOptions = {},
): number {
  const nTok = tokens.length;
  checkBatch(rs, kv, nTok, pos0);
  embedTokens(cfg, w, rs, tokens);
  for (let l = 0; l < cfg.nLayer; l++) {
    attentionBlock(cfg, w, rs, kv, l, pos0, nTok);
    ffnInput(cfg, w, rs, l, nTok);
    if (opts.ffn) {
      // a decoder's own FFN (src/decode/): o = FFN(xb), e.g. only the neurons predicted to fire
      opts.ffn(l, rs, nTok);
    } else {
      denseFfn(cfg, w, rs, l, nTok, opts.onFfnActivations);
    }
    addFfnOutput(cfg, rs, nTok);
    opts.onLayer?.(l);
  }
  return outputLogits(cfg, w, rs, nTok, opts.allLogits ?? false);
}

// The steps of forward(), also run one at a time by the actor pipeline's compute worker
// (workers/compute-worker.ts), which puts the FFN of each layer between ffnInput and addFfnOutput.

export function checkBatch(rs: RunState, kv: KVCache, nTok: number, pos0: number): void {
  if (nTok < 1 || nTok > rs.maxBatch) throw new RangeError(`forward: batch of ${nTok} tokens (1..${rs.maxBatch})`);
  if (pos0 + nTok > kv.ctx) throw new RangeError(`forward: context full (${pos0 + nTok} > ${kv.ctx} positions)`);
}

/** token embeddings -> x (nTok, dim) */
export function embedTokens(cfg: ModelConfig, w: Weights, rs: RunState, tokens: ArrayLike<number>): void {
  const n = native();
  const dim = cfg.nEmbd;
  for (let t = 0; t < tokens.length; t++) {
    const id = tokens[t]!;
    if (!(id >= 0 && id < cfg.nVocab)) throw new RangeError(`forward: token id ${id} outside the vocabulary (0..${cfg.nVocab - 1})`);
    n.dequantizeRow(w.tokenEmbd.type, w.tokenEmbd.buf, w.tokenEmbd.off, dim, id, rs.buf, rs.x + t * dim * 4);
  }
}

/** attention of layer l: xb = rmsnorm(x); q,k,v = W·xb; rope(q,k); cache k,v; att = softmax(q·K/√d)·V; x += Wo·att */
export function attentionBlock(cfg: ModelConfig, w: Weights, rs: RunState, kv: KVCache, l: number, pos0: number, nTok: number): void {
  const n = native();
  const { nEmbd: dim, nHead, nHeadKv, headDim } = cfg;
  const L = w.layers[l]!;
  const kOff = 2 * l * kv.layerBytes; // this layer's K cache
  const vOff = kOff + kv.layerBytes; // and V cache
  n.rmsnorm(rs.buf, rs.x, L.attnNorm.buf, L.attnNorm.off, dim, nTok, cfg.rmsEps, rs.buf, rs.xb);
  linear(n, L.wq, rs, rs.xb, rs.q, nTok);
  linear(n, L.wk, rs, rs.xb, rs.k, nTok);
  linear(n, L.wv, rs, rs.xb, rs.v, nTok);
  n.rope(rs.buf, rs.q, nTok, nHead, headDim, cfg.ropeDim, pos0, cfg.ropeBase, cfg.ropeNeox);
  n.rope(rs.buf, rs.k, nTok, nHeadKv, headDim, cfg.ropeDim, pos0, cfg.ropeBase, cfg.ropeNeox);
  n.kvStore(kv.type, kv.buf, kOff, kv.ctx, kv.rowLen, pos0, nTok, rs.buf, rs.k);
  n.kvStore(kv.type, kv.buf, vOff, kv.ctx, kv.rowLen, pos0, nTok, rs.buf, rs.v);
  n.attention(kv.type, rs.buf, rs.q, kv.buf, kOff, kv.buf, vOff, kv.ctx, nHead, nHeadKv, headDim, pos0, nTok, rs.buf, rs.att);
  linear(n, L.wo, rs, rs.att, rs.o, nTok);
  n.add(rs.buf, rs.x, rs.buf, rs.o, rs.buf, rs.x, nTok * dim);
}

/** the FFN's input: xb = rmsnorm(x) with ffn_norm of layer l */
export function ffnInput(cfg: ModelConfig, w: Weights, rs: RunState, l: number, nTok: number): void {
  const L = w.layers[l]!;
  native().rmsnorm(rs.buf, rs.x, L.ffnNorm.buf, L.ffnNorm.off, cfg.nEmbd, nTok, cfg.rmsEps, rs.buf, rs.xb);
}

/** dense feed-forward: hb = act(W_gate·xb) * (W_up·xb); o = W_down·hb */
export function denseFfn(cfg: ModelConfig, w: Weights, rs: RunState, l: number, nTok: number, onFfnActivations?: ForwardOptions["onFfnActivations"]): void {
  const n = native();
  const L = w.layers[l]!;
  linear(n, L.ffnGate!, rs, rs.xb, rs.gate, nTok);
  linear(n, L.ffnUp!, rs, rs.xb, rs.up, nTok);
  n.gatedAct(gateKind[cfg.activation], rs.buf, rs.gate, rs.buf, rs.up, rs.buf, rs.hb, nTok * cfg.nFF);
  onFfnActivations?.(l, rs, nTok);
  linear(n, L.ffnDown!, rs, rs.hb, rs.o, nTok);
}

/** x += o (the FFN's output) */
export function addFfnOutput(cfg: ModelConfig, rs: RunState, nTok: number): void {
  native().add(rs.buf, rs.x, rs.buf, rs.o, rs.buf, rs.x, nTok * cfg.nEmbd);
}

/** final norm and classifier: logits = W_out · rmsnorm(x), for the last token or all of them; returns the logits' offset in rs */
export function outputLogits(cfg: ModelConfig, w: Weights, rs: RunState, nTok: number, allLogits: boolean): number {
  const n = native();
  const dim = cfg.nEmbd;
  const first = allLogits ? 0 : nTok - 1;
  const m = nTok - first;
  n.rmsnorm(rs.buf, rs.x + first * dim * 4, w.outputNorm.buf, w.outputNorm.off, dim, m, cfg.rmsEps, rs.buf, rs.xb);
  linear(n, w.output, rs, rs.xb, rs.logits, m);
  return rs.logits;
}
