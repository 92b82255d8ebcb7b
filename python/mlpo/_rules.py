"""The update rules mlpo.torch offers, as torch.optim names their options
and state: which numbers and flags a param group holds, which state a
parameter has (the engine's slots, optimizer/kernel/update_rule.h), how a group
becomes the engine's hyperparameters and the manifest's, and the checks a
group gets wherever a user can set it (constructor, group dicts,
param_groups edits, add_param_group, a loaded state dict): a ValueError
naming where and what, before anything changes."""
import math

from ._unsupported import flag, refuse_unsupported

_ADAM = dict(numbers=("lr", "eps", "weight_decay"), betas=True,
             flags=("maximize", "amsgrad"),
             state=("exp_avg", "exp_avg_sq", "max_exp_avg_sq"),
             optional=("max_exp_avg_sq",), step_in_state=True,
             torch_flags=dict(foreach=None, capturable=False,
                              differentiable=False, fused=None))
RULES = {
    "adamw": _ADAM,
    "adam": _ADAM,
    # Lion has no torch.optim class: its state is lion-pytorch's (exp_avg).
    "lion": dict(numbers=("lr", "weight_decay"), betas=True,
                 flags=("maximize",), state=("exp_avg",), optional=(),
                 step_in_state=False, torch_flags={}),
    "adagrad": dict(numbers=("lr", "lr_decay", "weight_decay",
                             "initial_accumulator_value", "eps"),
                    betas=False, flags=("maximize",), state=("sum",),
                    optional=(), step_in_state=True,
                    torch_flags=dict(foreach=None, differentiable=False,
                                     fused=None)),
    "sgd": dict(numbers=("lr", "momentum", "dampening", "weight_decay"),
                betas=False, flags=("maximize", "nesterov"),
                state=("momentum_buffer",), optional=("momentum_buffer",),
                step_in_state=False,
                torch_flags=dict(foreach=None, differentiable=False,
                                 fused=None)),
    "adamax": dict(numbers=("lr", "eps", "weight_decay"), betas=True,
                   flags=("maximize",), state=("exp_avg", "exp_inf"),
                   optional=(), step_in_state=True,
                   torch_flags=dict(foreach=None, differentiable=False,
                                    capturable=False)),
}


def check_group(mode, group, where):
    """The group's options as the rule takes them: ValueError naming
    `where` and the key; returns the engine's hyperparameters."""
    rule = RULES[mode]
    refuse_unsupported(group, where)
    out = dict(mode=mode)
    for key in rule["numbers"]:
        if key not in group:
            raise ValueError(f"{where}: lacks {key!r}")
        v = group[key]
        try:
            x = float(v)  # a 0-d tensor lr, as a scheduler may set
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"{where}'s {key} is {v!r}, not a number") \
                from None
        if isinstance(v, bool) or not math.isfinite(x) or (
                x < 0 and key != "dampening"):
            raise ValueError(f"{where}: invalid {key} {v!r}")
        out[key] = x
    if rule["betas"]:
        b = group.get("betas")
        if not isinstance(b, (list, tuple)) or len(b) != 2:
            raise ValueError(f"{where}'s betas is {b!r}, not a pair of "
                             "numbers")
        for i, x in enumerate(b):
            try:
                float(x)
            except (TypeError, ValueError, RuntimeError):
                raise ValueError(f"{where}'s betas[{i}] is {x!r}, not a "
                                 "number") from None
        b1, b2 = float(b[0]), float(b[1])
        if any(isinstance(x, bool) for x in b) or not (
                0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"{where}: invalid betas {tuple(b)!r}")
        out.update(beta1=b1, beta2=b2)
    for key in rule["flags"]:
        out[key] = flag(group, key, where)
    if mode == "sgd" and out["nesterov"] and (
            out["momentum"] <= 0 or out["dampening"] != 0):
        raise ValueError(f"{where}: Nesterov momentum requires a momentum "
                         "and zero dampening")
    return out


def check_slots(engine_rule, group, where):
    """ValueError when the group asks for state the store does not hold
    (its rule and slots were fixed when it was created)."""
    if group.get("amsgrad") and engine_rule == "adam":
        raise ValueError(
            f"{where}: amsgrad=True needs max_exp_avg_sq, which this store "
            "does not hold: it was created without amsgrad (a store keeps "
            "the state its optimizer was created with). Create the "
            "optimizer with amsgrad=True in a new store (or name), and load "
            "this one's export_state_dict() into it; nothing was changed")
    if engine_rule == "sgd" and group.get("momentum"):
        raise ValueError(
            f"{where}: momentum {group['momentum']!r} needs a momentum "
            "buffer, which this store does not hold: it was created with "
            "momentum 0. Create the optimizer with the momentum set in a "
            "new store (or name); nothing was changed")


def manifest_hyper(mode, group):
    """The group's options as the manifest records them (torch's names)."""
    rule = RULES[mode]
    out = dict(mode=mode)
    for key in rule["numbers"]:
        out[key] = float(group[key])
    if rule["betas"]:
        out["betas"] = [float(group["betas"][0]), float(group["betas"][1])]
    for key in rule["flags"]:
        out[key] = flag(group, key, "mlpo.torch")
    return out


def torch_group(gm):
    """A torch.optim param group (without params) from a manifest group."""
    mode = gm.get("mode", "adamw")
    rule = RULES.get(mode, _ADAM)
    out = {}
    for key in rule["numbers"]:
        if key in gm:
            out[key] = gm[key]
    if rule["betas"] and "betas" in gm:
        out["betas"] = tuple(gm["betas"])
    for key in rule["flags"]:
        out[key] = bool(gm.get(key, False))
    out.update(rule["torch_flags"])
    return out
