#!/usr/bin/env python3
"""Export a trained checkpoint for the GGUF exporter.

  /usr/bin/python3 tools/train/export.py [--ckpt tools/train/work/final.pt] [--out tools/train/out]

Writes:
  out/weights.bin      all tensors, float32 little-endian, C-contiguous in PyTorch
                       order [out, in] (GGUF ne = reversed shape), each 32-byte aligned
  out/model.json       config + tensor index (gguf name, shape, gguf_ne, dtype, offset, nbytes)
  out/tokenizer.json   pieces / scores / token types (GGUF tokenizer.ggml.*) + special ids
  (out/tokenizer.model is written by prepare_data.py)
"""
import argparse, hashlib, json, os, struct, sys
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from model import Config, Model

ALIGN = 32


def load_model(ckpt_path):
    ck = torch.load(ckpt_path, map_location='cpu')
    cfg = Config(**ck['config'])
    model = Model(cfg)
    model.load_state_dict(ck['model'])
    model.eval()
    return model, ck


# --- minimal protobuf reader for sentencepiece ModelProto (no protobuf dependency) ---
def _varint(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1
        r |= (c & 0x7f) << s; s += 7
        if c < 0x80:
            return r, i


def _fields(b):
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        fn, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v = b[i:i + 8]; i += 8
        elif wt == 2:
            n, i = _varint(b, i); v = b[i:i + n]; i += n
        elif wt == 5:
            v = b[i:i + 4]; i += 4
        else:
            raise ValueError('bad wire type')
        yield fn, wt, v


def read_spm_pieces(model_file):
    """Returns [(piece, score, type)] from the ModelProto (field 1 = repeated SentencePiece)."""
    data = open(model_file, 'rb').read()
    out = []
    for fn, wt, v in _fields(data):
        if fn == 1 and wt == 2:
            piece, score, typ = None, 0.0, 1   # proto defaults: score 0, type NORMAL
            for f2, w2, v2 in _fields(v):
                if f2 == 1:
                    piece = v2.decode('utf-8')
                elif f2 == 2:
                    score = struct.unpack('<f', v2)[0]
                elif f2 == 3:
                    typ = v2
            out.append((piece, score, typ))
    return out


def export_tokenizer(model_file, out_path):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model_file)
    pieces = read_spm_pieces(model_file)
    assert len(pieces) == sp.get_piece_size()
    for i, (p, s, t) in enumerate(pieces):   # cross-check against the sentencepiece library
        assert p == sp.id_to_piece(i) and abs(s - sp.get_score(i)) < 1e-6, i
        exp = 2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else \
            5 if sp.is_unused(i) else None
        assert exp is None and t in (1, 4) or t == exp, (i, p, t, exp)
    n_byte = sum(1 for _, _, t in pieces if t == 6)
    assert n_byte == 256, n_byte
    tok = {
        'model': 'llama',   # GGUF tokenizer.ggml.model
        'type': 'sentencepiece-bpe',
        'normalization': {'normalization_rule_name': 'identity', 'add_dummy_prefix': True,
                          'remove_extra_whitespaces': False, 'split_digits': True,
                          'byte_fallback': True, 'escape_whitespaces': True},
        'bos_id': sp.bos_id(), 'eos_id': sp.eos_id(), 'unk_id': sp.unk_id(), 'pad_id': sp.pad_id(),
        'add_bos': True, 'add_eos': False,
        'token_type_legend': {'1': 'normal', '2': 'unknown', '3': 'control', '4': 'user_defined',
                              '5': 'unused', '6': 'byte'},
        'tokens': [p for p, _, _ in pieces],
        'scores': [float(s) for _, s, _ in pieces],
        'token_type': [int(t) for _, _, t in pieces],
        'sha256_tokenizer_model': hashlib.sha256(open(model_file, 'rb').read()).hexdigest(),
    }
    with open(out_path, 'w', encoding='utf-8') as f:
        json.dump(tok, f, ensure_ascii=False)
    return tok


def export_weights(model, ck, out_dir):
    cfg = model.cfg
    index, off = [], 0
    bin_path = os.path.join(out_dir, 'weights.bin')
    h = hashlib.sha256()
    with open(bin_path, 'wb') as f:
        for name, t in model.gguf_tensors():
            a = t.detach().to(torch.float32).contiguous().numpy().astype('<f4')
            pad = (-off) % ALIGN
            if pad:
                f.write(b'\0' * pad); h.update(b'\0' * pad); off += pad
            b = a.tobytes()
            f.write(b); h.update(b)
            index.append({'name': name, 'dtype': 'f32', 'shape': list(a.shape),
                          'gguf_ne': list(reversed(a.shape)), 'offset': off, 'nbytes': len(b)})
            off += len(b)
    args = ck.get('args', {})
    meta = {
        'format': 'neuronpipe-train-export/1',
        'architecture': 'llama',
        'config': cfg.to_dict(),
        'head_dim': cfg.n_embd // cfg.n_head,
        'rope': {'convention': 'normal (adjacent pairs 2i,2i+1; llama.cpp LLAMA_ROPE_TYPE_NORM)',
                 'freq_base': cfg.rope_base, 'dim': cfg.n_embd // cfg.n_head,
                 'qk_permuted_for_hf': False},
        'ffn': {'activation': cfg.activation,
                'formula': 'down(relu(gate(x)) * up(x))' if cfg.activation == 'reglu'
                else 'down(relu(gate(x)) * relu(up(x)))'},
        'gqa': f'query head j uses kv head j // {cfg.n_head // cfg.n_head_kv}',
        'tied_output': cfg.tied,
        'weights_file': 'weights.bin', 'weights_sha256': h.hexdigest(), 'weights_bytes': off,
        'alignment': ALIGN,
        'layout': 'float32 little-endian, row-major in PyTorch shape order [out, in]; GGUF ne = reversed shape',
        'tensors': index,
        'training': {'steps': ck.get('step'), 'tokens_seen': ck.get('tokens_seen'),
                     'seconds': round(ck.get('elapsed', 0.0), 1), 'seed': args.get('seed'),
                     'args': args},
        'n_params': int(sum(p.numel() for _, p in model.gguf_tensors())),
    }
    with open(os.path.join(out_dir, 'model.json'), 'w') as f:
        json.dump(meta, f, indent=1)
    return meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--ckpt', default=os.path.join(HERE, 'work', 'final.pt'))
    ap.add_argument('--out', default=os.path.join(HERE, 'out'))
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    model, ck = load_model(args.ckpt)
    meta = export_weights(model, ck, args.out)
    tok = export_tokenizer(os.path.join(args.out, 'tokenizer.model'), os.path.join(args.out, 'tokenizer.json'))
    print(f"exported {len(meta['tensors'])} tensors, {meta['n_params']} params, "
          f"{meta['weights_bytes']} bytes; tokenizer {len(tok['tokens'])} pieces")


if __name__ == '__main__':
    main()
