// Dense FFN over neuron bundles laid out as in a pack (gate row | up row + down column, one
// bundle per neuron, `bundleBytes` apart): every neuron of a range is computed, in pack order.
// Used where the FFN is read whole — the accelerator-role prefill streams a layer's bundles
// through a staging buffer, the `mmap` mode reads them from a mapping of the pack file.
//
// Per token t, for neurons k of the range (ascending):
//   g[k] = W_gate[k] · xb_t ;  u[k] = W_up[k] · xb_t ;  h[k] = act(g[k]) · u[k]
//   o_t += Σ_k h[k] · W_down[:, k]
// The same kernels as the sparse path (matvecRows/axpyRows with a row stride), so a neuron that
// does not fire adds an exact zero: the result equals the oracle sparse FFN's bit for bit.
import { native } from "../../native.js";
import type { RunState } from "../../model/forward.js";
import type { Pack } from "../pack/format.js";

export interface BundleLayout {
  kind: number; // GateKind
  gateType: number;
  upType: number;
  downType: number;
  dim: number; // n_embd
  nFF: number;
  bundleBytes: number;
  gateBlock: number; // the up row starts here within a bundle
  upBytes: number; // the down column follows the up row
}

/** The bundle layout of a pack; `kind` is the FFN's GateKind. */
export function bundleLayoutOf(pack: Pack, kind: number): BundleLayout {
  return {
    kind,
    gateType: pack.gateType,
    upType: pack.upType,
    downType: pack.downType,
    dim: pack.config.nEmbd,
    nFF: pack.config.nFF,
    bundleBytes: pack.bundleBytes,
    gateBlock: pack.gateBlock,
    upBytes: pack.upBytes,
  };
}

/** Scratch for denseBundles: iota (nFF) int32, then g, u, h (nFF each) f32. */
export interface BundleScratch {
  buf: number;
  iota: number;
  g: number;
  u: number;
  h: number;
}

export function bundleScratchBytes(nFF: number): number {
  return 4 * nFF * 4;
}

export function createBundleScratch(nFF: number, buf = native().alloc(bundleScratchBytes(nFF)), at = 0): BundleScratch {
  const n = native();
  const s = { buf, iota: at, g: at + nFF * 4, u: at + 2 * nFF * 4, h: at + 3 * nFF * 4 };
  const iota = n.viewI32(buf, s.iota, nFF);
  for (let i = 0; i < nFF; i++) iota[i] = i;
  return s;
}

/** o_t += FFN over `count` bundles at (src, srcOff) for tokens 0..nTok-1 of rs (xb in, o accumulated). */
export function denseBundles(L: BundleLayout, src: number, srcOff: number, count: number, rs: RunState, nTok: number, s: BundleScratch): void {
  const n = native();
  const row = L.dim * 4;
  const B = L.bundleBytes;
  for (let t = 0; t < nTok; t++) {
    const xb = rs.xb + t * row;
    n.matvecRows(L.gateType, src, srcOff, count, L.dim, s.buf, s.iota, count, rs.buf, xb, s.buf, s.g, B);
    n.matvecRows(L.upType, src, srcOff + L.gateBlock, count, L.dim, s.buf, s.iota, count, rs.buf, xb, s.buf, s.u, B);
    n.gatedAct(L.kind, s.buf, s.g, s.buf, s.u, s.buf, s.h, count);
    n.axpyRows(L.downType, src, srcOff + L.gateBlock + L.upBytes, count, L.dim, s.buf, s.iota, count, s.buf, s.h, rs.buf, rs.o + t * row, B);
  }
}
