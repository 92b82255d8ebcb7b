"""One FSDP (torch 2.x fully_shard) training run for test_fsdp.py, under
torchrun-style environment variables (gloo, CPU) or alone: a small MLP
whose Linear layers and root are sharded over the ranks, trained on the
full batch (every rank the same data, as FSDP's reference loop), with
mlpo.torch.AdamW or torch.optim.AdamW. Rank 0 writes the losses and the
full parameters (gathered) to --out as JSON."""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
import mlpo.torch as mt  # noqa: E402
from helpers import dcp_load, dcp_save, loss_of  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--optimizer", choices=["mlpo", "torch"], default="mlpo")
ap.add_argument("--store")
ap.add_argument("--start", type=int, default=0)
ap.add_argument("--stop", type=int, default=8)
ap.add_argument("--save-at", type=int, default=-1)
ap.add_argument("--save")
ap.add_argument("--load")
ap.add_argument("--out", required=True)
# --save/--load through torch.distributed.checkpoint (a directory):
# "sync" (dcp.save) or "async" (dcp.async_save)
ap.add_argument("--dcp")
ap.add_argument("--clip", type=float, default=0.0)
# mlpo's update_in_backward: None (the default), on or off
ap.add_argument("--in-backward", choices=["default", "on", "off"],
                default="default")
ap.add_argument("--accumulation", type=int, default=1)
a = ap.parse_args()

if "WORLD_SIZE" in os.environ:
    dist.init_process_group("gloo")
world = dist.get_world_size() if dist.is_initialized() else 1
rank = dist.get_rank() if dist.is_initialized() else 0

torch.manual_seed(0)
# 33 and 9 rows: shards of unequal size (17 + 16, 5 + 4 on two ranks).
net = torch.nn.Sequential(torch.nn.Linear(16, 33), torch.nn.Tanh(),
                          torch.nn.Linear(33, 9), torch.nn.Tanh(),
                          torch.nn.Linear(9, 8))
if world > 1:
    from torch.distributed.fsdp import fully_shard
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(net)


def groups():
    decay = [(n, p) for n, p in net.named_parameters()
             if n.endswith("weight")]
    rest = [(n, p) for n, p in net.named_parameters() if n.endswith("bias")]
    return [{"params": decay, "weight_decay": 0.1},
            {"params": rest, "weight_decay": 0.0}]


if a.optimizer == "mlpo":
    opt = mt.AdamW(groups(), lr=1e-2, store=a.store, subgroup_numel=100,
                   max_grad_norm=a.clip,
                   update_in_backward={"default": None, "on": True,
                                       "off": False}[a.in_backward])
else:
    opt = torch.optim.AdamW(groups(), lr=1e-2)
if a.load and a.dcp:
    dcp_load(a.load, net, opt)
elif a.load:
    ckpt = torch.load(a.load, weights_only=True)
    opt.load_state_dict(ckpt["opt"])  # restores the parameters too


def full_params():
    out = {}
    for n, p in net.named_parameters():
        t = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[n] = t.detach().reshape(-1).tolist()
    return out


losses = {}
in_backward = 0  # steps that ran during backward
for step in range(a.start, a.stop):
    opt.zero_grad()
    for micro in range(a.accumulation):
        # (micro-batches: the same batch in halves of the loss, so the
        # sum of their gradients is the whole batch's)
        loss = loss_of(net, step) / a.accumulation
        loss.backward()
    loss = loss * a.accumulation
    if a.clip and a.optimizer == "torch":
        torch.nn.utils.clip_grad_norm_(net.parameters(), a.clip)
    opt.step()
    if a.optimizer == "mlpo" and opt.last_report and \
            opt.last_report.get("in_backward"):
        in_backward += 1
    losses[step] = loss.item()
    if step + 1 == a.save_at and a.dcp:
        dcp_save(a.save, net, opt, a.dcp)
    elif step + 1 == a.save_at:
        sd = opt.state_dict()  # every rank tags its store
        if rank == 0:
            torch.save({"opt": sd}, a.save)
params = full_params()
if rank == 0:
    with open(a.out, "w") as f:
        json.dump({"losses": losses, "world": world, "params": params,
                   "in_backward": in_backward}, f)
if dist.is_initialized():
    dist.barrier()
    dist.destroy_process_group()
