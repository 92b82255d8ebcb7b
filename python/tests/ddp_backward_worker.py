"""One DDP training run for test_ddp_backward.py, under torchrun's
environment (gloo, CPU): the model wrapped in DistributedDataParallel with
small buckets (several per backward), mlpo's optimizer with DDP's
communication hook (mlpo.torch.ddp_comm_hook), or torch.optim.AdamW as the
reference. Rank `r` writes its final parameters (exact float32 values),
losses and what each step ran to --out-<r>.json."""
import argparse
import contextlib
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
import mlpo.torch as mt  # noqa: E402
from helpers import make_model, two_groups, loss_of  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--store", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--optimizer", default="mlpo", choices=["mlpo", "torch"])
ap.add_argument("--in-backward", default="auto", choices=["auto", "1", "0"])
ap.add_argument("--hook", type=int, default=1)  # 0: mlpo finds the DDP
ap.add_argument("--accum", type=int, default=1)
ap.add_argument("--no-sync", type=int, default=1)  # on micro-batches not last
ap.add_argument("--user-clip", type=float, default=0)  # clip_grad_norm_
ap.add_argument("--max-grad-norm", type=float, default=0)  # mlpo's own
ap.add_argument("--drop-bias-every", type=int, default=0)  # grad None
ap.add_argument("--inf-at", type=int, default=-1)  # a non-finite gradient
ap.add_argument("--read-state-at", type=int, default=-1)  # opt.state between
ap.add_argument("--bucket-mb", type=float, default=0.001)
ap.add_argument("--unused-every", type=int, default=0)  # a branch off
ap.add_argument("--set-to-none", type=int, default=1)  # zero_grad's
ap.add_argument("--rank0-saves-at", type=int, default=-1)  # DDP's habit
a = ap.parse_args()

ap_unused = a.unused_every
dist.init_process_group("gloo")
world, rank = dist.get_world_size(), dist.get_rank()
net = make_model()
if ap_unused:
    # A branch used on some steps only (DDP must look for unused
    # parameters; their grads stay None where no rank used them).
    torch.manual_seed(5)
    net.append(torch.nn.Linear(8, 8))
    branch = {"on": True}

    class Branchy(torch.nn.Module):
        def __init__(self, seq):
            super().__init__()
            self.seq = seq

        def forward(self, x):
            h = self.seq[2](self.seq[1](self.seq[0](x)))
            return self.seq[3](h) if branch["on"] else h
    inner = Branchy(net)
else:
    inner = net
model = torch.nn.parallel.DistributedDataParallel(
    inner, bucket_cap_mb=a.bucket_mb,
    find_unused_parameters=bool(ap_unused))
groups = two_groups(net, named=a.optimizer == "mlpo")
if a.optimizer == "torch":
    opt = torch.optim.AdamW(groups, lr=1e-2)
else:
    ib = {"auto": None, "1": True, "0": False}[a.in_backward]
    opt = mt.AdamW(groups, lr=1e-2, store=a.store, subgroup_numel=100,
                   update_in_backward=ib, max_grad_norm=a.max_grad_norm)
    if a.hook == 1:
        model.register_comm_hook(opt, mt.ddp_comm_hook)
if a.hook == 2:  # a hook of the script's own: mlpo cannot take it
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    model.register_comm_hook(None, default_hooks.allreduce_hook)
losses, ran = {}, []
for step in range(a.steps):
    opt.zero_grad(set_to_none=bool(a.set_to_none))
    if ap_unused:
        branch["on"] = step % ap_unused != 0
    total = 0.0
    for m in range(a.accum):
        last = m == a.accum - 1
        sync = contextlib.nullcontext() if last or not a.no_sync \
            else model.no_sync()
        with sync:
            loss = loss_of(model, step * 10 + m, part=rank, parts=world) \
                / a.accum
            if step == a.inf_at and last:
                loss = loss * float("inf")
            loss.backward()
        total += loss.item()
    if a.drop_bias_every and step % a.drop_bias_every == 1:
        net[0].bias.grad = None  # on every rank, after backward
    if a.user_clip:
        torch.nn.utils.clip_grad_norm_(net.parameters(), a.user_clip)
    if step == a.read_state_at and a.optimizer == "mlpo":
        opt.tags()  # a call on the store between backward and step()
    opt.step()
    if step == a.rank0_saves_at and rank == 0:
        # `if rank == 0: torch.save(opt.state_dict(), ...)`, as a
        # torch.optim DDP script saves its replicated state
        torch.save(opt.state_dict(), f"{a.out}-rank0.pt")
    losses[step] = total
    if a.optimizer == "mlpo":
        r = opt.last_report
        ran.append({"in_backward": bool(r.get("in_backward")),
                    "redone": bool(r.get("redone")),
                    "skipped": bool(r.get("skipped"))})
with open(f"{a.out}-{rank}.json", "w") as f:
    json.dump({"losses": losses, "ran": ran,
               "params": {n: p.detach().reshape(-1).tolist()
                          for n, p in net.named_parameters()}}, f)
if a.optimizer == "mlpo":
    opt.close()
dist.barrier()
dist.destroy_process_group()
