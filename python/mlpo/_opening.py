"""How an mlpo.torch optimizer finds and opens its store: the namespaces of
one store ("<name>", "<name>.2", ...: one per live optimizer and per
model), what a namespace holds (another model's state, this model's in
other subgroups or written by another number of ranks), the ranks opening
together, and a resume's choice of heads or tag. Functions of the Session
(_session.py) and the Layout (_layout.py); the optimizer's _open reads the
parameters back once a namespace is open."""
import gc
import json
import os

from ._warn import warn_user
from ._checkpoints import _model_difference, _parse_manifest
from ._session import store_name


def _another_model(diff):
    """What a namespace holding another model's state holds, from
    _model_difference's pair: (name, shape, group) or None each."""
    theirs, ours = diff
    if isinstance(theirs, str):  # the same model, sharded another way
        return f"this model's state under {theirs} (this optimizer: {ours})"
    if theirs is None:
        return f"another model (without parameter {ours[0]!r})"
    if ours is None:
        return f"another model (with parameter {theirs[0]!r} too)"
    return (f"another model ({theirs[0]!r} of shape {list(theirs[1])} "
            f"where this one has {ours[0]!r} of shape {list(ours[1])})")


def device_args(layout):
    """The engine's arguments of the device path (backend, index, and each
    group's tensors as (offset, numel, data_ptr)), and {id(param):
    data_ptr} of the memory they name."""
    if layout.device_path is None:
        return ("", 0, []), {}
    ptrs, pieces = {}, []
    for l in layout:
        ps = []
        for e in l["entries"]:
            if e["numel"]:
                ps.append((e["offset"], e["numel"], e["param"].data_ptr()))
                ptrs[id(e["param"])] = e["param"].data_ptr()
        pieces.append(ps)
    backend, index = layout.device_path
    return (backend, index, pieces), ptrs


class Opener:
    """Opens namespaces of `session`'s store for `layout`: engines made
    with `groups` (each group's sizes and hyperparameters) and
    `device_args`, at `restore_tag` (None: the heads). `resuming` (resume
    or a restore tag) makes a namespace holding this model's state in a
    way it cannot open an error rather than one to pass over;
    `check_model` False opens a namespace of another model's manifest (a
    group was added). What it passed over is in `skipped`."""

    def __init__(self, session, layout, groups, device_args, *,
                 restore_tag=None, resuming=False, check_model=True):
        self.s, self.layout = session, layout
        self.groups, self.device_args = groups, device_args
        self.restore_tag, self.resuming = restore_tag, resuming
        self.check_model = check_model
        self.skipped = []  # (namespace, why) passed over, for a resume

    def try_open(self, ns):
        """The engine of namespace `ns`, or None when it is held by another
        live optimizer or holds another model's state."""
        collected = False
        while True:
            try:
                eng = self.s.make_engine(ns, self.layout, self.groups,
                                         self.device_args, self.restore_tag)
            except RuntimeError as e:
                # (the engine's reason for the failure: _mlpo.EngineError)
                reason = getattr(e, "reason", None)
                detail = getattr(e, "detail", "")
                if reason == "store_held":
                    mine = detail == str(os.getpid())
                    if mine and not collected:
                        # An optimizer of this process nobody can reach any
                        # more (a notebook cell run again) still holds it.
                        gc.collect()
                        collected = True
                        continue
                    if not mine and self.resuming:
                        self._check_held(
                            ns, f"pid {detail}" if detail else
                            "another process")
                    return None
                if reason == "layout_mismatch":
                    # Objects of another size: another model, or this one
                    # in other subgroups, which resuming must not skip.
                    self.skipped.append(
                        (ns, self._check_subgroups(ns, detail)))
                    return None
                if reason == "state_format":
                    raise ValueError(
                        f"mlpo.torch: namespace {ns!r} of the store holds "
                        f"{detail} state and this optimizer asks for "
                        f"state_format={self.s.state_format!r}; pass "
                        f"state_format={detail!r} to use it, or name= / "
                        "store= for a store of its own (a store's format "
                        "is fixed when it is created)") from None
                raise
            old = eng.get_attribute("manifest")
            if old is not None and self.check_model:
                try:
                    diff = _model_difference(_parse_manifest(old),
                                             self.layout.manifest)
                except ValueError as e:
                    eng.close()
                    raise RuntimeError(
                        f"mlpo.torch: namespace {ns!r} of the store: {e}; "
                        "nothing was changed. Its state cannot be matched "
                        "to a model without it: pass name= (or store=) for "
                        "a fresh state elsewhere") from None
                if diff is not None:
                    eng.close()
                    self.skipped.append((ns, _another_model(diff)))
                    return None
            return eng

    def _check_held(self, ns, holder):
        """Resuming, a namespace another process holds: RuntimeError when it
        holds this model's state (the last job still running: resuming
        elsewhere would silently start afresh); noted as passed over when
        it holds another model's."""
        try:  # its manifest, read beside the writer
            held = self.s.read_attribute(
                store_name(ns, self.s.ranks.world), "manifest")
            diff = None if held is None else _model_difference(
                _parse_manifest(held), self.layout.manifest)
        except (RuntimeError, ValueError, OSError):
            diff = None  # unreadable: its state all the same
        if diff is not None:
            self.skipped.append(
                (ns, f"{_another_model(diff)}, open in {holder}"))
            return
        raise RuntimeError(
            f"mlpo.torch: resume: namespace {ns!r} of the store holds this "
            f"model's state, and {holder} has it open (the "
            "last job still running?). Nothing was changed: stop that "
            "process and resume again, or pass name= for a state of this "
            "optimizer's own")

    def _check_subgroups(self, ns, held):
        """Resuming (or restoring a tag), a namespace whose objects have
        another size but whose manifest is this model's holds this model's
        state in other subgroups (another subgroup_numel): a ValueError
        saying which to pass, instead of a fresh start elsewhere. Otherwise
        what the namespace holds, for the note a fresh start prints."""
        if not self.resuming:
            return "objects of another size"
        try:
            reader = self.s.reader(store_name(ns, self.s.ranks.world),
                                   self.restore_tag or "")
            diff = _model_difference(json.loads(reader.manifest()),
                                     self.layout.manifest)
        except (RuntimeError, ValueError):
            # Nothing readable at the heads (or that tag): not this
            # model's state to resume.
            return "objects of another size"
        if diff is not None:
            return _another_model(diff)
        # (`held`: the first object's layout, "p:f32[N], ...")
        raise ValueError(
            f"mlpo.torch: namespace {ns!r} of the store holds this model's "
            f"state in subgroups of another size (its first object is "
            f"{{{held}}}; this optimizer asks for subgroup_numel="
            f"{self.s.opts['subgroup_numel']}). Pass the subgroup_numel it "
            "was created with (the element count of that first object "
            "works) to resume it: a namespace's subgroups are fixed when it "
            "is created. Nothing was changed; resume=False starts a fresh "
            "state in a namespace of its own") from None


def open_namespace(opener, ns=None):
    """Opens `ns`, or the first of "<name>", "<name>.2", ... that no live
    optimizer holds and that holds no other model's state; with several
    ranks and no `ns`, the one every rank can open (the highest any
    needs). Returns (namespace, engine)."""
    s = opener.s
    eng = i = err = None
    together = s.ranks.world > 1 and ns is None
    tried = [ns] if ns is not None else list(s.namespaces())
    try:
        for i, cand in enumerate(tried):
            eng = opener.try_open(cand)
            if eng is not None:
                break
        if eng is None:
            raise RuntimeError(
                f"mlpo.torch: no free namespace in the store (tried "
                f"{tried[0]!r} to {tried[-1]!r}: each is held by a live "
                "optimizer or holds another model's state); pass name= "
                "or another store=")
    except Exception as e:
        if not together:
            raise
        err = e
    if not together:
        return cand, eng
    k = max(agree_open(s.ranks, s, i, err, eng))
    if k != i:
        eng.close()
        eng = opener.try_open(tried[k])
        if eng is None:
            raise RuntimeError(
                f"mlpo.torch: rank {s.ranks.rank} cannot open namespace "
                f"{tried[k]!r} that another rank chose")
    return tried[k], eng


def agree_open(ranks, session, value, err, eng=None):
    """Data parallel: one stage of opening, together. Every rank gives its
    value and its error, if any, and learns all ranks': when one failed
    (its node's path missing, its store held), every rank closes its store
    (`eng`, and the session's: None before one was made) and raises naming
    it, instead of the others waiting for it in the next collective (to
    fail there with the transport's "connection closed" once it exits, or
    at the process group's timeout while it lives on). Returns the ranks'
    values."""
    told = None if err is None else f"{type(err).__name__}: {err}"
    out = ranks.gather_objects((value, told))
    failed = [(r, m) for r, (_, m) in enumerate(out) if m is not None]
    if not failed:
        return [v for v, _ in out]
    if session is not None:
        session.open_told = True  # every rank knows: not again
        eng, other = session.engine, eng
        session.engine = None
        if other is not None:
            other.close()
    if eng is not None:
        eng.close()
    if err is not None:
        raise err
    r, m = failed[0]
    raise RuntimeError(
        f"mlpo.torch: rank {r} of {ranks.world} could not open its store, "
        f"so no rank opens (they open together); rank {ranks.rank} closed "
        f"its own, unchanged. Rank {r}'s error: {m}")


def steps_differ(session, ranks):
    """Data parallel, opened: every rank's (step, tags) in `ranks` must
    show one state. A rank at another step (one rank's store restored by
    hand, `mlpo restore <store>/rank-0 TAG`; or a job killed between two
    ranks' commits under durability="step") would train on a mixed state
    without a word: the error to raise on every rank (the caller closes
    first), naming the steps and the newest tag every rank holds; None
    when they agree."""
    steps = [s for s, _ in ranks]
    if len(set(steps)) == 1:
        return None
    common = [t for t in ranks[0][1] if all(t in tags for _, tags in
                                           ranks)]
    # (the store's directory on its first path: the CLI takes it and acts
    # on every rank's store in it)
    where = os.path.dirname(session.engine.store_dirs[0])
    at = ", ".join(f"rank {r} at step {s}" for r, s in enumerate(steps))
    way = (f"restore every rank to one tag (the newest all hold is "
           f"{common[-1]!r}: `mlpo restore {where} {common[-1]}` restores "
           "all its ranks), or load a state "
           "dict" if common else "load a state dict")
    return RuntimeError(
        f"mlpo.torch: the ranks' stores of {session.store_name!r} hold "
        f"different steps ({at}): their shards are not one state; {way}")


def resume_point(session, layout, skipped):
    """Resuming an open namespace: continues from the heads, or from the
    newest tag when the last step was cut short (or no head is left);
    returns what it resumed, to say once."""
    eng = session.engine
    try:
        eng.continue_heads()
        what = f"step {eng.step_count} (the last step written)" if \
            eng.step_count else "step 0 (the initial parameters a " \
            "checkpoint before the first step stored)"
    except RuntimeError as e:
        if getattr(e, "reason", None) != "step_interrupted":
            raise
        tags = eng.tag_order()
        if not tags:
            raise RuntimeError(
                f"mlpo.torch: resume: {e}; and the store has no tag to "
                "go back to, so it holds no state to resume. Start "
                "afresh with resume=False (the store is reused: the "
                "first step replaces what it holds) or under another "
                "name=, or load a state dict you saved") from None
        eng.restore(tags[-1])
        what = f"tag {tags[-1]!r} at step {eng.step_count} (the last " \
               "step was cut short)"
    if not eng.state_stored and eng.tag_order():
        # No heads but tags (a salvage dropped every head): the newest
        # tag, not a fresh start that leaves the tags unused.
        tag = eng.tag_order()[-1]
        eng.restore(tag)
        what = f"tag {tag!r} at step {eng.step_count} (the store held " \
               "no head: a salvage or restore dropped them)"
    _check_other_worlds(session, layout)
    if eng.state_stored:
        return "resuming from " + what
    what = "nothing to resume: starting at step 0"
    if skipped:
        # Say what was there, so a changed model is not a silent fresh
        # start.
        what += " (passed over: " + "; ".join(
            f"{ns!r} holds {why}" for ns, why in skipped) + ")"
    return what


def _other_worlds(session, layout):
    """This model's state under this name written by another number of
    ranks ("<name>" is one rank's, "<name>-w<W>" W ranks'), as (store
    name, ranks, step or None), highest step first."""
    name, world = session.name, session.ranks.world
    prefix = f"{name}-w"
    names = set()
    for root in session.roots():
        try:
            names.update(os.listdir(root))
        except OSError:
            pass
    found = []
    for n in names:
        w = 1 if n == name else (
            int(n[len(prefix):]) if n.startswith(prefix) and
            n[len(prefix):].isdigit() else None)
        if w is None or w == world or w < 1:
            continue
        try:
            held = session.read_attribute(n, "manifest")
            if held is None or _model_difference(
                    _parse_manifest(held), layout.manifest) is not None:
                continue
        except (RuntimeError, ValueError, OSError):
            continue  # not a store, or not this model's: not ours
        try:
            step = session.reader(n).step
        except (RuntimeError, ValueError, OSError):
            step = None
        found.append((n, w, step))
    return sorted(found, key=lambda f: -1 if f[2] is None else f[2],
                  reverse=True)


def _check_other_worlds(session, layout):
    """Resuming: this model's state written by another number of ranks is
    not resumed (a run of 2 ranks resumed on 1 looks in "<name>", not
    "<name>-w2"). With nothing to resume here, RuntimeError naming it (it
    started afresh without a word), the session closed; with an older
    state here, a warning (it went back to that one without a word)."""
    eng = session.engine
    others = _other_worlds(session, layout)
    if not others:
        return
    world = session.ranks.world
    n, w, step = others[0]
    at = "" if step is None else f" at step {step}"
    ranks = lambda k: f"{k} rank{'s' if k > 1 else ''}"  # noqa: E731
    what = (f"namespace {n!r} of the store holds this model's state{at}, "
            f"written by {ranks(w)}, and this run has {ranks(world)}")
    how = (f"load the state dict saved with that run (opt.load_state_"
           f"dict reshards it onto {ranks(world)})")
    if not eng.state_stored:
        session.close()
        raise RuntimeError(
            f"mlpo.torch: resume: {what}: resume=True continues a run of "
            f"as many ranks. To continue it, {how}; or pass "
            "resume=False to start afresh")
    if step is not None and step > eng.step_count:
        warn_user(
            f"mlpo.torch: resume: continuing {session.store_name!r} at step "
            f"{eng.step_count}, while {what} (a later state of another "
            f"run). To continue that one instead, {how}")
