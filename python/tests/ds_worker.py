"""One rank of a DeepSpeed ZeRO run on the CPU (gloo, torchrun's
environment from test_distributed.launch) for test_deepspeed_import.py:
trains --save-at steps, saves a ZeRO checkpoint (stage --stage) to
--ckpt, then resumes it with DeepSpeed's own load_checkpoint into a new
engine (a model of another seed) and trains to --stop. Rank 0 writes the
final parameters to --out (JSON)."""
import argparse
import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import torch  # noqa: E402
import deepspeed  # noqa: E402
import deepspeed.comm.torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from ds_helpers import ds_config, ds_model, ds_part  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--stage", type=int, required=True)
ap.add_argument("--ckpt", required=True)
ap.add_argument("--save-at", type=int, default=3)
ap.add_argument("--stop", type=int, default=6)
ap.add_argument("--out", required=True)
a = ap.parse_args()

# DeepSpeed builds a shared-memory all-reduce op for the CPU at its first
# init (a minute of compiling, once per machine): gloo's is enough here.
deepspeed.comm.torch.build_shm_op = lambda: None
deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False,
                           verbose=False)
world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))


def engine(seed):
    net = ds_model(seed)
    eng, _, _, _ = deepspeed.initialize(
        model=net, model_parameters=net.parameters(),
        config=ds_config(a.stage, world))
    return eng


def train(eng, start, stop):
    for s in range(start, stop):
        x, y = ds_part(s, rank, world)
        loss = torch.nn.functional.mse_loss(eng(x), y)
        eng.backward(loss)
        eng.step()


eng = engine(0)
train(eng, 0, a.save_at)
eng.save_checkpoint(a.ckpt, tag=f"step{a.save_at}")
again = engine(7)
again.load_checkpoint(a.ckpt)
train(again, a.save_at, a.stop)
params = {}
for n, p in again.module.named_parameters():
    if a.stage == 3:
        with deepspeed.zero.GatheredParameters([p]):
            params[n] = p.detach().clone().reshape(-1).tolist()
    else:
        params[n] = p.detach().reshape(-1).tolist()
if rank == 0:
    with open(a.out, "w") as f:
        json.dump({"params": params}, f)
# Torn down before the interpreter exits: a gloo group left to static
# destruction aborted a rank now and then ("terminate called without an
# active exception", exit -6) after its work was done.
import torch.distributed as _dist  # noqa: E402
if _dist.is_available() and _dist.is_initialized():
    _dist.barrier()
    _dist.destroy_process_group()
