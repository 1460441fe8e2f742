#!/usr/bin/env python3
"""Independent check of the export: a plain-numpy llama forward pass that reads only
out/model.json + out/weights.bin (not model.py / the checkpoint) and compares its logits
with the PyTorch reference in out/reference/. This is the math a GGUF runtime must do.

  /usr/bin/python3 tools/train/verify_export.py [--out tools/train/out]
"""
import argparse, json, os, sys
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def load(out):
    meta = json.load(open(os.path.join(out, 'model.json')))
    raw = np.fromfile(os.path.join(out, 'weights.bin'), dtype='<f4')
    W = {}
    for t in meta['tensors']:
        assert t['dtype'] == 'f32' and t['offset'] % 4 == 0
        n = int(np.prod(t['shape']))
        W[t['name']] = raw[t['offset'] // 4: t['offset'] // 4 + n].reshape(t['shape']).astype(np.float64)
    return meta, W


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, base):
    # x: [T, H, D]; llama.cpp "normal" rope: rotate pairs (2i, 2i+1) by pos * base^(-2i/D)
    T, H, D = x.shape
    theta = base ** (-np.arange(0, D, 2) / D)
    ang = np.arange(T)[:, None] * theta[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2] = x0 * c - x1 * s
    y[..., 1::2] = x0 * s + x1 * c
    return y


def forward(meta, W, ids):
    c = meta['config']
    E, H, Hkv, L = c['n_embd'], c['n_head'], c['n_head_kv'], c['n_layer']
    D = E // H
    x = W['token_embd.weight'][ids]                      # [T, E]
    T = len(ids)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(L):
        p = f'blk.{l}.'
        h = rmsnorm(x, W[p + 'attn_norm.weight'], c['rms_eps'])
        q = rope((h @ W[p + 'attn_q.weight'].T).reshape(T, H, D), c['rope_base'])
        k = rope((h @ W[p + 'attn_k.weight'].T).reshape(T, Hkv, D), c['rope_base'])
        v = (h @ W[p + 'attn_v.weight'].T).reshape(T, Hkv, D)
        o = np.empty((T, H, D))
        for j in range(H):
            kj = j // (H // Hkv)
            a = q[:, j, :] @ k[:, kj, :].T / np.sqrt(D) + mask
            a = np.exp(a - a.max(-1, keepdims=True)); a /= a.sum(-1, keepdims=True)
            o[:, j, :] = a @ v[:, kj, :]
        x = x + o.reshape(T, E) @ W[p + 'attn_output.weight'].T
        h = rmsnorm(x, W[p + 'ffn_norm.weight'], c['rms_eps'])
        g = np.maximum(h @ W[p + 'ffn_gate.weight'].T, 0)
        u = h @ W[p + 'ffn_up.weight'].T
        if c['activation'] == 'drelu':
            u = np.maximum(u, 0)
        x = x + (g * u) @ W[p + 'ffn_down.weight'].T
    out_w = W['token_embd.weight'] if c['tied'] else W['output.weight']
    return rmsnorm(x, W['output_norm.weight'], c['rms_eps']) @ out_w.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=os.path.join(HERE, 'out'))
    args = ap.parse_args()
    meta, W = load(args.out)
    ref = json.load(open(os.path.join(args.out, 'reference', 'index.json')))
    l16 = np.fromfile(os.path.join(args.out, 'reference', 'logits.f16.bin'), dtype='<f2')
    l32 = np.fromfile(os.path.join(args.out, 'reference', 'last_logits.f32.bin'), dtype='<f4')
    worst16 = worst32 = 0.0
    argmax_mismatch = 0
    for e in ref['prompts']:
        ids = e['tokens']
        y = forward(meta, W, ids)
        o, shp = e['logits_f16']['offset'] // 2, e['logits_f16']['shape']
        r16 = l16[o: o + shp[0] * shp[1]].reshape(shp).astype(np.float64)
        o32 = e['last_logits_f32']['offset'] // 4
        r32 = l32[o32: o32 + shp[1]].astype(np.float64)
        d16 = np.abs(y - r16).max() / max(1.0, np.abs(r16).max())   # f16 storage: ~1e-3 relative
        d32 = np.abs(y[-1] - r32).max()
        argmax_mismatch += int((y.argmax(-1) != np.array(e['argmax'])).sum())
        worst16, worst32 = max(worst16, d16), max(worst32, d32)
    # greedy continuations (float64 numpy vs float32 torch: ties aside, must agree)
    greedy_ok = 0
    for gr in ref['greedy']:
        ids = list(gr['prompt_tokens'])
        for t in gr['continuation']:
            nxt = int(forward(meta, W, ids)[-1].argmax())
            if nxt != t:
                break
            ids.append(t)
        else:
            greedy_ok += 1
    res = {'max_rel_err_vs_f16_logits': worst16, 'max_abs_err_vs_f32_last_logits': worst32,
           'argmax_mismatches': argmax_mismatch, 'greedy_sequences_identical': f"{greedy_ok}/{len(ref['greedy'])}"}
    print(json.dumps(res))
    ok = worst16 < 5e-3 and worst32 < 1e-3 and greedy_ok == len(ref['greedy'])
    print('OK' if ok else 'MISMATCH')
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
