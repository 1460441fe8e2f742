"""Llama-shaped decoder with ReGLU / dReLU FFN, written so that the math is exactly
what a llama.cpp-style runtime computes from the exported GGUF tensors.

- RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight           (eps 1e-5)
- RoPE, GGUF/llama.cpp "normal" convention: adjacent pairs (2i, 2i+1) of each head
  are rotated by angle pos * base^(-2i/head_dim). (NOT the HF rotate-half layout, so
  no q/k permutation is needed at export.)
- grouped-query attention, causal softmax, scale 1/sqrt(head_dim), no biases
- FFN: down( relu(gate(x)) * up(x) )          activation "reglu"
       down( relu(gate(x)) * relu(up(x)) )    activation "drelu"
- untied output projection (output.weight separate from token_embd.weight)
"""
import math
from dataclasses import dataclass, asdict
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    n_vocab: int = 4096
    n_embd: int = 256
    n_layer: int = 4
    n_head: int = 8
    n_head_kv: int = 4
    n_ff: int = 1024
    ctx: int = 256
    rope_base: float = 10000.0
    rms_eps: float = 1e-5
    activation: str = 'reglu'   # or 'drelu'
    tied: bool = False

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(ctx, head_dim, base, device=None):
    i = torch.arange(0, head_dim, 2, dtype=torch.float64)          # 2i
    inv = base ** (-i / head_dim)                                  # base^(-2i/d)
    pos = torch.arange(ctx, dtype=torch.float64)
    ang = pos[:, None] * inv[None, :]                              # [T, d/2]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):
    # x: [B, H, T, D]; rotate adjacent pairs (x[2i], x[2i+1])
    x0 = x[..., 0::2]
    x1 = x[..., 1::2]
    c = cos[: x.shape[-2]]
    s = sin[: x.shape[-2]]
    y0 = x0 * c - x1 * s
    y1 = x0 * s + x1 * c
    return torch.stack((y0, y1), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        hd = cfg.n_embd // cfg.n_head
        self.hd = hd
        self.attn_norm = RMSNorm(cfg.n_embd, cfg.rms_eps)
        self.wq = nn.Linear(cfg.n_embd, cfg.n_head * hd, bias=False)
        self.wk = nn.Linear(cfg.n_embd, cfg.n_head_kv * hd, bias=False)
        self.wv = nn.Linear(cfg.n_embd, cfg.n_head_kv * hd, bias=False)
        self.wo = nn.Linear(cfg.n_head * hd, cfg.n_embd, bias=False)
        self.ffn_norm = RMSNorm(cfg.n_embd, cfg.rms_eps)
        self.w_gate = nn.Linear(cfg.n_embd, cfg.n_ff, bias=False)
        self.w_up = nn.Linear(cfg.n_embd, cfg.n_ff, bias=False)
        self.w_down = nn.Linear(cfg.n_ff, cfg.n_embd, bias=False)

    def forward(self, x, cos, sin, mask, stats=None):
        B, T, C = x.shape
        cfg = self.cfg
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, cfg.n_head, self.hd).transpose(1, 2)
        k = self.wk(h).view(B, T, cfg.n_head_kv, self.hd).transpose(1, 2)
        v = self.wv(h).view(B, T, cfg.n_head_kv, self.hd).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        rep = cfg.n_head // cfg.n_head_kv
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)   # q head j uses kv head j // rep (llama.cpp)
            v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
        att = att.masked_fill(mask[:T, :T], float('-inf'))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.wo(y)
        h = self.ffn_norm(x)
        g = F.relu(self.w_gate(h))
        u = self.w_up(h)
        if cfg.activation == 'drelu':
            u = F.relu(u)
        a = g * u
        if stats is not None:
            stats.append((g, a))
        return x + self.w_down(a)


class Model(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.n_vocab, cfg.n_embd)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.norm = RMSNorm(cfg.n_embd, cfg.rms_eps)
        self.output = nn.Linear(cfg.n_embd, cfg.n_vocab, bias=False)
        if cfg.tied:
            self.output.weight = self.tok_emb.weight
        cos, sin = rope_tables(cfg.ctx, cfg.n_embd // cfg.n_head, cfg.rope_base)
        self.register_buffer('cos', cos, persistent=False)
        self.register_buffer('sin', sin, persistent=False)
        self.register_buffer('mask', torch.triu(torch.ones(cfg.ctx, cfg.ctx, dtype=torch.bool), 1),
                             persistent=False)
        self.apply(self._init)
        for b in self.blocks:   # GPT-2 style scaled init of residual projections
            nn.init.normal_(b.wo.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))
            nn.init.normal_(b.w_down.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, stats=None):
        x = self.tok_emb(idx)
        for b in self.blocks:
            x = b(x, self.cos, self.sin, self.mask, stats)
        return self.output(self.norm(x))

    def gguf_tensors(self):
        """(gguf_name, tensor) in GGUF order; shapes are PyTorch [out, in]."""
        out = [('token_embd.weight', self.tok_emb.weight)]
        for i, b in enumerate(self.blocks):
            p = f'blk.{i}.'
            out += [(p + 'attn_norm.weight', b.attn_norm.weight),
                    (p + 'attn_q.weight', b.wq.weight),
                    (p + 'attn_k.weight', b.wk.weight),
                    (p + 'attn_v.weight', b.wv.weight),
                    (p + 'attn_output.weight', b.wo.weight),
                    (p + 'ffn_norm.weight', b.ffn_norm.weight),
                    (p + 'ffn_gate.weight', b.w_gate.weight),
                    (p + 'ffn_up.weight', b.w_up.weight),
                    (p + 'ffn_down.weight', b.w_down.weight)]
        out.append(('output_norm.weight', self.norm.weight))
        if not self.cfg.tied:
            out.append(('output.weight', self.output.weight))
        return out
