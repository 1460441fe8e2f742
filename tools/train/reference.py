#!/usr/bin/env python3
"""Reference outputs, metrics and samples from the trained PyTorch model (float32, eval
mode, exactly the inference math: full causal recompute, no dropout, no KV-cache tricks).

  /usr/bin/python3 tools/train/reference.py [--ckpt tools/train/work/final.pt] [--out tools/train/out]

Writes out/reference/{index.json, logits.f16.bin, last_logits.f32.bin}, out/metrics.json,
out/activation_stats.json, out/samples.txt.
"""
import argparse, json, math, os, sys
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export import load_model

# Held-out prompts: (source document in the held-out split, character offset, n chars).
# Taken from documents never seen in training (see work/docs.jsonl / prepare_data.py).
HELDOUT_PROMPTS = [
    ('moby-dick', 'chapter_8.txt', 0, 60),
    ('moby-dick', 'chapter_8.txt', 900, 220),
    ('moby-dick', 'chapter_33.txt', 1000, 160),
    ('moby-dick', 'chapter_58.txt', 500, 100),
    ('moby-dick', 'chapter_133.txt', 200, 240),
    ('sotu', None, 0, 40),       # None: the first held-out SOTU document
    ('sotu', -1, 2000, 200),     # -1: the last (most recent) held-out SOTU document
    ('sotu', 3, 5000, 120),
    ('sotu', 6, 300, 260),
]
EXTRA_PROMPTS = [   # not from the corpus: exercise byte fallback, digits and newlines
    'Café naïve façade — “quoted” 1,234.5 ½ 東京\nThe whale',
    'The',
]
N_GREEDY = 64
PPL_TOKENS = 20480


def heldout_docs(pkg):
    sys.path.insert(0, HERE)
    from prepare_data import load_docs
    return [d for d in load_docs(pkg) if d['split'] == 'heldout']


def pick_prompts(docs):
    moby = {d['name']: d for d in docs if d['corpus'] == 'moby-dick'}
    sotu = [d for d in docs if d['corpus'] == 'sotu']
    out = []
    for corpus, which, off, n in HELDOUT_PROMPTS:
        if corpus == 'moby-dick':
            d = moby[which]
        else:
            d = sotu[0 if which is None else which]
        t = d['text'][off:off + n]
        if off > 0:   # start at a word boundary
            t = t[t.index(' ') + 1:]
        out.append({'source': f"{d['corpus']}/{d['name']}@{off}", 'text': t})
    for t in EXTRA_PROMPTS:
        out.append({'source': 'synthetic', 'text': t})
    return out


@torch.no_grad()
def forward(model, ids, stats=None):
    return model(torch.tensor([ids], dtype=torch.long), stats)[0]


@torch.no_grad()
def greedy(model, ids, n):
    ids = list(ids)
    out = []
    for _ in range(n):
        logits = forward(model, ids[-model.cfg.ctx:])
        t = int(torch.argmax(logits[-1]).item())   # ties -> lowest id
        out.append(t); ids.append(t)
    return out


@torch.no_grad()
def sample(model, ids, n, temp, top_k, gen):
    ids = list(ids)
    for _ in range(n):
        logits = forward(model, ids[-model.cfg.ctx:])[-1] / temp
        v, ix = torch.topk(logits, top_k)
        p = F.softmax(v, -1)
        ids.append(int(ix[torch.multinomial(p, 1, generator=gen)].item()))
    return ids


@torch.no_grad()
def heldout_metrics(model, toks):
    cfg = model.cfg
    toks = toks.astype(np.int64)
    nll, n = 0.0, 0
    L = cfg.n_layer
    zero_g = [0] * L; zero_a = [0] * L; cnt = 0
    freq = [torch.zeros(cfg.n_ff, dtype=torch.float64) for _ in range(L)]
    per_tok_active = [[] for _ in range(L)]
    for s in range(0, len(toks) - 1, cfg.ctx):
        w = toks[s: s + cfg.ctx + 1]
        stats = []
        logits = forward(model, w[:-1].tolist(), stats)
        tgt = torch.from_numpy(w[1:])
        nll += F.cross_entropy(logits, tgt, reduction='sum').item()
        n += len(tgt)
        cnt += logits.shape[0]
        for i, (g, a) in enumerate(stats):
            g, a = g[0], a[0]
            zero_g[i] += int((g == 0).sum()); zero_a[i] += int((a == 0).sum())
            freq[i] += (g > 0).double().sum(0)
            per_tok_active[i].append((g > 0).sum(1))
    res = {'heldout_ppl': math.exp(nll / n), 'heldout_nll': nll / n, 'n_predicted': n,
           'ppl_protocol': f'first {len(toks)} tokens of work/heldout.bin (held-out documents in docs.jsonl order, '
                           f'each <s> text </s>), '
                           f'non-overlapping windows of {cfg.ctx} inputs predicting the next token '
                           f'(window k: inputs t[{cfg.ctx}k : {cfg.ctx}k+{cfg.ctx}], targets shifted by 1), '
                           f'float32, every token from 1 to N-1 predicted once',
           'layers': []}
    stats_out = {'n_tokens': cnt, 'layers': []}
    for i in range(L):
        f = (freq[i] / cnt)
        act = torch.cat(per_tok_active[i]).double()
        srt = torch.sort(f, descending=True).values
        cum = torch.cumsum(srt, 0) / srt.sum()
        res['layers'].append({
            'layer': i,
            'sparsity_relu_gate_zero': zero_g[i] / (cnt * cfg.n_ff),
            'sparsity_activation_zero': zero_a[i] / (cnt * cfg.n_ff),
            'active_neurons_per_token_mean': float(act.mean()),
            'active_neurons_per_token_p50': float(act.median()),
            'active_neurons_per_token_max': float(act.max()),
            'never_active_neurons': int((f == 0).sum()),
            'hot_neurons_for_80pct_of_activations': int((cum < 0.8).sum()) + 1,
        })
        stats_out['layers'].append({'layer': i, 'activation_frequency': [round(x, 6) for x in f.tolist()]})
    res['sparsity_mean'] = sum(l['sparsity_relu_gate_zero'] for l in res['layers']) / L
    return res, stats_out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--ckpt', default=os.path.join(HERE, 'work', 'final.pt'))
    ap.add_argument('--out', default=os.path.join(HERE, 'out'))
    ap.add_argument('--work', default=os.path.join(HERE, 'work'))
    ap.add_argument('--pkg', default='/tmp/ds/package')
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, ck = load_model(args.ckpt)
    cfg = model.cfg
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.out, 'tokenizer.model'))
    ref_dir = os.path.join(args.out, 'reference')
    os.makedirs(ref_dir, exist_ok=True)

    # 1. per-position logits for the prompts
    prompts = pick_prompts(heldout_docs(args.pkg))
    f16 = open(os.path.join(ref_dir, 'logits.f16.bin'), 'wb')
    f32 = open(os.path.join(ref_dir, 'last_logits.f32.bin'), 'wb')
    off16 = off32 = 0
    entries = []
    for k, p in enumerate(prompts):
        ids = [sp.bos_id()] + sp.encode(p['text'])
        assert len(ids) <= cfg.ctx
        logits = forward(model, ids).float().numpy()
        b = logits.astype('<f2').tobytes(); f16.write(b)
        b32 = logits[-1].astype('<f4').tobytes(); f32.write(b32)
        e = {'id': k, 'source': p['source'], 'text': p['text'], 'tokens': ids,
             'pieces': [sp.id_to_piece(i) for i in ids],
             'logits_f16': {'offset': off16, 'shape': list(logits.shape)},
             'last_logits_f32': {'offset': off32, 'shape': [logits.shape[1]]},
             'argmax': [int(x) for x in logits.argmax(-1)]}
        off16 += len(b); off32 += len(b32)
        entries.append(e)
    f16.close(); f32.close()

    # 2. greedy continuations
    greedy_out = []
    for e in entries[:5] + entries[-2:]:
        cont = greedy(model, e['tokens'], N_GREEDY)
        greedy_out.append({'prompt_id': e['id'], 'prompt_tokens': e['tokens'], 'continuation': cont,
                           'text': sp.decode(e['tokens'][1:] + cont)})
    index = {
        'model_weights_sha256': json.load(open(os.path.join(args.out, 'model.json')))['weights_sha256']
        if os.path.exists(os.path.join(args.out, 'model.json')) else None,
        'description': 'PyTorch float32 reference. tokens = [<s>] + sentencepiece encode(text). '
                       'logits.f16.bin: for each prompt, float16 little-endian row-major '
                       '[n_tokens, n_vocab] next-token logits at every position, at byte offset '
                       'logits_f16.offset. last_logits.f32.bin: float32 logits of the last position. '
                       'greedy: argmax decoding (ties -> lowest id), full recompute each step, '
                       f'{N_GREEDY} new tokens, no stop at </s>.',
        'n_vocab': cfg.n_vocab,
        'prompts': entries,
        'greedy': greedy_out,
    }
    with open(os.path.join(ref_dir, 'index.json'), 'w', encoding='utf-8') as f:
        json.dump(index, f, ensure_ascii=False, indent=1)

    # 3. held-out perplexity + sparsity
    heldout = np.fromfile(os.path.join(args.work, 'heldout.bin'), dtype=np.uint16)
    res20, _ = heldout_metrics(model, heldout[:PPL_TOKENS])
    res, act_stats = heldout_metrics(model, heldout)
    res = {'heldout_ppl': res20['heldout_ppl'], 'heldout_nll': res20['heldout_nll'],
           'n_predicted': res20['n_predicted'], 'ppl_protocol': res20['ppl_protocol'],
           'heldout_all': {k: res[k] for k in ('heldout_ppl', 'heldout_nll', 'n_predicted', 'ppl_protocol')},
           'sparsity_mean': res['sparsity_mean'], 'layers': res['layers'],
           'layers_first_20k': res20['layers'],
           'note': 'layers / sparsity_mean are measured on ALL held-out tokens (heldout_all windows); '
                   'layers_first_20k on the heldout_ppl windows'}
    tr_args = ck.get('args', {})
    metrics = {
        **res,
        'config': cfg.to_dict(),
        'n_params': int(sum(p.numel() for p in model.parameters())),
        'training': {'steps': ck.get('step'), 'tokens_seen': ck.get('tokens_seen'),
                     'seconds': round(ck.get('elapsed', 0.0), 1), 'seed': tr_args.get('seed'),
                     'train_tokens_in_corpus': int(os.path.getsize(os.path.join(args.work, 'train.bin')) // 2),
                     'heldout_tokens_in_corpus': int(len(heldout)),
                     'final_l1_multipliers': ck.get('mult')},
        'sparsity_definition': 'fraction of (token, neuron) pairs with relu(gate(x)) == 0 exactly, '
                               'over the perplexity windows',
    }
    with open(os.path.join(args.out, 'metrics.json'), 'w') as f:
        json.dump(metrics, f, indent=1)
    with open(os.path.join(args.out, 'activation_stats.json'), 'w') as f:
        json.dump({'description': 'per-layer, per-neuron fraction of held-out tokens with relu(gate) > 0 '
                                  '(same windows as metrics.json)', **act_stats}, f)

    # 4. samples
    gen = torch.Generator().manual_seed(1234)
    lines = []
    for pr in ['Call me', 'The whale', 'Fellow-Citizens of the Senate and House of Representatives:',
               'The state of our Union is', 'It was a dark night, and the sea']:
        ids = [sp.bos_id()] + sp.encode(pr)
        g = greedy(model, ids, 64)
        s = sample(model, ids, 80, 0.8, 40, gen)
        lines += [f'### prompt: {pr!r}', '[greedy, 64 tokens]', sp.decode(ids[1:] + g),
                  '[temperature 0.8, top-k 40, torch seed 1234, 80 tokens]', sp.decode(s[1:]), '']
    with open(os.path.join(args.out, 'samples.txt'), 'w', encoding='utf-8') as f:
        f.write('\n'.join(lines))
    print(json.dumps({'heldout_ppl': round(res['heldout_ppl'], 3),
                      'heldout_ppl_all': round(res['heldout_all']['heldout_ppl'], 3), 'sparsity_mean': round(res['sparsity_mean'], 4),
                      'per_layer': [round(l['sparsity_relu_gate_zero'], 4) for l in res['layers']]}))


if __name__ == '__main__':
    main()
