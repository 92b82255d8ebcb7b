#!/usr/bin/env python3
"""Trains a small decoder-only transformer (character level, ~2M parameters)
on the CPU with its optimizer state in an mlpo store on two tiers, the way a
real training loop uses mlpo: the only change from a torch.optim script is
the optimizer line.

The corpus is the licence texts Debian ships in every installation
(/usr/share/common-licenses, package base-files): ~300 KB of English.

    PYTHONPATH=build/python /usr/bin/python3 examples/train_gpt.py --seconds 60
    ... --resume            # continue from the last checkpoint
    ... --device cuda --preset 1b --compare --steps 20 --seconds 0
                            # ~1B parameters in bf16 on one GPU, against
                            # torch.optim.AdamW(fused=True) with its state
                            # in GPU memory

Every --ckpt-every steps the model and the optimizer's state_dict (a tag in
the store, no tensors) are saved to --ckpt; --resume loads them and goes on
with the same data order, so a killed run continues where it was.

At the end it reports tokens/s, the optimizer's share of the step (time in
opt.step() over the whole step, the device synchronised around it) and the
bytes each store tier read and wrote; --summary writes them as JSON.
"""
import argparse
import glob
import itertools
import json
import math
import os
import sys
import time

try:
    import torch
    from tqdm import tqdm
except ModuleNotFoundError as e:
    sys.exit(f"train_gpt.py: {sys.executable} has no module {e.name!r}: run "
             "it with mlpo's venv, .venv/bin/python (scripts/deps.sh makes "
             "it from requirements.txt)")
import torch.nn as nn
import torch.nn.functional as F

try:
    import mlpo.torch
except ModuleNotFoundError:
    # Run from a checkout: the build tree's package (scripts/build.sh), as
    # PYTHONPATH=build/python would give it.
    _build = os.environ.get("MLPO_BUILD_DIR", os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    sys.path.insert(0, os.path.join(_build, "python"))
    try:
        import mlpo.torch
    except ModuleNotFoundError:
        sys.exit(f"train_gpt.py: the mlpo package is not importable from "
                 f"{sys.executable} nor built in {os.path.abspath(_build)}: "
                 "run scripts/build.sh (README, first command), or pip "
                 "install . into this interpreter's environment")

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
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
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
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1],
                                                  device=idx.device))
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


# Model sizes: d_model, layers, heads, ctx, batch. Flags given explicitly
# win over the preset.
PRESETS = {
    "small": dict(d_model=192, layers=4, heads=6, ctx=128, batch=16),  # ~2M
    "1b": dict(d_model=2048, layers=20, heads=16, ctx=512, batch=8),  # ~1.0B
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cache", default="25%",
                    help="the DRAM tier: a share of the optimizer state "
                         "(\"25%%\") or a size (\"64M\"); 0 = off")
    ap.add_argument("--tiers", default="var/nvme,var/pfs",
                    help="store path roots, fastest first (default %(default)s)")
    ap.add_argument("--name", default="train_gpt", help="store name")
    ap.add_argument("--ckpt", default="var/train_gpt.pt",
                    help="checkpoint file (model + optimizer state_dict)")
    ap.add_argument("--ckpt-every", type=int, default=25,
                    help="steps between checkpoints (0: none)")
    ap.add_argument("--steps", type=int, default=10000,
                    help="stop after this many steps")
    ap.add_argument("--seconds", type=float, default=60,
                    help="stop after this much training time (0 = no limit)")
    ap.add_argument("--resume", action="store_true",
                    help="continue from --ckpt")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small",
                    help="model size: small (~2M parameters, the default) or "
                         "1b (~1.0B: d-model 2048, 20 layers, 16 heads, "
                         "ctx 512, batch 8; for a GPU)")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--ctx", type=int)
    ap.add_argument("--d-model", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--device", default="cpu",
                    help="where the model trains: cpu (default), cuda or "
                         "cuda:N")
    ap.add_argument("--dtype", choices=["fp32", "bf16"],
                    help="model parameters' dtype (default: bf16 on a GPU, "
                         "fp32 on the CPU); mlpo keeps fp32 master weights "
                         "in the store either way")
    ap.add_argument("--optimizer", choices=["mlpo", "torch"], default="mlpo",
                    help="mlpo.torch.AdamW (state in the store, the default) "
                         "or torch.optim.AdamW (state in device memory; "
                         "fused=True on a GPU)")
    ap.add_argument("--compare", action="store_true",
                    help="run mlpo, then torch.optim.AdamW, from the same "
                         "initial model on the same batches, and print them "
                         "side by side (no checkpoints)")
    ap.add_argument("--summary", help="write the run's figures (both runs' "
                                      "with --compare) as JSON to this file")
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
    a = ap.parse_args(argv)
    for k, v in PRESETS[a.preset].items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    for k in ("batch", "ctx", "d_model", "layers", "heads", "steps"):
        if getattr(a, k) < 1:
            ap.error(f"--{k.replace('_', '-')} must be at least 1")
    if a.d_model % a.heads:
        ap.error(f"--d-model {a.d_model} is not a multiple of --heads "
                 f"{a.heads}")
    if a.ckpt_every < 0:
        ap.error("--ckpt-every must be 0 (none) or more")
    try:
        a.device = torch.device(a.device)
    except RuntimeError as e:
        ap.error(f"--device {a.device}: {e}")
    if a.device.type not in ("cpu", "cuda"):
        ap.error(f"--device {a.device}: expected cpu, cuda or cuda:N")
    if a.device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit(f"train_gpt: --device {a.device}: torch "
                     f"{torch.__version__} sees no CUDA device"
                     + ("" if torch.version.cuda else
                        " (this torch is built without CUDA)"))
        if (a.device.index or 0) >= torch.cuda.device_count():
            sys.exit(f"train_gpt: --device {a.device}: only "
                     f"{torch.cuda.device_count()} CUDA device(s)")
    if a.dtype is None:
        a.dtype = "bf16" if a.device.type == "cuda" else "fp32"
    if a.compare and a.resume:
        ap.error("--compare starts both runs from the same fresh model; "
                 "it does not take --resume")
    if a.summary:  # before the run, not after it
        try:
            os.makedirs(os.path.dirname(a.summary) or ".", exist_ok=True)
            open(a.summary, "a").close()
        except OSError as e:
            ap.error(f"--summary {a.summary}: {e.strerror}")
    return a


def make_optimizer(a, kind, model, tiers):
    decay = [(n, p) for n, p in model.named_parameters() if p.dim() >= 2]
    other = [(n, p) for n, p in model.named_parameters() if p.dim() < 2]
    if kind == "mlpo":
        return mlpo.torch.AdamW(
            [{"params": decay, "weight_decay": 0.1},
             {"params": other, "weight_decay": 0.0}],
            lr=a.lr, betas=(0.9, 0.95), name=a.name,
            # The DRAM tier capped below the state, so that every step
            # reads and writes both directories (write-behind drains the
            # writes during the next forward and backward).
            store={"path": [{"root": t, "kind": "nvme" if i == 0 else "pfs"}
                            for i, t in enumerate(tiers)],
                   "cache": a.cache},
            subgroup_numel=1 << 19 if a.preset == "small" else 1 << 24,
            max_grad_norm=1.0,
            # A new run starts fresh in the same store (as torch.optim
            # does); the store keeps the newest 3 checkpoints of its runs.
            keep_checkpoints=3, state_format=a.state_format)
    groups = [{"params": [p for _, p in decay], "weight_decay": 0.1},
              {"params": [p for _, p in other], "weight_decay": 0.0}]
    if a.device.type == "cuda":
        try:
            return torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95),
                                     fused=True)
        except (TypeError, RuntimeError) as e:
            print(f"train_gpt: torch.optim.AdamW(fused=True) unavailable "
                  f"({e}); using foreach")
    return torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95))


def train(a, kind, ids, chars, tiers):
    """One run; returns its figures."""
    torch.manual_seed(a.seed)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    model = GPT(len(chars), a.ctx, a.d_model, a.layers, a.heads).to(
        device=a.device, dtype=dtype)
    nparams = sum(p.numel() for p in model.parameters())
    try:
        opt = make_optimizer(a, kind, model, tiers)
    except (RuntimeError, ValueError) as e:  # the store says what and where
        sys.exit(f"train_gpt: {e}")
    warmup = 20
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup))
    ckpt_every = 0 if a.compare else a.ckpt_every
    start = 0
    if a.resume:
        if not os.path.exists(a.ckpt):
            sys.exit(f"train_gpt: --resume: no checkpoint {a.ckpt} (one is "
                     f"written every {a.ckpt_every} steps; run without "
                     "--resume first)")
        ckpt = torch.load(a.ckpt, map_location=a.device)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        sched.load_state_dict(ckpt["sched"])
        start = ckpt["step"]
        where = (f"store tag {ckpt['opt']['mlpo']['tag']}"
                 if "mlpo" in ckpt["opt"] else "torch.optim state")
        print(f"train_gpt: resumed at step {start} from {a.ckpt} ({where})")
    elif ckpt_every and os.path.exists(a.ckpt):
        # A rerun starts a new run (as a torch.optim script does); say that
        # its first checkpoint replaces the last run's, and how to go on.
        print(f"train_gpt: starting at step 0; {a.ckpt} (an earlier run's "
              f"checkpoint) is replaced at step {ckpt_every}: pass --resume "
              "to continue that run instead, or --ckpt to keep it")
    if kind == "mlpo":
        state = (f"optimizer state {fmt_bytes(mlpo.torch.STATE_BYTES[a.state_format] * nparams)} "
                 f"({a.state_format}) on {', '.join(tiers)}")
    else:
        state = (f"torch.optim.AdamW state in {a.device} memory "
                 f"({fmt_bytes(2 * nparams * model.head.weight.element_size())})")
    print(f"train_gpt: {kind}: {nparams / 1e6:.2f}M parameters ({a.dtype}) "
          f"on {a.device}, vocab {len(chars)}, corpus "
          f"{len(ids) / 1e3:.0f}K chars; {state}")
    cuda = a.device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(a.device)) if cuda else (lambda: None)

    t0 = time.time()
    losses, step_s, opt_s, wait_s = [], [], [], []
    tier_bytes = {}
    # A time-bounded run has no known total: count steps without a bar.
    bar = tqdm(itertools.count(start), initial=start,
               total=None if a.seconds else a.steps,
               unit="step", dynamic_ncols=True, mininterval=1.0)
    step = start
    loss = None
    for step in bar:
        if step >= a.steps:
            step -= 1
            break
        x, y = batch(ids, step, a.batch, a.ctx, a.seed)
        x, y = x.to(a.device), y.to(a.device)
        sync()
        ts = time.time()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).view(-1, len(chars)).float(),
                               y.view(-1))
        loss.backward()
        sync()
        to = time.time()
        if kind == "torch":  # mlpo clips inside its step
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        te = time.time()
        sched.step()
        step_s.append(te - ts)
        opt_s.append(te - to)
        losses.append(loss.item())
        if a.log:
            with open(a.log, "a") as f:
                f.write(json.dumps(dict(step=step + 1, loss=losses[-1],
                                        state_format=a.state_format,
                                        optimizer=kind, seed=a.seed)) + "\n")
        post = (f"loss {losses[-1]:.3f} step {te - ts:.2f}s "
                f"opt {(te - to) * 1e3:.0f}ms")
        if kind == "mlpo":
            rep = opt.last_report
            # Waiting for the state: the step's time beyond its kernel (the
            # reads it waited for, the writes it could not leave behind).
            wait_s.append(max(0.0, (te - to) - rep.get("compute_s", 0.0)))
            dram = tier_bytes.setdefault("DRAM tier", {"read": 0,
                                                       "written": 0})
            dram["read"] += rep["cache_hit_bytes"]  # checkouts it served
            for p in rep["paths"]:
                t = tier_bytes.setdefault(p["root"], {"read": 0, "written": 0})
                t["read"] += p["read"]
                t["written"] += p["written"]
            post += " " + " ".join(
                f"{os.path.basename(p['root'].rstrip('/'))}="
                f"{fmt_bytes(p['read'] + p['written'])}" for p in rep["paths"])
        bar.set_postfix_str(post)
        if ckpt_every and (step + 1) % ckpt_every == 0:
            os.makedirs(os.path.dirname(a.ckpt) or ".", exist_ok=True)
            tmp = a.ckpt + ".tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "sched": sched.state_dict(), "step": step + 1}, tmp)
            os.replace(tmp, a.ckpt)
        if a.seconds and time.time() - t0 > a.seconds:
            break
    bar.close()
    wall = time.time() - t0
    if kind == "mlpo":
        opt.close()
    n = len(step_s)
    # Rates leave out the first step (allocation, the store's first writes)
    # when there are more.
    timed = slice(1, None) if n > 1 else slice(None)
    tokens = a.batch * a.ctx * len(step_s[timed])
    out = dict(optimizer=kind, device=str(a.device), dtype=a.dtype,
               params=nparams, steps=n, wall_s=wall,
               tokens_per_s=tokens / max(sum(step_s[timed]), 1e-12),
               step_s_mean=sum(step_s[timed]) / max(len(step_s[timed]), 1),
               opt_s_mean=sum(opt_s[timed]) / max(len(opt_s[timed]), 1),
               opt_share=sum(opt_s[timed]) / max(sum(step_s[timed]), 1e-12),
               losses=losses, tiers=tier_bytes)
    if kind == "mlpo":
        out["wait_share"] = sum(wait_s[timed]) / max(sum(step_s[timed]),
                                                     1e-12)
        out["state_format"] = a.state_format
        out["store"] = os.path.join(tiers[0], a.name, "rank-0")
    if n:
        print(f"train_gpt: {kind}: {n} steps in {wall:.1f}s; "
              f"{out['tokens_per_s']:.0f} tokens/s, step "
              f"{out['step_s_mean'] * 1e3:.0f} ms of which the optimizer "
              f"{out['opt_s_mean'] * 1e3:.0f} ms ({out['opt_share']:.0%}); "
              f"loss {losses[0]:.3f} -> {losses[-1]:.3f}" +
              (f"; waiting for the state {out['wait_share']:.0%} of the "
               "iteration" if kind == "mlpo" else ""))
        for root, t in tier_bytes.items():
            if root == "DRAM tier":
                print(f"train_gpt: {kind}: DRAM tier: served "
                      f"{fmt_bytes(t['read'])} of checkouts")
            else:
                print(f"train_gpt: {kind}: path {root}: the steps read "
                      f"{fmt_bytes(t['read'])}, wrote "
                      f"{fmt_bytes(t['written'])} (checkpoints not "
                      "counted)")
    return out


def main(argv=None):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    ids, chars = load_corpus(a.corpus)
    tiers = a.tiers.split(",")
    for t in tiers:
        # The tiers named on this command line are made with their parents,
        # as --ckpt's directory is (mlpo itself makes a store path but never
        # its parents).
        try:
            os.makedirs(t, exist_ok=True)
        except OSError as e:
            sys.exit(f"train_gpt: --tiers {t}: {e}")
    runs = [train(a, kind, ids, chars, tiers)
            for kind in (["mlpo", "torch"] if a.compare else [a.optimizer])]
    summary = {"runs": runs}
    if a.compare and runs[0]["steps"] and runs[1]["steps"]:
        m, t = runs
        common = min(m["steps"], t["steps"])
        summary["compare"] = dict(
            tokens_per_s_ratio=m["tokens_per_s"] / t["tokens_per_s"],
            opt_s_ratio=m["opt_s_mean"] / max(t["opt_s_mean"], 1e-12),
            max_loss_diff=max(abs(x - y) for x, y in
                              zip(m["losses"][:common], t["losses"][:common])))
        c = summary["compare"]
        print(f"train_gpt: mlpo against torch.optim.AdamW: tokens/s ratio "
              f"{c['tokens_per_s_ratio']:.3f}, optimizer time ratio "
              f"{c['opt_s_ratio']:.2f}, largest loss difference over "
              f"{common} steps {c['max_loss_diff']:.2e}")
    if a.summary:
        os.makedirs(os.path.dirname(a.summary) or ".", exist_ok=True)
        with open(a.summary, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
