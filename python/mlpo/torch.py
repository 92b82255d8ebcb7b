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

It behaves as torch.optim does: a new optimizer starts at step 0 from the
model's current parameters (resume=True or load_state_dict() continue a
run); the model's tensors are authoritative (a parameter changed between
steps becomes the new master); a parameter whose grad is None is skipped
with its own step count; several optimizers share one store, each in its
own namespace; opt.state[p] reads step, exp_avg and exp_avg_sq back.

How it maps onto the engine: each parameter group's parameters, in order,
form one flat vector; its fp32 state is cut into subgroups (store objects of
p, m, v) that the C++ pipeline streams through the fused kernel. Gradients
are handed over in the model's dtype (no fp32 copy), and on the CPU the
kernel reads and writes the model's tensors in place. The arithmetic follows
torch.optim.AdamW / Adam operation by operation, each operation rounded on
its own; torch 2.x's CPU kernels fuse some multiply-adds, so an element
differs by an ulp now and then (as torch's own fused=True does).

state_format="bf16-moments" or "int8-moments" (or the store config's
state_format) keeps exp_avg and exp_avg_sq compact in the store (8 or about
6 bytes per parameter instead of 12; master weights stay fp32): fewer bytes
per step, results no longer bit-identical to torch. A store's format is
fixed when it is created; opening it with another is an error.

Data parallel (torch.distributed initialised, e.g. gloo on CPU): ZeRO-style,
each rank owns an equal shard of every group's flat vector and keeps it in
its own store "<name>-w<W>/rank-<r>" on the shared paths; gradients are
averaged across ranks, each rank updates its shard, and the new parameters
are all-gathered. A checkpoint written by W ranks loads into W' ranks
(load_state_dict reads the old shards by the manifest's offsets).
Under FSDP (fully_shard) the parameters are DTensors: each rank updates its
own shards in place, and checkpoints reshard the same way (_reshard.py).
"""
try:
    import torch  # noqa: F401 -- (its absence said plainly)
except ImportError as e:  # an interpreter without torch
    raise ImportError(
        "mlpo.torch needs PyTorch (2.6 or newer), which is not importable "
        f"from {__import__('sys').executable}: pip install torch there, or "
        "use mlpo's venv (.venv/bin/python in a source tree, made by "
        "scripts/deps.sh)") from e

from ._session import STATE_BYTES, STATE_FORMATS  # noqa: F401
from ._optimizer import _MlpoOptimizer, _wrapped  # noqa: F401 (lightning.py)
from ._export import export_state_dict
from ._backward import ddp_comm_hook
from ._backward_choice import PlainStepNote
from ._unsupported import refuse_unsupported

__all__ = ["AdamW", "Adam", "Lion", "Adagrad", "SGD", "Adamax",
           "export_state_dict",
           "PlainStepNote", "ddp_comm_hook"]



_MLPO_KEYWORDS = """

    The parameters and torch's keywords are those of the torch.optim
    class it replaces. mlpo's own keywords (docs/user-guide.md has each in
    full):

    store: where the state lives: a directory, a list of directories (the
        first NVMe, the others PFS), a .toml config, or a dict of its keys;
        None is ./mlpo-store.
    name: the namespace in the store (several optimizers share a store).
    durability: "tag" (steps durable at tags and close) or "step" (each
        step durable once the next returns).
    resume: continue from what the store holds (else it starts fresh, as
        torch.optim does; load_state_dict continues from a checkpoint).
    restore_tag: open at that tag.
    keep_checkpoints: how many automatic checkpoints (state_dict() tags)
        to keep; 0 keeps all.
    subgroup_numel, prefetch, commits, threads: the pipeline's object
        size, read-ahead, writes in flight and kernel threads.
    max_grad_norm, loss_scale: clipping over the global gradient norm,
        and a static loss scale to divide out.
    process_group: data parallel (each rank a shard of the state).
    device_backend: None/"auto", "cuda" or "host" for device parameters.
    state_format: "fp32", "bf16-moments" or "int8-moments" (fixed when a
        namespace is created).
    update_in_backward, accumulation_steps: the update during backward
        (None: on where it is exact and faster).

    opt.state_dict() is a small dict naming a tag of the store; save it
    with the model. opt.dcp_state ("reference" or "copy") is what
    torch.distributed.checkpoint's get_optimizer_state_dict gets.
    """


def _with_keywords(cls):
    """Appends mlpo's keywords to an optimizer class's docstring (a
    docstring is a literal: one built with a sum is not one, and help()
    showed nothing)."""
    cls.__doc__ = (cls.__doc__ or "").rstrip() + _MLPO_KEYWORDS
    return cls


class _AdamBase(_MlpoOptimizer):
    _default_weight_decay = 0.0

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=None, amsgrad=False, *, maximize=False,
                 foreach=None, capturable=False, differentiable=False,
                 fused=None, **mlpo):
        refuse_unsupported(dict(capturable=capturable,
                                differentiable=differentiable),
                           f"mlpo.torch.{type(self).__name__}()")
        if weight_decay is None:
            weight_decay = self._default_weight_decay
        betas = tuple(betas) if isinstance(betas, (list, tuple)) else betas
        super().__init__(params, dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
            amsgrad=amsgrad, maximize=maximize, foreach=foreach,
            capturable=False, differentiable=False, fused=fused), **mlpo)


@_with_keywords
class AdamW(_AdamBase):
    """torch.optim.AdamW (decoupled weight decay, default 0.01; amsgrad and
    maximize honoured per group) over an mlpo store."""
    _mode = "adamw"
    _default_weight_decay = 1e-2


@_with_keywords
class Adam(_AdamBase):
    """torch.optim.Adam (L2 weight decay, default 0) over an mlpo store."""
    _mode = "adam"
    _default_weight_decay = 0.0


@_with_keywords
class Lion(_MlpoOptimizer):
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization
    Algorithms"): p -= lr * (sign(b1*m + (1-b1)*g) + wd*p), then
    m = b2*m + (1-b2)*g. One moment (exp_avg): 8 bytes of state per
    parameter in fp32 against Adam's 12. Defaults as lion-pytorch
    (lr 1e-4, betas (0.9, 0.99), weight_decay 0)."""
    _mode = "lion"

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0,
                 *, maximize=False, **mlpo):
        betas = tuple(betas) if isinstance(betas, (list, tuple)) else betas
        super().__init__(params, dict(lr=lr, betas=betas,
                                      weight_decay=weight_decay,
                                      maximize=maximize), **mlpo)


@_with_keywords
class Adagrad(_MlpoOptimizer):
    """torch.optim.Adagrad over an mlpo store (state: step, sum)."""
    _mode = "adagrad"

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0,
                 initial_accumulator_value=0, eps=1e-10, foreach=None, *,
                 maximize=False, differentiable=False, fused=None, **mlpo):
        refuse_unsupported(dict(differentiable=differentiable),
                           "mlpo.torch.Adagrad()")
        super().__init__(params, dict(
            lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value, eps=eps,
            foreach=foreach, maximize=maximize, differentiable=False,
            fused=fused), **mlpo)


@_with_keywords
class SGD(_MlpoOptimizer):
    """torch.optim.SGD (momentum, dampening, nesterov, weight decay,
    maximize) over an mlpo store (state: momentum_buffer; none, and 4 bytes
    per parameter, at momentum 0)."""
    _mode = "sgd"

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0,
                 weight_decay=0, nesterov=False, *, maximize=False,
                 foreach=None, differentiable=False, fused=None, **mlpo):
        refuse_unsupported(dict(differentiable=differentiable),
                           "mlpo.torch.SGD()")
        super().__init__(params, dict(
            lr=lr, momentum=momentum, dampening=dampening,
            weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
            foreach=foreach, differentiable=False, fused=fused), **mlpo)


@_with_keywords
class Adamax(_MlpoOptimizer):
    """torch.optim.Adamax (Adam with the infinity norm: exp_inf =
    max(beta2 * exp_inf, |g| + eps)) over an mlpo store (state: step,
    exp_avg, exp_inf; 12 bytes per parameter in fp32)."""
    _mode = "adamax"

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=0, foreach=None, *, maximize=False,
                 differentiable=False, capturable=False, **mlpo):
        refuse_unsupported(dict(differentiable=differentiable,
                                capturable=capturable),
                           "mlpo.torch.Adamax()")
        betas = tuple(betas) if isinstance(betas, (list, tuple)) else betas
        super().__init__(params, dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
            foreach=foreach, maximize=maximize, differentiable=False,
            capturable=False), **mlpo)
