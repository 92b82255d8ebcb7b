"""mlpo with PyTorch Lightning.

    import mlpo.lightning, mlpo.torch
    class Model(lightning.LightningModule):
        def configure_optimizers(self):
            return mlpo.torch.AdamW(self.named_parameters(), lr=1e-3,
                                    store=["/nvme/ckpt", "/pfs/ckpt"])
    trainer = lightning.Trainer(
        callbacks=[lightning.pytorch.callbacks.ModelCheckpoint(save_top_k=3),
                   mlpo.lightning.StoreCheckpoints()])

Lightning saves `optimizer.state_dict()` in each .ckpt file (a small dict
naming a tag of the store) and loads it on `fit(ckpt_path=...)`, on one
process or under its DDP strategy: that works without this module. What
StoreCheckpoints adds: the store's checkpoints follow the .ckpt files that
Lightning's ModelCheckpoint keeps. After each of its saves it drops the
automatic tags ("step-<t>", the ones state_dict() takes) that this run's
saves took, or that a .ckpt file in a ModelCheckpoint directory named,
once no .ckpt file there names them any more: `save_top_k` frees the
store's space as it deletes files, and every file left loads. Tags it
never saw are left alone (an earlier run's checkpoints in another
directory, the file a run resumed from), as is every tag you took with
`opt.checkpoint(name)`.
"""
import glob
import os

import torch

try:
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint
except ImportError:  # the standalone package of the same code
    from pytorch_lightning.callbacks import Callback, ModelCheckpoint

from ._retention import drop_unfollowed, names_this_store


__all__ = ["StoreCheckpoints", "mlpo_optimizers"]


def mlpo_optimizers(trainer):
    """The mlpo.torch optimizers the trainer's strategy holds."""
    from .torch import _MlpoOptimizer, _wrapped
    out = []
    for opt in trainer.optimizers:
        while opt is not None and not isinstance(opt, _MlpoOptimizer):
            opt = getattr(opt, "optimizer", None)
        if opt is not None:
            out.append(_wrapped(opt) or opt)
    return out


def _read_infos(path):
    """The 'mlpo' entries of the optimizer states a .ckpt file holds. The
    tensors are mapped, not read (mmap); a file that is not in torch's zip
    format is read whole."""
    for kw in (dict(weights_only=True, mmap=True), dict(weights_only=True),
               dict(weights_only=False)):
        try:
            ckpt = torch.load(path, map_location="cpu", **kw)
            break
        except Exception:  # noqa: BLE001 -- the next way, or unreadable
            ckpt = None
    if not isinstance(ckpt, dict):
        raise ValueError(f"{path}: not a Lightning checkpoint")
    out = []
    for sd in ckpt.get("optimizer_states") or []:
        info = sd.get("mlpo") if isinstance(sd, dict) else None
        if isinstance(info, dict):
            out.append(info)
    return out


class StoreCheckpoints(Callback):
    """A Lightning callback: the store's automatic checkpoints follow the
    .ckpt files ModelCheckpoint keeps (see the module's text). Runs on
    every rank; each drops the tags of its own store."""

    def __init__(self):
        self._seen = {}  # path -> ((mtime_ns, size), [mlpo infos])
        # (name, store uuid, tag) of every checkpoint this callback saw
        # taken or named by a followed file: the ones it may drop.
        self._known = set()

    def _note(self, info):
        for u in info.get("store_uuids") or []:
            self._known.add((info.get("name"), u, info.get("tag")))

    def _named(self, trainer, opt):
        """The tags of opt's store that the .ckpt files in the
        ModelCheckpoint directories name; None when one of them cannot be
        read (being written, or damaged): then nothing may be dropped."""
        opt._require_engine()
        out = set()
        dirs = {cb.dirpath for cb in trainer.callbacks
                if isinstance(cb, ModelCheckpoint) and cb.dirpath}
        for d in dirs:
            for path in glob.glob(os.path.join(d, "*.ckpt")):
                try:
                    st = os.stat(path)
                    key = (st.st_mtime_ns, st.st_size)
                    seen = self._seen.get(path)
                    if seen is None or seen[0] != key:
                        seen = (key, _read_infos(path))
                        self._seen[path] = seen
                        for info in seen[1]:
                            self._note(info)
                except (OSError, ValueError):
                    return None
                out.update(info.get("tag") for info in seen[1]
                           if names_this_store(opt, info))
        return out

    def _follow(self, trainer):
        for opt in mlpo_optimizers(trainer):
            if opt._engine is None:
                continue
            named = self._named(trainer, opt)
            if named is None:
                continue  # the next save tries again
            drop_unfollowed(
                opt, named, self._known, "because no .ckpt file in the "
                "ModelCheckpoint directories names it any more (mlpo."
                "lightning.StoreCheckpoints follows Lightning's save_top_k)")

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        for sd in checkpoint.get("optimizer_states") or []:
            if isinstance(sd, dict) and isinstance(sd.get("mlpo"), dict):
                self._note(sd["mlpo"])

    # ModelCheckpoint runs last in each hook (Lightning orders it so):
    # what it deleted is seen at the next hook, and at the end.
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._follow(trainer)

    def on_train_epoch_start(self, trainer, pl_module):
        self._follow(trainer)

    def on_validation_start(self, trainer, pl_module):
        self._follow(trainer)

    def on_fit_end(self, trainer, pl_module):
        self._follow(trainer)
