"""Update during backward (update_in_backward=True): each parameter's
gradient goes to the engine from its post-accumulate-grad hook (torch 2.1's
register_post_accumulate_grad_hook), and the engine's step, started by the
first of them in the last backward of a step (accumulation_steps), updates
every subgroup whose gradients are all in while backward goes on
(Optimizer::BeginStep in the engine). step() then waits for the rest.

The step is speculative: a store transaction that step() decides, so the
result is always torch.optim's for the gradients step() finds, bit for bit
the plain step's:

- a parameter whose gradient backward did not hand in (no gradient in the
  last micro-batch, set_to_none=False and unused, a backward cut short)
  is handed in at step();
- a gradient changed after it was handed in (clipping or unscaling in
  place, replaced) makes step() discard the speculative step and redo it
  from the state before it (last_report['redone']);
- a backward beyond accumulation_steps (one more micro-batch, a graph
  backwarded again with retain_graph) ran on parameters the step had
  updated already: refused from its hook, the step discarded;
- clipping (max_grad_norm) that triggers, and a non-finite gradient, are
  decided by the engine as the plain step decides: redone clipped, or
  skipped;
- zero_grad() (or close()) while the step runs, without step(): the step
  is discarded and the model's parameters get their values back, as if
  it never ran (an exception in the middle of backward, then zero_grad()).

A mixin of the optimizer class in torch.py."""
import weakref

import torch

from ._opening import _DTYPES
from ._stand_in import sync_in, sync_out
from ._warn import warn_user


def _queue_end_of_backward(fn):
    """Runs fn when the backward pass running now ends (not when it
    raises: that pass's callbacks are dropped with it)."""
    torch.autograd.Variable._execution_engine.queue_callback(fn)


class BackwardUpdate:
    def _setup_backward(self, on, accumulation_steps, max_grad_norm,
                        loss_scale):
        """Checks what update_in_backward cannot do (a ValueError saying
        why), then hooks every parameter."""
        cls = f"mlpo.torch.{type(self).__name__}"
        if isinstance(accumulation_steps, bool) or not isinstance(
                accumulation_steps, int) or accumulation_steps < 1:
            raise ValueError(f"{cls}: accumulation_steps must be a whole "
                             f"number >= 1, not {accumulation_steps!r}")
        self.accumulation_steps = accumulation_steps
        self._bwd_hooks = []
        self._reset_backward()
        self.update_in_backward = bool(on)
        if not on:
            return
        why = None
        if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
            why = "it needs torch >= 2.1 (register_post_accumulate_grad_hook)"
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

    def _reset_backward(self):
        """A step's count of backward passes and what they handed in
        starts again."""
        self._bwd_pass = 0         # backward passes since the last step
        self._bwd_in_pass = False  # a pass began and has not ended
        self._bwd_given = {}       # id(entry) -> (entry, .grad, version, grad)
        self._bwd_stale = False    # a gradient changed once handed in

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

    def _pass_ended(self):
        self._bwd_in_pass = False

    def _grad_final(self, e):
        """A parameter's gradient was accumulated: in the last backward
        pass of a step (the accumulation_steps-th since step()) it goes to
        the running step."""
        eng = self._engine
        if eng is None or self._failed_step is not None:
            return  # closed, or reopening at the next call
        if not self._bwd_in_pass:
            self._bwd_in_pass = True
            self._bwd_pass += 1
            me = weakref.ref(self)
            _queue_end_of_backward(
                lambda: me() is not None and me()._pass_ended())
        if self._bwd_pass < self.accumulation_steps:
            return
        if self._bwd_pass > self.accumulation_steps:
            # This backward ran on parameters the step had already updated
            # (autograd reads them in place): its gradients are not
            # torch.optim's, and no redo can make them so. Refused, and
            # the step dropped: the parameters are as before it.
            if eng.stepping_in_backward:
                self._discard_in_backward(None)
            raise RuntimeError(
                f"mlpo.torch: parameter {e['name']} got a gradient in "
                f"backward {self._bwd_pass} since the last step(); with "
                f"update_in_backward=True and accumulation_steps="
                f"{self.accumulation_steps} the update ran in backward "
                f"{self.accumulation_steps}, on the parameters this one "
                "used. Call step() after every accumulation_steps backwards "
                "(accumulation_steps=N accumulates N; a backward with "
                "retain_graph=True run again needs the plain step). The step "
                "was discarded: the parameters are as before it; call "
                "zero_grad() and train on")
        if id(e) in self._bwd_given:
            # A second gradient in the same pass (a hook of its own
            # accumulating again): step() redoes the step with the sum.
            self._bwd_stale = True
            return
        if not eng.stepping_in_backward:
            self._begin_in_backward(eng)
        self._hand_in(eng, e)

    def _hand_in(self, eng, e):
        """Entry e's gradient to the running step (read in place: its
        version tells a change after this)."""
        if not e["numel"]:
            self._bwd_given[id(e)] = (e, None, 0, None)
            return
        grad = self._grad_of(e)
        if grad is None:
            return
        orig = e["dparam"].grad
        self._bwd_given[id(e)] = (e, orig, orig._version, grad)
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
        self._guarded(eng, "begin_step", self.loss_scale)

    def _changed_after_hand_in(self):
        if self._bwd_stale:
            return True
        for e, orig, version, _ in self._bwd_given.values():
            if orig is None:
                continue
            if e["dparam"].grad is not orig or orig._version != version:
                return True
        return False

    def _finish_in_backward(self, eng):
        """Decides a step running during backward: at step(), or at any
        other call on the state first (step() then has nothing left to
        do)."""
        try:
            if self._changed_after_hand_in():
                # Exact all the same: dropped, and redone as the plain step
                # with the gradients as they are now.
                self._guarded(eng, "discard_step", True)
                keep = []
                rep = self._step_host(eng, keep, self.loss_scale)
            else:
                # Gradients backward did not hand in: unused in the last
                # micro-batch, zeros kept by set_to_none=False, a pass cut
                # short.
                for l in self._layout:
                    for e in l["entries"]:
                        if id(e) not in self._bwd_given and \
                                e["dparam"].grad is not None:
                            self._hand_in(eng, e)
                rep = self._guarded(eng, "finish_step")
            self.last_report = rep
            self._bwd_done = True
        finally:
            self._reset_backward()
            sync_out(self._entries)
            self._note_versions()

    def _discard_in_backward(self, why):
        """A step running during backward that step() never asked for:
        nothing of it is applied, and the model's parameters get back what
        they held before it."""
        eng = self._engine
        try:
            self._guarded(eng, "discard_step", False)
        finally:
            self._reset_backward()
            sync_out(self._entries)
            self._note_versions()
        if why:
            warn_user(f"mlpo.torch: {why}: the step that ran during "
                      "backward was discarded (step() was not called); "
                      "the parameters are as before it", RuntimeWarning)

    def zero_grad(self, set_to_none=True):
        """As torch.optim's. With update_in_backward, a step still running
        (backward ran, step() did not: an exception in the middle of
        backward, or zero_grad before step) is discarded, as torch.optim
        would not have stepped either, and a count of backwards without a
        step starts again."""
        if self.update_in_backward:
            if self._engine is not None and self._engine.stepping_in_backward:
                self._discard_in_backward(None)
            self._reset_backward()
        super().zero_grad(set_to_none=set_to_none)
