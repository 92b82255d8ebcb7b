"""opt.state of mlpo.torch's optimizers: a read-only view of the store's
moments and step counts, in torch.optim's shape."""
import warnings
import weakref
from collections.abc import Mapping

import torch

from ._callers import called_from
from ._rules import RULES

# torch.optim.Adagrad makes every parameter's state (step 0, the initial
# sum) in its constructor; the others at a parameter's first step.
_STATE_FROM_START = {"adagrad": True}

from ._checkpoints import _shaped

# Tensor methods that change their tensor in place besides those named
# "<op>_" (zero_, add_, copy_, ...).
_IN_PLACE = {"__setitem__", "__iadd__", "__isub__", "__imul__",
             "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
             "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"}


class _StateCopy(torch.Tensor):
    """A tensor of opt.state: a copy read from the store. torch.optim code
    edits moments in place (`opt.state[p]["exp_avg"].zero_()`); here that
    would change the copy only, so it warns, naming the way that works.
    Anything computed from it is a plain tensor."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if args and isinstance(args[0], _StateCopy) and (
                name in _IN_PLACE or
                (name.endswith("_") and not name.startswith("_"))):
            warnings.warn(
                f"mlpo.torch: opt.state tensors are copies read from the "
                f"store: {name} changed only this copy. To change moments "
                "or step counts, edit export_state_dict(opt.state_dict()) "
                "and load it with opt.load_state_dict", stacklevel=2)
        with torch._C.DisableTorchFunction():
            return func(*args, **(kwargs or {}))

    def _plain(self):
        with torch._C.DisableTorchFunction():
            return self.as_subclass(torch.Tensor)

    def __deepcopy__(self, memo):
        return self._plain().clone()

    def __reduce_ex__(self, proto):  # torch.save: a plain tensor
        return self._plain().__reduce_ex__(proto)

    def __repr__(self, **kwargs):
        return repr(self._plain())


def _lightning_moving_state():
    """Whether PyTorch Lightning's _optimizer_to_device is iterating
    opt.state. Its strategies "move the optimizer state to the device" at
    setup and at teardown by reading every entry and writing it back. An
    mlpo optimizer's state lives in the store and goes to no device, so
    that loop sees no entries: reading them would cost a pass over the
    whole state twice a fit (and a rank's shard is refused with data
    parallel)."""
    return called_from("fabric.utilities.optimizer", "_optimizer_to_device")


class StateView(Mapping):
    """opt.state: {param: {"step", "exp_avg", "exp_avg_sq"}} (each rule's
    own state, _rules.py) as torch.optim
    has it, for the parameters that have taken a step. Each access reads the
    store and returns a copy: writing into it changes nothing (and warns,
    see _StateCopy)."""

    def __init__(self, opt):
        # A weak reference: opt.state -> opt -> opt.state would be a cycle,
        # and `del opt` would leave the store open until the garbage
        # collector ran (a second optimizer on it was refused till then).
        self._opt_ref = weakref.ref(opt)

    @property
    def _opt(self):
        opt = self._opt_ref()
        if opt is None:
            raise RuntimeError("mlpo.torch: the optimizer of this state is "
                               "gone")
        return opt

    def _stepped(self, param):
        """Engine parameter index of `param` when it has taken a step (or
        has state from the start, as torch.optim.Adagrad's), else None."""
        opt = self._opt
        if opt._layout is None or opt._engine is None:
            return None
        k = opt._layout.piece_of.get(id(param))
        if k is None or (opt._engine.param_steps[k] == 0 and
                         not _STATE_FROM_START.get(opt._mode)):
            return None
        return k

    def __getitem__(self, param):
        opt = self._opt
        k = self._stepped(param)
        if k is None:  # torch.optim's state is a defaultdict(dict)
            return {}
        if opt._ranks.world > 1:
            raise NotImplementedError(
                "mlpo.torch: opt.state[p] with data parallel (each rank "
                "holds a shard); read mlpo.torch.export_state_dict("
                "opt.state_dict()) instead")
        e = opt._layout.pieces[k][1]
        eng = opt._engine
        _, slots = eng.read_range(e["group"], e["offset"], e["numel"])
        dev = e["param"].device
        out = {}
        if RULES[opt._mode]["step_in_state"]:
            out["step"] = torch.tensor(float(eng.param_steps[k]))
        for sec, name, _ in eng.slots:
            if name == "max_exp_avg_sq" and not \
                    opt.param_groups[e["group"]].get("amsgrad"):
                continue  # torch keeps it only for amsgrad groups
            out[name] = _shaped(torch.from_numpy(slots[sec]), e).to(dev)
        return {k: t.as_subclass(_StateCopy) for k, t in out.items()}

    def __iter__(self):
        opt = self._opt
        if opt._layout is None or opt._engine is None or \
                _lightning_moving_state():
            return
        steps = opt._engine.param_steps
        for k, (g, e, at, n, off) in enumerate(opt._layout.pieces):
            if steps[k] > 0 or _STATE_FROM_START.get(opt._mode):
                yield e["dparam"]

    def __len__(self):
        return sum(1 for _ in self)

    def __contains__(self, param):
        return self._stepped(param) is not None

    def _read_only(self, *args):
        raise TypeError(
            "mlpo.torch: opt.state is read from the store and cannot be "
            "assigned to or deleted from (torch.optim code that resets a "
            "parameter's moments this way would change nothing here); "
            "export_state_dict() and load_state_dict() of a torch.optim "
            "dict move state in and out")

    __setitem__ = __delitem__ = _read_only

    def __repr__(self):
        return f"<mlpo state of {len(self)} parameters (read on access)>"
