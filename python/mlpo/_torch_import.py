"""Importing a torch.optim state dict: its state (each rule's, _rules.py)
checked whole, then written into the open engine's store at its step as a
new lineage, which the caller tags."""
import torch

from ._stand_in import _flat
from ._dict_checks import _masters_of, _step_number
from ._rules import RULES
from ._stand_in import sync_in


def import_torch(sd, require_engine, layout, mode, initial_slot):
    """torch.optim state dict `sd` of rule `mode` -> the store of the
    engine require_engine() returns (asked only when there is state to
    import: a closed optimizer still loads a dict of hyperparameters), at
    its step, laid out as `layout`; initial_slot(g, name) is a state's
    value before its first step. Returns the name of the tag to take of
    it ("step-<t>", the first free), or None when the dict holds no state
    (never stepped: nothing but hyperparameters)."""
    state = sd.get("state", {})
    if not isinstance(state, dict):
        raise ValueError("mlpo.torch: the state dict's 'state' is "
                         f"{type(state).__name__}, not a dict")
    entries = layout.entries
    sync_in(entries)  # stand-ins (_stand_in.py) hold the model's
    masters = _masters_of(sd, entries)
    if not state:
        return None  # never stepped: nothing but hyperparameters
    eng = require_engine()
    rule = RULES[mode]
    slots = eng.slots  # [(section, torch name, never negative)]
    held = {name for _, name, _ in slots}
    for e in entries:  # state this store does not keep: refused
        s = state.get(e["index"])
        for k in (s if isinstance(s, dict) else ()):
            if k in rule["state"] and k not in held and \
                    s[k] is not None:
                raise ValueError(
                    f"mlpo.torch: the state of {e['name']} holds {k!r}, "
                    f"which this store does not keep (its rule is "
                    f"{eng.rule}, fixed when it was created): create the "
                    "optimizer with the option that keeps it (amsgrad="
                    "True, a momentum) in a new store; nothing was "
                    "changed")
    steps = {}
    for e in entries:
        s = state.get(e["index"])
        if s is None:  # never stepped in torch (no gradient yet)
            steps[e["index"]] = 0
            continue
        if not isinstance(s, dict):
            raise ValueError(f"mlpo.torch: state of {e['name']} is "
                             f"{type(s).__name__}, not a dict")
        want = [n for _, n, _ in slots if n not in rule["optional"]]
        want += ["step"] if rule["step_in_state"] else []
        for k in want:
            if k not in s:
                raise ValueError(f"mlpo.torch: state of {e['name']} "
                                 f"lacks {k!r}")
        for _, k, nonneg in slots:
            x = s.get(k)
            if x is None:
                continue
            if not isinstance(x, torch.Tensor) or \
                    not x.is_floating_point():
                raise ValueError(f"mlpo.torch: {k} of {e['name']} is not "
                                 "a floating-point tensor")
            if tuple(x.shape) != e["shape"]:
                raise ValueError(f"mlpo.torch: {k} of {e['name']} has "
                                 f"shape {list(x.shape)}, the "
                                 f"parameter {list(e['shape'])}")
            if not bool(torch.isfinite(x).all()):
                raise ValueError(f"mlpo.torch: {k} of {e['name']} holds "
                                 "inf or nan")
            if nonneg and bool((x < 0).any()):
                raise ValueError(f"mlpo.torch: {k} of {e['name']} has "
                                 "negative values")
        if "step" in s:
            steps[e["index"]] = _step_number(s["step"], e["name"],
                                             zero_ok=mode ==
                                             "adagrad")
        else:  # SGD and Lion keep no step: one, if it has state
            steps[e["index"]] = int(any(s.get(k) is not None
                                        for _, k, _ in slots))
    t = max(max(steps.values()), 1)

    def fill(g, off, n):
        lo = layout[g]["start"] + off
        out = [torch.empty(n, dtype=torch.float32)
               for _ in range(1 + len(slots))]
        for e in layout[g]["entries"]:
            a = max(lo, e["offset"])
            b = min(lo + n, e["offset"] + e["numel"])
            if a >= b:
                continue
            s = state.get(e["index"]) or {}
            p = e["param"].detach()
            # export_state_dict's fp32 masters when the dict has them
            # (a bf16 model's own weights are the masters rounded).
            src = [masters.get(e["name"], p)]
            for _, k, _ in slots:
                x = s.get(k)
                src.append(x.to(p.device) if x is not None else
                           torch.full_like(p, initial_slot(
                               e["group"], k), dtype=torch.float32))
            for dst, x in zip(out, src):
                # In the parameter's memory order (its strides).
                x = torch.empty_like(p, dtype=x.dtype).copy_(x) \
                    if x.stride() != p.stride() else x
                dst[a - lo:b - lo] = _flat(x)[
                    a - e["offset"]:b - e["offset"]].float().cpu()
        return out[0].numpy(), {sec: x.numpy() for (sec, _, _), x in
                                zip(slots, out[1:])}

    eng.reset()
    eng.import_state(t, fill, [steps[e["index"]] for (g, e, at, n, off)
                               in layout.pieces])
    tag, k = f"step-{t}", 1
    while tag in eng.tags():
        tag, k = f"step-{t}.{k}", k + 1
    return tag
