"""The optimizer's step() and zero_grad(), functions its methods call with
it (_optimizer.py): the groups checked, the step run during backward
finished (with the other ranks where there are several) or the plain step
run, its gradients handed to the engine by _staging.py's functions and
the engine step run through the Session; skipped steps reported; a failed
step's store reopened; and the edits made between steps adopted before a
tag."""

import torch

from ._stand_in import sync_in, sync_out
from ._warn import warn_user
from ._session import _DTYPES
from ._backward_choice import note_plain_step_once
from ._layout import check_groups
from ._staging import (global_stats, override_masters, point_at_model,
                       publish_sharded, stage_device, stage_host,
                       stage_local_shards, stage_sharded)


def _fsdp_step(session, layout, keep, scale):
    """The plain step of an FSDP rank: FSDP gives every rank the same
    gradients to have or not, so the ranks agree only that every one is in
    step(), then on the gradient statistics (global_stats)."""
    ranks, eng = session.ranks, session.engine
    ranks.agree_call("step", [], layout.n_params)
    stage_local_shards(eng, layout, keep)
    return session.call("step", scale, *global_stats(eng, ranks))


@torch.no_grad()
def step(opt, closure=None, *, loss_scale=None):
    """opt.step(closure, loss_scale=): a step finished that ran during
    backward, or the plain step (the gradients staged, the engine's step
    run through the Session), by how the parameters are held."""
    loss = None
    if closure is not None:
        with torch.enable_grad():
            loss = closure()
    opt._bwd.ddp_pass_agreed = False  # (a backward that raised kept it)
    # (a step run in backward finishes; with data parallel, below,
    # where every rank decides it together)
    eng = opt._require_engine(finish=opt._ranks.world == 1)
    if opt._bwd.done:
        opt._bwd.done = False
        _warn_skipped(opt, eng, opt.last_report)
        if opt._bwd.auto is not None:
            opt._bwd.auto.stepped(True)
        return loss
    if opt._ranks.world > 1 and (not opt._ranks.fsdp or
                                 opt.update_in_backward):
        return _step_ranks(opt, eng, loss, loss_scale or opt.loss_scale)
    opt._bwd.learn_passes()  # (update in backward: the next step's count)
    opt._bwd.reset()  # fewer backwards than expected, or more
    check_groups(opt.param_groups, opt._layout, opt._ranks.fsdp)
    opt._forget_prepared()  # a prepared dict is of the state before
    for g, group in enumerate(opt.param_groups):
        eng.set_hyper(g, opt._hyper(group))
    scale = loss_scale or opt.loss_scale
    keep = []  # gradients stay alive while staged
    # stand-ins (_stand_in.py) take the model's values
    sync_in(opt._layout.entries)
    layout = opt._layout
    try:
        if layout.device_path is not None:
            stage_device(eng, layout, keep, opt._device_ptrs,
                         opt._edited())
            rep = opt._session.call("step", scale)
        elif opt._ranks.world == 1:
            stage_host(eng, layout, keep)
            rep = opt._session.call("step", scale)
        else:
            rep = _fsdp_step(opt._session, layout, keep, scale)
    finally:
        sync_out(opt._layout.entries)
    rep["in_backward"] = False
    opt.last_report = rep
    _warn_skipped(opt, eng, rep)
    opt._note_versions()
    if opt._bwd.auto is not None:
        opt._bwd.auto.stepped(False)
    return loss


def zero_grad(opt, set_to_none=True):
    """opt.zero_grad(): a step running during backward discarded first."""
    if opt.update_in_backward:
        eng = opt._engine
        if eng is not None and eng.stepping_in_backward:
            opt._bwd.discard(None)
        opt._bwd.reset()
    torch.optim.Optimizer.zero_grad(opt, set_to_none=set_to_none)


def _step_ranks(opt, eng, loss, scale):
    """step() of a rank of several: FSDP (each rank's shards of the
    parameters, with the update in backward: each shard of the gradients
    handed in when FSDP's reduce-scatter put it in place) or ZeRO data
    parallel (each rank's shard of the state; DDP's reduced buckets handed
    in by ddp_comm_hook). The step run during backward is finished where
    every rank can, deciding clipping and overflow skips from every rank's
    statistics summed, else every rank runs the plain step; ZeRO's new
    shards are then gathered on every rank."""
    zero = not opt._ranks.fsdp
    running = eng.stepping_in_backward
    together, rep = False, None
    if zero and opt.update_in_backward and not opt._bwd.ddp_hooked and \
            not opt._bwd.hook_ddp():
        note_plain_step_once(
            opt._bwd.ddp_why or
            "with data parallel it takes DDP's averaged gradients from "
            "its communication hook, and no DistributedDataParallel "
            "holds these parameters: wrap the model in one, or "
            "ddp_model.register_comm_hook(opt, mlpo.torch.ddp_comm_hook)")
    check_groups(opt.param_groups, opt._layout, opt._ranks.fsdp)
    opt._forget_prepared()
    keep = []
    sync_in(opt._layout.entries)
    try:
        if zero and running:
            opt._bwd.ddp_drain(wait=True)
        # (a loss_scale other than the one the running step began
        # with: the plain step)
        ok = running and scale == opt.loss_scale and \
            not opt._bwd.changed_after_hand_in()
        # One collective: which call, whether every rank can finish, and
        # (ZeRO) which parameters have gradients on any rank.
        has = [e["dparam"].grad is not None
               for e in opt._layout.entries] if zero else []
        got = opt._ranks.agree_call("step", [0 if ok else 1] + has,
                                    opt._layout.n_params)
        together = int(got[0]) == 0
        if together:
            rep = opt._bwd.finish_together(eng)
        elif zero:
            _ready_for_plain_step(opt, eng, running)
            stage_sharded(eng, opt._layout, opt._ranks, keep, got[1:],
                          opt._bwd.ddp_reduced)
            rep = opt._session.call(
                "step", scale, *global_stats(eng, opt._ranks))
        else:
            _ready_for_plain_step(opt, eng, running)
            rep = _fsdp_step(opt._session, opt._layout, keep, scale)
        rep["in_backward"] = together
        opt.last_report = rep
        if running:  # (a speculation dropped here is redone too)
            opt._bwd.note_redo(bool(rep.get("redone")))
    finally:
        _end_ranks_step(opt)
    if not _warn_skipped(opt, eng, rep) and not rep["skipped"] and zero:
        publish_sharded(opt._layout, opt._ranks)
    opt._note_versions()
    if opt._bwd.auto is not None:
        opt._bwd.auto.stepped(together)
    return loss


def _ready_for_plain_step(opt, eng, running):
    """The ranks run the plain step: a step running during backward is
    dropped (another rank's gradients changed, or it runs the plain
    step: this one's speculation goes too), and the engine takes the
    groups' hyperparameters as they are now."""
    if running:
        opt._session.call("discard_step", True)
        point_at_model(eng, opt._layout)
    for g, group in enumerate(opt.param_groups):
        eng.set_hyper(g, opt._hyper(group))


def _end_ranks_step(opt):
    """The end of a data-parallel step(), however it ended: the next
    step's backward count, the backward state reset, a step still
    running during backward dropped (raised before the ranks decided
    it, another rank gone mid-collective: nothing of it is applied;
    the error raised is the one that stopped it), the parameters' memory
    the model's again."""
    opt._bwd.learn_passes()
    opt._bwd.reset()
    if opt._engine is not None:
        if opt._engine.stepping_in_backward:
            try:
                opt._engine.discard_step(False)
            except (RuntimeError, OSError):
                pass
        point_at_model(opt._engine, opt._layout)
    sync_out(opt._layout.entries)


def _warn_skipped(opt, eng, rep):
    """A step skipped for an overflow: a warning (the first, then at
    10x as many); whether it was one."""
    if not (rep and rep["skipped"] and "overflow" in rep["skip_reason"]):
        return False
    n = eng.skipped_steps
    if n >= opt._warned_skips * 10 or opt._warned_skips == 0:
        warn_user(
            f"mlpo.torch: step {eng.step_count + 1} skipped: "
            f"{rep['skip_reason']}; {n} step(s) skipped so far "
            "(optimizer.skipped_steps)", RuntimeWarning)
        opt._warned_skips = max(1, n)
    return True


def recover_failed_step(opt):
    """After a failed step: closes the store (a poisoned index takes no
    more writes until reopened) and opens it again as resume=True
    does, so that the store's heads, not the failed step's leftovers,
    are the state and the model's parameters; says where it continues.
    While the store cannot open (the disk still full), raises, and the
    next call tries again."""
    s = opt._session
    what, why = failed = s.failed
    opt.close()  # (what a poisoned store could not write back is lost)
    s.failed = failed  # until the reopen works
    opt._open(ns=s.ns, resume=True)
    s.failed = None
    if opt.update_in_backward:
        opt._bwd.hook_params()
    if not opt._engine.state_stored:
        raise RuntimeError(
            f"mlpo.torch: {what} failed ({why}) before the store held "
            "any state of this model; the model's parameters may hold "
            "part of that step. The store is open again at step 0: "
            "reload the model's weights (or make the optimizer again "
            "from them) before training on")
    warn_user(
        f"mlpo.torch: {what} failed earlier ({why}); the store was "
        f"reopened and training continues from step "
        f"{opt._engine.step_count}, the state it holds; the model's "
        "parameters were reloaded from it", RuntimeWarning)


def adopt_edits(opt):
    """Edits made since the last step, into the store before a tag. On
    the CPU every parameter is compared with its master (an edit through
    .data bumps no version counter); device memory is compared by
    version counter."""
    eng = opt._require_engine()
    sync_in(opt._layout.entries)
    if opt._layout.device_path is not None:
        edited = opt._edited()
        if edited:
            override_masters(eng, opt._layout, edited)
            eng.adopt_edits([])
    else:
        edited = list(range(len(opt._layout.pieces)))
        for k in edited:
            g, e, at, n, off = opt._layout.pieces[k]
            p = e["param"]
            eng.set_param_memory(k, p.data_ptr() + at * p.element_size(),
                                 _DTYPES[p.dtype])
        eng.adopt_edits(edited)
        if not eng.state_stored:
            opt._set_initial()
    opt._note_versions()
