"""One training run for the distributed tests, under torchrun (gloo, CPU) or
alone. Each rank trains on its part of every batch; rank 0 writes the
full-batch losses and the final parameters to --out (JSON). Every third
step 0.bias has no gradient (skipped with its own step count, resharded
with it)."""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
import mlpo.torch as mt  # noqa: E402
from helpers import dcp_load, dcp_save, loss_of, make_model, two_groups  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--store", required=True)
ap.add_argument("--start", type=int, default=0)
ap.add_argument("--stop", type=int, default=10)
ap.add_argument("--load")
ap.add_argument("--save")
ap.add_argument("--save-at", type=int, default=-1)
ap.add_argument("--out", required=True)
# --save/--load through torch.distributed.checkpoint (a directory):
# "sync" (dcp.save) or "async" (dcp.async_save)
ap.add_argument("--dcp")
ap.add_argument("--state-format", default="fp32")
ap.add_argument("--ddp", type=int, default=0)  # wrap in DistributedDataParallel
ap.add_argument("--resume", type=int, default=0)
ap.add_argument("--save-on-rank0-only", type=int, default=0)
ap.add_argument("--load-on-rank0-only", type=int, default=0)
ap.add_argument("--rank1-load")  # rank 1 loads this file instead
ap.add_argument("--rank0-restores")  # a tag, after the save, on rank 0 only
ap.add_argument("--rank1-store")  # rank 1's own (as on another node)
ap.add_argument("--rank1-fails-opening", type=int, default=0)  # injected
a = ap.parse_args()

if "WORLD_SIZE" in os.environ:
    dist.init_process_group("gloo")
world = dist.get_world_size() if dist.is_initialized() else 1
rank = dist.get_rank() if dist.is_initialized() else 0

if a.rank1_fails_opening and rank == 1:
    def fail(self):  # as loading the state fails, after the namespace is
        raise OSError("injected: rank 1 cannot read its state")  # agreed
    mt.AdamW._set_initial = fail

model = net = make_model()
if a.ddp and dist.is_initialized():
    model = torch.nn.parallel.DistributedDataParallel(net)
store = a.rank1_store if a.rank1_store and rank == 1 else a.store
opt = mt.AdamW(two_groups(net, named=True), lr=1e-2, store=store,
               subgroup_numel=100,  # several subgroups per shard
               state_format=a.state_format, resume=bool(a.resume))
load = a.rank1_load if a.rank1_load and rank == 1 else a.load
if load and a.dcp:
    dcp_load(load, net, opt)
elif load and (rank == 0 or not a.load_on_rank0_only):
    ckpt = torch.load(load)
    net.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
losses = {}
for step in range(a.start, a.stop):
    opt.zero_grad()
    loss = loss_of(model, step, part=rank, parts=world)
    loss.backward()
    if step % 3 == 1:  # a frozen parameter now and then: skipped everywhere
        net[0].bias.grad = None
    opt.step()
    full = loss.detach().clone()
    if world > 1:
        dist.all_reduce(full)
        full /= world
    losses[step] = full.item()
    if step + 1 == a.save_at and a.dcp:
        dcp_save(a.save, net, opt, a.dcp)
    elif step + 1 == a.save_at and (rank == 0 or not a.save_on_rank0_only):
        sd = opt.state_dict()  # every rank tags its store
        if rank == 0:
            torch.save({"model": net.state_dict(), "opt": sd}, a.save)
        if a.rank0_restores and rank == 0:
            opt.restore(a.rank0_restores)
if rank == 0:
    with open(a.out, "w") as f:
        json.dump({"losses": losses, "world": world,
                   "params": {n: p.detach().reshape(-1).tolist()
                              for n, p in net.named_parameters()}}, f)
# The store closed before the process group goes and the interpreter ends:
# left to interpreter teardown, a rank once died there ("terminate called
# without an active exception", SIGABRT) after its run had succeeded.
opt.close()
if dist.is_initialized():
    dist.barrier()
    dist.destroy_process_group()
