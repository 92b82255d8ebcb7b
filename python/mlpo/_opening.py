"""How mlpo.torch's optimizers find and open their store: the config's name
and durability against the keywords, the namespaces of one store ("<name>",
"<name>.2", ...: one per live optimizer and per model), a fresh start or a
resume, and the engine's arguments. A mixin of the optimizer class in
torch.py, which owns the layout (_layout, _pieces, _manifest)."""
import gc
import json
import os
import sys

import torch
import torch.distributed as dist

from ._warn import warn_user
from . import _mlpo
from . import store_config
from ._checkpoints import _model_difference, _parse_manifest, _store_name

_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
# Bytes of state per parameter in each format (optimizer/kernel/state_codec.h).
STATE_BYTES = {"fp32": 12, "bf16-moments": 8, "int8-moments": 6 + 8 / 256}
STATE_FORMATS = tuple(STATE_BYTES)
# Namespaces tried in one store before giving up (each a live optimizer or
# another model's state).
_MAX_NAMESPACES = 64


def _local_ranks(world):
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    except ValueError:
        return world



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


class StoreOpening:
    def _resolve_name(self, name):
        theirs = self._config.get("name")
        if theirs is not None and not isinstance(theirs, str):
            raise ValueError(f"mlpo store config: 'name' must be a string, "
                             f"not {theirs!r}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"mlpo.torch: name must be a string, not {name!r}")
        if name is not None and theirs is not None and name != theirs:
            raise ValueError(
                f"mlpo.torch: name={name!r} contradicts the store config's "
                f"name {theirs!r}; drop one of them")
        return name or theirs or "mlpo"

    def _resolve_keyword(self, key, value, default, allowed=None):
        """A keyword that may also be a config key: the one given, the
        other's value, or `default`; both given and different is an
        error, and so is a value outside `allowed`."""
        theirs = self._config.get(key)
        for what, v in ((key, value), (f"the store config's {key}", theirs)):
            if allowed and v is not None and v not in allowed:
                raise ValueError(f"mlpo.torch: {what} must be one of "
                                 f"{', '.join(allowed)}, not {v!r}")
        if value is not None and theirs is not None and value != theirs:
            raise ValueError(
                f"mlpo.torch: {key}={value!r} contradicts the store config's "
                f"{key} {theirs!r}; drop one of them")
        return value or theirs or default

    def _resolve_durability(self, durability):
        return self._resolve_keyword("durability", durability, "tag")

    def _resolve_state_format(self, state_format):
        return self._resolve_keyword("state_format", state_format, "fp32",
                                     STATE_FORMATS)

    @property
    def state_format(self):
        """How the store holds Adam's moments: "fp32", "bf16-moments" or
        "int8-moments" (fixed when the store was created)."""
        return self._state_format

    @property
    def store_name(self):
        """The namespace this optimizer's state lives in ("<name>",
        "<name>.2", ...; data parallel: "<name>-w<W>")."""
        return _store_name(self._ns, self._world)

    def _toml(self):
        state = int(STATE_BYTES[self._state_format] *
                    sum(l["numel"] for l in self._layout))
        return store_config.to_toml(store_config.apply_defaults(
            self._config, state, _local_ranks(self._world)))

    def _make_engine(self, ns, restore_tag=None):
        groups = []
        for g, l in zip(self.param_groups, self._layout):
            groups.append(dict(numel=l["numel"],
                               params=[self._layout.pieces[k][3]
                                       for k in l["pieces"]],
                               **self._hyper(g)))
        dt = _DTYPES[self._layout.dtype]
        return _mlpo.Engine(
            self._toml_text, self._base_dir, _store_name(ns, self._world),
            self._rank, groups, self._opts["subgroup_numel"],
            self._layout.grad_dt, dt, self._opts["max_grad_norm"], self._opts["prefetch"],
            self._opts["commits"], self._opts["threads"], self._durability,
            restore_tag or "", *self._device_args(), True,
            self._state_format)

    def _namespaces(self):
        yield self._name
        for k in range(2, _MAX_NAMESPACES + 1):
            yield f"{self._name}.{k}"

    def _try_open(self, ns, restore_tag=None, check_model=True):
        """The engine of namespace `ns`, or None when it is held by another
        live optimizer or holds another model's state."""
        collected = False
        while True:
            try:
                eng = self._make_engine(ns, restore_tag)
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
                    if not mine and getattr(self, "_resuming", False):
                        self._check_held(
                            ns, f"pid {detail}" if detail else
                            "another process")
                    return None
                if reason == "layout_mismatch":
                    # Objects of another size: another model, or this one
                    # in other subgroups, which resuming must not skip.
                    self._skipped.append(
                        (ns, self._check_subgroups(ns, detail, restore_tag)))
                    return None
                if reason == "state_format":
                    theirs = detail
                    raise ValueError(
                        f"mlpo.torch: namespace {ns!r} of the store holds "
                        f"{theirs} state and this optimizer asks for "
                        f"state_format={self._state_format!r}; pass "
                        f"state_format={theirs!r} to use it, or name= / "
                        "store= for a store of its own (a store's format "
                        "is fixed when it is created)") from None
                raise
            old = eng.get_attribute("manifest")
            if old is not None and check_model:
                try:
                    diff = _model_difference(_parse_manifest(old),
                                             self._layout.manifest)
                except ValueError as e:
                    eng.close()
                    raise RuntimeError(
                        f"mlpo.torch: namespace {ns!r} of the store: {e}; "
                        "nothing was changed. Its state cannot be matched "
                        "to a model without it: pass name= (or store=) for "
                        "a fresh state elsewhere") from None
                if diff is not None:
                    eng.close()
                    self._skipped.append((ns, _another_model(diff)))
                    return None
            return eng

    def _check_held(self, ns, holder):
        """Resuming, a namespace another process holds: RuntimeError when it
        holds this model's state (the last job still running: resuming
        elsewhere would silently start afresh); noted as passed over when
        it holds another model's."""
        try:  # its manifest, read beside the writer
            held = _mlpo.read_store_attribute(
                self._toml_text, self._base_dir,
                _store_name(ns, self._world), "manifest")
            diff = None if held is None else _model_difference(
                _parse_manifest(held), self._layout.manifest)
        except (RuntimeError, ValueError, OSError):
            diff = None  # unreadable: its state all the same
        if diff is not None:
            self._skipped.append(
                (ns, f"{_another_model(diff)}, open in {holder}"))
            return
        raise RuntimeError(
            f"mlpo.torch: resume: namespace {ns!r} of the store holds this "
            f"model's state, and {holder} has it open (the "
            "last job still running?). Nothing was changed: stop that "
            "process and resume again, or pass name= for a state of this "
            "optimizer's own")

    def _other_worlds(self):
        """This model's state under this name written by another number of
        ranks ("<name>" is one rank's, "<name>-w<W>" W ranks'), as
        (store name, ranks, step or None), highest step first."""
        prefix = f"{self._name}-w"
        names = set()
        for p in self._config["path"]:
            try:
                names.update(os.listdir(os.path.join(self._base_dir,
                                                     p["root"])))
            except OSError:
                pass
        found = []
        for n in names:
            w = 1 if n == self._name else (
                int(n[len(prefix):]) if n.startswith(prefix) and
                n[len(prefix):].isdigit() else None)
            if w is None or w == self._world or w < 1:
                continue
            try:
                held = _mlpo.read_store_attribute(
                    self._toml_text, self._base_dir, n, "manifest")
                if held is None or _model_difference(
                        _parse_manifest(held),
                        self._layout.manifest) is not None:
                    continue
            except (RuntimeError, ValueError, OSError):
                continue  # not a store, or not this model's: not ours
            try:
                step = _mlpo.CheckpointReader(self._toml_text,
                                              self._base_dir, n, "").step
            except (RuntimeError, ValueError, OSError):
                step = None
            found.append((n, w, step))
        return sorted(found, key=lambda f: -1 if f[2] is None else f[2],
                      reverse=True)

    def _check_other_worlds(self):
        """Resuming: this model's state written by another number of ranks
        is not resumed (a run of 2 ranks resumed on 1 looks in "<name>", not
        "<name>-w2"). With nothing to resume here, RuntimeError naming it
        (it started afresh without a word); with an older state here, a
        warning (it went back to that one without a word)."""
        eng = self._engine
        others = self._other_worlds()
        if not others:
            return
        n, w, step = others[0]
        at = "" if step is None else f" at step {step}"
        ranks = lambda k: f"{k} rank{'s' if k > 1 else ''}"  # noqa: E731
        what = (f"namespace {n!r} of the store holds this model's state{at}, "
                f"written by {ranks(w)}, and this run has "
                f"{ranks(self._world)}")
        how = (f"load the state dict saved with that run (opt.load_state_"
               f"dict reshards it onto {ranks(self._world)})")
        if not eng.state_stored:
            eng.close()
            self._engine = None
            raise RuntimeError(
                f"mlpo.torch: resume: {what}: resume=True continues a run of "
                f"as many ranks. To continue it, {how}; or pass "
                "resume=False to start afresh")
        if step is not None and step > eng.step_count:
            warn_user(
                f"mlpo.torch: resume: continuing {self.store_name!r} at step "
                f"{eng.step_count}, while {what} (a later state of another "
                f"run). To continue that one instead, {how}")

    def _check_subgroups(self, ns, held, restore_tag):
        """Resuming (or restoring a tag), a namespace whose objects have
        another size but whose manifest is this model's holds this model's
        state in other subgroups (another subgroup_numel): a ValueError
        saying which to pass, instead of a fresh start elsewhere. Otherwise
        what the namespace holds, for the note a fresh start prints."""
        if not getattr(self, "_resuming", False):
            return "objects of another size"
        try:
            reader = _mlpo.CheckpointReader(
                self._toml_text, self._base_dir,
                _store_name(ns, self._world), restore_tag or "")
            diff = _model_difference(json.loads(reader.manifest()),
                                     self._layout.manifest)
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
            f"{self._opts['subgroup_numel']}). Pass the subgroup_numel it "
            "was created with (the element count of that first object "
            "works) to resume it: a namespace's subgroups are fixed when it "
            "is created. Nothing was changed; resume=False starts a fresh "
            "state in a namespace of its own") from None

    def _open(self, restore_tag=None, resume=False, ns=None,
              check_model=True):
        """Opens this optimizer's namespace: `ns`, or the first of
        "<name>", "<name>.2", ... that no live optimizer holds and that holds
        no other model's state. Fresh unless `resume` or `restore_tag`."""
        self._toml_text = self._toml()
        self._resuming = bool(resume or restore_tag)
        self._skipped = []  # (namespace, why) passed over, for _resume
        eng = i = err = None
        together = self._world > 1 and ns is None
        tried = [ns] if ns is not None else list(self._namespaces())
        try:
            for i, cand in enumerate(tried):
                eng = self._try_open(cand, restore_tag, check_model)
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
        if together:
            # Every rank in the same namespace: the highest any rank needs.
            k = max(self._agree_open(i, err, eng))
            if k != i:
                eng.close()
                eng = self._try_open(tried[k], restore_tag)
                if eng is None:
                    raise RuntimeError(
                        f"mlpo.torch: rank {self._rank} cannot open namespace "
                        f"{tried[k]!r} that another rank chose")
            cand = tried[k]
        self._ns = cand
        self._engine = eng
        try:
            eng.set_attribute("manifest", json.dumps(self._layout.manifest))
            self._resuming = False  # (only while opening)
            if restore_tag:
                self._params_from_store()
            elif resume:
                self._resume()
            self._set_initial()
            self._note_versions()
        except BaseException:
            # A resume that failed (damaged data, another world) releases
            # the store at once: the half-made optimizer held it, and its
            # lock, until the garbage collector ran.
            self._engine = None
            try:
                eng.close()
            except Exception:  # noqa: BLE001 -- the first error is the one
                pass
            raise

    def _agree_open(self, value, err, eng=None):
        """Data parallel: one stage of opening, together. Every rank gives
        its value and its error, if any, and learns all ranks': when one
        failed (its node's path missing, its store held), every rank closes
        its store and raises naming it, instead of the others waiting for
        it in the next collective (to fail there with the transport's
        "connection closed" once it exits, or at the process group's
        timeout while it lives on). Returns the ranks' values."""
        out = [None] * self._world
        told = None if err is None else f"{type(err).__name__}: {err}"
        dist.all_gather_object(out, (value, told), group=self._pg)
        failed = [(r, m) for r, (_, m) in enumerate(out) if m is not None]
        if not failed:
            return [v for v, _ in out]
        self._open_told = True  # every rank knows: not again
        for e in (eng, self._engine):
            if e is not None:
                e.close()
        self._engine = None
        if err is not None:
            raise err
        r, m = failed[0]
        raise RuntimeError(
            f"mlpo.torch: rank {r} of {self._world} could not open its "
            f"store, so no rank opens (they open together); rank "
            f"{self._rank} closed its own, unchanged. Rank {r}'s error: {m}")

    def _agree_steps(self, ranks):
        """Data parallel, opened: every rank's (step, tags) must show one
        state. A rank at another step (one rank's store restored by hand,
        `mlpo restore <store>/rank-0 TAG`; or a job killed between two
        ranks' commits under durability="step") would train on a mixed
        state without a word: RuntimeError on every rank, naming the steps
        and the newest tag every rank holds."""
        steps = [s for s, _ in ranks]
        if len(set(steps)) == 1:
            return
        common = [t for t in ranks[0][1] if all(t in tags for _, tags in
                                               ranks)]
        # (the store's directory on its first path: the CLI takes it and
        # acts on every rank's store in it)
        where = os.path.dirname(self._engine.store_dirs[0])
        self.close()
        at = ", ".join(f"rank {r} at step {s}" for r, s in enumerate(steps))
        way = (f"restore every rank to one tag (the newest all hold is "
               f"{common[-1]!r}: `mlpo restore {where} {common[-1]}` restores "
               "all its ranks), or load a state "
               "dict" if common else "load a state dict")
        raise RuntimeError(
            f"mlpo.torch: the ranks' stores of {self.store_name!r} hold "
            f"different steps ({at}): their shards are not one state; "
            f"{way}")

    def _resume(self):
        """Continues from the heads, or from the newest tag when the last
        step was cut short; says which, once."""
        eng = self._engine
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
        self._check_other_worlds()
        if not eng.state_stored:
            what = "nothing to resume: starting at step 0"
            if self._skipped:
                # Say what was there, so a changed model is not a silent
                # fresh start.
                what += " (passed over: " + "; ".join(
                    f"{ns!r} holds {why}" for ns, why in self._skipped) + ")"
        else:
            what = "resuming from " + what
        if self._world > 1:
            # Before the collectives of reading the parameters: a rank with
            # nothing stored (killed before its DRAM tier was written back)
            # beside ranks at step t took other collectives, and gloo
            # aborted the process.
            self._agree_steps(self._agree_open(
                (eng.step_count, eng.tag_order()), None))
        if self._rank == 0:
            print(f"mlpo.torch: {self.store_name}: {what}", file=sys.stderr)
        if eng.state_stored:
            self._params_from_store()

    def _device_args(self):
        """Engine arguments of the device path: backend, index, and each
        group's tensors as (offset, numel, data_ptr)."""
        if self._layout.device_path is None:
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
        backend, index = self._layout.device_path
        return backend, index, pieces
