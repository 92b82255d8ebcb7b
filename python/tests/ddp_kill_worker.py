"""A DDP (or, --parallel fsdp, FSDP fully_shard) job for the kill loop of
test_ddp_backward.py (gloo, CPU, the update during backward on,
durability="step"): trains until killed,
resuming from the store when --resume; rank 0 saves the parameters it
resumed with to --work/start-<step>.pt and prints each step that
returned; every 10 steps it takes a checkpoint (state_dict()). With --stop it trains to that step unkilled and saves the
parameters after each step in --record (the reference)."""
import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
import mlpo.torch as mt  # noqa: E402
from helpers import make_model, loss_of  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--work", required=True)
ap.add_argument("--out", required=True)  # (launch's; unused)
ap.add_argument("--resume", type=int, default=0)
ap.add_argument("--stop", type=int, default=10 ** 9)
ap.add_argument("--record", default="")
ap.add_argument("--parallel", choices=["ddp", "fsdp"], default="ddp")
a = ap.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
net = make_model()
if a.parallel == "fsdp":
    from torch.distributed.fsdp import fully_shard
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    model = fully_shard(net)
else:
    model = torch.nn.parallel.DistributedDataParallel(net,
                                                      bucket_cap_mb=0.001)
opt = mt.AdamW(net.named_parameters(), lr=1e-2, weight_decay=0.1,
               store=os.path.join(a.work, "s"), durability="step",
               subgroup_numel=100, update_in_backward=True,
               resume=bool(a.resume))
params = lambda: {  # (FSDP: the whole parameter, gathered)
    n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
    for n, p in net.named_parameters()}
record = {int(s) for s in a.record.split(",") if s}
saved = {}
start = params()  # (every rank: FSDP gathers the parameters)
if rank == 0:
    torch.save(start, os.path.join(a.work, f"start-{opt.step_count}.pt"))
    print("START", opt.step_count, flush=True)
for step in range(opt.step_count, a.stop):
    opt.zero_grad()
    loss_of(model, step, part=rank, parts=2).backward()
    if step % 5 == 3:
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.05)  # redone
    opt.step()
    if opt.step_count % 10 == 0:
        opt.state_dict()  # a tag step-<t> on every rank
    if rank == 0:
        print("RET", opt.step_count, flush=True)
    if opt.step_count in record:
        saved[opt.step_count] = params()
if rank == 0 and record:
    torch.save(saved, os.path.join(a.work, "reference.pt"))
opt.close()
dist.barrier()
dist.destroy_process_group()
