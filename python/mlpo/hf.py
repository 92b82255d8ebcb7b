"""mlpo with Hugging Face transformers.Trainer.

    import mlpo.hf, mlpo.torch
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=data,
        optimizer_cls_and_kwargs=(mlpo.torch.AdamW,
                                  dict(lr=args.learning_rate,
                                       store=["/nvme/ckpt", "/pfs/ckpt"])),
        callbacks=[mlpo.hf.TrainerCheckpoints()])

Trainer saves `optimizer.state_dict()` into each checkpoint folder
(`optimizer.pt`, a few hundred bytes naming a tag of the store) and loads
it on `resume_from_checkpoint`: that works without this module. What
TrainerCheckpoints adds: the store's checkpoints follow Trainer's folders.
After every save it drops the automatic tags ("step-<t>", the ones
state_dict() takes) that this run's saves took or that a
`checkpoint-*/optimizer.pt` under `args.output_dir` named, once no such
file names them any more: `save_total_limit` frees the store's space as
it deletes folders, and every folder left loads. Tags it never saw (the
folders of a run in another output_dir, the one a run resumed from) are
left alone, as is every tag you took with `opt.checkpoint(name)`.
"""
import glob
import os

import torch
import transformers

from ._retention import drop_unfollowed, names_this_store


__all__ = ["TrainerCheckpoints", "mlpo_optimizer"]


def mlpo_optimizer(optimizer):
    """The mlpo.torch optimizer inside what Trainer or Accelerate hold (an
    AcceleratedOptimizer wraps it), or None."""
    from .torch import _MlpoOptimizer
    while optimizer is not None and not isinstance(optimizer,
                                                   _MlpoOptimizer):
        optimizer = getattr(optimizer, "optimizer", None)
    return optimizer


def folder_tags(output_dir, opt):
    """The tags of `opt`'s store that the checkpoint folders under
    output_dir name (their optimizer.pt files); None when one of those
    files cannot be read (being written by another rank, or damaged):
    then nothing may be dropped."""
    opt._require_engine()
    out = set()
    for path in glob.glob(os.path.join(output_dir, "checkpoint-*",
                                       "optimizer.pt")):
        try:
            sd = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:
            return None
        info = sd.get("mlpo") if isinstance(sd, dict) else None
        if isinstance(info, dict) and names_this_store(opt, info):
            out.add(info.get("tag"))
    return out


class TrainerCheckpoints(transformers.TrainerCallback):
    """A Trainer callback: the store's automatic checkpoints follow the
    checkpoint folders Trainer keeps (see the module's text). Runs on every
    rank; each drops the tags of its own store. With data parallel it also
    has every rank take the checkpoint just before Trainer saves it on
    rank 0 alone (prepare_state_dict): without it that save is refused."""

    def __init__(self):
        # (name, store uuid, tag) of each checkpoint this callback saw
        # taken or named by a folder under output_dir: the only ones it
        # drops. A run resumed into another output_dir leaves the old
        # folders' tags alone.
        self._known = set()

    def _prepare(self, control, optimizer):
        opt = mlpo_optimizer(optimizer)
        if control.should_save and opt is not None and opt._ranks.world > 1:
            opt.prepare_state_dict()

    def on_step_end(self, args, state, control, optimizer=None, **kwargs):
        self._prepare(control, optimizer)

    def on_epoch_end(self, args, state, control, optimizer=None, **kwargs):
        self._prepare(control, optimizer)

    def _note_folders(self, args, opt):
        named = folder_tags(args.output_dir, opt)
        mine = (opt._session.ns, opt._engine.store_uuid)
        self._known.update((*mine, t) for t in named or ())
        return named

    def on_train_begin(self, args, state, control, optimizer=None,
                       **kwargs):
        # The folders there before this run's first save (a resumed run
        # may save over one): their tags are this output_dir's. So is the
        # step-0 checkpoint Accelerate's prepare() took of this optimizer.
        opt = mlpo_optimizer(optimizer)
        if opt is not None and opt._engine is not None:
            self._note_folders(args, opt)
            if opt._last_handed is not None:
                self._known.add((opt._session.ns, opt._engine.store_uuid,
                                 opt._last_handed))

    def on_save(self, args, state, control, optimizer=None, **kwargs):
        opt = mlpo_optimizer(optimizer)
        if opt is None or opt._engine is None:
            return
        named = self._note_folders(args, opt)
        if named is None:
            return  # the next save tries again
        self._known.add((opt._session.ns, opt._engine.store_uuid,
                         opt._last_handed))
        drop_unfollowed(
            opt, named, self._known, "because no checkpoint folder under "
            f"{args.output_dir} names it any more (mlpo.hf."
            "TrainerCheckpoints follows Trainer's save_total_limit)")
