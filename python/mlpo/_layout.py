"""How an mlpo.torch optimizer lays out its parameters (a mixin of the
optimizer class in torch.py): the parameters and names it was given, each
group's flat vector and this rank's shard of it, the engine's parameters
(the pieces of the shard), the device path, and the manifest the store
keeps."""
import warnings

import torch

from ._checkpoints import _MANIFEST_FORMAT
from ._opening import _DTYPES
from ._reshard import (fsdp_group_sizes, fsdp_rows, local_shard,
                       row_numel)
from ._stand_in import stand_in_for


class Layout:
    @staticmethod
    def _split_names(params):
        """Accepts parameters, (name, parameter) pairs, or groups of either;
        returns them as torch groups and {id(param): name}."""
        if isinstance(params, torch.Tensor):
            raise TypeError("params argument given to the optimizer should be "
                            "an iterable of Tensors or dicts, but got a Tensor")
        params = list(params)
        names = {}

        def strip(seq):
            # (name, parameter) pairs stay pairs: torch.optim (2.6 on)
            # turns them into the group's "param_names", which its state
            # dicts carry.
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

    def _make_layout(self):
        """Flat offsets of every parameter within its group, this rank's
        shard of each group, the engine's parameters (the pieces of the
        shard, one per model parameter it overlaps) and the manifest."""
        layout = []
        index = 0
        manifest_params = []
        dtypes = set()
        for g, group in enumerate(self.param_groups):
            entries, off = [], 0
            for dp in group["params"]:
                p = local_shard(dp)  # dp itself but for FSDP's shards
                name = self._names.get(id(dp), f"param.{index}")
                self._check_param(p, name)
                # complex: the real view; float64 or with gaps: a stand-in
                p, model = stand_in_for(p)
                if model is not None and (self._world > 1 or self._fsdp):
                    raise ValueError(
                        f"mlpo.torch: parameter {name} ({dp.dtype}, strides "
                        f"{list(dp.stride())}) needs a stand-in copy "
                        "(float64, or gaps in memory), which mlpo makes in "
                        "one process only; with data parallel use float32, "
                        "bfloat16 or float16 parameters in a dense layout")
                dtypes.add(p.dtype)
                entries.append(dict(param=p, dparam=dp, name=name,
                                    model=model,
                                    offset=off, group=g, numel=p.numel(),
                                    shape=tuple(p.shape),
                                    stride=tuple(p.stride()),
                                    dtype=p.dtype, index=index))
                if self._fsdp:
                    rows = self._fsdp_rows(dp)
                    entries[-1]["elem0"] = rows[0] * row_numel(dp.shape)
                manifest_params.append(dict(
                    name=name,
                    shape=list(dp.shape if self._fsdp else p.shape),
                    dtype=_DTYPES[p.dtype],
                    group=g, offset=off, numel=p.numel(),
                    stride=list(p.stride()),
                    **({"rows": rows} if self._fsdp else {})))
                off += p.numel()
                index += 1
            if self._fsdp:
                # This rank's shards are its whole state. The manifest
                # places them in rank-major coordinates (rank 0's shards,
                # then rank 1's, ...): each rank's one contiguous range, as
                # the checkpoint reader takes them (_reshard.py).
                sizes = fsdp_group_sizes(
                    [e["dparam"].shape for e in entries], self._world)
                base = sum(sizes[:self._rank])
                for m in manifest_params[len(manifest_params) -
                                         len(entries):]:
                    m["offset"] += base
                flat, chunk, start, end = sum(sizes), off, 0, off
                extra = dict(manifest_start=base)
            else:  # ZeRO: rank r holds the r-th chunk of the flat group
                chunk = -(-off // self._world) if off else 0
                start = min(off, self._rank * chunk)
                flat, end, extra = off, min(off, start + chunk), {}
            layout.append(dict(entries=entries, flat=flat, chunk=chunk,
                               start=start, numel=end - start, **extra))
        if not dtypes:
            raise ValueError("mlpo.torch: optimizer got an empty parameter "
                             "list")
        self._mixed = len(dtypes) > 1
        self._dtype = dtypes.pop() if not self._mixed else torch.float32
        devices = {e["param"].device for l in layout for e in l["entries"]}
        if len(devices) > 1:
            raise ValueError(
                "mlpo.torch: parameters are on several devices "
                f"({', '.join(sorted(str(d) for d in devices))}); put the "
                "model on one device")
        self._device = devices.pop()
        if self._mixed and (self._world > 1 or self._device.type != "cpu"):
            raise ValueError(
                "mlpo.torch: parameters of several dtypes are supported on "
                "the CPU in one process; with data parallel or CUDA give "
                "every parameter one dtype")
        self._device_path = self._pick_device_path()
        # The engine's parameters: (group, entry, start in param, count,
        # offset in the shard), in flat order.
        self._pieces = []
        for g, l in enumerate(layout):
            lo, hi = l["start"], l["start"] + l["numel"]
            l["pieces"] = []
            for e in l["entries"]:
                a, b = max(lo, e["offset"]), min(hi, e["offset"] + e["numel"])
                if a < b:
                    piece = (g, e, a - e["offset"], b - a, a - lo)
                    l["pieces"].append(len(self._pieces))
                    self._pieces.append(piece)
        # Engine parameter of each model parameter (one piece per rank).
        self._piece_of = {id(e["dparam"]): k
                          for k, (g, e, at, n, off) in enumerate(self._pieces)}
        self._manifest = dict(
            format=_MANIFEST_FORMAT, world=self._world, rank=self._rank,
            subgroup_numel=self._opts["subgroup_numel"],
            state_format=self._state_format,
            groups=[dict(flat_numel=l["flat"],
                         shard_start=l.get("manifest_start", l["start"]),
                         shard_numel=l["numel"], **self._hyper_json(g))
                    for g, l in zip(self.param_groups, layout)],
            params=manifest_params,
            **({"sharding": "fsdp"} if self._fsdp else {}))
        return layout

    def _fsdp_rows(self, dp):
        """[first, end) of the global dim-0 rows this rank's shard of
        DTensor `dp` holds: fully_shard gives rank r torch.chunk's r-th
        piece, which is what fsdp_rows computes for every rank."""
        first, end = fsdp_rows(dp.shape, self._world, self._rank)
        local = local_shard(dp)
        if (end - first) * row_numel(dp.shape) != local.numel():
            raise ValueError(
                f"mlpo.torch: a DTensor parameter of shape {list(dp.shape)} "
                f"holds {local.numel()} elements on rank {self._rank} of "
                f"{self._world}, not rows [{first}, {end}) of dim 0 as "
                "fully_shard lays them out")
        return [first, end]

    @staticmethod
    def _check_param(p, name):
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

    def _pick_device_path(self):
        """(backend name, device index) for the device path, or None."""
        want = self._device_backend_arg
        on_cuda = self._device.type == "cuda"
        if want == "cuda" and not on_cuda:
            raise ValueError("mlpo.torch: device_backend='cuda' needs the "
                             f"parameters on a CUDA device, not {self._device}")
        if want == "host" and on_cuda:
            raise ValueError("mlpo.torch: device_backend='host' copies with "
                             "memcpy and needs CPU parameters")
        if self._world > 1:
            if want == "host":
                raise ValueError("mlpo.torch: device_backend='host' is for "
                                 "one process")
            return None  # PyTorch's own copies around the collectives
        if on_cuda:
            return ("cuda", self._device.index or 0)
        if want == "host":
            return ("host", 0)
        return None
