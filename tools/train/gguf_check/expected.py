#!/usr/bin/env python3
"""Expected logits for the zero-ffn_down GGUF (numpy float64 forward of verify_export.py with
ffn_down zeroed), for the reference prompts. Writes EXPECTED.json next to the GGUF.

  /usr/bin/python3 expected.py OUT_DIR EXPECTED.json
"""
import json, os, sys
import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from verify_export import load, forward

out_dir, path = sys.argv[1], sys.argv[2]
if '--neox-rope' in sys.argv:   # counter-check: the WRONG (rotate-half) convention must not match
    import verify_export
    def rope_neox(x, base):
        T, H, D = x.shape
        theta = base ** (-np.arange(0, D, 2) / D)
        ang = np.arange(T)[:, None] * theta[None, :]
        c, s_ = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., :D // 2], x[..., D // 2:]
        return np.concatenate([x0 * c - x1 * s_, x0 * s_ + x1 * c], -1)
    verify_export.rope = rope_neox
meta, W = load(out_dir)
for k in W:
    if k.endswith('ffn_down.weight'):
        W[k] = np.zeros_like(W[k])
ref = json.load(open(os.path.join(out_dir, 'reference', 'index.json')))
res = []
for e in ref['prompts']:
    y = forward(meta, W, e['tokens'])
    res.append({'text': e['text'], 'tokens': e['tokens'], 'logits': np.round(y, 5).tolist()})
json.dump({'prompts': res}, open(path, 'w'))
print('wrote', path)
