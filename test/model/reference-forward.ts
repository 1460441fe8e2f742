// A straightforward TypeScript forward pass (f64 arithmetic, F32 weights read from the GGUF
// bytes), written from the math alone — the independent reference for the native engine.
import { readFileSync } from "node:fs";
import { readGGUF } from "../../src/gguf/reader.js";
import { type FfnActivation, readConfig } from "../../src/model/config.js";

/** `activation` is passed by the caller, not read through our config code, so a mis-read key cannot hide. */
export function referenceLogits(path: string, tokens: number[], activation: FfnActivation): Float64Array[] {
  const f = readGGUF(path);
  const cfg = readConfig(f);
  const bytes = readFileSync(path);
  const W = (name: string): Float64Array => {
    const t = f.tensorsByName.get(name);
    if (!t) throw new Error(`reference: missing ${name}`);
    if (t.type !== 0) throw new Error(`reference: ${name} must be F32`);
    const out = new Float64Array(t.nbytes / 4);
    for (let i = 0; i < out.length; i++) out[i] = bytes.readFloatLE(t.offset + 4 * i);
    return out;
  };
  const D = cfg.nEmbd;
  const H = cfg.nFF;
  const hd = cfg.headDim;
  const nH = cfg.nHead;
  const nKV = cfg.nHeadKv;
  // y = W x, W rows of `cols`
  const mv = (w: Float64Array, x: Float64Array, rows: number, cols: number) => {
    const y = new Float64Array(rows);
    for (let r = 0; r < rows; r++) {
      let s = 0;
      for (let c = 0; c < cols; c++) s += w[r * cols + c]! * x[c]!;
      y[r] = s;
    }
    return y;
  };
  const rmsnorm = (x: Float64Array, w: Float64Array) => {
    let ss = 0;
    for (const v of x) ss += v * v;
    const k = 1 / Math.sqrt(ss / x.length + cfg.rmsEps);
    return x.map((v, i) => v * k * w[i]!);
  };
  const rope = (v: Float64Array, nHeads: number, pos: number) => {
    for (let h = 0; h < nHeads; h++) {
      for (let i = 0; i < cfg.ropeDim / 2; i++) {
        const theta = pos * Math.pow(cfg.ropeBase, (-2 * i) / cfg.ropeDim);
        const [a, b] = cfg.ropeNeox ? [h * hd + i, h * hd + i + cfg.ropeDim / 2] : [h * hd + 2 * i, h * hd + 2 * i + 1];
        const x0 = v[a]!;
        const x1 = v[b]!;
        v[a] = x0 * Math.cos(theta) - x1 * Math.sin(theta);
        v[b] = x0 * Math.sin(theta) + x1 * Math.cos(theta);
      }
    }
  };
  const act = (g: number, u: number) => {
    switch (activation) {
      case "swiglu":
        return (g / (1 + Math.exp(-g))) * u;
      case "reglu":
        return Math.max(g, 0) * u;
      case "drelu":
        return Math.max(g, 0) * Math.max(u, 0);
    }
  };

  const emb = W("token_embd.weight");
  const out = f.tensorsByName.has("output.weight") ? W("output.weight") : emb;
  const layers = Array.from({ length: cfg.nLayer }, (_, l) => {
    const p = `blk.${l}.`;
    return {
      an: W(`${p}attn_norm.weight`),
      q: W(`${p}attn_q.weight`),
      k: W(`${p}attn_k.weight`),
      v: W(`${p}attn_v.weight`),
      o: W(`${p}attn_output.weight`),
      fn: W(`${p}ffn_norm.weight`),
      g: W(`${p}ffn_gate.weight`),
      u: W(`${p}ffn_up.weight`),
      d: W(`${p}ffn_down.weight`),
      K: [] as Float64Array[],
      V: [] as Float64Array[],
    };
  });
  const outNorm = W("output_norm.weight");
  const result: Float64Array[] = [];
  tokens.forEach((tok, pos) => {
    let x = emb.slice(tok * D, (tok + 1) * D);
    for (const L of layers) {
      const xb = rmsnorm(x, L.an);
      const q = mv(L.q, xb, nH * hd, D);
      const k = mv(L.k, xb, nKV * hd, D);
      const v = mv(L.v, xb, nKV * hd, D);
      rope(q, nH, pos);
      rope(k, nKV, pos);
      L.K.push(k);
      L.V.push(v);
      const att = new Float64Array(nH * hd);
      for (let h = 0; h < nH; h++) {
        const kh = Math.floor(h / (nH / nKV));
        const scores = L.K.map((kk) => {
          let s = 0;
          for (let i = 0; i < hd; i++) s += q[h * hd + i]! * kk[kh * hd + i]!;
          return s / Math.sqrt(hd);
        });
        const m = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - m));
        const z = e.reduce((a, b) => a + b, 0);
        for (let t = 0; t < e.length; t++) {
          for (let i = 0; i < hd; i++) att[h * hd + i]! += (e[t]! / z) * L.V[t]![kh * hd + i]!;
        }
      }
      const o = mv(L.o, att, D, nH * hd);
      x = x.map((xv, i) => xv + o[i]!);
      const xf = rmsnorm(x, L.fn);
      const g = mv(L.g, xf, H, D);
      const u = mv(L.u, xf, H, D);
      const hb = g.map((gv, i) => act(gv, u[i]!));
      const d = mv(L.d, hb, D, H);
      x = x.map((xv, i) => xv + d[i]!);
    }
    result.push(mv(out, rmsnorm(x, outNorm), cfg.nVocab, D));
  });
  return result;
}
