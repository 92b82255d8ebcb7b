#!/usr/bin/python3
"""Trains a small decoder-only transformer (character level, ~2M parameters)
on the CPU with its optimizer state in an mlpo store on two tiers, the way a
real training loop uses mlpo: the only change from a torch.optim script is
the optimizer line.

The corpus is the licence texts Debian ships in every installation
(/usr/share/common-licenses, package base-files): ~300 KB of English.

    PYTHONPATH=build/python /usr/bin/python3 examples/train_gpt.py --seconds 60
    ... --resume            # continue from the last checkpoint

Every --ckpt-every steps the model and the optimizer's state_dict (a tag in
the store, no tensors) are saved to --ckpt; --resume loads them and goes on
with the same data order, so a killed run continues where it was.
"""
import argparse
import glob
import itertools
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

import mlpo.torch

CORPUS = "/usr/share/common-licenses"


def load_corpus(path):
    files = sorted(glob.glob(os.path.join(path, "*")))
    text = "".join(open(f, encoding="utf-8", errors="replace").read()
                   for f in files if os.path.isfile(f))
    if len(text) < 10000:
        sys.exit(f"train_gpt: corpus {path} is too small or missing")
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    return ids, chars


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, ctx, d, layers, heads):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def batch(ids, step, n, ctx, seed):
    """The batch of a step depends only on the step: resumes see the same."""
    g = torch.Generator().manual_seed(seed * 1000003 + step)
    starts = torch.randint(0, len(ids) - ctx - 1, (n,), generator=g)
    x = torch.stack([ids[s:s + ctx] for s in starts])
    y = torch.stack([ids[s + 1:s + ctx + 1] for s in starts])
    return x, y


def fmt_bytes(b):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if b < 1024:
            return f"{b:.0f}{unit}"
        b /= 1024
    return f"{b:.1f}TiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tiers", default="var/nvme,var/pfs",
                    help="store path roots, fastest first (default %(default)s)")
    ap.add_argument("--name", default="train_gpt", help="store name")
    ap.add_argument("--ckpt", default="var/train_gpt.pt",
                    help="checkpoint file (model + optimizer state_dict)")
    ap.add_argument("--ckpt-every", type=int, default=25)
    ap.add_argument("--steps", type=int, default=10000,
                    help="stop after this many steps")
    ap.add_argument("--seconds", type=float, default=60,
                    help="stop after this much training time (0 = no limit)")
    ap.add_argument("--resume", action="store_true",
                    help="continue from --ckpt")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--d-model", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--state-format", default="fp32",
                    choices=["fp32", "bf16-moments", "int8-moments"],
                    help="how the store holds Adam's moments (default "
                         "%(default)s; a store keeps the format it was "
                         "created with)")
    ap.add_argument("--log", help="append one JSON line per step (step, "
                                  "loss) to this file")
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="torch threads for forward/backward")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    ids, chars = load_corpus(a.corpus)
    torch.manual_seed(a.seed)
    model = GPT(len(chars), a.ctx, a.d_model, a.layers, a.heads)
    nparams = sum(p.numel() for p in model.parameters())
    tiers = a.tiers.split(",")
    decay = [(n, p) for n, p in model.named_parameters() if p.dim() >= 2]
    other = [(n, p) for n, p in model.named_parameters() if p.dim() < 2]
    opt = mlpo.torch.AdamW(
        [{"params": decay, "weight_decay": 0.1},
         {"params": other, "weight_decay": 0.0}],
        lr=a.lr, betas=(0.9, 0.95), store=tiers, name=a.name,
        subgroup_numel=1 << 19, max_grad_norm=1.0,
        # A new run starts fresh in the same store (as torch.optim does);
        # the store keeps the newest 3 checkpoints of its runs.
        keep_checkpoints=3, state_format=a.state_format)
    warmup = 20
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup))
    start = 0
    if a.resume:
        if not os.path.exists(a.ckpt):
            sys.exit(f"train_gpt: --resume: no checkpoint {a.ckpt} (one is "
                     "written every 25 steps; run without --resume first)")
        ckpt = torch.load(a.ckpt)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        sched.load_state_dict(ckpt["sched"])
        start = ckpt["step"]
        print(f"train_gpt: resumed at step {start} from {a.ckpt} "
              f"(store tag {ckpt['opt']['mlpo']['tag']})")
    print(f"train_gpt: {nparams / 1e6:.2f}M parameters, vocab {len(chars)}, "
          f"corpus {len(ids) / 1e3:.0f}K chars; optimizer state "
          f"{fmt_bytes(mlpo.torch.STATE_BYTES[a.state_format] * nparams)} "
          f"({a.state_format}) on {', '.join(tiers)}")

    t0 = time.time()
    first_loss = None
    # A time-bounded run has no known total: count steps without a bar.
    bar = tqdm(itertools.count(start), initial=start,
               total=None if a.seconds else a.steps,
               unit="step", dynamic_ncols=True, mininterval=1.0)
    step = start
    for step in bar:
        if step >= a.steps:
            step -= 1
            break
        x, y = batch(ids, step, a.batch, a.ctx, a.seed)
        ts = time.time()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).view(-1, len(chars)), y.view(-1))
        loss.backward()
        opt.step()
        sched.step()
        first_loss = loss.item() if first_loss is None else first_loss
        if a.log:
            with open(a.log, "a") as f:
                f.write(json.dumps(dict(step=step + 1, loss=loss.item(),
                                        state_format=a.state_format,
                                        seed=a.seed)) + "\n")
        rep = opt.last_report
        per_tier = " ".join(f"{os.path.basename(p['root'].rstrip('/'))}="
                            f"{fmt_bytes(p['read'] + p['written'])}"
                            for p in rep["paths"])
        bar.set_postfix_str(f"loss {loss.item():.3f} "
                            f"step {time.time() - ts:.2f}s "
                            f"opt {rep['total_s'] * 1e3:.0f}ms {per_tier}")
        if (step + 1) % a.ckpt_every == 0:
            os.makedirs(os.path.dirname(a.ckpt) or ".", exist_ok=True)
            tmp = a.ckpt + ".tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "sched": sched.state_dict(), "step": step + 1}, tmp)
            os.replace(tmp, a.ckpt)
        if a.seconds and time.time() - t0 > a.seconds:
            break
    bar.close()
    wall = time.time() - t0
    print(f"train_gpt: {step + 1 - start} steps in {wall:.1f}s "
          f"({(step + 1 - start) / wall:.2f} steps/s); loss "
          f"{first_loss:.3f} -> {loss.item():.3f}; store "
          f"{os.path.join(tiers[0], a.name, 'rank-0')}")
    opt.close()


if __name__ == "__main__":
    main()
