"""export_state_dict: an mlpo checkpoint as torch.optim's state dict (fp32
moments and master weights), read through the C++ CheckpointReader, with
no optimizer and no model needed."""
import json
import math

import torch

from ._rules import RULES, torch_group

from . import _mlpo
from . import store_config
from ._checkpoints import _shaped
from ._session import store_name as _store_name
from ._reshard import CheckpointCoords
from ._tag_ids import check_reader_tag, check_tag_ids


def export_state_dict(store, tag=None, name="mlpo"):
    """The torch.optim.AdamW/Adam state dict equivalent to an mlpo
    checkpoint: state {index: {step, exp_avg, exp_avg_sq}} and param_groups
    (indices in the optimizer's group order), plus "master_params" {name:
    fp32 tensor} and "param_names" (the name of each index).

    `store` is what the optimizer got as store= (with `name`), or a state
    dict from mlpo.torch's state_dict() (then `tag` defaults to its tag)."""
    if isinstance(store, dict) and "mlpo" in store:
        info = store["mlpo"]
        toml, base = info["store"]["toml"], info["store"]["base_dir"]
        store_name = info.get("store_name") or _store_name(
            info["name"], info["world_size"])
        tag = tag if tag is not None else info["tag"]
    else:
        toml, base = store_config.resolve(store, create=False)
        store_name = name
    try:
        reader = _mlpo.CheckpointReader(toml, base, store_name, tag or "")
    except FileNotFoundError as e:
        if not isinstance(store, dict):
            raise
        raise FileNotFoundError(
            f"mlpo: {e}; the state dict names the store where it was "
            "written: to read a copy of it, give the copy's store= "
            f"with name={store_name!r}, tag={tag!r}") from None
    if isinstance(store, dict) and "mlpo" in store and tag == info["tag"]:
        check_tag_ids(info, info["world_size"])
        check_reader_tag(reader, info)
    manifest = json.loads(reader.manifest())
    steps = reader.param_steps()
    state, masters = {}, {}
    groups = []
    coords = CheckpointCoords(manifest)  # FSDP's shards come together
    for g, gm in enumerate(manifest["groups"]):
        mode = gm.get("mode", "adamw")
        rule = RULES.get(mode, RULES["adamw"])
        indices = []
        for i, pm in enumerate(manifest["params"]):
            if pm["group"] != g:
                continue
            n = math.prod(pm["shape"])
            p = torch.empty(n)
            slots = {sec: torch.empty(n) for sec, _, _ in reader.slots}
            for coord, k, at in coords.runs(i, 0, n):
                got_p, got = reader.read(g, coord, k)
                p[at:at + k] = torch.from_numpy(got_p)
                for sec, x in got.items():
                    slots[sec][at:at + k] = torch.from_numpy(x)
            if steps[i] > 0 or (mode == "adagrad" and reader.slots):
                # torch.optim has no state before a step (but Adagrad's)
                st = {"step": torch.tensor(float(steps[i]))} \
                    if rule["step_in_state"] else {}
                for sec, name, _ in reader.slots:
                    if name == "max_exp_avg_sq" and not gm.get("amsgrad"):
                        continue
                    st[name] = _shaped(slots[sec], pm)
                if st:
                    state[i] = st
            masters[pm["name"]] = _shaped(p, pm)
            indices.append(i)
        groups.append({**torch_group(gm), "params": indices})
    theirs = store.get("param_groups") if isinstance(store, dict) else None
    if isinstance(theirs, list) and len(theirs) == len(groups):
        # The dict's groups hold the hyperparameters as they were when it
        # was taken (a scheduler's lr, a group's maximize); the manifest,
        # those the store was created with.
        for mine, t in zip(groups, theirs):
            if isinstance(t, dict):
                mine.update({k: (tuple(v) if k == "betas" else v)
                             for k, v in t.items() if k != "params"})
    return {"state": state, "param_groups": groups,
            "master_params": masters,
            "param_names": [pm["name"] for pm in manifest["params"]]}
