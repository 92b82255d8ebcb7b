"""torch.optim options that mlpo does not implement, refused wherever a
user can set them (the constructor, a group dict, param_groups edits,
add_param_group, a loaded torch.optim state dict), never ignored: a run
would silently differ from torch's. foreach and fused are accepted:
mlpo's update is always one fused kernel; maximize, amsgrad and the other
rules' options are honoured per group (_rules.py)."""

WHY = {
    "capturable": "capturable=True is for capturing the step in a CUDA "
                  "graph, and mlpo's step runs on the host outside any graph",
    "differentiable": "differentiable=True is autograd through the step, "
                      "and mlpo's update runs in C++ outside autograd",
}


def refuse_unsupported(options, where):
    """ValueError naming `where` and the option when `options` (a dict)
    sets one of WHY's to a true value; nothing was changed."""
    for key, why in WHY.items():
        v = options.get(key) if isinstance(options, dict) else None
        if v is None:
            continue
        if not isinstance(v, (bool, int, float)):
            raise ValueError(f"{where}: {key} must be True or False, not "
                             f"{v!r}; nothing was changed")
        if v:
            raise ValueError(f"{where}: {why}; nothing was changed")


def flag(options, key, where):
    """A group's True/False option (maximize, amsgrad, nesterov), checked: ValueError naming
    `where` for anything but a bool or a number."""
    v = options.get(key, False) if isinstance(options, dict) else False
    if v is None:
        return False
    if not isinstance(v, (bool, int, float)):
        raise ValueError(f"{where}: {key} must be True or False, not {v!r}; "
                         "nothing was changed")
    return bool(v)
