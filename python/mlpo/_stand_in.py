"""Parameters the engine cannot read in place, as torch.optim takes them:

- complex parameters are optimized as their real view
  (torch.view_as_real: two real elements per complex one, as torch.optim's
  own Adam, SGD and Adagrad do), in place;
- float64 parameters are optimized in fp32 (the store's masters and state
  are fp32, as for every other dtype): a documented choice, since the
  store's formats, codecs and kernels are fp32; the model's float64 tensor
  receives each step's fp32 result, exact in float64;
- parameters with gaps or overlaps in memory (a strided view, an
  expanded tensor) are staged through a contiguous copy.

Each such parameter gets a stand-in: a contiguous tensor (fp32 for
float64) that the engine reads and writes in the parameter's place. The
model's values go into it before anything reads it (a step, a checkpoint,
the initial state; sync_in) and come back after anything writes it (a
step, a restore; sync_out). Gradients take the same way (grad_of)."""
import torch


def _flat(t):
    """A 1-d view of a dense tensor's elements in memory order."""
    if t.is_contiguous():
        return t.view(-1)
    return t.as_strided((t.numel(),), (1,), t.storage_offset())


def is_dense(p):
    """Non-overlapping and dense: its elements fill numel() consecutive
    slots of its storage in some order (contiguous, channels_last, ...)."""
    if p.is_contiguous():
        return True
    dims = sorted((s, n) for s, n in zip(p.stride(), p.shape) if n != 1)
    expect = 1
    for s, n in dims:
        if s != expect:
            return False
        expect *= n
    return True


def real_view(t):
    """The real view of a complex tensor, else t."""
    return torch.view_as_real(t) if t.is_complex() else t


def stand_in_for(p):
    """(tensor the engine uses, model tensor to sync with or None): the
    real view of a complex parameter, and a contiguous (fp32 for float64)
    copy where that is not dense or is float64."""
    r = real_view(p)
    if r.dtype == torch.float64 or not is_dense(r):
        dtype = torch.float32 if r.dtype == torch.float64 else r.dtype
        s = torch.empty(tuple(r.shape), dtype=dtype, device=r.device)
        with torch.no_grad():
            s.copy_(r)
        return s, r
    return r, None


def sync_in(entries):
    """The model's values into every stand-in."""
    with torch.no_grad():
        for e in entries:
            if e.get("model") is not None:
                e["param"].copy_(e["model"])


def sync_out(entries):
    """Every stand-in's values into the model."""
    with torch.no_grad():
        for e in entries:
            if e.get("model") is not None:
                e["model"].copy_(e["param"])


def grad_of(e, grad):
    """A gradient of e's model parameter in the stand-in's form: the real
    view, then a contiguous copy in the stand-in's dtype."""
    grad = real_view(grad)
    if e.get("model") is None:
        return grad
    return grad.to(dtype=e["param"].dtype, memory_format=torch.contiguous_format
                   ).contiguous()
