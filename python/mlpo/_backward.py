"""Update during backward (update_in_backward=True): each parameter's
gradient goes to the engine from its post-accumulate-grad hook (torch 2.1's
register_post_accumulate_grad_hook), and the engine's step, started by the
first of them, updates every subgroup whose gradients are all in while
backward goes on (Optimizer::BeginStep in the engine). step() then waits
for the rest. The same kernels and constants as the plain step: the result
is the same bit for bit. A mixin of the optimizer class in torch.py."""
import weakref

import torch

from ._opening import _DTYPES
from ._stand_in import sync_in, sync_out


class BackwardUpdate:
    def _setup_backward(self, on, accumulation_steps, max_grad_norm,
                        loss_scale):
        """Checks what update_in_backward cannot do exactly (a ValueError
        saying why), then hooks every parameter."""
        cls = f"mlpo.torch.{type(self).__name__}"
        if isinstance(accumulation_steps, bool) or not isinstance(
                accumulation_steps, int) or accumulation_steps < 1:
            raise ValueError(f"{cls}: accumulation_steps must be a whole "
                             f"number >= 1, not {accumulation_steps!r}")
        self.accumulation_steps = accumulation_steps
        self._bwd_hooks = []
        self._bwd_counts = {}
        self._bwd_keep = []
        self.update_in_backward = bool(on)
        if not on:
            return
        why = None
        if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
            why = "it needs torch >= 2.1 (register_post_accumulate_grad_hook)"
        elif max_grad_norm:
            why = ("clipping by global norm (max_grad_norm) needs every "
                   "gradient before the first update; clip after backward "
                   "and use the plain step")
        elif loss_scale != 1:
            why = ("with loss scaling a step with an inf/nan gradient is "
                   "skipped, which cannot be done once part of it is applied")
        elif self._world > 1:
            why = ("data parallel (DDP, FSDP, ZeRO shards) averages the "
                   "gradients after backward; use the plain step")
        elif self._device_path is not None:
            why = ("the parameters are on a device; the update in backward "
                   "reads host gradients")
        if why:
            self.close()
            raise ValueError(f"{cls}: update_in_backward=True is refused: "
                             f"{why}")
        self._hook_params()

    def _hook_params(self):
        """Hooks every parameter (again after a reopen or a new group)."""
        self._remove_backward_hooks()
        self._pieces_of = {}
        for k, (g, e, at, n, off) in enumerate(self._pieces):
            self._pieces_of.setdefault(id(e), []).append(k)
        for l in self._layout:
            for e in l["entries"]:
                # (a weak reference: the model does not keep the
                # optimizer alive)
                self._bwd_hooks.append(
                    e["dparam"].register_post_accumulate_grad_hook(
                        lambda p, e=e, me=weakref.ref(self):
                        me() is not None and me()._grad_final(e)))

    def _remove_backward_hooks(self):
        for h in getattr(self, "_bwd_hooks", ()):
            h.remove()
        self._bwd_hooks = []

    def _grad_final(self, e):
        """A parameter's gradient was accumulated: on its
        accumulation_steps-th backward since the last step() it goes to
        the running step."""
        eng = self._engine
        if eng is None or self._failed_step is not None:
            return  # closed, or reopening at the next call
        c = self._bwd_counts.get(id(e), 0) + 1
        self._bwd_counts[id(e)] = c
        if c < self.accumulation_steps:
            return
        if c > self.accumulation_steps:
            self._bwd_overrun = True  # (said here: not again at step())
            raise RuntimeError(
                f"mlpo.torch: parameter {e['name']} got a gradient in "
                f"backward {c} since the last step(); with "
                f"update_in_backward=True and accumulation_steps="
                f"{self.accumulation_steps} the update ran in backward "
                f"{self.accumulation_steps}. Call step() after every "
                "accumulation_steps backwards (pass accumulation_steps=N "
                "to accumulate N)")
        if not eng.stepping_in_backward:
            self._begin_in_backward(eng)
        if not e["numel"]:
            return
        grad = self._grad_of(e)
        if grad is None:
            return
        # Read in place by the step; its version tells a change after this.
        self._bwd_keep.append((e["name"], grad, grad._version))
        for k in self._pieces_of.get(id(e), ()):
            g, _, at, n, off = self._pieces[k]
            eng.borrow_grad(g, off, grad.data_ptr() + at * grad.element_size(),
                            self._grad_dt, n)
            eng.grad_ready(k)

    def _begin_in_backward(self, eng):
        """The first final gradient of a step: the engine's step starts,
        with the hyperparameters the groups hold now."""
        self._check_groups()
        self._forget_prepared()
        for g, group in enumerate(self.param_groups):
            eng.set_hyper(g, self._hyper(group))
        sync_in(self._entries)
        for k, (g, e, at, n, off) in enumerate(self._pieces):
            p = e["param"]
            eng.set_param_memory(k, p.data_ptr() + at * p.element_size(),
                                 _DTYPES[p.dtype])
        self._bwd_keep = []
        self._guarded(eng, "begin_step", self.loss_scale)

    def _finish_in_backward(self, eng):
        """Waits for a step running during backward: at step(), or at any
        other call on the state first (step() then has nothing left to
        do)."""
        try:
            self.last_report = self._guarded(eng, "finish_step")
            self._bwd_done = True
            changed = [n for n, g, v in self._bwd_keep if g._version != v]
            if getattr(self, "_bwd_overrun", False):
                changed = []
        finally:
            self._bwd_overrun = False
            self._bwd_keep = []
            self._bwd_counts = {}
            sync_out(self._entries)
            self._note_versions()
        if changed:
            raise RuntimeError(
                f"mlpo.torch: the gradient of {changed[0]} (and "
                f"{len(changed) - 1} more) was changed in place after "
                "backward handed it to the update (gradient clipping or "
                "unscaling after backward?); with update_in_backward=True "
                "the step already ran with the gradients as backward made "
                "them. Turn the clipping off (Trainer: max_grad_norm=0) or "
                "use the plain step")

    def zero_grad(self, set_to_none=True):
        """As torch.optim's; with update_in_backward, a step still running
        finishes first (it reads the gradients in place), and a count of
        backwards without a step starts again."""
        if self.update_in_backward:
            if self._engine is not None and self._engine.stepping_in_backward:
                self._finish_in_backward(self._engine)
            self._bwd_counts = {}
        super().zero_grad(set_to_none=set_to_none)
