"""torch.distributed.checkpoint's view of an mlpo optimizer: the dict
shapes its state-dict helpers (get_optimizer_state_dict,
set_optimizer_state_dict) get and give back. "reference" (the default):
torch.optim's shape keyed by FQN, carrying the tag reference; "copy": the
state itself. Plain functions of the dict, the optimizer's groups and its
layout (_layout.py)."""
import json

import torch

# The key of the tag reference in a DCP-shaped dict's groups and states,
# and of a parameter's fp32 master in one of dcp_state="copy".
_DCP_KEY = "mlpo"
_MASTER_KEY = "mlpo_master"


def from_dcp_shape(sd):
    """A dict from set_optimizer_state_dict (see _dcp_shape: the reference
    in every group, parameters named by FQN) as state_dict() made it;
    anything else as it is."""
    if not isinstance(sd, dict) or "mlpo" in sd:
        return sd
    groups = sd.get("param_groups")
    if not isinstance(groups, (list, tuple)) or not groups or not all(
            isinstance(g, dict) and isinstance(g.get(_DCP_KEY), str)
            for g in groups):
        return sd
    refs = {g[_DCP_KEY] for g in groups}
    if len(refs) != 1:
        raise ValueError("mlpo.torch: the state dict's parameter groups name "
                         "different checkpoints (a DCP checkpoint of two "
                         "mlpo optimizers merged into one?)")
    try:
        info = json.loads(refs.pop())
    except ValueError as e:
        raise ValueError("mlpo.torch: the state dict's checkpoint reference "
                         f"is not readable ({e})") from None
    return {"state": {},
            "param_groups": [{**{k: v for k, v in g.items()
                                 if k != _DCP_KEY}, "params": []}
                             for g in groups],
            "mlpo": info}


def dcp_shape(sd, param_groups, layout, dcp_state):
    """The dict for torch.distributed.checkpoint's get_optimizer_state_dict
    (and get_state_dict): torch.optim's shape, which DCP maps to
    parameter names (FQNs) and keeps nothing else of. The reference to
    the tag (the 'mlpo' entry, as JSON) rides in every parameter group,
    and each parameter's state is that tag's name (DCP's strict load
    wants an entry per parameter): no tensor, no copy of the state.
    load_state_dict takes it back from set_optimizer_state_dict. Only
    DCP's helpers get this shape: torch.optim's own load_state_dict
    still refuses a plain mlpo dict."""
    if dcp_state == "copy":
        return _dcp_copy(sd, layout)
    if dcp_state != "reference":
        raise ValueError("mlpo.torch: dcp_state must be 'reference' or "
                         f"'copy', not {dcp_state!r}")
    ref = json.dumps(sd["mlpo"], sort_keys=True)
    state, groups, pid = {}, [], 0
    for g, mine in zip(sd["param_groups"], param_groups):
        ids = list(range(pid, pid + len(mine["params"])))
        pid += len(ids)
        groups.append({**g, "params": ids, _DCP_KEY: ref})
        for i, p in zip(ids, mine["params"]):
            if p.requires_grad:
                state[i] = {_DCP_KEY: sd["mlpo"]["tag"]}
    return {"state": state, "param_groups": groups}


def _dcp_copy(sd, layout):
    """dcp_state="copy": the checkpoint's state itself in torch.optim's
    shape (export_state_dict: moments and steps; each parameter's fp32
    master under "mlpo_master" where the model is not fp32), for a DCP
    checkpoint that stands alone (moved to another machine, read
    without the store). Every rank puts the whole state together: one
    read of it per rank."""
    # (late: _export imports _checkpoints, which imports this module)
    from ._export import export_state_dict
    exp = export_state_dict(sd)
    state = exp["state"]
    if any(e["param"].dtype != torch.float32
           for e in layout.entries):
        # The model's weights are not the masters (bf16, fp16): they
        # go in too. An fp32 model's copy is torch.optim's shape
        # exactly, so that DCP checkpoints move between the two.
        for i, name in enumerate(exp["param_names"]):
            state.setdefault(i, {})[_MASTER_KEY] = \
                exp["master_params"][name]
    return {"state": state, "param_groups": exp["param_groups"]}


def from_dcp_copy(sd, layout):
    """A torch.optim-shaped dict from set_optimizer_state_dict (state
    and groups by FQN: dcp_state="copy", or a DCP checkpoint a
    torch.optim optimizer wrote) with the positions load_state_dict
    imports by; anything else as it is."""
    groups = sd.get("param_groups") if isinstance(sd, dict) else None
    state = sd.get("state") if isinstance(sd, dict) else None
    if not isinstance(groups, (list, tuple)) or not isinstance(
            state, dict) or "mlpo" in sd or not all(
            isinstance(g, dict) and isinstance(g.get("params"), list)
            and all(isinstance(n, str) for n in g["params"])
            for g in groups) or not any(g["params"] for g in groups):
        return sd
    pos, out_groups = {}, []
    for g in groups:
        ids = []
        for n in g["params"]:
            ids.append(pos.setdefault(n, len(pos)))
        out_groups.append({**g, "params": ids})
    name_of = {e["index"]: e["name"] for e in layout.entries}
    out_state, masters = {}, {}
    for k, v in state.items():
        if k not in pos:
            raise ValueError(f"mlpo.torch: the state dict has state for "
                             f"{k!r}, which none of its groups lists")
        v = dict(v) if isinstance(v, dict) else v
        if isinstance(v, dict) and _MASTER_KEY in v:
            masters[name_of.get(pos[k], k)] = v.pop(_MASTER_KEY)
        if v:
            out_state[pos[k]] = v
    out = {"state": out_state, "param_groups": out_groups}
    if masters:
        out["master_params"] = masters
    return out
