"""A DeepSpeed ZeRO checkpoint's optimizer state, into an mlpo store.

    import mlpo.deepspeed, mlpo.torch
    opt = mlpo.torch.AdamW(model.named_parameters(), lr=..., store=[...])
    mlpo.deepspeed.load_checkpoint(opt, "ckpt_dir", model=model)
    # training goes on where DeepSpeed's own resume (load_checkpoint) would

A team moving from DeepSpeed ZeRO (stage 1, 2 or 3, any number of data
parallel ranks, fp32 masters and Adam moments partitioned per rank) keeps
its optimizer state: each rank's `zero_pp_rank_<r>_mp_rank_00_optim_states.pt`
is read, the partitions put back together into each parameter's fp32
master, exp_avg and exp_avg_sq (by the names DeepSpeed recorded), and
loaded into the optimizer as a torch.optim dict is (the store takes the
masters, the moments and the step count; with data parallel every rank
takes its shard). `model=` also loads the module's weights DeepSpeed
saved (`mp_rank_00_model_states.pt`), as DeepSpeed's resume does.
Parameters are matched by name where the optimizer has names
(`named_parameters()`), else by position; shapes always. Anything that
does not match (another model, a rank's file missing, tensor or pipeline
parallel) raises naming the file, before anything changes.
"""
import glob
import os
import re

import torch

__all__ = ["load_checkpoint", "read_checkpoint"]

_OPTIM = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt")


def _load(path):
    try:
        # DeepSpeed pickles its own classes (fragment addresses, enums):
        # the checkpoint is the user's own, as for DeepSpeed's resume.
        return torch.load(path, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        raise
    except Exception as e:  # noqa: BLE001 -- a damaged or foreign file
        raise ValueError(f"mlpo.deepspeed: {path} cannot be read as a "
                         f"DeepSpeed checkpoint file ({e})") from None


def _tag_dir(ckpt_dir, tag):
    if tag is None:
        latest = os.path.join(ckpt_dir, "latest")
        try:
            with open(latest) as f:
                tag = f.read().strip()
        except FileNotFoundError:
            raise FileNotFoundError(
                f"mlpo.deepspeed: {latest} is missing: name the checkpoint "
                "with tag= (a folder of " f"{ckpt_dir})") from None
    d = os.path.join(ckpt_dir, str(tag))
    if not os.path.isdir(d):
        raise FileNotFoundError(f"mlpo.deepspeed: no checkpoint folder {d}")
    return d


def _rank_files(d):
    files = {}
    for path in glob.glob(os.path.join(d, "*_optim_states.pt")):
        m = _OPTIM.fullmatch(os.path.basename(path))
        if m is None:
            continue
        if m.group(2) != "00":
            raise ValueError(
                f"mlpo.deepspeed: {path}: a checkpoint of tensor or "
                "pipeline parallel training (mp_rank_" f"{m.group(2)}); only "
                "data parallel ZeRO checkpoints (mp_rank_00) are read")
        files[int(m.group(1))] = path
    if not files:
        raise FileNotFoundError(
            f"mlpo.deepspeed: {d} holds no ZeRO optimizer state "
            "(zero_pp_rank_<r>_mp_rank_00_optim_states.pt)")
    return files


class _Param:
    def __init__(self, name, shape):
        self.name, self.shape = name, torch.Size(shape)
        self.parts = {"master": [], "exp_avg": [], "exp_avg_sq": []}
        self.step = None

    def take(self, what, t):
        self.parts[what].append(t.detach().float().reshape(-1))

    def full(self, what, where):
        n = self.shape.numel()
        t = torch.cat(self.parts[what]) if self.parts[what] else \
            torch.empty(0)
        if t.numel() < n:
            raise ValueError(
                f"mlpo.deepspeed: {where}: {what} of {self.name} holds "
                f"{t.numel()} of its {n} elements (a rank's partition is "
                "missing or of another checkpoint)")
        return t[:n].reshape(self.shape).clone()


def read_checkpoint(ckpt_dir, tag=None):
    """{name: {"master", "exp_avg", "exp_avg_sq": fp32 tensors, "step":
    int, "group": DeepSpeed's group index}} in DeepSpeed's parameter order,
    the groups' hyperparameters, and the model states file's path."""
    d = _tag_dir(ckpt_dir, tag)
    files = _rank_files(d)
    first = _load(files[min(files)])
    osd = first.get("optimizer_state_dict") if isinstance(first, dict) \
        else None
    if not isinstance(osd, dict) or "zero_stage" not in osd:
        raise ValueError(f"mlpo.deepspeed: {files[min(files)]} is not a "
                         "ZeRO optimizer state file")
    stage = int(getattr(osd["zero_stage"], "value", osd["zero_stage"]))
    counts = osd.get("partition_count")
    world = max(counts) if isinstance(counts, (list, tuple)) else int(counts)
    missing = [r for r in range(world) if r not in files]
    if missing:
        raise FileNotFoundError(
            f"mlpo.deepspeed: {d}: the checkpoint of {world} ranks lacks "
            "the optimizer state of rank(s) "
            f"{', '.join(map(str, missing))} (zero_pp_rank_<r>_mp_rank_00_"
            "optim_states.pt); copy every rank's file into the folder")
    if stage in (1, 2):
        params, groups, model_file = _read_zero12(d, files, world, first)
    elif stage == 3:
        params, groups, model_file = _read_zero3(d, files, world, first)
    else:
        raise ValueError(f"mlpo.deepspeed: {d}: ZeRO stage {stage} is not "
                         "one mlpo reads (1, 2 or 3)")
    out = {}
    for p in params:
        out[p.name] = {w: p.full(w, d) for w in p.parts}
        out[p.name]["step"] = p.step
        out[p.name]["group"] = p.group
    return out, groups, model_file


def _base_state(osd, where):
    base = osd.get("base_optimizer_state")
    if base is None:
        base = osd.get("optimizer_state_dict")
    if not isinstance(base, dict) or "state" not in base:
        raise ValueError(f"mlpo.deepspeed: {where}: no Adam state in it")
    return base


def _step_of(st, where):
    s = st.get("step")
    if s is None:
        raise ValueError(f"mlpo.deepspeed: {where}: its Adam state has no "
                         "step (not an Adam/AdamW checkpoint?)")
    return int(float(s))


def _rank_states(files, world, first):
    """(rank, its ZeRO optimizer_state_dict, the base optimizer's state,
    its groups' hyperparameters) of each rank in turn, one file read at a
    time (`first`: rank 0's, read already)."""
    for r in range(world):
        data = first if r == min(files) else _load(files[r])
        osd = data["optimizer_state_dict"]
        base = _base_state(osd, files[r])
        yield r, osd, base, [{k: v for k, v in g.items() if k != "params"}
                             for g in base["param_groups"]]


def _read_zero12(d, files, world, first):
    """ZeRO 1/2: each group flattened and cut into `world` equal
    partitions; each rank's file maps the names it holds to (numel,
    start) in its partition (param_slice_mappings)."""
    params, groups = {}, None
    for r, osd, base, g_hyper in _rank_states(files, world, first):
        groups = groups or g_hyper
        maps = osd.get("param_slice_mappings")
        fp32 = osd.get("single_partition_of_fp32_groups")
        if maps is None or fp32 is None:
            raise ValueError(f"mlpo.deepspeed: {files[r]}: a ZeRO 1/2 file "
                             "without param_slice_mappings (DeepSpeed older "
                             "than 0.9?)")
        for g, mapping in enumerate(maps):
            st = base["state"].get(g, {})
            for name, frag in mapping.items():
                p = params.get(name)
                if p is None:
                    p = params[name] = _Param(name, (0,))
                    p.group = g
                lo, n = int(frag.start), int(frag.numel)
                p.take("master", fp32[g][lo:lo + n])
                for w in ("exp_avg", "exp_avg_sq"):
                    if w not in st:
                        raise ValueError(f"mlpo.deepspeed: {files[r]}: "
                                         f"group {g} has no {w}")
                    p.take(w, st[w][lo:lo + n])
                p.step = _step_of(st, files[r])
    model_file = os.path.join(d, "mp_rank_00_model_states.pt")
    shapes = _load(model_file).get("param_shapes")
    ordered = []
    for g_shapes in shapes or []:
        for name, shape in g_shapes.items():
            if name not in params:
                raise ValueError(f"mlpo.deepspeed: {d}: no optimizer state "
                                 f"for {name} in any rank's file")
            params[name].shape = torch.Size(shape)
            ordered.append(params[name])
    if len(ordered) != len(params):
        raise ValueError(f"mlpo.deepspeed: {model_file}: its param_shapes "
                         "do not list every parameter the optimizer holds")
    return ordered, groups, model_file


def _read_zero3(d, files, world, first):
    """ZeRO 3: every parameter cut into `world` partitions of
    ceil(numel / world) (the last padded); a rank's flat group is its
    partitions of the group's parameters in order."""
    params, groups = [], None
    for r, osd, base, g_hyper in _rank_states(files, world, first):
        groups = groups or g_hyper
        flat = osd.get("fp32_flat_groups")
        mfile = os.path.join(d, f"zero_pp_rank_{r}_mp_rank_00_model_states.pt")
        if not os.path.exists(mfile):
            raise FileNotFoundError(f"mlpo.deepspeed: {mfile} is missing "
                                    "(ZeRO 3 keeps each rank's parameter "
                                    "shapes there)")
        shapes = _load(mfile).get("param_shapes")
        if flat is None or shapes is None:
            raise ValueError(f"mlpo.deepspeed: {files[r]}: a ZeRO 3 file "
                             "without fp32_flat_groups or param_shapes")
        k = 0
        for g, g_shapes in enumerate(shapes):
            st = base["state"].get(g, {})
            off = 0
            for name, shape in g_shapes.items():
                if r == 0:
                    p = _Param(name, shape)
                    p.group = g
                    params.append(p)
                p = params[k]
                k += 1
                part = -(-p.shape.numel() // world)
                p.take("master", flat[g][off:off + part])
                for w in ("exp_avg", "exp_avg_sq"):
                    p.take(w, st[w][off:off + part])
                p.step = _step_of(st, files[r])
                off += part
    model_file = os.path.join(d, "zero_pp_rank_0_mp_rank_00_model_states.pt")
    return params, groups, model_file


def load_checkpoint(opt, ckpt_dir, tag=None, model=None):
    """Loads DeepSpeed's ZeRO checkpoint `ckpt_dir`/`tag` (tag None: the
    one `latest` names) into mlpo.torch optimizer `opt` (see the module's
    text); with `model`, the module's weights too. Returns the step count
    the optimizer continues from."""
    from .torch import _MlpoOptimizer
    if not isinstance(opt, _MlpoOptimizer):
        raise TypeError("mlpo.deepspeed.load_checkpoint: opt must be an "
                        f"mlpo.torch optimizer, not {type(opt).__name__}")
    if opt._ranks.fsdp:
        raise ValueError("mlpo.deepspeed.load_checkpoint: an FSDP optimizer "
                         "(its parameters are shards): load the DeepSpeed "
                         "checkpoint in one process or mlpo's data "
                         "parallel, save state_dict(), and load that into "
                         "the FSDP run (it reshards)")
    got, _, model_file = read_checkpoint(ckpt_dir, tag)
    where = os.path.dirname(model_file)
    theirs = list(got)
    entries = [e for l in opt._layout for e in l["entries"]]
    named = all(not re.fullmatch(r"param\.[0-9]+", e["name"])
                for e in entries)
    if len(entries) != len(theirs):
        raise ValueError(
            f"mlpo.deepspeed: {where} holds the state of {len(theirs)} "
            f"parameters and this optimizer has {len(entries)}: a checkpoint "
            "of another model (or of frozen parameters DeepSpeed did not "
            "optimize); nothing was changed")
    state, masters = {}, {}
    for e in sorted(entries, key=lambda e: e["index"]):
        name = e["name"] if named else theirs[e["index"]]
        s = got.get(name)
        if s is None:
            raise ValueError(
                f"mlpo.deepspeed: {where} has no state for {name} (its "
                f"parameters are {', '.join(theirs[:4])}"
                f"{', ...' if len(theirs) > 4 else ''}): a checkpoint of "
                "another model; nothing was changed")
        if tuple(s["master"].shape) != tuple(e["shape"]):
            raise ValueError(
                f"mlpo.deepspeed: {where}: {name} is {list(s['master'].shape)}"
                f" there and {list(e['shape'])} here: a checkpoint of another"
                " model; nothing was changed")
        state[e["index"]] = {"step": torch.tensor(float(s["step"])),
                             "exp_avg": s["exp_avg"],
                             "exp_avg_sq": s["exp_avg_sq"]}
        masters[e["name"]] = s["master"]
    module = None
    if model is not None:
        module = _load(model_file).get("module")
        if not isinstance(module, dict):
            raise ValueError(f"mlpo.deepspeed: {model_file} holds no module "
                             "weights (ZeRO 3 keeps them partitioned): leave "
                             "model= out, the masters give the parameters")
    groups = [{**{k: v for k, v in g.items() if k != "params"},
               "params": [e["index"] for e in l["entries"]]}
              for g, l in zip(opt.param_groups, opt._layout)]
    # The parameters become the masters in the model's dtype, as
    # DeepSpeed's resume leaves them: before the load, so that the
    # optimizer takes them as they are (not as an edit of the model), and
    # put back if the load refuses.
    before = [e["dparam"].detach().clone() for e in entries]
    with torch.no_grad():
        for e in entries:
            e["dparam"].copy_(masters[e["name"]].to(e["dparam"].dtype))
    try:
        opt.load_state_dict({"state": state, "param_groups": groups,
                             "master_params": masters})
    except BaseException:
        with torch.no_grad():
            for e, b in zip(entries, before):
                e["dparam"].copy_(b)
        raise
    if module is not None:
        # Its buffers (its parameters are the masters already: loading
        # them again would look like an edit of the model to the optimizer).
        params = dict(model.named_parameters())
        model.load_state_dict({k: v for k, v in module.items()
                               if k not in params}, strict=False)
    return opt.step_count
