"""The base class of mlpo.torch's optimizers (torch.py's AdamW, Adam, Lion,
Adagrad, SGD, Adamax each name their rule and torch keywords over it): a
torch.optim.Optimizer holding a Session and its Ranks (_session.py), a
Layout (_layout.py) and an InBackward (_backward.py). Its methods are
torch.optim's API and mlpo's; the longer ones call the functions of
_stepping.py (step, zero_grad) and _checkpoints.py (state_dict,
load_state_dict, checkpoint, restore, flush, close) with the optimizer."""
import json
import math
import sys

import torch

from . import _checkpoints, _mlpo, _stepping, store_config
from ._session import _DTYPES, Ranks, Session
from ._checkpoints import _MADE
from ._stand_in import _flat
from ._layout import build_layout, split_names
from ._state_view import StateView
from ._opening import (Opener, agree_open, device_args, open_namespace,
                       resume_point, steps_differ)
from ._stepping import adopt_edits, recover_failed_step
from ._backward import InBackward
from ._rules import check_group, check_slots
from ._stand_in import sync_in, sync_out
from ._reshard import fsdp_mesh


def _wrapped(obj):
    """The mlpo optimizer `obj` wraps when it is a proxy object whose class
    derives from an mlpo optimizer's (Lightning's LightningOptimizer);
    None for an optimizer itself."""
    real = obj.__dict__.get("_optimizer")
    return real if isinstance(real, _MlpoOptimizer) and real is not obj \
        else None


class _MlpoOptimizer(torch.optim.Optimizer):
    _mode = "adamw"

    def __init__(self, params, defaults, *, store=None, name=None,
                 durability=None, resume=False, subgroup_numel=1 << 22,
                 max_grad_norm=0.0, loss_scale=1.0, prefetch=2, commits=2,
                 threads=0, restore_tag=None, keep_checkpoints=0,
                 process_group=None, device_backend=None, state_format=None,
                 update_in_backward=None, accumulation_steps=None,
                 **unknown):
        cls = type(self).__name__
        if unknown:  # named as Python names it, for the class called
            raise TypeError(f"{cls}.__init__() got an unexpected keyword "
                            f"argument {next(iter(unknown))!r}")
        check_group(self._mode, defaults, f"mlpo.torch.{cls}()")
        for g, group in enumerate(params if params and isinstance(
                params, (list, tuple)) and isinstance(params[0], dict)
                else []):
            check_group(self._mode, {**defaults, **group},
                        f"mlpo.torch.{cls}(): param group {g}")
        # The engine's sizes, checked here: pybind11 answered a negative
        # or huge one with its signature dump, and took 2.5 as 2.
        for key, v, lo, hi in (("subgroup_numel", subgroup_numel, 1, 1 << 40),
                               ("prefetch", prefetch, 1, 64),
                               ("commits", commits, 1, 64),
                               ("threads", threads, 0, 4096)):
            if isinstance(v, bool) or not isinstance(v, int) or \
                    not lo <= v <= hi:
                raise ValueError(f"mlpo.torch.{cls}: {key} must be a whole "
                                 f"number from {lo} to {hi}, not {v!r}")
        for key, v in (("max_grad_norm", max_grad_norm),
                       ("loss_scale", loss_scale)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                    not math.isfinite(v) or v < 0 or (key == "loss_scale"
                                                       and v == 0):
                raise ValueError(f"mlpo.torch.{cls}: invalid {key} {v!r}")
        if durability not in (None, "step", "tag"):
            raise ValueError(f"mlpo.torch.{cls}: durability must be 'step' "
                             f"or 'tag', not {durability!r}")
        if isinstance(keep_checkpoints, bool) or not isinstance(
                keep_checkpoints, int) or keep_checkpoints < 0:
            raise ValueError(f"mlpo.torch.{cls}: keep_checkpoints must be a "
                             f"whole number >= 0 (0 keeps every checkpoint), "
                             f"not {keep_checkpoints!r}")
        params, self._names = split_names(params)
        self._layout = None
        self._session = None  # (the store and engine, once made)
        _MADE.add(self)  # closed at interpreter exit if still open
        self._bwd = InBackward(self)  # the update during backward
        self.update_in_backward = False
        self._prepared = None  # (step, dict) of prepare_state_dict()
        self._last_handed = None  # the tag state_dict() handed out last
        # (own tag, its id, the dict's "mlpo") of a dict loaded by copying
        # its tag in (another live optimizer held its namespace): handed
        # back by state_dict() while the state is still that tag's.
        self._loaded_ref = None
        # What torch.distributed.checkpoint's get_optimizer_state_dict
        # gets: "reference" (a tag of the store, no copy) or "copy" (the
        # state itself, a checkpoint that stands alone).
        self.dcp_state = "reference"
        super().__init__(params, defaults)
        for group in self.param_groups:
            if any(getattr(p, "_is_flat_param", False)
                   for p in group["params"]):
                # FSDP1 (FullyShardedDataParallel, Lightning's FSDPStrategy):
                # each rank's flat shard of many parameters. mlpo would
                # shard it again as if every rank held the same tensor.
                _MADE.discard(self)
                raise ValueError(
                    f"mlpo.torch.{cls}: a parameter is FSDP1's flat "
                    "parameter (FullyShardedDataParallel, Lightning's "
                    "FSDPStrategy), which mlpo does not take: shard the "
                    "model with fully_shard (FSDP2; Lightning's "
                    "ModelParallelStrategy) and give mlpo its parameters")
        self.state = StateView(self)
        self.loss_scale = float(loss_scale)
        self.keep_checkpoints = keep_checkpoints
        self.last_report = None
        self._warned_skips = 0
        # FSDP (fully_shard): the parameters are DTensors whose local
        # shards this rank updates in place, as torch.optim does; FSDP
        # itself averages the gradients and gathers the parameters.
        self._ranks = Ranks(process_group, fsdp_mesh(self.param_groups))
        if device_backend not in (None, "auto", "cuda", "host"):
            raise ValueError(f"mlpo.torch.{cls}: device_backend must be "
                             "None, 'auto', 'cuda' or 'host', not "
                             f"{device_backend!r}")
        self._device_backend_arg = device_backend
        try:
            s = self._session = Session(
                store, name=name, durability=durability,
                state_format=state_format, ranks=self._ranks,
                opts=dict(subgroup_numel=int(subgroup_numel),
                          max_grad_norm=float(max_grad_norm),
                          prefetch=int(prefetch), commits=int(commits),
                          threads=int(threads)))
            self._layout = self._build_layout()
            try:  # a bad key or value, named with the file it is in
                _mlpo.check_store_config(s.toml(self._layout), s.base_dir)
            except ValueError as e:
                raise ValueError(
                    f"mlpo store config {store_config.source(store)}: {e}"
                ) from None
            store_config.make_roots(s.config, s.base_dir)
            self._open(restore_tag=restore_tag, resume=resume)
        except Exception as e:
            s = self._session
            if self._ranks.world > 1 and not (s is not None and s.open_told):
                # The other ranks wait for this one in a collective of
                # opening: tell them, so they stop too.
                agree_open(self._ranks, s, None, e)
            raise
        self._bwd.setup(update_in_backward, accumulation_steps)
        if self._ranks.world > 1:
            self._agree_steps()

    # Wrapped as a base class: PyTorch Lightning's LightningOptimizer makes
    # an object of a class derived from its own and this one, holding this
    # optimizer in `_optimizer` and reading what it lacks from it
    # (__getattr__). Methods called through that wrapper run with the
    # wrapper as self: what they write goes to the optimizer that owns the
    # state, and the wrapper's end (garbage) closes nothing.
    def __setattr__(self, name, value):
        real = _wrapped(self)
        if real is not None and name not in self.__dict__:
            setattr(real, name, value)
        else:
            object.__setattr__(self, name, value)

    def __delattr__(self, name):
        real = _wrapped(self)
        if real is not None and name not in self.__dict__:
            delattr(real, name)
        else:
            object.__delattr__(self, name)

    def __getstate__(self):
        # torch.optim's optimizers pickle (and deepcopy) with their state;
        # mlpo's lives in the store, which two optimizers cannot share, and
        # a copy without it would fail at its first use.
        raise TypeError(
            f"mlpo.torch.{type(self).__name__} cannot be pickled or copied "
            "(copy.deepcopy, torch.save(opt)): its state lives in the "
            "store. Save opt.state_dict() (a small dict naming a checkpoint "
            "of the store) and load it into a new optimizer")

    @property
    def _engine(self):
        """The session's open engine; None while closed (or half made)."""
        s = self._session
        return None if s is None else s.engine

    @property
    def state_format(self):
        """How the store holds the rule's state: "fp32", "bf16-moments" or
        "int8-moments" (fixed when the store was created)."""
        return self._session.state_format

    @property
    def store_name(self):
        """The namespace this optimizer's state lives in ("<name>",
        "<name>.2", ...; data parallel: "<name>-w<W>")."""
        return self._session.store_name

    def _engine_groups(self):
        """Each group's sizes and hyperparameters, as the engine takes
        them."""
        return [dict(numel=l["numel"],
                     params=[self._layout.pieces[k][3] for k in l["pieces"]],
                     **self._hyper(g))
                for g, l in zip(self.param_groups, self._layout)]

    def _opener(self, **kw):
        """An Opener (_opening.py) of this optimizer's store and layout;
        sets aside the device path's pointers it opens with."""
        args, self._device_ptrs = device_args(self._layout)
        return Opener(self._session, self._layout, self._engine_groups(),
                      args, **kw)

    def _open(self, restore_tag=None, resume=False, ns=None,
              check_model=True):
        """Opens this optimizer's namespace (`ns`, or the first free one
        holding this model's state or none) and sets the model's
        parameters from it: fresh unless `resume` or `restore_tag`."""
        s = self._session
        s.toml_text = s.toml(self._layout)
        opener = self._opener(restore_tag=restore_tag,
                              resuming=bool(resume or restore_tag),
                              check_model=check_model)
        s.ns, eng = open_namespace(opener, ns)
        s.engine = eng
        try:
            eng.set_attribute("manifest", json.dumps(self._layout.manifest))
            if restore_tag:
                self._params_from_store()
            elif resume:
                self._resume(opener.skipped)
            self._set_initial()
            self._note_versions()
        except BaseException:
            # A resume that failed (damaged data, another world) releases
            # the store at once: the half-made optimizer held it, and its
            # lock, until the garbage collector ran.
            s.engine = None
            try:
                eng.close()
            except Exception:  # noqa: BLE001 -- the first error is the one
                pass
            raise

    def _resume(self, skipped):
        """Continues from what the open namespace holds (resume_point),
        says which once, and reads the parameters back."""
        what = resume_point(self._session, self._layout, skipped)
        if self._ranks.world > 1:
            # Before the collectives of reading the parameters: a rank with
            # nothing stored (killed before its DRAM tier was written back)
            # beside ranks at step t took other collectives, and gloo
            # aborted the process.
            self._agree_steps()
        if self._ranks.rank == 0:
            print(f"mlpo.torch: {self.store_name}: {what}", file=sys.stderr)
        if self._engine.state_stored:
            self._params_from_store()

    def _agree_steps(self):
        """Data parallel, opened: the ranks agree that their stores hold
        one state (steps_differ), or every rank closes and raises."""
        eng = self._engine
        err = steps_differ(self._session, agree_open(
            self._ranks, self._session, (eng.step_count, eng.tag_order()),
            None))
        if err is not None:
            self.close()
            raise err

    def _build_layout(self):
        return build_layout(
            self.param_groups, self._names, mode=self._mode,
            world=self._ranks.world, rank=self._ranks.rank,
            fsdp=self._ranks.fsdp,
            subgroup_numel=self._session.opts["subgroup_numel"],
            state_format=self._session.state_format,
            device_backend=self._device_backend_arg)

    def _hyper(self, group):
        """The group's hyperparameters as numbers (a 0-d tensor lr, as a
        scheduler may set, included); a ValueError naming the group and key
        for anything else, or for an option whose state the store does not
        hold (the engine then checks the ranges)."""
        g = next((i for i, x in enumerate(self.param_groups) if x is group),
                 "new")
        where = f"mlpo.torch: step(): param group {g}"
        out = check_group(self._mode, group, where)
        if "initial_accumulator_value" in out:
            # torch.optim.Adagrad fills every sum from the constructor's
            # value (a group's own is never read): so does mlpo.
            out["initial_accumulator_value"] = float(
                self.defaults["initial_accumulator_value"])
        if self._engine is not None:
            check_slots(self._engine.rule, group, where)
        return out

    def _initial_slot(self, g, name):
        """A state's value before the first step: torch.optim.Adagrad's sum
        starts at the constructor's initial_accumulator_value, the rest at
        0."""
        if name == "sum":  # the constructor's, as torch (not the group's)
            return float(self.defaults["initial_accumulator_value"])
        return 0.0

    def _set_initial(self):
        """The model's parameters as the initial masters (a fresh start)."""
        sync_in(self._layout.entries)
        for g in range(len(self._layout)):
            for e, at, n, off in self._layout.shard_pieces(g):
                t = _flat(e["param"].detach())[at:at + n]
                if t.device.type != "cpu":
                    t = t.cpu()
                self._engine.set_initial(g, off, t.data_ptr(),
                                         _DTYPES[t.dtype], n)

    @torch.no_grad()
    def _params_from_store(self):
        """Copies the master weights (cast to the model dtype) into the
        model's parameters, gathering the shards of every rank."""
        for g, l in enumerate(self._layout):
            p, _ = self._engine.read_group(g)
            flat = torch.from_numpy(p)
            if self._ranks.world > 1 and not self._ranks.fsdp:
                flat = self._ranks.gather_flat(flat, l)
            for e in l["entries"]:
                _flat(e["param"]).copy_(
                    flat[e["offset"]:e["offset"] + e["numel"]])
        sync_out(self._layout.entries)
        self._note_versions()

    def _note_versions(self):
        """What each parameter is now: its version counter and memory, to
        see edits made outside step()."""
        self._seen = {id(e["param"]): (e["param"]._version,
                                       e["param"].data_ptr())
                      for l in self._layout for e in l["entries"]}

    def _edited(self):
        """Engine parameter indices whose tensor changed since step() or a
        load (in place, or new memory)."""
        out = []
        for k, (g, e, at, n, off) in enumerate(self._layout.pieces):
            p = e["param"]
            if self._seen.get(id(p)) != (p._version, p.data_ptr()):
                out.append(k)
        return out

    def _require_engine(self, finish=True):
        """The open engine (reopened after a failed step); a step running
        during backward is decided first unless `finish` is False."""
        if self._session is not None and self._session.failed is not None:
            recover_failed_step(self)
        if self._engine is None:
            raise RuntimeError("mlpo.torch: the optimizer is closed")
        if finish and self._engine.stepping_in_backward:
            self._bwd.finish(self._engine)
        return self._engine

    def add_param_group(self, param_group):
        """Adds a group, as torch.optim does: its parameters start at step 0;
        every other parameter keeps its state and step count."""
        if self._layout is None:  # torch.optim.Optimizer.__init__
            return super().add_param_group(param_group)
        if self._ranks.world > 1:
            raise NotImplementedError(
                "mlpo.torch: add_param_group with data parallel is not "
                "supported; pass every group to the constructor")
        check_group(self._mode, {**self.defaults, **param_group},
                    "mlpo.torch: add_param_group")
        if self._engine is not None:
            check_slots(self._engine.rule, {**self.defaults, **param_group},
                        "mlpo.torch: add_param_group")
        groups, names = split_names([param_group])
        eng = self._require_engine()
        saved = None
        if eng.step_count > 0 or not eng.fresh_pending:
            adopt_edits(self)
            saved = ([eng.read_group(g) for g in range(len(self._layout))],
                     list(eng.param_steps), eng.step_count)
        old_names = dict(self._names)
        self._names.update(names)
        super().add_param_group(groups[0])
        try:
            self._layout = self._build_layout()
        except Exception:
            self.param_groups.pop()
            self._names = old_names
            raise
        self._session.close()
        self._open(ns=self._session.ns, check_model=False)  # the model grew
        if self.update_in_backward:
            self._bwd.hook_params()
        if saved is None or saved[2] == 0:
            return
        states, steps, t = saved
        new_g = len(self._layout) - 1
        steps += [0] * len(self._layout[new_g]["pieces"])

        def fill(g, off, n):
            if g < new_g:
                p, slots = states[g]
                return p[off:off + n], {k: x[off:off + n]
                                        for k, x in slots.items()}
            p = torch.empty(n, dtype=torch.float32)
            for e, at, cnt, o in self._layout.shard_pieces(g):
                a, b = max(off, o), min(off + n, o + cnt)
                if a < b:
                    p[a - off:b - off] = _flat(e["param"].detach())[
                        at + a - o:at + b - o].float()
            return p.numpy(), {
                sec: torch.full((n,), self._initial_slot(g, name),
                                dtype=torch.float32).numpy()
                for sec, name, _ in self._engine.slots}

        self._engine.import_state(t, fill, steps)

    # torch.optim's API and mlpo's: the longer ones in _stepping.py and
    # _checkpoints.py, called with this optimizer.

    @torch.no_grad()
    def step(self, closure=None, *, loss_scale=None):
        """One optimizer step. Gradients are divided by loss_scale (default
        self.loss_scale); parameters whose grad is None are skipped; with an
        inf/nan gradient the step is skipped (with a warning; see
        last_report['skipped']) and nothing changes."""
        return _stepping.step(self, closure, loss_scale=loss_scale)

    def zero_grad(self, set_to_none=True):
        """As torch.optim's. With update_in_backward, a step still running
        (backward ran, step() did not: an exception in the middle of
        backward, or zero_grad before step) is discarded, as torch.optim
        would not have stepped either, and a count of backwards without a
        step starts again."""
        _stepping.zero_grad(self, set_to_none)

    def state_dict(self):
        """A small dict naming the store, a tag taken now ("step-<t>") and
        the hyperparameters; no tensors. torch.save it with the model.
        torch.optim's state-dict hooks run around it, as in torch."""
        return _checkpoints.state_dict(self)

    def load_state_dict(self, state_dict):
        """Restores a dict from state_dict() (the tag it names; resharded
        when it was written by another number of ranks), or imports a plain
        torch.optim state dict of this rule (exp_avg, exp_avg_sq, step, ...).
        torch.optim's load-state-dict hooks run around it, as in torch."""
        _checkpoints.load_state_dict(self, state_dict)

    def prepare_state_dict(self):
        """Data parallel: takes the checkpoint on every rank now (call it on
        every rank), so that a state_dict() before the next step, on any
        rank or on one only (as a script that saves on rank 0 calls it),
        hands it out without waiting for the others. mlpo.hf's Trainer
        callback calls it before each of Trainer's saves."""
        _checkpoints.prepare_state_dict(self)

    def checkpoint(self, tag):
        """Records the current state as `tag` (no data copied)."""
        _checkpoints.checkpoint(self, tag)

    def restore(self, tag):
        """Moves the state back to `tag` and the model's parameters with it."""
        _checkpoints.restore(self, tag)

    def tags(self):
        """The store's tags, oldest state first (tags of one state by name)."""
        return list(self._require_engine().tag_order())

    def flush(self):
        """Waits until everything step() has returned is durable (with
        durability="step"): the writes a step leaves landing behind it
        (write-behind) and its one index write. A step whose writes failed
        raises here, naming it, and is rolled back. close(), state_dict()
        and the next step() flush first."""
        self._require_engine()
        self._session.call("settle")

    def close(self):
        """Waits for commits in flight and releases the store. A step
        running during backward that step() never asked for is discarded
        (with a warning)."""
        _checkpoints.close(self)

    @property
    def step_count(self):
        """Optimizer steps taken (the version of every state object). A
        step running during backward is not one until step() decides it
        (read from a step pre-hook, this is the count before the step)."""
        return self._require_engine(finish=False).step_count

    @property
    def skipped_steps(self):
        """Steps skipped for a non-finite gradient."""
        return self._require_engine(finish=False).skipped_steps

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if "_session" not in self.__dict__:
            return  # a wrapper (Lightning's) or a half-made optimizer
        try:
            self.close()
        except Exception:  # interpreter shutdown: the store's own close runs
            pass

    def _forget_prepared(self):
        """A dict prepare_state_dict() took, or one loaded by copying its
        tag in, no longer names the state (it changed)."""
        self._prepared = None
        self._loaded_ref = None
