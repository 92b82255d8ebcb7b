"""One rank of a PyTorch Lightning DDP run (2 gloo ranks on the CPU,
torchrun's environment set by test_distributed.launch) for
test_lightning.py: lightning_helpers.Net with mlpo.torch.AdamW or
torch.optim.AdamW. Rank 0 writes the final parameters and the store's
tags to --out (JSON)."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from lightning_helpers import ckpts, fit  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--optimizer", choices=["mlpo", "torch"], default="mlpo")
ap.add_argument("--store")
ap.add_argument("--out", required=True)
ap.add_argument("--root", required=True)
ap.add_argument("--resume")  # a .ckpt file, or "first" of --resume-root's
ap.add_argument("--resume-root")
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--batch", type=int, default=8)  # per rank
ap.add_argument("--fsdp", type=int, default=0)  # ModelParallelStrategy
a = ap.parse_args()

world = int(os.environ.get("WORLD_SIZE", "1"))
ckpt = ckpts(a.resume_root)[0] if a.resume == "first" else a.resume
tags = {}


def keep_tags(trainer):
    import mlpo.lightning
    for opt in mlpo.lightning.mlpo_optimizers(trainer):
        tags["tags"] = sorted(opt._engine.tags())


def strategy():
    if a.fsdp:
        from lightning.pytorch.strategies import ModelParallelStrategy
        return ModelParallelStrategy(data_parallel_size=world,
                                     tensor_parallel_size=1)
    return "ddp" if world > 1 else "auto"


params, trainer = fit(
    a.root, a.optimizer, store=a.store, every=4, top_k=2, follow=True,
    ckpt_path=ckpt, seed=a.seed, batch=a.batch, close=False,
    fsdp=bool(a.fsdp), trainer_kw=dict(devices=world, strategy=strategy()))
keep_tags(trainer)
import mlpo.lightning  # noqa: E402
for opt in mlpo.lightning.mlpo_optimizers(trainer):
    opt.close()
if trainer.global_rank == 0:
    with open(a.out, "w") as f:
        json.dump({"params": {n: p.flatten().tolist()
                              for n, p in params.items()},
                   "ckpts": [os.path.basename(c) for c in ckpts(a.root)],
                   **tags}, f)
# Torn down before the interpreter exits: a gloo group left to static
# destruction aborted a rank now and then ("terminate called without an
# active exception", exit -6) after its work was done.
import torch.distributed as _dist  # noqa: E402
if _dist.is_available() and _dist.is_initialized():
    _dist.barrier()
    _dist.destroy_process_group()
