#!/usr/bin/env python3
"""VERIFICATION ONLY (the project's real GGUF exporter is elsewhere): write out/ as a
minimal GGUF v3 file, arch "llama", all tensors F32, so that llama.cpp can check the
tokenizer and the attention / RoPE / norm math.

  /usr/bin/python3 write_gguf.py OUT_DIR FILE.gguf [--zero-ffn-down]

Stock llama.cpp's "llama" architecture computes SwiGLU, not ReGLU; with --zero-ffn-down the
FFN contributes nothing in either, so llama.cpp's logits must equal ours exactly (up to
float error) and the check isolates embeddings, RMSNorm, RoPE convention, GQA, output.
The key neuronpipe.ffn_activation states the real activation (docs/formats.md).
"""
import json, os, struct, sys
import numpy as np

T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9


def s(x):
    b = x.encode('utf-8')
    return struct.pack('<Q', len(b)) + b


def kv(key, typ, val):
    out = s(key) + struct.pack('<I', typ)
    if typ == T_U32: out += struct.pack('<I', val)
    elif typ == T_I32: out += struct.pack('<i', val)
    elif typ == T_F32: out += struct.pack('<f', val)
    elif typ == T_BOOL: out += struct.pack('<?', val)
    elif typ == T_STR: out += s(val)
    elif typ == T_ARR:
        et, items = val
        out += struct.pack('<IQ', et, len(items))
        if et == T_STR: out += b''.join(s(i) for i in items)
        elif et == T_F32: out += np.asarray(items, '<f4').tobytes()
        elif et == T_I32: out += np.asarray(items, '<i4').tobytes()
    return out


def main():
    out_dir, path = sys.argv[1], sys.argv[2]
    zero_down = '--zero-ffn-down' in sys.argv
    meta = json.load(open(os.path.join(out_dir, 'model.json')))
    tok = json.load(open(os.path.join(out_dir, 'tokenizer.json')))
    c = meta['config']
    raw = open(os.path.join(out_dir, 'weights.bin'), 'rb').read()
    kvs = [
        kv('general.architecture', T_STR, 'llama'),
        kv('general.name', T_STR, 'neuronpipe-train-check'),
        kv('general.alignment', T_U32, 32),
        kv('llama.context_length', T_U32, c['ctx']),
        kv('llama.embedding_length', T_U32, c['n_embd']),
        kv('llama.block_count', T_U32, c['n_layer']),
        kv('llama.feed_forward_length', T_U32, c['n_ff']),
        kv('llama.rope.dimension_count', T_U32, c['n_embd'] // c['n_head']),
        kv('llama.attention.head_count', T_U32, c['n_head']),
        kv('llama.attention.head_count_kv', T_U32, c['n_head_kv']),
        kv('llama.attention.layer_norm_rms_epsilon', T_F32, c['rms_eps']),
        kv('llama.rope.freq_base', T_F32, c['rope_base']),
        kv('llama.vocab_size', T_U32, c['n_vocab']),
        kv('neuronpipe.ffn_activation', T_STR, c['activation']),
        kv('tokenizer.ggml.model', T_STR, 'llama'),
        kv('tokenizer.ggml.tokens', T_ARR, (T_STR, tok['tokens'])),
        kv('tokenizer.ggml.scores', T_ARR, (T_F32, tok['scores'])),
        kv('tokenizer.ggml.token_type', T_ARR, (T_I32, tok['token_type'])),
        kv('tokenizer.ggml.bos_token_id', T_U32, tok['bos_id']),
        kv('tokenizer.ggml.eos_token_id', T_U32, tok['eos_id']),
        kv('tokenizer.ggml.unknown_token_id', T_U32, tok['unk_id']),
        kv('tokenizer.ggml.add_bos_token', T_BOOL, True),
        kv('tokenizer.ggml.add_eos_token', T_BOOL, False),
    ]
    infos, blobs, off = [], [], 0
    for t in meta['tensors']:
        data = raw[t['offset']: t['offset'] + t['nbytes']]
        if zero_down and t['name'].endswith('ffn_down.weight'):
            data = b'\0' * len(data)
        pad = (-off) % 32
        off += pad
        blobs.append(b'\0' * pad + data)
        infos.append(s(t['name']) + struct.pack('<I', len(t['gguf_ne'])) +
                     b''.join(struct.pack('<Q', n) for n in t['gguf_ne']) + struct.pack('<IQ', 0, off))
        off += len(data)
    head = b'GGUF' + struct.pack('<IQQ', 3, len(infos), len(kvs)) + b''.join(kvs) + b''.join(infos)
    head += b'\0' * ((-len(head)) % 32)
    with open(path, 'wb') as f:
        f.write(head)
        for b in blobs:
            f.write(b)
    print(f'wrote {path} ({len(infos)} tensors, zero_ffn_down={zero_down})')


if __name__ == '__main__':
    main()
