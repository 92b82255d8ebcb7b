"""A small LightningModule and one Trainer run, for test_lightning.py (in
process) and lightning_worker.py (its data-parallel ranks)."""
import glob
import os
import warnings

import torch

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

import mlpo.lightning
import mlpo.torch as mt

# The parameters move by ~5e-2 in these runs; torch's AdamW kernels round
# with fused multiply-adds where mlpo's round each operation.
TOL = 1e-5

for msg in (".*does not have many workers.*", ".*LeafSpec.*",
            ".*litlogger.*", ".*GPU available.*", ".*TPU available.*"):
    warnings.filterwarnings("ignore", message=msg)


def data(n=64, seed=123):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = torch.sin(x.sum(1, keepdim=True))
    return torch.utils.data.TensorDataset(x, y)


class Net(L.LightningModule):
    """An MLP in two parameter groups (weights decay, biases do not),
    optimized by mlpo.torch.AdamW or torch.optim.AdamW."""

    def __init__(self, optimizer="mlpo", store=None, seed=0, opt_kw=None,
                 fsdp=False):
        super().__init__()
        torch.manual_seed(seed)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
            torch.nn.Tanh(), torch.nn.Linear(32, 1))
        self.optimizer, self.store = optimizer, store
        self.opt_kw = opt_kw or {}
        self.fsdp = fsdp

    def configure_model(self):
        """ModelParallelStrategy: FSDP2 (fully_shard) over its data
        parallel mesh, every Linear and the root."""
        if not self.fsdp:
            return
        from torch.distributed.fsdp import fully_shard
        mesh = self.device_mesh["data_parallel"]
        for layer in self.net:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(self, mesh=mesh)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, on_step=True, prog_bar=False)
        return loss

    def configure_optimizers(self):
        named = list(self.named_parameters())
        decay = [(n, p) for n, p in named if n.endswith("weight")]
        rest = [(n, p) for n, p in named if not n.endswith("weight")]
        if self.optimizer == "torch":
            return torch.optim.AdamW(
                [{"params": [p for _, p in decay], "weight_decay": 0.1},
                 {"params": [p for _, p in rest], "weight_decay": 0.0}],
                lr=1e-2)
        return mt.AdamW([{"params": decay, "weight_decay": 0.1},
                         {"params": rest, "weight_decay": 0.0}], lr=1e-2,
                        store=self.store, subgroup_numel=512, **self.opt_kw)


def params_of(module):
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p)
            .detach().clone() for n, p in module.named_parameters()}


def max_diff(a, b):
    return max((a[n] - b[n]).abs().max().item() for n in a)


def fit(root, optimizer="mlpo", store=None, max_steps=8, every=None,
        top_k=-1, ckpt_path=None, follow=False, seed=0, batch=8,
        callbacks=(), close=True, trainer_kw=None, opt_kw=None, fsdp=False):
    """One Trainer.fit; (final parameters, trainer). `every`: a
    ModelCheckpoint every that many steps into root/ckpt keeping `top_k`
    (by train_loss); `follow`: mlpo.lightning.StoreCheckpoints beside it.
    The mlpo optimizer is closed after (as the process ending would)."""
    module = Net(optimizer, store, seed, opt_kw, fsdp)
    cbs = list(callbacks)
    if every:
        cbs.append(ModelCheckpoint(
            dirpath=os.path.join(root, "ckpt"), every_n_train_steps=every,
            save_top_k=top_k, monitor="train_loss" if top_k > 0 else None,
            filename="{step}"))
    if follow:
        cbs.append(mlpo.lightning.StoreCheckpoints())
    trainer = L.Trainer(
        max_steps=max_steps, accelerator="cpu", logger=False,
        enable_checkpointing=bool(every), enable_progress_bar=False,
        enable_model_summary=False, callbacks=cbs,
        default_root_dir=str(root), **(trainer_kw or {}))
    loader = torch.utils.data.DataLoader(data(), batch_size=batch)
    trainer.fit(module, loader, ckpt_path=ckpt_path)
    if close:
        for opt in mlpo.lightning.mlpo_optimizers(trainer):
            opt.close()
    return params_of(module), trainer


def ckpts(root):
    """ModelCheckpoint's files (or, under ModelParallelStrategy, its
    distributed checkpoint folders), oldest step first."""
    return sorted(glob.glob(os.path.join(root, "ckpt", "*.ckpt")),
                  key=lambda p: int(p.rsplit("=", 1)[1].split(".")[0]))
