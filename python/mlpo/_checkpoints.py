"""Checkpoints of mlpo.torch's optimizers: state_dict()/load_state_dict() as
store tags, resharding a checkpoint of W ranks into W' ranks, importing a
torch.optim state dict, and export_state_dict(). A mixin of the optimizer
class in torch.py, which owns the layout, the engine and the step."""
import json
import math

import torch
import torch.distributed as dist

from . import _mlpo
from . import store_config

_MANIFEST_FORMAT = 1


def _store_name(name, world):
    return name if world == 1 else f"{name}-w{world}"


def _model_difference(a, b):
    """The first (name, shape, group) that differs between two manifests'
    parameter lists, as a pair (None where one list is shorter); None when
    they describe the same model."""
    def key(m):
        return [(p["name"], tuple(p["shape"]), p["group"]) for p in m["params"]]
    ka, kb = key(a), key(b)
    if ka == kb:
        return None
    n = max(len(ka), len(kb))
    ka += [None] * (n - len(ka))
    kb += [None] * (n - len(kb))
    return next((x, y) for x, y in zip(ka, kb) if x != y)


class CheckpointMixin:
    @property
    def step_count(self):
        """Optimizer steps taken (the version of every state object)."""
        return self._require_engine().step_count

    @property
    def skipped_steps(self):
        return self._require_engine().skipped_steps

    def checkpoint(self, tag):
        """Records the current state as `tag` (no data copied)."""
        self._require_engine().tag(tag)

    def restore(self, tag):
        """Moves the state back to `tag` and the model's parameters with it."""
        self._require_engine().restore(tag)
        self._params_from_store()

    def tags(self):
        return self._require_engine().tags()

    def close(self):
        """Waits for commits in flight and releases the store."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
            self._open_error = None

    def _prune_checkpoints(self):
        """Keeps the newest keep_checkpoints "step-<t>" tags (0 keeps all)
        and frees what only the older ones held."""
        if self.keep_checkpoints <= 0:
            return
        eng = self._engine
        auto = sorted((k, t) for t in eng.tags()
                      if (k := _step_tag_key(t)) is not None)
        old = auto[:-self.keep_checkpoints]
        for _, t in old:
            eng.drop_tag(t)
        if old:
            eng.gc()

    def _uuids(self):
        mine = self._require_engine().store_uuid
        if self._world == 1:
            return [mine]
        out = [None] * self._world
        dist.all_gather_object(out, mine, group=self._pg)
        return out

    def state_dict(self):
        """A small dict naming the store, a tag taken now ("step-<t>") and
        the hyperparameters; no tensors. torch.save it with the model."""
        eng = self._require_engine()
        # "step-<t>", or "step-<t>.<k>" when a tag of that step already
        # holds another lineage's state (training on after a rollback): a
        # dict never names a tag of another lineage, and no tag is replaced.
        tags = set(eng.tags())
        tag, k = f"step-{eng.step_count}", 1
        while tag in tags and not eng.tag_is_current(tag):
            tag, k = f"step-{eng.step_count}.{k}", k + 1
        if tag not in tags:
            eng.tag(tag)
            self._prune_checkpoints()
        groups = []
        index = 0
        for g in self.param_groups:
            d = {k: v for k, v in g.items() if k != "params"}
            d["params"] = list(range(index, index + len(g["params"])))
            index += len(g["params"])
            groups.append(d)
        return {
            "state": {},
            "param_groups": groups,
            "mlpo": {"format": _MANIFEST_FORMAT,
                     "store": {"toml": self._toml, "base_dir": self._base_dir},
                     "name": self._name, "world_size": self._world,
                     "store_name": _store_name(self._name, self._world),
                     "tag": tag, "step": eng.step_count,
                     "store_uuids": self._uuids()},
        }

    def load_state_dict(self, state_dict):
        """Restores a dict from state_dict() (the tag it names; resharded
        when it was written by another number of ranks), or imports a plain
        torch.optim.AdamW/Adam state dict (exp_avg, exp_avg_sq, step)."""
        if not isinstance(state_dict, dict) or "param_groups" not in \
                state_dict:
            raise ValueError("mlpo.torch: not an optimizer state dict")
        groups = state_dict["param_groups"]
        if not isinstance(groups, (list, tuple)) or len(groups) != len(
                self.param_groups) or any(
                not isinstance(a, dict) or
                not isinstance(a.get("params"), (list, tuple)) or
                len(a["params"]) != len(b["params"])
                for a, b in zip(groups, self.param_groups)):
            raise ValueError("mlpo.torch: the state dict has other parameter "
                             "groups than this optimizer")
        # Everything is checked before anything changes: a bad dict raises
        # and leaves the optimizer and its store as they were.
        for g, group in enumerate(groups):
            _check_hyper(group, g)
        if "mlpo" in state_dict:
            self._load_mlpo(state_dict["mlpo"])
        else:
            self._import_torch(state_dict)
        for mine, theirs in zip(self.param_groups, groups):
            for k, v in theirs.items():
                if k != "params":
                    mine[k] = tuple(v) if k == "betas" else v

    def _load_mlpo(self, info):
        if not isinstance(info, dict):
            raise ValueError("mlpo.torch: the state dict's 'mlpo' entry is "
                             f"{type(info).__name__}, not a dict")
        for k in ("tag", "world_size", "store_uuids", "store", "name"):
            if k not in info:
                raise ValueError(f"mlpo.torch: mlpo state dict lacks {k!r}")
        world, uuids, store = (info["world_size"], info["store_uuids"],
                               info["store"])
        if not isinstance(info["tag"], str) or not isinstance(
                info["name"], str):
            raise ValueError("mlpo.torch: mlpo state dict: 'tag' and 'name' "
                             "must be strings")
        if isinstance(world, bool) or not isinstance(world, int) or world < 1:
            raise ValueError("mlpo.torch: mlpo state dict: 'world_size' "
                             f"{world!r} is not a positive integer")
        if not isinstance(uuids, (list, tuple)) or len(uuids) != world or \
                not all(isinstance(u, str) for u in uuids):
            raise ValueError("mlpo.torch: mlpo state dict: 'store_uuids' "
                             "must list one identity per rank")
        if not isinstance(store, dict) or not isinstance(
                store.get("toml"), str) or not isinstance(
                store.get("base_dir"), str):
            raise ValueError("mlpo.torch: mlpo state dict: 'store' must name "
                             "the store's config (toml, base_dir)")
        tag = info["tag"]
        if info["world_size"] == self._world:
            if self._engine is None:
                self._open(restore_tag=tag)  # an interrupted step: the tag
            eng = self._engine
            theirs = info["store_uuids"][self._rank]
            if theirs != eng.store_uuid:
                raise ValueError(
                    f"mlpo.torch: the state dict is from another store "
                    f"(identity {theirs}); this optimizer's store "
                    f"{eng.meta_dir} is {eng.store_uuid}. Point store= and "
                    "name= at the store that wrote it")
            if tag not in eng.tags():
                raise ValueError(f"mlpo.torch: store {eng.meta_dir} has no "
                                 f"tag {tag!r} (dropped?)")
            eng.restore(tag)
            self._params_from_store()
            return
        self._reshard(info)

    def _reshard(self, info):
        """Reads the shards a checkpoint of another world size holds for this
        rank and imports them (into a fresh store)."""
        store = info["store"]
        reader = _mlpo.CheckpointReader(store["toml"], store["base_dir"],
                                        info.get("store_name") or
                                        _store_name(info["name"],
                                                    info["world_size"]),
                                        info["tag"])
        if list(reader.store_uuids) != list(info["store_uuids"]):
            raise ValueError("mlpo.torch: the checkpoint's stores were "
                             "replaced since the state dict was written")
        self._check_manifest_of(json.loads(reader.manifest()))
        eng = self._require_engine()

        def fill(g, off, n):
            return reader.read(g, self._layout[g]["start"] + off, n)

        eng.import_state(reader.step, fill)
        eng.tag(f"step-{reader.step}")
        self._params_from_store()

    def _check_manifest_of(self, other):
        diff = _model_difference(other, self._manifest)
        if diff is not None:
            raise ValueError(
                "mlpo.torch: the checkpoint was written for another model "
                f"(checkpoint {diff[0]}, model {diff[1]})")

    def _import_torch(self, sd):
        """torch.optim.AdamW/Adam state -> this store, at its step."""
        state = sd.get("state", {})
        if not isinstance(state, dict):
            raise ValueError("mlpo.torch: the state dict's 'state' is "
                             f"{type(state).__name__}, not a dict")
        entries = [e for l in self._layout for e in l["entries"]]
        if not state:
            return  # never stepped: nothing but hyperparameters
        steps = set()
        for e in entries:
            s = state.get(e["index"])
            if s is None:
                raise ValueError(f"mlpo.torch: the state dict has no state "
                                 f"for parameter {e['index']} ({e['name']})")
            if not isinstance(s, dict):
                raise ValueError(f"mlpo.torch: state of {e['name']} is "
                                 f"{type(s).__name__}, not a dict")
            for k in ("exp_avg", "exp_avg_sq", "step"):
                if k not in s:
                    raise ValueError(f"mlpo.torch: state of {e['name']} "
                                     f"lacks {k!r}")
            for k in ("exp_avg", "exp_avg_sq"):
                x = s[k]
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
            if bool((s["exp_avg_sq"] < 0).any()):
                raise ValueError(f"mlpo.torch: exp_avg_sq of {e['name']} has "
                                 "negative values")
            steps.add(_step_number(s["step"], e["name"]))
        if len(steps) != 1:
            raise ValueError(f"mlpo.torch: parameters are at different steps "
                             f"{sorted(steps)}")
        t = steps.pop()
        eng = self._require_engine()

        def fill(g, off, n):
            lo = self._layout[g]["start"] + off
            out = [torch.empty(n, dtype=torch.float32) for _ in range(3)]
            for e in self._layout[g]["entries"]:
                a = max(lo, e["offset"])
                b = min(lo + n, e["offset"] + e["numel"])
                if a >= b:
                    continue
                s = state[e["index"]]
                src = (e["param"].detach(), s["exp_avg"], s["exp_avg_sq"])
                for dst, x in zip(out, src):
                    dst[a - lo:b - lo] = x.reshape(-1)[
                        a - e["offset"]:b - e["offset"]].float()
            return tuple(x.numpy() for x in out)

        eng.import_state(t, fill)
        eng.tag(f"step-{t}")




def _check_hyper(group, g):
    """A loaded param group's hyperparameters, as the constructor checks
    them: ValueError before anything changes."""
    for key in ("lr", "eps", "weight_decay"):
        if key in group:
            v = group[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                    not math.isfinite(v) or v < 0:
                raise ValueError(f"mlpo.torch: param group {g} of the state "
                                 f"dict has an invalid {key} {v!r}")
    if "betas" in group:
        b = group["betas"]
        if not isinstance(b, (list, tuple)) or len(b) != 2 or not all(
                not isinstance(x, bool) and isinstance(x, (int, float)) and
                0.0 <= x < 1.0 for x in b):
            raise ValueError(f"mlpo.torch: param group {g} of the state dict "
                             f"has invalid betas {b!r}")


def _step_number(step, name):
    """A torch state's step (int, float or 0-d tensor) as a positive int."""
    if isinstance(step, torch.Tensor):
        if step.numel() != 1:
            raise ValueError(f"mlpo.torch: step of {name} is a tensor of "
                             f"{step.numel()} elements")
        step = step.item()
    if isinstance(step, bool) or not isinstance(step, (int, float)) or \
            not math.isfinite(step) or step < 1 or step != int(step):
        raise ValueError(f"mlpo.torch: step of {name} is {step!r}, not a "
                         "positive whole number")
    return int(step)


def _step_tag_key(tag):
    """(step, k) of an automatic tag "step-<t>" or "step-<t>.<k>", else
    None."""
    if not tag.startswith("step-"):
        return None
    step, _, k = tag[5:].partition(".")
    if not step.isdigit() or (k and not k.isdigit()):
        return None
    return (int(step), int(k) if k else 0)


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
    reader = _mlpo.CheckpointReader(toml, base, store_name, tag or "")
    manifest = json.loads(reader.manifest())
    state, masters = {}, {}
    groups = []
    for g, gm in enumerate(manifest["groups"]):
        p, m, v = (torch.from_numpy(x) for x in
                   reader.read(g, 0, gm["flat_numel"]))
        indices = []
        for i, pm in enumerate(manifest["params"]):
            if pm["group"] != g:
                continue
            sl = slice(pm["offset"], pm["offset"] + pm["numel"])
            shape = tuple(pm["shape"])
            state[i] = {"step": torch.tensor(float(reader.step)),
                        "exp_avg": m[sl].clone().view(shape),
                        "exp_avg_sq": v[sl].clone().view(shape)}
            masters[pm["name"]] = p[sl].clone().view(shape)
            indices.append(i)
        groups.append({"lr": gm["lr"], "betas": tuple(gm["betas"]),
                       "eps": gm["eps"], "weight_decay": gm["weight_decay"],
                       "amsgrad": False, "maximize": False, "foreach": None,
                       "capturable": False, "differentiable": False,
                       "fused": None, "params": indices})
    return {"state": state, "param_groups": groups,
            "master_params": masters,
            "param_names": [pm["name"] for pm in manifest["params"]]}
