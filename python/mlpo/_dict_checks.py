"""Checks of what load_state_dict() and state_dict() are given, before
anything changes: a loaded group's hyperparameters and flags, a torch
state's step number, export_state_dict's master weights, and the
data-parallel save on one rank that would hang. Used by _checkpoints.py."""
import math
import sys

import torch

from ._rules import RULES, check_group, check_slots


def _check_hyper(group, g, mode, engine_rule=None):
    """A loaded param group's options, as the constructor checks them:
    ValueError before anything changes (also for an option whose state
    the store does not hold)."""
    where = f"mlpo.torch: load_state_dict: param group {g} of the state dict"
    full = dict(group)
    for key, v in (("amsgrad", False), ("maximize", False),
                   ("nesterov", False)):
        full.setdefault(key, v)
    rule = RULES[mode]
    missing = [k for k in rule["numbers"] if k not in full] + (
        ["betas"] if rule["betas"] and "betas" not in full else [])
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}: it is not a "
                         f"state dict of {mode}")
    check_group(mode, full, where)
    if engine_rule is not None:
        check_slots(engine_rule, full, where)


def _step_number(step, name, zero_ok=False):
    """A torch state's step (int, float or 0-d tensor) as a positive int
    (zero_ok: or 0, as torch.optim.Adagrad's state before its first
    step)."""
    if isinstance(step, torch.Tensor):
        if step.numel() != 1:
            raise ValueError(f"mlpo.torch: step of {name} is a tensor of "
                             f"{step.numel()} elements")
        step = step.item()
    if isinstance(step, bool) or not isinstance(step, (int, float)) or \
            not math.isfinite(step) or step < (0 if zero_ok else 1) or \
            step != int(step):
        raise ValueError(f"mlpo.torch: step of {name} is {step!r}, not a "
                         "positive whole number")
    return int(step)


def _refuse_one_rank_save():
    """transformers.Trainer saves the optimizer on rank 0 only: its
    state_dict() there would wait for the other ranks, which are in their
    next step's collectives (DDP's all-reduce), for ever. Say what to add
    instead, on the rank that saves."""
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "_save_optimizer_and_scheduler" and \
                "transformers" in f.f_code.co_filename:
            raise RuntimeError(
                "mlpo.torch: Trainer saves the optimizer on rank 0 only, "
                "and with data parallel every rank holds a shard of mlpo's "
                "state: add callbacks=[mlpo.hf.TrainerCheckpoints()] to the "
                "Trainer, which has every rank take the checkpoint before "
                "Trainer saves it")
        f = f.f_back


def _masters_of(sd, entries):
    """{name: fp32 tensor} of the dict's "master_params" (what
    export_state_dict writes), each checked against its parameter; {} when
    the dict has none (a torch.optim dict: the model's weights are the
    masters). ValueError before anything changes."""
    masters = sd.get("master_params")
    if masters is None:
        return {}
    if not isinstance(masters, dict):
        raise ValueError("mlpo.torch: the state dict's 'master_params' is "
                         f"{type(masters).__name__}, not a dict")
    out = {}
    for e in entries:
        w = masters.get(e["name"])
        if w is None:
            raise ValueError(f"mlpo.torch: the state dict's 'master_params' "
                             f"lacks {e['name']!r}")
        if not isinstance(w, torch.Tensor) or not w.is_floating_point() or \
                tuple(w.shape) != e["shape"]:
            raise ValueError(f"mlpo.torch: master_params[{e['name']!r}] is "
                             "not a floating-point tensor of shape "
                             f"{list(e['shape'])}")
        if not bool(torch.isfinite(w).all()):
            raise ValueError(f"mlpo.torch: master_params[{e['name']!r}] "
                             "holds inf or nan")
        out[e["name"]] = w.detach().to(device=e["param"].device,
                                       dtype=torch.float32)
    return out
