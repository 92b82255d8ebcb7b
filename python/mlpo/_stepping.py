"""The optimizer's step() and zero_grad(), part of the optimizer class in
torch.py: the groups checked, the step run during backward finished (with
the other ranks where there are several) or the plain step run, its
gradients handed to the engine by _staging.py's functions and the engine
step run through the Session; skipped steps reported; a failed step's
store reopened; and the edits made between steps adopted before a tag."""

import torch

from ._stand_in import sync_in, sync_out
from ._warn import warn_user
from ._session import _DTYPES
from ._backward import _note_plain_step_once, point_at_model
from ._layout import check_groups
from ._staging import (global_stats, override_masters, publish_sharded,
                       stage_device, stage_host, stage_local_shards,
                       stage_sharded)


def _fsdp_step(session, layout, keep, scale):
    """The plain step of an FSDP rank: FSDP gives every rank the same
    gradients to have or not, so the ranks agree only that every one is in
    step(), then on the gradient statistics (global_stats)."""
    ranks, eng = session.ranks, session.engine
    ranks.agree_call("step", [], layout.n_params)
    stage_local_shards(eng, layout, keep)
    return session.call("step", scale, *global_stats(eng, ranks))


class Stepping:
    @torch.no_grad()
    def step(self, closure=None, *, loss_scale=None):
        """One optimizer step. Gradients are divided by loss_scale (default
        self.loss_scale); parameters whose grad is None are skipped; with an
        inf/nan gradient the step is skipped (with a warning; see
        last_report['skipped']) and nothing changes."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._bwd.ddp_pass_agreed = False  # (a backward that raised kept it)
        # (a step run in backward finishes; with data parallel, below,
        # where every rank decides it together)
        eng = self._require_engine(finish=self._ranks.world == 1)
        if self._bwd.done:
            self._bwd.done = False
            self._warn_skipped(eng, self.last_report)
            if self._bwd.auto is not None:
                self._bwd.auto.stepped(True)
            return loss
        if self._ranks.world > 1 and not self._ranks.fsdp:
            return self._step_data_parallel(eng, loss,
                                            loss_scale or self.loss_scale)
        if self._ranks.world > 1 and self.update_in_backward:
            return self._step_fully_sharded(eng, loss,
                                            loss_scale or self.loss_scale)
        self._bwd.learn_passes()  # (update in backward: the next step's count)
        self._bwd.reset()  # fewer backwards than expected, or more
        check_groups(self.param_groups, self._layout, self._ranks.fsdp)
        self._forget_prepared()  # a prepared dict is of the state before
        for g, group in enumerate(self.param_groups):
            eng.set_hyper(g, self._hyper(group))
        scale = loss_scale or self.loss_scale
        keep = []  # gradients stay alive while staged
        # stand-ins (_stand_in.py) take the model's values
        sync_in(self._layout.entries)
        layout = self._layout
        try:
            if layout.device_path is not None:
                stage_device(eng, layout, keep, self._device_ptrs,
                             self._edited())
                rep = self._session.call("step", scale)
            elif self._ranks.world == 1:
                stage_host(eng, layout, keep)
                rep = self._session.call("step", scale)
            else:
                rep = _fsdp_step(self._session, layout, keep, scale)
        finally:
            sync_out(self._layout.entries)
        rep["in_backward"] = False
        self.last_report = rep
        self._warn_skipped(eng, rep)
        self._note_versions()
        if self._bwd.auto is not None:
            self._bwd.auto.stepped(False)
        return loss

    def zero_grad(self, set_to_none=True):
        """As torch.optim's. With update_in_backward, a step still running
        (backward ran, step() did not: an exception in the middle of
        backward, or zero_grad before step) is discarded, as torch.optim
        would not have stepped either, and a count of backwards without a
        step starts again."""
        if self.update_in_backward:
            eng = self._engine
            if eng is not None and eng.stepping_in_backward:
                self._bwd.discard(None)
            self._bwd.reset()
        super().zero_grad(set_to_none=set_to_none)

    def _step_fully_sharded(self, eng, loss, scale):
        """step() of an FSDP rank with the update in backward (each shard
        of the gradients handed in when FSDP's reduce-scatter put it in
        place): the step that ran during backward is finished where every
        rank can, deciding clipping and overflow skips from every rank's
        statistics summed (each rank holds a shard), else every rank runs
        the plain step."""
        running = eng.stepping_in_backward
        together, rep = False, None
        check_groups(self.param_groups, self._layout, self._ranks.fsdp)
        self._forget_prepared()
        keep = []
        sync_in(self._layout.entries)
        try:
            ok = running and scale == self.loss_scale and \
                not self._bwd.changed_after_hand_in()
            got = self._ranks.agree_call("step", [0 if ok else 1],
                                         self._layout.n_params)
            together = int(got[0]) == 0
            if together:
                rep = self._bwd.finish_together(eng)
            else:
                self._ready_for_plain_step(eng, running)
                rep = _fsdp_step(self._session, self._layout, keep, scale)
            rep["in_backward"] = together
            self.last_report = rep
            if running:
                self._bwd.note_redo(bool(rep.get("redone")))
        finally:
            self._end_ranks_step()
        self._warn_skipped(eng, rep)
        self._note_versions()
        if self._bwd.auto is not None:
            self._bwd.auto.stepped(together)
        return loss

    def _step_data_parallel(self, eng, loss, scale):
        """step() of a rank of ZeRO data parallel (each rank's shard of the
        state): the step run during backward (DDP's reduced buckets,
        ddp_comm_hook) is finished where every rank can, else every rank
        runs the plain step; then the new shards are gathered."""
        running = eng.stepping_in_backward
        if self.update_in_backward and not self._bwd.ddp_hooked and \
                not self._bwd.hook_ddp():
            _note_plain_step_once(
                self._bwd.ddp_why or
                "with data parallel it takes DDP's averaged gradients from "
                "its communication hook, and no DistributedDataParallel "
                "holds these parameters: wrap the model in one, or "
                "ddp_model.register_comm_hook(opt, mlpo.torch.ddp_comm_hook)")
        check_groups(self.param_groups, self._layout, self._ranks.fsdp)
        self._forget_prepared()
        keep = []
        sync_in(self._layout.entries)
        try:
            if running:
                self._bwd.ddp_drain(wait=True)
            # (a loss_scale other than the one the running step began
            # with: the plain step)
            ok = running and scale == self.loss_scale and \
                not self._bwd.changed_after_hand_in()
            # One collective: which call, whether every rank can finish,
            # and which parameters have gradients on any rank.
            got = self._ranks.agree_call("step", [0 if ok else 1] + [
                e["dparam"].grad is not None for e in self._layout.entries],
                self._layout.n_params)
            together = int(got[0]) == 0
            if together:
                rep = self._bwd.finish_together(eng)
            else:
                self._ready_for_plain_step(eng, running)
                stage_sharded(eng, self._layout, self._ranks, keep, got[1:],
                              self._bwd.ddp_reduced)
                rep = self._session.call(
                    "step", scale, *global_stats(eng, self._ranks))
            rep["in_backward"] = together
            self.last_report = rep
            if running:  # (a speculation dropped here is redone too)
                self._bwd.note_redo(bool(rep.get("redone")))
        finally:
            self._end_ranks_step()
        if not self._warn_skipped(eng, rep) and not rep["skipped"]:
            publish_sharded(self._layout, self._ranks)
        self._note_versions()
        if self._bwd.auto is not None:
            self._bwd.auto.stepped(together)
        return loss

    def _ready_for_plain_step(self, eng, running):
        """The ranks run the plain step: a step running during backward is
        dropped (another rank's gradients changed, or it runs the plain
        step: this one's speculation goes too), and the engine takes the
        groups' hyperparameters as they are now."""
        if running:
            self._session.call("discard_step", True)
            point_at_model(eng, self._layout)
        for g, group in enumerate(self.param_groups):
            eng.set_hyper(g, self._hyper(group))

    def _end_ranks_step(self):
        """The end of a data-parallel step(), however it ended: the next
        step's backward count, the backward state reset, a step still
        running during backward dropped (raised before the ranks decided
        it, another rank gone mid-collective: nothing of it is applied;
        the error raised is the one that stopped it), the parameters' memory
        the model's again."""
        self._bwd.learn_passes()
        self._bwd.reset()
        if self._engine is not None:
            if self._engine.stepping_in_backward:
                try:
                    self._engine.discard_step(False)
                except (RuntimeError, OSError):
                    pass
            point_at_model(self._engine, self._layout)
        sync_out(self._layout.entries)

    def _warn_skipped(self, eng, rep):
        """A step skipped for an overflow: a warning (the first, then at
        10x as many); whether it was one."""
        if not (rep and rep["skipped"] and "overflow" in rep["skip_reason"]):
            return False
        n = eng.skipped_steps
        if n >= self._warned_skips * 10 or self._warned_skips == 0:
            warn_user(
                f"mlpo.torch: step {eng.step_count + 1} skipped: "
                f"{rep['skip_reason']}; {n} step(s) skipped so far "
                "(optimizer.skipped_steps)", RuntimeWarning)
            self._warned_skips = max(1, n)
        return True

    def _recover_failed_step(self):
        """After a failed step: closes the store (a poisoned index takes no
        more writes until reopened) and opens it again as resume=True
        does, so that the store's heads, not the failed step's leftovers,
        are the state and the model's parameters; says where it continues.
        While the store cannot open (the disk still full), raises, and the
        next call tries again."""
        s = self._session
        what, why = failed = s.failed
        self.close()  # (what a poisoned store could not write back is lost)
        s.failed = failed  # until the reopen works
        self._open(ns=s.ns, resume=True)
        s.failed = None
        if self.update_in_backward:
            self._bwd.hook_params()
        if not self._engine.state_stored:
            raise RuntimeError(
                f"mlpo.torch: {what} failed ({why}) before the store held "
                "any state of this model; the model's parameters may hold "
                "part of that step. The store is open again at step 0: "
                "reload the model's weights (or make the optimizer again "
                "from them) before training on")
        warn_user(
            f"mlpo.torch: {what} failed earlier ({why}); the store was "
            f"reopened and training continues from step "
            f"{self._engine.step_count}, the state it holds; the model's "
            "parameters were reloaded from it", RuntimeWarning)

    def _adopt_edits(self):
        """Edits made since the last step, into the store before a tag. On
        the CPU every parameter is compared with its master (an edit through
        .data bumps no version counter); device memory is compared by
        version counter."""
        eng = self._require_engine()
        sync_in(self._layout.entries)
        if self._layout.device_path is not None:
            edited = self._edited()
            if edited:
                override_masters(eng, self._layout, edited)
                eng.adopt_edits([])
        else:
            edited = list(range(len(self._layout.pieces)))
            for k in edited:
                g, e, at, n, off = self._layout.pieces[k]
                p = e["param"]
                eng.set_param_memory(k, p.data_ptr() + at * p.element_size(),
                                     _DTYPES[p.dtype])
            eng.adopt_edits(edited)
            if not eng.state_stored:
                self._set_initial()
        self._note_versions()
