"""How an mlpo.torch optimizer lays out its parameters, as a value: the
parameters and names it was given, each group's flat vector and this
rank's shard of it, the engine's parameters (the pieces of the shard), the
device path, and the manifest the store keeps. `build_layout` makes one
from the optimizer's groups (at construction, and again when a group is
added); nothing in it changes afterwards. check_groups and grad_of read
the model against it at each step."""
import warnings

import torch

from ._session import _DTYPES, MANIFEST_FORMAT
from ._reshard import (fsdp_group_sizes, fsdp_rows, local_shard,
                       row_numel)
from ._rules import manifest_hyper
from ._stand_in import grad_of as stand_in_grad, stand_in_for


def split_names(params):
    """Accepts parameters, (name, parameter) pairs, or groups of either;
    returns them as torch groups and {id(param): name}."""
    if isinstance(params, torch.Tensor):
        raise TypeError("params argument given to the optimizer should be "
                        "an iterable of Tensors or dicts, but got a Tensor")
    params = list(params)
    names = {}

    def strip(seq):
        # (name, parameter) pairs stay pairs: torch.optim (2.6 on) turns
        # them into the group's "param_names", which its state dicts carry.
        out, seen = [], set()
        for item in seq:
            x = item
            if (isinstance(x, tuple) and len(x) == 2
                    and isinstance(x[0], str)):
                names[id(x[1])] = x[0]
                x = x[1]
            if id(x) in seen:
                # torch.optim warns and keeps it (updating it twice a
                # step); one tensor has one state in the store, so mlpo
                # keeps it once, and says so.
                warnings.warn(
                    "optimizer contains a parameter group with duplicate "
                    "parameters; in future, this will cause an error; "
                    "see github.com/pytorch/pytorch/issues/40967 for more "
                    "information (mlpo.torch keeps the parameter once" +
                    (f": {names[id(x)]!r}" if id(x) in names else "") +
                    ", and updates it once a step)", stacklevel=4)
                continue
            seen.add(id(x))
            out.append(item)
        return out

    if params and isinstance(params[0], dict):
        groups = []
        for g in params:
            g = dict(g)
            ps = g["params"]
            g["params"] = strip([ps] if isinstance(ps, torch.Tensor)
                                else list(ps))
            groups.append(g)
        return groups, names
    return strip(params), names


class Layout:
    """A sequence of group layouts (dicts: entries, flat, chunk, start,
    numel, pieces), and what they add up to:

    pieces      the engine's parameters, in flat order: (group, entry,
                start in the parameter, count, offset in the shard)
    piece_of    {id(model parameter): its piece} (one per rank)
    dtype       the parameters' dtype (float32 when mixed)
    mixed       several dtypes (one process on the CPU only)
    device      the parameters' one device
    device_path (backend, device index) of the device path, or None
    manifest    what the store keeps of the model (names, shapes, groups)
    n_params    how many model parameters it lays out
    """
    __slots__ = ("groups", "pieces", "piece_of", "dtype", "mixed", "device",
                 "device_path", "manifest", "n_params")

    def __iter__(self):
        return iter(self.groups)

    def __len__(self):
        return len(self.groups)

    def __getitem__(self, g):
        return self.groups[g]

    @property
    def entries(self):
        """Every model parameter's entry, group by group."""
        return [e for l in self.groups for e in l["entries"]]

    @property
    def grad_dt(self):
        """The gradients' dtype as the engine names it."""
        return "f32" if self.mixed else _DTYPES[self.dtype]

    def shard_pieces(self, g):
        """(entry, start within param, count, offset within shard) for
        every piece of this rank's shard of group g."""
        for k in self.groups[g]["pieces"]:
            _, e, at, n, off = self.pieces[k]
            yield e, at, n, off


def build_layout(param_groups, names, *, mode, world, rank, fsdp,
                 subgroup_numel, state_format, device_backend):
    """The Layout of `param_groups` (torch's groups) for rank `rank` of
    `world` (fully_shard's shards when `fsdp`): flat offsets of every
    parameter within its group, this rank's shard of each group, the
    pieces and the manifest. A ValueError for parameters mlpo cannot
    take."""
    out = Layout()
    layout = []
    index = 0
    manifest_params = []
    dtypes = set()
    for g, group in enumerate(param_groups):
        entries, off = [], 0
        for dp in group["params"]:
            p = local_shard(dp)  # dp itself but for FSDP's shards
            name = names.get(id(dp), f"param.{index}")
            check_param(p, name)
            # complex: the real view; float64 or with gaps: a stand-in
            p, model = stand_in_for(p)
            if model is not None and (world > 1 or fsdp):
                raise ValueError(
                    f"mlpo.torch: parameter {name} ({dp.dtype}, strides "
                    f"{list(dp.stride())}) needs a stand-in copy "
                    "(float64, or gaps in memory), which mlpo makes in "
                    "one process only; with data parallel use float32, "
                    "bfloat16 or float16 parameters in a dense layout")
            dtypes.add(p.dtype)
            entries.append(dict(param=p, dparam=dp, name=name, model=model,
                                offset=off, group=g, numel=p.numel(),
                                shape=tuple(p.shape),
                                stride=tuple(p.stride()),
                                dtype=p.dtype, index=index))
            if fsdp:
                rows = _fsdp_rows(dp, world, rank)
                entries[-1]["elem0"] = rows[0] * row_numel(dp.shape)
            manifest_params.append(dict(
                name=name,
                shape=list(dp.shape if fsdp else p.shape),
                dtype=_DTYPES[p.dtype],
                group=g, offset=off, numel=p.numel(),
                stride=list(p.stride()),
                **({"rows": rows} if fsdp else {})))
            off += p.numel()
            index += 1
        if fsdp:
            # This rank's shards are its whole state. The manifest places
            # them in rank-major coordinates (rank 0's shards, then rank
            # 1's, ...): each rank's one contiguous range, as the
            # checkpoint reader takes them (_reshard.py).
            sizes = fsdp_group_sizes([e["dparam"].shape for e in entries],
                                     world)
            base = sum(sizes[:rank])
            for m in manifest_params[len(manifest_params) - len(entries):]:
                m["offset"] += base
            flat, chunk, start, end = sum(sizes), off, 0, off
            extra = dict(manifest_start=base)
        else:  # ZeRO: rank r holds the r-th chunk of the flat group
            chunk = -(-off // world) if off else 0
            start = min(off, rank * chunk)
            flat, end, extra = off, min(off, start + chunk), {}
        layout.append(dict(entries=entries, flat=flat, chunk=chunk,
                           start=start, numel=end - start, **extra))
    if not dtypes:
        raise ValueError("mlpo.torch: optimizer got an empty parameter "
                         "list")
    out.groups = layout
    out.n_params = index
    out.mixed = len(dtypes) > 1
    out.dtype = dtypes.pop() if not out.mixed else torch.float32
    devices = {e["param"].device for e in out.entries}
    if len(devices) > 1:
        raise ValueError(
            "mlpo.torch: parameters are on several devices "
            f"({', '.join(sorted(str(d) for d in devices))}); put the "
            "model on one device")
    out.device = devices.pop()
    if out.mixed and (world > 1 or out.device.type != "cpu"):
        raise ValueError(
            "mlpo.torch: parameters of several dtypes are supported on the "
            "CPU in one process; with data parallel or CUDA give every "
            "parameter one dtype")
    out.device_path = _pick_device_path(device_backend, out.device, world)
    out.pieces = []
    for g, l in enumerate(layout):
        lo, hi = l["start"], l["start"] + l["numel"]
        l["pieces"] = []
        for e in l["entries"]:
            a, b = max(lo, e["offset"]), min(hi, e["offset"] + e["numel"])
            if a < b:
                l["pieces"].append(len(out.pieces))
                out.pieces.append((g, e, a - e["offset"], b - a, a - lo))
    out.piece_of = {id(e["dparam"]): k
                    for k, (g, e, at, n, off) in enumerate(out.pieces)}
    out.manifest = dict(
        format=MANIFEST_FORMAT, world=world, rank=rank,
        subgroup_numel=subgroup_numel, state_format=state_format,
        groups=[dict(flat_numel=l["flat"],
                     shard_start=l.get("manifest_start", l["start"]),
                     shard_numel=l["numel"], **manifest_hyper(mode, group))
                for group, l in zip(param_groups, layout)],
        params=manifest_params,
        **({"sharding": "fsdp"} if fsdp else {}))
    return out


def _fsdp_rows(dp, world, rank):
    """[first, end) of the global dim-0 rows rank `rank`'s shard of
    DTensor `dp` holds: fully_shard gives rank r torch.chunk's r-th piece,
    which is what fsdp_rows computes for every rank."""
    first, end = fsdp_rows(dp.shape, world, rank)
    local = local_shard(dp)
    if (end - first) * row_numel(dp.shape) != local.numel():
        raise ValueError(
            f"mlpo.torch: a DTensor parameter of shape {list(dp.shape)} "
            f"holds {local.numel()} elements on rank {rank} of {world}, not "
            f"rows [{first}, {end}) of dim 0 as fully_shard lays them out")
    return [first, end]


def check_param(p, name):
    """A ValueError or TypeError for a parameter mlpo cannot take."""
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"mlpo.torch: {name} is not a tensor")
    if p.device.type not in ("cpu", "cuda"):
        raise ValueError(
            f"mlpo.torch: parameter {name} is on {p.device}; mlpo takes "
            "CPU and CUDA tensors")
    if p.layout != torch.strided:
        raise ValueError(f"mlpo.torch: parameter {name} is sparse")
    if p.dtype not in _DTYPES and p.dtype not in (
            torch.float64, torch.complex64, torch.complex128):
        raise ValueError(f"mlpo.torch: parameter {name} has dtype "
                         f"{p.dtype}; mlpo takes float32, bfloat16, "
                         "float16, float64 (optimized in fp32) and "
                         "complex (as its real view)")


def _pick_device_path(want, device, world):
    """(backend name, device index) for the device path, or None."""
    on_cuda = device.type == "cuda"
    if want == "cuda" and not on_cuda:
        raise ValueError("mlpo.torch: device_backend='cuda' needs the "
                         f"parameters on a CUDA device, not {device}")
    if want == "host" and on_cuda:
        raise ValueError("mlpo.torch: device_backend='host' copies with "
                         "memcpy and needs CPU parameters")
    if world > 1:
        if want == "host":
            raise ValueError("mlpo.torch: device_backend='host' is for one "
                             "process")
        return None  # PyTorch's own copies around the collectives
    if on_cuda:
        return ("cuda", device.index or 0)
    if want == "host":
        return ("host", 0)
    return None


def grad_of(e, mixed):
    """The gradient of layout entry `e` in the parameter's memory order
    (as fp32 when the layout is `mixed`), or None (no gradient: the
    parameter is skipped)."""
    p = e["param"]
    if p.dtype != e["dtype"] or tuple(p.shape) != e["shape"]:
        raise ValueError(
            f"mlpo.torch: parameter {e['name']} changed from "
            f"{e['dtype']} {list(e['shape'])} to {p.dtype} "
            f"{list(p.shape)} since the optimizer was made")
    if tuple(p.stride()) != e["stride"]:
        raise ValueError(
            f"mlpo.torch: parameter {e['name']} changed its memory "
            f"layout (strides {list(e['stride'])} -> "
            f"{list(p.stride())}) since the optimizer was made")
    grad = e["dparam"].grad
    if grad is None:
        return None
    if hasattr(grad, "to_local"):  # FSDP's: this rank's shard of it
        grad = grad.to_local()
    grad = stand_in_grad(e, grad)
    if grad.is_sparse:
        raise RuntimeError(
            f"mlpo.torch: parameter {e['name']} has a sparse gradient; "
            "Adam does not support sparse gradients")
    if grad.dtype != p.dtype or grad.shape != p.shape:
        raise ValueError(f"mlpo.torch: gradient of {e['name']} is "
                         f"{grad.dtype} {list(grad.shape)}, the "
                         f"parameter {p.dtype} {list(p.shape)}")
    if grad.device != p.device:
        raise ValueError(f"mlpo.torch: gradient of {e['name']} is on "
                         f"{grad.device}")
    if grad.stride() != p.stride():
        grad = torch.empty_like(p).copy_(grad)
    if mixed and grad.dtype != torch.float32:
        grad = torch.empty_like(p, dtype=torch.float32).copy_(grad)
    return grad


def check_groups(param_groups, layout, fsdp):
    """ValueError unless `param_groups` hold the parameters `layout` was
    made for (`fsdp`: as fully_shard's DTensors): one added to, removed
    from or replaced in a group's 'params' by hand would be left out of
    the update without a word (or updated all the same)."""
    if len(param_groups) != len(layout):
        raise ValueError(
            f"mlpo.torch: the optimizer has {len(param_groups)} "
            f"param groups and was made with {len(layout)}: "
            "groups are added with add_param_group; nothing was changed")
    for g, (group, l) in enumerate(zip(param_groups, layout)):
        ps, es = group["params"], l["entries"]
        if not fsdp and any(hasattr(p, "device_mesh")
                                        for p in ps):
            raise ValueError(
                f"mlpo.torch: param group {g}'s parameters were replaced "
                "by FSDP's sharded ones (DTensors) after the optimizer "
                "was made, as Accelerate's and Trainer's FSDP plugins "
                "do; mlpo lays its store out for the parameters it is "
                "given. Call fully_shard on the model first and make "
                "the optimizer from its parameters then, in your own "
                "loop (docs/coming-from.md); nothing was changed")
        if len(ps) != len(es) or any(p is not e["dparam"]
                                     for p, e in zip(ps, es)):
            raise ValueError(
                f"mlpo.torch: param group {g}'s 'params' changed since "
                "the optimizer was made (a parameter added, removed or "
                "replaced by hand); mlpo lays its store out for them "
                "once. Add parameters with add_param_group; leave one "
                "out of the update with grad None or requires_grad_("
                "False); nothing was changed")
