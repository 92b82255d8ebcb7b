"""Update during backward (on by default where it can run: one process,
host parameters, torch >= 2.1): each parameter's gradient goes to the
engine from its post-accumulate-grad hook (torch 2.1's
register_post_accumulate_grad_hook), and the engine's step, started by the
first of them in the last backward of a step, updates every subgroup whose
gradients are all in while backward goes on (Optimizer::BeginStep in the
engine). step() then waits for the rest. Which backward is the last:
accumulation_steps when given, else as many as the step before had (the
first step of a run with gradient accumulation is redone once, then the
count is known).

The step is speculative: a store transaction that step() decides, and the
new parameters go into a copy of each parameter (the model's own tensors
keep their values until step() copies them in, so a forward or a backward
before step() sees the parameters torch.optim's would), so the result is
always torch.optim's for the gradients step() finds, bit for bit the plain
step's:

- a parameter whose gradient backward did not hand in (no gradient in the
  last micro-batch, set_to_none=False and unused, a backward cut short)
  is handed in at step();
- a gradient changed after it was handed in (clipping or unscaling in
  place, replaced) makes step() discard the speculative step and redo it
  from the state before it (last_report['redone']);
- a backward beyond the expected count (one more micro-batch, a graph
  backwarded again with retain_graph) changes the gradients: the step
  running is discarded, and step() runs the plain step (with a warning
  when accumulation_steps was given, as the overlap was lost);
- clipping (max_grad_norm) that triggers, and a non-finite gradient, are
  decided by the engine as the plain step decides: redone clipped, or
  skipped;
- zero_grad() (or close()) while the step runs, without step(): the step
  is discarded, as if it never ran (an exception in the middle of
  backward, then zero_grad()); the model's tensors were never written.

InBackward is held by the optimizer (_optimizer.py: opt._bwd)."""
import gc
import weakref

import torch
import torch.distributed as dist

from . import _mlpo
from ._backward_choice import (AutoChoice, fsdp_hooks_after_reduce,
                               note_plain_step_once)
from ._layout import check_groups, grad_of
from ._session import _DTYPES
from ._staging import point_at_model, stage_host
from ._stand_in import _flat, sync_in, sync_out
from ._warn import warn_user

def ddp_comm_hook(state, bucket):
    """DistributedDataParallel's communication hook for an mlpo optimizer:

        ddp_model.register_comm_hook(opt, mlpo.torch.ddp_comm_hook)

    Averages each bucket of gradients over the ranks as DDP's own hook
    does, and hands the averaged gradients to the optimizer's step as soon
    as they are, so that it updates during backward (update_in_backward)
    with the gradients step() would see. Without it, with data parallel,
    step() runs the whole update."""
    return state._bwd.ddp_bucket(bucket)


def _weak_hook(ref, e):
    """A post-accumulate-grad hook for entry `e` calling the InBackward
    `ref` refers to while it lives (a hook returns None: torch takes
    anything else for a new gradient)."""
    def hook(p):
        me = ref()
        if me is not None:
            me._grad_final(e)
    return hook


def _queue_end_of_backward(fn):
    """Runs fn when the backward pass running now ends (not when it
    raises: that pass's callbacks are dropped with it)."""
    torch.autograd.Variable._execution_engine.queue_callback(fn)


class InBackward:
    """The update during backward of one optimizer: its hooks, the count
    of backward passes, what they handed in, and the speculation's
    bookkeeping. The optimizer holds it (opt._bwd) and it reaches the
    optimizer through a weak reference (the model's hooks must not keep
    the optimizer, and the store, alive)."""

    def __init__(self, opt):
        self._opt = weakref.ref(opt)
        self.done = False  # a step ran in backward; step() is done
        self.auto = None  # AutoChoice when update_in_backward is None
        self._bwd_hooks = []
        self._passes = 1  # the backward that updates (setup)
        self._warned_passes = False
        self._shadows = {}  # id(entry) -> the copy a speculative step writes
        self._check_values = False  # gradients are rewritten after backward
        self._redo_streak = 0  # steps redone in a row
        self._spec_pause = 0   # steps left to run whole (note_redo)
        self._spec_backoff = 2
        self.ddp_hooked = False  # ddp_comm_hook has run
        self.ddp_pass_agreed = False  # this backward's call check is done
        self._ddp_searched = False  # for a DDP to hook (hook_ddp)
        self.ddp_why = None  # why no DDP could be hooked
        self.reset()

    @property
    def opt(self):
        return self._opt()

    def setup(self, on, accumulation_steps):
        """Checks what update_in_backward cannot do (a ValueError saying
        why), then hooks every parameter."""
        opt = self.opt
        cls = f"mlpo.torch.{type(opt).__name__}"
        if accumulation_steps is not None and (isinstance(
                accumulation_steps, bool) or not isinstance(
                accumulation_steps, int) or accumulation_steps < 1):
            raise ValueError(f"{cls}: accumulation_steps must be a whole "
                             f"number >= 1 (or None: learned from the "
                             f"backwards of each step), not "
                             f"{accumulation_steps!r}")
        if on not in (None, True, False):
            raise ValueError(f"{cls}: update_in_backward must be True, False "
                             f"or None (on where it can run), not {on!r}")
        opt.accumulation_steps = accumulation_steps
        self._passes = accumulation_steps or 1
        opt.update_in_backward = bool(on)
        if on is False:
            return
        why = None
        if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
            why = "it needs torch >= 2.1 (register_post_accumulate_grad_hook)"
        elif opt._ranks.world > 1 and opt._ranks.fsdp and \
                not fsdp_hooks_after_reduce():
            why = ("this torch's FSDP does not run the parameters' hooks "
                   "after its reduce-scatter (torch 2.15's does)")
        elif opt._layout.device_path is not None:
            why = ("the parameters are on a device; the update in backward "
                   "reads host gradients")
        if why and on is None:
            # The default: the plain step, whose results are the same.
            opt.update_in_backward = False
            note_plain_step_once(why)
            return
        if why:
            opt.close()
            raise ValueError(f"{cls}: update_in_backward=True is refused: "
                             f"{why}")
        opt.update_in_backward = True
        # (data parallel: the ranks' median times summed, so that every
        # rank makes the same choice)
        self.auto = AutoChoice(
            opt._ranks.sum if opt._ranks.world > 1 else None) \
            if on is None else None
        self.hook_params()

    def reset(self):
        """A step's count of backward passes and what they handed in
        starts again."""
        self._bwd_pass = 0         # backward passes since the last step
        self._bwd_in_pass = False  # a pass began and has not ended
        self._bwd_given = {}       # id(entry) -> (entry, .grad, version, grad)
        self._bwd_stale = False    # a gradient changed once handed in
        self._bwd_beyond = False   # a backward past the updating one ran
        self.plain = False    # this step is step()'s to run whole
        self.ddp_pending = []     # DDP buckets reduced or in flight
        self.ddp_reduced = False  # DDP averaged this step's gradients

    def hook_params(self):
        """Hooks every parameter (again after a reopen or a new group)."""
        opt = self.opt
        self.remove_hooks()
        self._pieces_of = {}
        for k, (g, e, at, n, off) in enumerate(opt._layout.pieces):
            self._pieces_of.setdefault(id(e), []).append(k)
        self._map_entries()
        if opt._ranks.world > 1 and not opt._ranks.fsdp:
            # Data parallel: the gradients are final once DDP reduced
            # them, which its communication hook sees (ddp_comm_hook); the
            # parameters' own hooks fire before that. (FSDP runs a sharded
            # parameter's hooks once its reduce-scatter put this rank's
            # shard of the gradient in place: hooked as one process is.)
            return
        for e in opt._layout.entries:
            # (a weak reference: the model does not keep the optimizer
            # alive)
            self._bwd_hooks.append(
                e["dparam"].register_post_accumulate_grad_hook(
                    _weak_hook(weakref.ref(self), e)))

    def _map_entries(self):
        """Each parameter's entry by its memory (DDP's buckets name
        parameters; their objects need not be the ones given)."""
        opt = self.opt
        self._entry_at = {e["dparam"].data_ptr(): e
                          for e in opt._layout.entries}

    def remove_hooks(self):
        for h in self._bwd_hooks:
            h.remove()
        self._bwd_hooks = []

    def _pass_ended(self):
        self._bwd_in_pass = False
        if self.ddp_pending and self.opt is not None:
            self.ddp_drain(wait=True)

    def _count_pass(self):
        """The first gradient of a backward pass counts it (and its end is
        noted when the pass ends)."""
        if not self._bwd_in_pass:
            self._bwd_in_pass = True
            self._bwd_pass += 1
            me = weakref.ref(self)
            _queue_end_of_backward(
                lambda: me() is not None and me()._pass_ended())

    def _updating_pass(self, eng):
        """Whether the pass running now is the step's last, the one whose
        gradients go to the running step (a pass beyond it discards that
        step: False)."""
        if self._bwd_pass < self._passes:
            return False
        if self._bwd_pass > self._passes:
            # One more backward than the step expected (another
            # micro-batch, retain_graph): the gradients it accumulates are
            # not those handed in. The model's tensors were never written
            # (the step writes copies), so this backward's gradients are
            # torch.optim's; the step running is discarded and step() runs
            # the plain step.
            if not self._bwd_beyond:
                self._bwd_beyond = True
                self.ddp_pending = []
                if eng.stepping_in_backward:
                    self.discard(None, mid_backward=True)
            return False
        return not (self.plain or self._spec_pause > 0 or (
            self.auto is not None and not self.auto.speculate()))

    def hook_ddp(self):
        """update_in_backward on, data parallel and no ddp_comm_hook seen at
        step(): a DistributedDataParallel wrapping these parameters (as
        Trainer and Accelerate make it, out of the script's reach) gets
        the hook, once, for the steps after this one. Whether it did."""
        if self._ddp_searched:
            return False
        self._ddp_searched = True
        self._map_entries()  # (the parameters' memory now)
        ptrs = self._entry_at.keys()
        DDP = torch.nn.parallel.DistributedDataParallel
        for obj in gc.get_objects():
            if not isinstance(obj, DDP):
                continue
            mine = {p.data_ptr() for p in obj.module.parameters()}
            if not ptrs <= mine:
                continue
            try:
                obj.register_comm_hook(self.opt, ddp_comm_hook)
            except (RuntimeError, ValueError, AssertionError) as err:
                # (a hook of its own already: compression, PowerSGD)
                self.ddp_why = f"its model's DDP has a hook already: {err}"
                return False
            return True
        return False

    def ddp_bucket(self, bucket):
        """DDP's communication hook (ddp_comm_hook): the bucket averaged
        over the ranks as DDP's own hook does it; in the pass that updates,
        its reduced gradients go to the running step (as soon as its
        all-reduce is seen done: at a later bucket, or when the pass
        ends)."""
        opt = self.opt
        if not self.ddp_pass_agreed:
            # The first bucket of a backward: every rank is in backward, or
            # all raise (state_dict() on rank 0 only, as a torch.optim DDP
            # script saves, once paired its check with this all-reduce and
            # gloo ended the job without a word of why).
            self.ddp_pass_agreed = True
            _queue_end_of_backward(self._ddp_pass_ended)
            opt._ranks.agree_call("backward", [],
                                   opt._layout.n_params)
        buf = bucket.buffer()
        buf.div_(opt._ranks.world)
        fut = dist.all_reduce(buf, group=opt._ranks.pg,
                              async_op=True).get_future()
        self.ddp_reduced = self.ddp_hooked = True
        eng = opt._engine
        if opt.update_in_backward and eng is not None and \
                opt._session.failed is None:
            self._count_pass()
            if self._updating_pass(eng):
                self.ddp_pending.append(
                    (bucket.parameters(), bucket.gradients(), fut))
                self.ddp_drain(wait=False)
        return fut.then(lambda f: f.value()[0])

    def _ddp_pass_ended(self):
        self.ddp_pass_agreed = False

    def ddp_drain(self, wait):
        """Reduced buckets, in the order they came, to the running step
        (begun by the first); `wait`: every bucket, waiting for its
        all-reduce."""
        opt = self.opt
        eng = opt._engine
        while self.ddp_pending:
            params, grads, fut = self.ddp_pending[0]
            if not wait and not fut.done():
                return
            self.ddp_pending.pop(0)
            fut.wait()
            if eng is None or self.plain or self._bwd_beyond:
                continue
            for p, g in zip(params, grads):
                e = self._entry_at.get(p.data_ptr())
                if e is None:
                    # (a parameter's memory moved since: Trainer moves the
                    # model after the optimizer is made)
                    self._map_entries()
                    e = self._entry_at.get(p.data_ptr())
                if e is None or id(e) in self._bwd_given:
                    continue
                if e["dparam"].grad is None:
                    # Unused here (find_unused_parameters): DDP gives it a
                    # gradient after backward if another rank used it, else
                    # leaves it None; step() hands in what it finds.
                    continue
                if not eng.stepping_in_backward and \
                        not self._begin(eng):
                    self.ddp_pending = []
                    return
                self._hand_in(eng, e, g)

    def _grad_final(self, e):
        """A parameter's gradient was accumulated: in the last backward
        pass of a step (the accumulation_steps-th since step()) it goes to
        the running step."""
        opt = self.opt
        eng = None if opt is None else opt._engine
        if eng is None or opt._session.failed is not None:
            return  # gone or closed, or reopening at the next call
        self._count_pass()
        if id(e) in self._bwd_given and self._bwd_pass == self._passes:
            # A second gradient in the same pass (a hook of its own
            # accumulating again): step() redoes the step with the sum.
            self._bwd_stale = True
            return
        if not self._updating_pass(eng):
            return
        if not eng.stepping_in_backward and not self._begin(eng):
            return
        self._hand_in(eng, e)

    def note_redo(self, redone):
        """Speculation that keeps failing (clipping that clips step after
        step, as early in training) costs a second pass over the state
        each step: after two redone steps in a row the next steps run the
        plain step (with write-behind and read-ahead), 2, then 4, ... up
        to 64 of them, before speculating again; a step not redone ends
        the pause."""
        if not redone:
            self._redo_streak, self._spec_backoff = 0, 2
            return
        self._redo_streak += 1
        if self._redo_streak >= 2:
            self._spec_pause = self._spec_backoff
            self._spec_backoff = min(64, self._spec_backoff * 2)
            self._redo_streak = 0

    def learn_passes(self):
        """At step(): the backwards this step had are the count the next
        one updates in (accumulation_steps given: a warning when it was
        exceeded, once)."""
        opt = self.opt
        n = self._bwd_pass
        if n <= 0:
            return
        if self._spec_pause > 0 and not self.done:
            self._spec_pause -= 1  # a paused step ran whole
        if opt.accumulation_steps is None:
            self._passes = n
        elif n > opt.accumulation_steps and not self._warned_passes:
            self._warned_passes = True
            warn_user(
                f"mlpo.torch: {n} backwards ran before step() with "
                f"accumulation_steps={opt.accumulation_steps}: the update "
                "that ran during backward was discarded and step() ran the "
                "plain step (exact, without the overlap). Set "
                "accumulation_steps to the backwards per step, or leave it "
                "None to have it learned", RuntimeWarning)

    def _hand_in(self, eng, e, reduced=None):
        """Entry e's gradient to the running step (read in place: its
        version tells a change after this). `reduced`: DDP's averaged
        gradient of it in its bucket (p.grad gets a copy of it when
        backward ends: its values tell a change)."""
        opt = self.opt
        if not e["numel"]:
            self._bwd_given[id(e)] = (e, None, 0, None, None)
            return
        if reduced is not None:
            if reduced.dtype != e["dtype"] or \
                    tuple(reduced.shape) != e["shape"] or \
                    not reduced.is_contiguous():
                self.plain = True  # step() stages it, or says why not
                if eng.stepping_in_backward:
                    self.discard(None, mid_backward=True)
                return
            self._bwd_given[id(e)] = (e, None, 0, reduced,
                                      self._piece_digests(e, reduced))
            self._borrow_pieces(eng, e, reduced)
            return
        try:
            grad = grad_of(e, opt._layout.mixed)
        except (ValueError, TypeError, RuntimeError):
            # A gradient the step refuses (sparse, another dtype): step()
            # raises saying so, and nothing of this step runs before it.
            self.plain = True
            if eng.stepping_in_backward:
                self.discard(None, mid_backward=True)
            return
        if grad is None:
            return
        orig = e["dparam"].grad
        self._bwd_given[id(e)] = (
            e, orig, orig._version, grad,
            self._piece_digests(e, grad) if opt._ranks.world > 1
            else self._digest(orig))
        self._borrow_pieces(eng, e, grad)

    def _borrow_pieces(self, eng, e, grad):
        """This rank's pieces of entry e: the step reads `grad` in place
        and writes a copy of the parameter, copied in at step()."""
        opt = self.opt
        if not self._pieces_of.get(id(e)):
            return  # (data parallel: all of it in other ranks' shards)
        p = e["param"]
        copy = self._shadows.get(id(e))
        if copy is None or copy.dtype != p.dtype or \
                copy.numel() != p.numel():
            copy = self._shadows[id(e)] = torch.empty(p.numel(),
                                                      dtype=p.dtype)
        copy.copy_(_flat(p.detach()))
        for k in self._pieces_of.get(id(e), ()):
            g, _, at, n, off = opt._layout.pieces[k]
            eng.set_param_memory(k, copy.data_ptr() + at * copy.element_size(),
                                 _DTYPES[p.dtype])
            eng.borrow_grad(g, off, grad.data_ptr() + at * grad.element_size(),
                            opt._layout.grad_dt, n)
            eng.grad_ready(k)

    def _copy_in(self):
        """The speculative step was committed: its parameters into the
        model's tensors."""
        with torch.no_grad():
            for e, *_ in self._bwd_given.values():
                copy = self._shadows.get(id(e))
                if copy is not None and e["numel"]:
                    _flat(e["param"].detach()).copy_(copy)

    def _begin(self, eng):
        """The first final gradient of a step: the engine's step starts,
        with the hyperparameters the groups hold now; whether it did (a
        group or hyperparameter the step refuses is left to step(), which
        raises saying so, rather than backward())."""
        opt = self.opt
        try:
            check_groups(opt.param_groups, opt._layout, opt._ranks.fsdp)
            hyper = [opt._hyper(group) for group in opt.param_groups]
        except (ValueError, TypeError, RuntimeError):
            self.plain = True
            return False
        if eng.fresh_pending:
            # A fresh start's first step drops the store's heads (the run
            # before): not a speculation a discard could give back.
            self.plain = True
            return False
        opt._forget_prepared()
        for g, h in enumerate(hyper):
            eng.set_hyper(g, h)
        sync_in(opt._layout.entries)
        # (a parameter handed in gets its copy's memory instead)
        point_at_model(eng, opt._layout)
        opt._session.call("begin_step", opt.loss_scale)
        return True

    def _digest(self, grad):
        """A checksum of a gradient's values, once a step has seen its
        gradients rewritten after backward (Trainer's clip_grad_norm_
        multiplies every gradient in place, by 1.0 when it does not clip):
        a gradient rewritten with its own values is not a change."""
        if not self._check_values or not grad.is_contiguous():
            return None
        return _mlpo.checksum(grad.data_ptr(),
                              grad.numel() * grad.element_size())

    def _piece_digests(self, e, grad):
        """Checksums of this rank's pieces of a gradient (data parallel:
        what DDP handed in is compared with p.grad by value)."""
        opt = self.opt
        flat = grad.reshape(-1)
        es = flat.element_size()
        out = []
        for k in self._pieces_of.get(id(e), ()):
            _, _, at, n, _ = opt._layout.pieces[k]
            out.append(_mlpo.checksum(flat.data_ptr() + at * es, n * es))
        return tuple(out)

    def changed_after_hand_in(self):
        opt = self.opt
        if self._bwd_stale:
            return True
        if opt._ranks.world > 1:
            # (DDP: p.grad holds a copy of the reduced bucket, or is it)
            for e, _, _, _, digests in self._bwd_given.values():
                g = e["dparam"].grad
                if digests is None:
                    continue
                if hasattr(g, "to_local"):  # FSDP: this rank's shard
                    g = g.to_local()
                if g is None or not g.is_contiguous() or \
                        g.dtype != e["dtype"] or \
                        self._piece_digests(e, g) != digests:
                    return True
            return False
        for e, orig, version, _, digest in self._bwd_given.values():
            if orig is None:
                continue
            if e["dparam"].grad is orig and orig._version == version:
                continue
            if digest is not None and e["dparam"].grad is orig and \
                    self._digest(orig) == digest:
                continue  # rewritten with the same values
            self._check_values = True
            return True
        return False

    def finish(self, eng):
        """Decides a step running during backward: at step(), or at any
        other call on the state first (step() then has nothing left to
        do). Data parallel: step() decides it with the other ranks; any
        other call first drops it (nothing applied), and step() runs the
        plain step on every rank."""
        opt = self.opt
        if opt._ranks.world > 1:
            self.ddp_pending = []
            self.plain = True
            self.discard(None, mid_backward=True)
            return
        try:
            if self.changed_after_hand_in():
                # Exact all the same: dropped, and redone as the plain step
                # (into the model's own tensors) with the gradients as they
                # are now.
                opt._session.call("discard_step", True)
                keep = []
                stage_host(eng, opt._layout, keep)
                rep = opt._session.call("step", opt.loss_scale)
            else:
                # Gradients backward did not hand in: unused in the last
                # micro-batch, zeros kept by set_to_none=False, a pass cut
                # short.
                for l in opt._layout:
                    for e in l["entries"]:
                        if id(e) not in self._bwd_given and \
                                e["dparam"].grad is not None:
                            self._hand_in(eng, e)
                rep = opt._session.call("finish_step")
                if not rep["skipped"]:
                    self._copy_in()
            rep["in_backward"] = True
            opt.last_report = rep
            self.done = True
            self.note_redo(bool(rep.get("redone")))
        finally:
            self.learn_passes()
            self.reset()
            if opt._engine is not None:
                point_at_model(opt._engine, opt._layout)
            sync_out(opt._layout.entries)
            opt._note_versions()

    def finish_together(self, eng):
        """Data parallel: step() on every rank finishes the step run during
        backward, deciding clipping and overflow skips from every rank's
        gradient statistics."""
        opt = self.opt
        for l in opt._layout:
            for e in l["entries"]:
                if id(e) not in self._bwd_given and \
                        e["dparam"].grad is not None:
                    self._hand_in(eng, e)

        def agree(sum_sq, nonfinite):
            sum_sq, nonfinite = opt._ranks.sum((sum_sq, nonfinite))
            return sum_sq, int(nonfinite)
        rep = opt._session.call("finish_step", agree)
        if not rep["skipped"]:
            self._copy_in()
        return rep

    def discard(self, why, mid_backward=False):
        """A step running during backward that step() never asked for (or,
        `mid_backward`, that this backward made moot: step() runs the plain
        step): nothing of it is applied; the model's tensors were never
        written."""
        opt = self.opt
        eng = opt._engine
        try:
            # (its rewind writes the copies: the model's tensors hold the
            # values from before it already)
            opt._session.call("discard_step", False)
        finally:
            if mid_backward:  # the count of backwards goes on
                self._bwd_given = {}
                self._bwd_stale = False
            else:
                self.reset()
            point_at_model(eng, opt._layout)
            sync_out(opt._layout.entries)
            opt._note_versions()
        if why:
            warn_user(f"mlpo.torch: {why}: the step that ran during "
                      "backward was discarded (step() was not called); "
                      "the parameters are as before it", RuntimeWarning)
