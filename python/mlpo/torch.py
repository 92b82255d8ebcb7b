"""mlpo.torch: drop-in replacements for torch.optim.AdamW and torch.optim.Adam
whose state (fp32 master weights, exp_avg, exp_avg_sq) lives in an mlpo
store instead of host memory.

    opt = mlpo.torch.AdamW(model.named_parameters(), lr=1e-3,
                           weight_decay=0.01, store=["nvme/ckpt", "pfs/ckpt"])
    for batch in data:
        loss = model(batch).mean(); loss.backward()
        opt.step(); opt.zero_grad()
        sched.step()                        # torch.optim.lr_scheduler works
    torch.save({"opt": opt.state_dict()}, "ckpt.pt")   # a tag, not tensors

How it maps onto the engine: each parameter group's parameters, in order,
form one flat vector; its fp32 state is cut into subgroups (store objects of
p, m, v) that the C++ pipeline streams through the fused kernel. Gradients
are handed over in the model's dtype (no fp32 copy), and the new parameters
are written back into the model's tensors in place after every step. The
arithmetic follows torch.optim.AdamW / Adam operation by operation, so fp32
results match bit for bit.

Data parallel (torch.distributed initialised, e.g. gloo on CPU): ZeRO-style,
each rank owns an equal shard of every group's flat vector and keeps it in
its own store "<name>-w<W>/rank-<r>" on the shared paths; gradients are
averaged across ranks, each rank updates its shard, and the new parameters
are all-gathered. A checkpoint written by W ranks loads into W' ranks
(load_state_dict reads the old shards by the manifest's offsets).
"""
import json
import math

import torch
import torch.distributed as dist

from . import _mlpo
from . import store_config
from ._checkpoints import (CheckpointMixin, _MANIFEST_FORMAT, _model_difference,
                           _store_name, export_state_dict)

__all__ = ["AdamW", "Adam", "export_state_dict"]

_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
_TORCH_DTYPES = {v: k for k, v in _DTYPES.items()}


def _world(process_group):
    if dist.is_available() and dist.is_initialized():
        return (dist.get_world_size(process_group),
                dist.get_rank(process_group))
    return 1, 0


class _MlpoOptimizer(CheckpointMixin, torch.optim.Optimizer):
    _mode = "adamw"
    _default_weight_decay = 1e-2

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=None, amsgrad=False, *, maximize=False,
                 foreach=None, capturable=False, differentiable=False,
                 fused=None, store=None, name="mlpo", durability="step",
                 subgroup_numel=1 << 22, max_grad_norm=0.0, loss_scale=1.0,
                 prefetch=2, commits=2, threads=0, restore_tag=None,
                 keep_checkpoints=3, process_group=None,
                 device_backend=None):
        cls = type(self).__name__
        if weight_decay is None:
            weight_decay = self._default_weight_decay
        if amsgrad:
            raise ValueError(f"mlpo.torch.{cls}: amsgrad=True is not "
                             "supported (mlpo implements Adam/AdamW without "
                             "amsgrad)")
        if maximize or capturable or differentiable or fused:
            raise ValueError(f"mlpo.torch.{cls}: maximize, capturable, "
                             "differentiable and fused are not supported")
        for key, v in (("lr", lr), ("eps", eps),
                       ("weight_decay", weight_decay)):
            if not (isinstance(v, (int, float)) and math.isfinite(v)
                    and v >= 0):
                raise ValueError(f"mlpo.torch.{cls}: invalid {key} {v!r}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"mlpo.torch.{cls}: invalid betas {betas!r}")
        params, self._names = self._split_names(params)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps,
                        weight_decay=weight_decay, amsgrad=False,
                        maximize=False, foreach=foreach, capturable=False,
                        differentiable=False, fused=None)
        super().__init__(params, defaults)
        self.loss_scale = float(loss_scale)
        self.keep_checkpoints = int(keep_checkpoints)
        self.last_report = None
        self._pg = process_group
        self._world, self._rank = _world(process_group)
        if device_backend not in (None, "auto", "cuda", "host"):
            raise ValueError(f"mlpo.torch.{cls}: device_backend must be "
                             "None, 'auto', 'cuda' or 'host', not "
                             f"{device_backend!r}")
        self._device_backend_arg = device_backend
        self._name = name
        self._store_arg = store
        self._toml, self._base_dir = store_config.resolve(store)
        self._opts = dict(subgroup_numel=int(subgroup_numel),
                          max_grad_norm=float(max_grad_norm),
                          prefetch=int(prefetch), commits=int(commits),
                          threads=int(threads), durability=durability)
        self._layout = self._make_layout()
        self._engine = None
        self._open_error = None
        self._open(restore_tag)

    # -- construction ----------------------------------------------------

    @staticmethod
    def _split_names(params):
        """Accepts parameters, (name, parameter) pairs, or groups of either;
        returns plain torch groups and {id(param): name}."""
        if isinstance(params, torch.Tensor):
            raise TypeError("params argument given to the optimizer should be "
                            "an iterable of Tensors or dicts, but got a Tensor")
        params = list(params)
        names = {}

        def strip(seq):
            out = []
            for i, x in enumerate(seq):
                if (isinstance(x, tuple) and len(x) == 2
                        and isinstance(x[0], str)):
                    names[id(x[1])] = x[0]
                    out.append(x[1])
                else:
                    out.append(x)
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
        shard of each group, and the manifest that records both."""
        dtype = None
        layout = []
        index = 0
        manifest_params = []
        for g, group in enumerate(self.param_groups):
            entries, off = [], 0
            for p in group["params"]:
                name = self._names.get(id(p), f"param.{index}")
                self._check_param(p, name)
                if dtype is None:
                    dtype = p.dtype
                elif p.dtype != dtype:
                    raise ValueError(
                        f"mlpo.torch: parameter {name} is {p.dtype} but "
                        f"others are {dtype}; all parameters must share one "
                        "dtype (float32, bfloat16 or float16)")
                entries.append(dict(param=p, name=name, offset=off,
                                    numel=p.numel(), shape=tuple(p.shape),
                                    dtype=p.dtype, index=index))
                manifest_params.append(dict(
                    name=name, shape=list(p.shape), dtype=_DTYPES[p.dtype],
                    group=g, offset=off, numel=p.numel()))
                off += p.numel()
                index += 1
            chunk = -(-off // self._world) if off else 0
            start = min(off, self._rank * chunk)
            end = min(off, start + chunk)
            layout.append(dict(entries=entries, flat=off, chunk=chunk,
                               start=start, numel=end - start))
        if dtype is None:
            raise ValueError("mlpo.torch: optimizer got an empty parameter "
                             "list")
        self._dtype = dtype
        devices = {e["param"].device for l in layout for e in l["entries"]}
        if len(devices) > 1:
            raise ValueError(
                "mlpo.torch: parameters are on several devices "
                f"({', '.join(sorted(str(d) for d in devices))}); put the "
                "model on one device")
        self._device = devices.pop()
        self._device_path = self._pick_device_path()
        self._manifest = dict(
            format=_MANIFEST_FORMAT, world=self._world, rank=self._rank,
            subgroup_numel=self._opts["subgroup_numel"],
            groups=[dict(flat_numel=l["flat"], shard_start=l["start"],
                         shard_numel=l["numel"], **self._hyper_json(g))
                    for g, l in zip(self.param_groups, layout)],
            params=manifest_params)
        return layout

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
        if p.dtype not in _DTYPES:
            raise ValueError(f"mlpo.torch: parameter {name} has dtype "
                             f"{p.dtype}; use float32, bfloat16 or float16")
        if not p.is_contiguous():
            raise ValueError(f"mlpo.torch: parameter {name} is not "
                             "contiguous")

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

    def _hyper_json(self, group):
        b1, b2 = group["betas"]
        return dict(lr=group["lr"], betas=[b1, b2], eps=group["eps"],
                    weight_decay=group["weight_decay"], mode=self._mode)

    def _hyper(self, group):
        b1, b2 = group["betas"]
        return dict(lr=float(group["lr"]), beta1=float(b1), beta2=float(b2),
                    eps=float(group["eps"]),
                    weight_decay=float(group["weight_decay"]),
                    mode=self._mode)

    def _open(self, restore_tag=None):
        dt = _DTYPES[self._dtype]
        groups = [dict(numel=l["numel"], **self._hyper(g))
                  for g, l in zip(self.param_groups, self._layout)]
        try:
            eng = _mlpo.Engine(
                self._toml, self._base_dir,
                _store_name(self._name, self._world), self._rank, groups,
                self._opts["subgroup_numel"], dt, dt,
                self._opts["max_grad_norm"], self._opts["prefetch"],
                self._opts["commits"], self._opts["threads"],
                self._opts["durability"], restore_tag or "",
                *self._device_args())
        except RuntimeError as e:
            if "is declared as" in str(e):
                raise ValueError(
                    f"mlpo.torch: the store {self._toml.strip()!r} (name "
                    f"{_store_name(self._name, self._world)!r}) holds state "
                    "of another model, other parameter groups or another "
                    f"subgroup_numel: {e}. Use another store or name=") \
                    from None
            if "different steps" in str(e) and restore_tag is None:
                # An interrupted step: load_state_dict (which restores a
                # tag) can still open it; step() before that raises this.
                self._open_error = e
                return
            raise
        self._engine = eng
        self._open_error = None
        manifest = eng.get_attribute("manifest")
        if manifest is not None:
            self._check_manifest(json.loads(manifest))
        eng.set_attribute("manifest", json.dumps(self._manifest))
        if eng.step_count > 0:
            # The store is the source of truth: the model continues from it.
            self._params_from_store()
        else:
            self._initial_params()

    def _device_args(self):
        """Engine arguments of the device path: backend, index, and each
        group's tensors as (offset, numel, data_ptr)."""
        if self._device_path is None:
            return "", 0, []
        self._device_ptrs = {}
        pieces = []
        for l in self._layout:
            ps = []
            for e in l["entries"]:
                if e["numel"]:
                    ps.append((e["offset"], e["numel"],
                               e["param"].data_ptr()))
                    self._device_ptrs[id(e["param"])] = e["param"].data_ptr()
            pieces.append(ps)
        return self._device_path[0], self._device_path[1], pieces

    def _check_manifest(self, old):
        """The store was written for this model (same names and shapes)."""
        diff = _model_difference(old, self._manifest)
        if diff is not None:
            raise ValueError(
                f"mlpo.torch: store {self._engine.meta_dir} holds state of "
                f"another model (stored {diff[0]}, model {diff[1]}); use "
                "another store or name=")

    def _shard_pieces(self, g):
        """(entry, start within param, count, offset within shard) for every
        piece of this rank's shard of group g."""
        l = self._layout[g]
        lo, hi = l["start"], l["start"] + l["numel"]
        for e in l["entries"]:
            a, b = max(lo, e["offset"]), min(hi, e["offset"] + e["numel"])
            if a < b:
                yield e, a - e["offset"], b - a, a - lo

    def _initial_params(self):
        for g in range(len(self._layout)):
            for e, at, n, off in self._shard_pieces(g):
                t = e["param"].detach().reshape(-1)[at:at + n]
                if t.device.type != "cpu":
                    t = t.cpu()
                self._engine.set_initial(g, off, t.data_ptr(),
                                         _DTYPES[t.dtype], n)

    @torch.no_grad()
    def _params_from_store(self):
        """Copies the master weights (cast to the model dtype) into the
        model's parameters, gathering the shards of every rank."""
        for g, l in enumerate(self._layout):
            p, _, _ = self._engine.read_group(g)
            flat = torch.from_numpy(p)
            if self._world > 1:
                flat = self._gather(flat, l)
            for e in l["entries"]:
                e["param"].copy_(flat[e["offset"]:e["offset"] + e["numel"]]
                                 .view(e["shape"]))

    def _gather(self, shard, l):
        padded = torch.zeros(l["chunk"], dtype=shard.dtype)
        padded[:shard.numel()] = shard
        out = [torch.empty_like(padded) for _ in range(self._world)]
        dist.all_gather(out, padded, group=self._pg)
        return torch.cat(out)[:l["flat"]]

    def _require_engine(self):
        if self._engine is None and self._open_error is None:
            raise RuntimeError("mlpo.torch: the optimizer is closed")
        if self._engine is None:
            raise RuntimeError(
                f"mlpo.torch: the store could not be opened: {self._open_error}"
                "\nLoad a checkpoint with load_state_dict(), pass "
                "restore_tag=, or run `mlpo restore STORE TAG`")
        return self._engine

    def add_param_group(self, param_group):
        if getattr(self, "_layout", None) is not None:
            raise NotImplementedError(
                "mlpo.torch: add_param_group after construction is not "
                "supported (the store's layout is fixed); pass every group "
                "to the constructor")
        super().add_param_group(param_group)

    # -- the step ---------------------------------------------------------

    def _grad_of(self, e):
        p = e["param"]
        if p.dtype != e["dtype"] or tuple(p.shape) != e["shape"]:
            raise ValueError(
                f"mlpo.torch: parameter {e['name']} changed from "
                f"{e['dtype']} {list(e['shape'])} to {p.dtype} "
                f"{list(p.shape)} since the optimizer was made")
        if not p.is_contiguous():
            raise ValueError(f"mlpo.torch: parameter {e['name']} is no "
                             "longer contiguous")
        grad = p.grad
        if grad is None:
            return torch.zeros_like(p)
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
        return grad.contiguous()

    @torch.no_grad()
    def step(self, closure=None, *, loss_scale=None):
        """One optimizer step. Gradients are divided by loss_scale (default
        self.loss_scale); with an inf/nan gradient the step is skipped
        (last_report['skipped']) and nothing changes."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        eng = self._require_engine()
        for g, group in enumerate(self.param_groups):
            eng.set_hyper(g, self._hyper(group))
        dt = _DTYPES[self._dtype]
        keep = []  # gradients stay alive while staged
        if self._device_path is not None:
            if self._device.type == "cuda":
                # backward ran on PyTorch's stream; ours copy the gradients
                torch.cuda.synchronize(self._device)
            for g, l in enumerate(self._layout):
                for e in l["entries"]:
                    if not e["numel"]:
                        continue
                    if e["param"].data_ptr() != \
                            self._device_ptrs[id(e["param"])]:
                        raise ValueError(
                            f"mlpo.torch: parameter {e['name']} was moved "
                            "to new memory since the optimizer was made "
                            "(new parameters are copied to where it was); "
                            "make the optimizer after moving the model")
                    grad = self._grad_of(e)
                    keep.append(grad)
                    eng.stage_grad_device(g, e["offset"], grad.data_ptr(),
                                          dt, e["numel"])
            rep = eng.step(loss_scale or self.loss_scale)
        elif self._world == 1:
            for g, l in enumerate(self._layout):
                for e in l["entries"]:
                    grad = self._grad_of(e)
                    keep.append(grad)
                    eng.stage_grad(g, e["offset"], grad.data_ptr(), dt,
                                   e["numel"])
            rep = eng.step(loss_scale or self.loss_scale)
        else:
            for g, l in enumerate(self._layout):
                flat = torch.zeros(l["chunk"] * self._world,
                                   dtype=torch.float32)
                for e in l["entries"]:
                    flat[e["offset"]:e["offset"] + e["numel"]] = \
                        self._grad_of(e).reshape(-1).float()
                dist.all_reduce(flat, group=self._pg)
                shard = (flat[l["start"]:l["start"] + l["numel"]]
                         / self._world).to(self._dtype).contiguous()
                keep.append(shard)
                if l["numel"]:
                    eng.stage_grad(g, 0, shard.data_ptr(), dt, l["numel"])
            sum_sq, nonfinite = eng.local_grad_stats()
            stats = torch.tensor([sum_sq, float(nonfinite)],
                                 dtype=torch.float64)
            dist.all_reduce(stats, group=self._pg)
            rep = eng.step(loss_scale or self.loss_scale, float(stats[0]),
                           int(stats[1]))
        self.last_report = rep
        if not rep["skipped"] and self._device_path is None:
            self._publish()  # the device path's step copied them already
        return loss

    def _publish(self):
        """New parameters (model dtype) into the model's tensors."""
        eng = self._engine
        if self._world == 1:
            for g, l in enumerate(self._layout):
                for e in l["entries"]:
                    eng.copy_params(g, e["offset"], e["param"].data_ptr(),
                                    e["numel"])
            return
        for g, l in enumerate(self._layout):
            shard = torch.empty(l["numel"], dtype=self._dtype)
            if l["numel"]:
                eng.copy_params(g, 0, shard.data_ptr(), l["numel"])
            flat = self._gather(shard, l)
            for e in l["entries"]:
                e["param"].copy_(flat[e["offset"]:e["offset"] + e["numel"]]
                                 .view(e["shape"]))


class AdamW(_MlpoOptimizer):
    """torch.optim.AdamW (decoupled weight decay, default 0.01) over an mlpo
    store. Extra keywords: store, name, durability ("step" | "tag"),
    subgroup_numel, max_grad_norm, loss_scale, prefetch, commits, threads,
    restore_tag, keep_checkpoints, process_group."""
    _mode = "adamw"
    _default_weight_decay = 1e-2


class Adam(_MlpoOptimizer):
    """torch.optim.Adam (L2 weight decay, default 0) over an mlpo store."""
    _mode = "adam"
    _default_weight_decay = 0.0
