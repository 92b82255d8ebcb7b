"""Handing a step's gradients to the engine, as torch.optim's step hands
its parameters and gradients to its functional update (adam(...)): one
function per way the parameters are held. Each stages the gradients of
`layout`'s parameters into engine `eng` (the step then runs through the
Session), appends what the engine reads in place to `keep` (alive until
the step returns), and raises before the engine is called for a gradient
mlpo cannot take (grad_of)."""
import torch
import torch.distributed as dist

from ._layout import grad_of
from ._session import _DTYPES
from ._stand_in import _flat


def point_at_model(eng, layout, dt=None):
    """Every piece's parameter memory for the engine is the model's tensor
    (each of its own dtype, or `dt`: data parallel takes one): for the
    step, and again after the update during backward wrote copies (a later
    rewind, of a step whose writes fail behind, writes there)."""
    for k, (g, e, at, n, off) in enumerate(layout.pieces):
        p = e["param"]
        eng.set_param_memory(k, p.data_ptr() + at * p.element_size(),
                             dt or _DTYPES[p.dtype])


def stage_host(eng, layout, keep):
    """One process, host parameters: the kernel reads each gradient and
    writes each parameter in place (no copy)."""
    for k, (g, e, at, n, off) in enumerate(layout.pieces):
        p = e["param"]
        grad = grad_of(e, layout.mixed)  # (first: a changed parameter)
        eng.set_param_memory(k, p.data_ptr() + at * p.element_size(),
                             _DTYPES[p.dtype])
        if grad is None:
            continue
        keep.append(grad)
        eng.borrow_grad(g, off, grad.data_ptr() + at * grad.element_size(),
                        layout.grad_dt, n)


def override_masters(eng, layout, edited):
    """Device memory the engine cannot compare: the `edited` pieces'
    parameters (edited since the last step) go in as masters."""
    for k in edited:
        g, e, at, n, off = layout.pieces[k]
        t = _flat(e["param"].detach())[at:at + n].cpu()
        if not eng.state_stored:
            eng.set_initial(g, off, t.data_ptr(), _DTYPES[t.dtype], n)
        else:
            eng.override_masters(g, off, t.data_ptr(), _DTYPES[t.dtype], n)


def stage_device(eng, layout, keep, device_ptrs, edited):
    """Device parameters (the device path): edits first (`edited`
    pieces), then each gradient staged from device memory. A parameter
    moved since the engine took its memory (`device_ptrs`) is refused."""
    dt = _DTYPES[layout.dtype]
    if layout.device.type == "cuda":
        # backward ran on PyTorch's stream; ours copy the gradients
        torch.cuda.synchronize(layout.device)
    override_masters(eng, layout, edited)
    for g, l in enumerate(layout):
        for e in l["entries"]:
            if not e["numel"]:
                continue
            if e["param"].data_ptr() != device_ptrs[id(e["param"])]:
                raise ValueError(
                    f"mlpo.torch: parameter {e['name']} was moved to new "
                    "memory since the optimizer was made (new parameters "
                    "are copied to where it was); make the optimizer "
                    "after moving the model")
            grad = grad_of(e, layout.mixed)
            if grad is None:
                continue
            keep.append(grad)
            eng.stage_grad_device(g, e["offset"], grad.data_ptr(), dt,
                                  e["numel"])


def stage_local_shards(eng, layout, keep):
    """FSDP: FSDP averaged the gradients and left each rank its shard of
    them; the kernel updates this rank's shards of the parameters in
    place."""
    dt = _DTYPES[layout.dtype]
    point_at_model(eng, layout, dt)
    for k, (g, e, at, n, off) in enumerate(layout.pieces):
        grad = grad_of(e, layout.mixed)
        if grad is None:
            continue
        keep.append(grad)
        eng.stage_grad(g, off, grad.data_ptr() + at * grad.element_size(),
                       dt, n)


def stage_sharded(eng, layout, ranks, keep, has, reduced):
    """ZeRO data parallel: this rank's shard of every group's averaged
    gradients. `has`: whether each parameter has a gradient on any rank
    (it has one on every rank then); `reduced`: DDP averaged them in
    backward already (ddp_comm_hook), else they are averaged here."""
    dt = _DTYPES[layout.dtype]
    active = {id(e["param"]): bool(h) for e, h in zip(layout.entries, has)}
    point_at_model(eng, layout, dt)
    if reduced:
        # Each rank's copy is the average already.
        for k, (g, e, at, n, off) in enumerate(layout.pieces):
            grad = grad_of(e, layout.mixed) if active[id(e["param"])] \
                else None
            if grad is None:
                continue
            grad = grad.contiguous()
            keep.append(grad)
            eng.borrow_grad(g, off, grad.data_ptr() +
                            at * grad.element_size(), dt, n)
        return
    for g, l in enumerate(layout):
        flat = torch.zeros(l["chunk"] * ranks.world, dtype=torch.float32)
        for e in l["entries"]:
            grad = grad_of(e, layout.mixed)
            if grad is not None:
                flat[e["offset"]:e["offset"] + e["numel"]] = \
                    _flat(grad).float()
        dist.all_reduce(flat, group=ranks.pg)
        shard = (flat[l["start"]:l["start"] + l["numel"]]
                 / ranks.world).to(layout.dtype).contiguous()
        keep.append(shard)
        for e, at, n, off in layout.shard_pieces(g):
            if active[id(e["param"])]:
                eng.stage_grad(g, off, shard.data_ptr() +
                               off * shard.element_size(), dt, n)


def global_stats(eng, ranks):
    """The staged gradients' squared norm and non-finite count summed over
    the ranks (clipping and overflow skips decide as one process would):
    the engine step's last two arguments."""
    sum_sq, nonfinite = ranks.sum(eng.local_grad_stats())
    return sum_sq, int(nonfinite)


@torch.no_grad()
def publish_sharded(layout, ranks):
    """Each rank's step wrote its shard into its own tensors: the shards
    gathered, so that every rank has every new parameter."""
    for g, l in enumerate(layout):
        shard = torch.empty(l["numel"], dtype=layout.dtype)
        for e, at, n, off in layout.shard_pieces(g):
            shard[off:off + n] = _flat(e["param"])[at:at + n]
        flat = ranks.gather_flat(shard, l)
        lo, hi = l["start"], l["start"] + l["numel"]  # this rank's
        for e in l["entries"]:
            a, b = e["offset"], e["offset"] + e["numel"]
            dst = _flat(e["param"])
            # (the other ranks' parts only: this rank's are there)
            for x, y in ((a, min(b, lo)), (max(a, hi), b)):
                if x < y:
                    dst[x - a:y - a].copy_(flat[x:y])
