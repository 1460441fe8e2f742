#!/usr/bin/env python3
"""Train the neuronpipe default model: a small llama-shaped ReLU-sparse decoder.

Single CPU thread by design (see README). Stops at --time-budget seconds (or --steps)
and saves work/final.pt; saves work/ckpt.pt every --ckpt-every seconds.

Sparsity (ProSparse-style): loss = CE + sum_l lambda_l * mean(relu(gate_l(x))).
lambda_l = l1 * ramp(step) * mult_l, ramp goes linearly 0 -> 1 over --l1-warmup of the
run; from the start of the ramp each layer's mult_l is nudged (x1.015 or /1.015 every
step) so that the measured fraction of exactly-zero relu(gate) activations on the training batch tracks
--target-sparsity.
"""
import argparse, json, math, os, sys, time
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, Model

HERE = os.path.dirname(os.path.abspath(__file__))


def get_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--work', default=os.path.join(HERE, 'work'))
    ap.add_argument('--seed', type=int, default=1234)
    ap.add_argument('--n-embd', type=int, default=256)
    ap.add_argument('--n-layer', type=int, default=6)
    ap.add_argument('--n-head', type=int, default=8)
    ap.add_argument('--n-head-kv', type=int, default=4)
    ap.add_argument('--n-ff', type=int, default=1024)
    ap.add_argument('--ctx', type=int, default=256)
    ap.add_argument('--activation', default='reglu', choices=['reglu', 'drelu'])
    ap.add_argument('--tied', action='store_true')
    ap.add_argument('--batch', type=int, default=8, help='sequences per step')
    ap.add_argument('--seq', type=int, default=256, help='tokens per training sequence')
    ap.add_argument('--lr', type=float, default=2e-3)
    ap.add_argument('--min-lr-ratio', type=float, default=0.1)
    ap.add_argument('--warmup', type=int, default=100)
    ap.add_argument('--wd', type=float, default=0.1)
    ap.add_argument('--clip', type=float, default=1.0)
    ap.add_argument('--l1', type=float, default=0.2, help='base L1 coefficient')
    ap.add_argument('--l1-start', type=float, default=0.05, help='fraction of the run before the L1 ramp starts')
    ap.add_argument('--l1-warmup', type=float, default=0.3, help='fraction of the run over which L1 ramps up')
    ap.add_argument('--target-sparsity', type=float, default=0.90)
    ap.add_argument('--ctrl-rate', type=float, default=0.015, help='per-step multiplicative nudge of mult_l')
    ap.add_argument('--time-budget', type=float, default=4000.0, help='seconds; hard stop')
    ap.add_argument('--steps', type=int, default=0,
                    help='fixed number of steps, schedule by step (0: schedule by wall-clock over --time-budget)')
    ap.add_argument('--ckpt-every', type=float, default=300.0, help='seconds')
    ap.add_argument('--eval-every', type=int, default=200, help='steps')
    ap.add_argument('--log-every', type=int, default=10)
    ap.add_argument('--resume', action='store_true')
    ap.add_argument('--threads', type=int, default=1)
    return ap.parse_args(argv)


@torch.no_grad()
def quick_eval(model, heldout, ctx, n_windows=8):
    model.eval()
    losses, zs, alive = [], None, None
    for w in range(n_windows):
        x = torch.from_numpy(heldout[w * ctx: w * ctx + ctx + 1].astype(np.int64))[None]
        stats = []
        logits = model(x[:, :-1], stats)
        losses.append(F.cross_entropy(logits[0], x[0, 1:]).item())
        z = [(g == 0).float().mean().item() for g, _ in stats]
        zs = z if zs is None else [a + b for a, b in zip(zs, z)]
        a = [(g[0] > 0).any(0) for g, _ in stats]
        alive = a if alive is None else [x | y for x, y in zip(alive, a)]
    model.train()
    dead = [1.0 - x.float().mean().item() for x in alive]
    return math.exp(sum(losses) / len(losses)), [z / n_windows for z in zs], dead


def main():
    args = get_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.use_deterministic_algorithms(True)
    t_start = time.time()

    train = np.fromfile(os.path.join(args.work, 'train.bin'), dtype=np.uint16)
    heldout = np.fromfile(os.path.join(args.work, 'heldout.bin'), dtype=np.uint16)
    cfg = Config(n_vocab=4096, n_embd=args.n_embd, n_layer=args.n_layer, n_head=args.n_head,
                 n_head_kv=args.n_head_kv, n_ff=args.n_ff, ctx=args.ctx,
                 activation=args.activation, tied=args.tied)
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(HERE, 'out', 'tokenizer.model'))
    cfg.n_vocab = sp.get_piece_size()
    model = Model(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print(f'config {cfg.to_dict()}  params {n_params}  train tokens {len(train)}', flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{'params': decay, 'weight_decay': args.wd},
                             {'params': no_decay, 'weight_decay': 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed)
    mult = [1.0] * cfg.n_layer
    step, tokens_seen, elapsed_prev = 0, 0, 0.0
    log = []
    ckpt_path = os.path.join(args.work, 'ckpt.pt')
    if args.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path)
        model.load_state_dict(ck['model']); opt.load_state_dict(ck['opt'])
        gen.set_state(ck['gen']); torch.set_rng_state(ck['torch_rng'])
        mult, step, tokens_seen = ck['mult'], ck['step'], ck['tokens_seen']
        elapsed_prev, log = ck['elapsed'], ck['log']
        print(f'resumed at step {step}', flush=True)

    def save(path, final=False):
        d = {'model': model.state_dict(), 'config': cfg.to_dict(), 'step': step,
             'tokens_seen': tokens_seen, 'mult': mult,
             'elapsed': elapsed_prev + time.time() - t_start, 'log': log, 'args': vars(args)}
        if not final:
            d.update(opt=opt.state_dict(), gen=gen.get_state(), torch_rng=torch.get_rng_state())
        torch.save(d, path + '.tmp'); os.replace(path + '.tmp', path)

    def lr_at(s, p):
        if s < args.warmup:
            return args.lr * (s + 1) / args.warmup
        return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))

    def ramp_at(p):
        return min(1.0, max(0.0, (p - args.l1_start) / args.l1_warmup))

    B, S = args.batch, args.seq
    last_ckpt = time.time()
    model.train()
    while True:
        now = time.time()
        elapsed = elapsed_prev + now - t_start
        # progress p in [0, 1] drives the cosine LR and the L1 ramp: step-based with --steps
        # (reproducible), otherwise wall-clock based, so the schedule always completes within
        # --time-budget however busy the shared machine is
        p = step / args.steps if args.steps else elapsed / args.time_budget
        if p >= 1.0:
            print(f'schedule complete at step {step} ({elapsed:.0f} s)', flush=True)
            break
        lr = lr_at(step, p)
        for g in opt.param_groups:
            g['lr'] = lr
        ramp = ramp_at(p)

        ix = torch.randint(0, len(train) - S - 1, (B,), generator=gen)
        xb = torch.stack([torch.from_numpy(train[i: i + S + 1].astype(np.int64)) for i in ix.tolist()])
        stats = []
        logits = model(xb[:, :-1], stats)
        ce = F.cross_entropy(logits.reshape(-1, cfg.n_vocab), xb[:, 1:].reshape(-1))
        l1_terms = [g.mean() for g, _ in stats]
        l1 = sum(args.l1 * ramp * m * t for m, t in zip(mult, l1_terms))
        loss = ce + l1
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        with torch.no_grad():
            spars = [(g == 0).float().mean().item() for g, _ in stats]
        if ramp > 0.0:   # per-layer controller, active as soon as the L1 ramp starts
            r = 1.0 + args.ctrl_rate
            for i, s in enumerate(spars):
                mult[i] = min(100.0, max(0.01, mult[i] * (r if s < args.target_sparsity else 1 / r)))
        step += 1
        tokens_seen += B * S
        if step % args.log_every == 0:
            el = elapsed_prev + time.time() - t_start
            rec = {'step': step, 't': round(el, 1), 'p': round(p, 4), 'tok': tokens_seen, 'lr': lr, 'ce': round(ce.item(), 4),
                   'l1': round(float(l1), 5), 'ramp': round(ramp, 3), 'gn': round(gn.item(), 3),
                   'sparsity': [round(s, 4) for s in spars], 'mult': [round(m, 3) for m in mult]}
            log.append(rec)
            print(json.dumps(rec), flush=True)
        if step % args.eval_every == 0:
            ppl, zs, dead = quick_eval(model, heldout, cfg.ctx)
            rec = {'step': step, 'eval_ppl': round(ppl, 3), 'eval_sparsity': [round(z, 4) for z in zs],
                   'dead_neurons': [round(d, 4) for d in dead]}
            log.append(rec)
            print(json.dumps(rec), flush=True)
        if time.time() - last_ckpt > args.ckpt_every:
            save(ckpt_path)
            last_ckpt = time.time()
    save(ckpt_path)
    save(os.path.join(args.work, 'final.pt'), final=True)
    ppl, zs, dead = quick_eval(model, heldout, cfg.ctx)
    print(json.dumps({'dead_neurons': [round(d, 4) for d in dead], 'final_step': step, 'tokens_seen': tokens_seen,
                      'elapsed': round(elapsed_prev + time.time() - t_start, 1),
                      'quick_eval_ppl': round(ppl, 3), 'quick_eval_sparsity': [round(z, 4) for z in zs]}), flush=True)


if __name__ == '__main__':
    main()
