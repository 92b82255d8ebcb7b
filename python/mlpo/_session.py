"""What an mlpo.torch optimizer works with besides its parameters, held as
two objects that the adapter's functions take:

- Ranks: the processes one optimizer's state is spread over (world, this
  rank, the process group, whether fully_shard shards the model) and the
  collectives the adapter takes over them;
- Session: the store (its config, base directory and TOML; the name and
  namespace; the durability, state format and the engine's options) and
  the open engine, which is None while the optimizer is closed.

The layout of the parameters is the third (_layout.py)."""
import hashlib
import os

import torch
import torch.distributed as dist

from . import _mlpo
from . import store_config

# Bytes of state per parameter in each format (optimizer/kernel/state_codec.h).
STATE_BYTES = {"fp32": 12, "bf16-moments": 8, "int8-moments": 6 + 8 / 256}
STATE_FORMATS = tuple(STATE_BYTES)
_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
# Namespaces tried in one store before giving up (each a live optimizer or
# another model's state).
_MAX_NAMESPACES = 64
# The format of the manifest the store keeps of the model (_layout.py) and
# of the 'mlpo' entry of a state dict (_checkpoints.py).
MANIFEST_FORMAT = 1
# Codes of the calls that take collectives with several ranks.
_CALLS = {"step": 1, "state_dict": 2, "load_state_dict": 3,
          "checkpoint": 4, "restore": 5, "backward": 6}


def store_name(ns, world):
    """The store directory name of namespace `ns` written by `world`
    ranks ("<ns>", or "<ns>-w<W>" holding a rank-<r> store per rank)."""
    return ns if world == 1 else f"{ns}-w{world}"


class Ranks:
    """`world` ranks (1: one process), this one `rank`, their process group
    `pg` (None: the default group), `fsdp` when the parameters are
    fully_shard's DTensors. The collectives are called with world > 1."""
    __slots__ = ("world", "rank", "pg", "fsdp")

    def __init__(self, process_group=None, mesh=None):
        self.fsdp = mesh is not None
        self.pg = mesh.get_group() if self.fsdp and process_group is None \
            else process_group
        if dist.is_available() and dist.is_initialized():
            self.world = dist.get_world_size(self.pg)
            self.rank = dist.get_rank(self.pg)
        else:
            self.world, self.rank = 1, 0

    def gather_objects(self, obj):
        """Every rank's `obj`, in rank order (one process: [obj])."""
        if self.world == 1:
            return [obj]
        out = [None] * self.world
        dist.all_gather_object(out, obj, group=self.pg)
        return out

    def sum(self, values):
        """Each of `values` (numbers) summed over the ranks, in float64:
        gradient statistics, the default's iteration times."""
        t = torch.tensor([float(v) for v in values], dtype=torch.float64)
        dist.all_reduce(t, group=self.pg)
        return t.tolist()

    def gather_flat(self, shard, l):
        """Every rank's shard of group layout `l`, as its flat vector
        (gathered into one buffer: each rank's chunk a view of it, no
        concatenation)."""
        chunk = l["chunk"]
        if shard.numel() == chunk:
            padded = shard.contiguous()
        else:
            padded = torch.zeros(chunk, dtype=shard.dtype)
            padded[:shard.numel()] = shard
        flat = torch.empty(chunk * self.world, dtype=shard.dtype)
        dist.all_gather(list(flat.view(self.world, chunk)), padded,
                        group=self.pg)
        return flat[:l["flat"]]

    def agree_call(self, what, flags, n_params):
        """The first collective of step(), state_dict(), load_state_dict(),
        checkpoint() and restore(), an all-reduce (MAX) of `flags` (ints,
        at most one per parameter of the `n_params`; returned reduced) that
        also carries which call each rank is in. A rank in another call
        (state_dict() on rank 0 only, as a torch.optim script saves its
        replicated state) paired its collectives with the others' until
        every rank waited forever: now every rank raises, saying so, and
        their collectives stay paired."""
        code = _CALLS[what]
        # One length for every call (a collective pairs tensors of one
        # size): a flag per parameter, at least two.
        n = max(2, 1 + n_params)
        flags = list(flags) + [0] * (n - len(flags))
        t = torch.tensor([code, -code] + flags, dtype=torch.int32)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.pg)
        if int(t[0]) != code or int(-t[1]) != code:
            other = int(t[0]) if int(t[0]) != code else int(-t[1])
            other = next(n for n, c in _CALLS.items() if c == other)
            raise RuntimeError(
                f"mlpo.torch: rank {self.rank} is in {what}() while another "
                f"rank is in {other}(): with data parallel every rank makes "
                "the same calls, as "
                "each holds a shard of the state. Call state_dict() on every "
                "rank (each tags its shard) and save the dict on one, and "
                "load_state_dict() on every rank; nothing was changed")
        return t[2:]

    def agree_same(self, what, key, n_params):
        """agree_call for `what`, whose argument (`key`, a string) must be
        the same on every rank: whether it is."""
        h = int(hashlib.sha256(key.encode()).hexdigest()[:7], 16)
        got = self.agree_call(what, [h, -h], n_params)
        return int(got[0]) == -int(got[1])

    def agree_load(self, state_dict, n_params):
        """Every rank loads, and the same checkpoint, before anything
        changes (a load on rank 0 only, or of another file on one rank,
        left the ranks' shards at different states)."""
        info = state_dict.get("mlpo") if isinstance(state_dict, dict) \
            else None
        if not isinstance(info, dict):
            info = {}
        if not self.agree_same("load_state_dict", repr((
                info.get("tag"), info.get("step"), info.get("world_size"),
                info.get("store_uuids"))), n_params):
            raise RuntimeError(
                "mlpo.torch: the ranks load different state dicts (this "
                f"rank's names tag {info.get('tag')!r}): with data parallel "
                "every rank loads the same one; nothing was changed")

    def agree_tag(self, what, tag, n_params):
        """checkpoint() and restore() on every rank, of one tag, before
        anything changes (on one rank only they left the ranks' shards at
        different states)."""
        if not self.agree_same(what, repr(tag), n_params):
            raise RuntimeError(
                f"mlpo.torch: {what}({tag!r}): the ranks name different "
                "tags; with data parallel every rank names the same one; "
                "nothing was changed")


def _refused(e):
    """An engine error that changed nothing (a bad argument, an unknown
    tag): no reopen needed."""
    return getattr(e, "code", None) in ("INVALID_ARGUMENT", "NOT_FOUND",
                                        "ALREADY_EXISTS")


def _resolve_keyword(config, key, value, default, allowed=None):
    """A keyword that may also be a config key: the one given, the config's
    value, or `default`; both given and different is an error, and so is a
    value outside `allowed`."""
    theirs = config.get(key)
    for what, v in ((key, value), (f"the store config's {key}", theirs)):
        if allowed and v is not None and v not in allowed:
            raise ValueError(f"mlpo.torch: {what} must be one of "
                             f"{', '.join(allowed)}, not {v!r}")
    if value is not None and theirs is not None and value != theirs:
        raise ValueError(
            f"mlpo.torch: {key}={value!r} contradicts the store config's "
            f"{key} {theirs!r}; drop one of them")
    return value or theirs or default


def _resolve_name(config, name):
    theirs = config.get("name")
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


def _local_ranks(world):
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    except ValueError:
        return world


class Session:
    """One optimizer's store and engine.

    config, base_dir  the store config (a dict of its keys, without the
                      optimizer's own) and the directory its paths are in
    toml_text         the config the engine was opened with (its defaults
                      filled in for the state's size)
    name, ns          the name asked for, and the namespace opened
                      ("<name>", "<name>.2", ...)
    durability, state_format, opts   the engine's settings
    ranks             the Ranks
    engine            the open engine (_mlpo.Engine), None while closed
    failed            (what, why) of a call that failed part-way (see
                      call): the optimizer reopens before its next call
    """

    def __init__(self, store, *, name, durability, state_format, opts,
                 ranks):
        """Loads the store config `store` (as store_config.load takes it)
        and resolves the keywords that are also its keys; a ValueError or
        TypeError names a contradiction or a bad value."""
        self.ranks = ranks
        self.engine = None
        self.ns = None
        self.toml_text = None
        self.open_told = False  # the ranks learnt of a failed opening
        self.failed = None
        self.config, self.base_dir = store_config.load(store, create=False)
        self.name = _resolve_name(self.config, name)
        self.durability = _resolve_keyword(self.config, "durability",
                                           durability, "tag")
        self.state_format = _resolve_keyword(
            self.config, "state_format", state_format, "fp32",
            STATE_FORMATS)
        self.config.pop("name", None)
        self.config.pop("state_format", None)
        rank = self.config.pop("rank", None)
        if rank is not None and rank != ranks.rank:
            # (a rank=3 config made rank-0's store without a word, and the
            # CLI then called rank 3's healthy store lost)
            raise ValueError(
                f"mlpo.torch: the store config's rank {rank!r} is not "
                f"this process's rank {ranks.rank}: the optimizer takes "
                "its rank from torch.distributed (one store per rank, "
                "<path>/<name>/rank-<r>); drop `rank` from the config")
        self.config["durability"] = self.durability
        self.opts = opts

    @property
    def store_name(self):
        """The open namespace's store directory name."""
        return store_name(self.ns, self.ranks.world)

    def namespaces(self):
        """The namespaces an optimizer of this name may open, in order."""
        yield self.name
        for k in range(2, _MAX_NAMESPACES + 1):
            yield f"{self.name}.{k}"

    def toml(self, layout):
        """The config with its defaults filled in for `layout`'s state."""
        state = int(STATE_BYTES[self.state_format] *
                    sum(l["numel"] for l in layout))
        return store_config.to_toml(store_config.apply_defaults(
            self.config, state, _local_ranks(self.ranks.world)))

    def make_engine(self, ns, layout, groups, device_args, restore_tag=None):
        """An engine of namespace `ns` for `layout`, whose groups' sizes
        and hyperparameters are `groups` (dicts), with the device path's
        `device_args` (backend, index, pieces)."""
        o = self.opts
        return _mlpo.Engine(
            self.toml_text, self.base_dir, store_name(ns, self.ranks.world),
            self.ranks.rank, groups, o["subgroup_numel"], layout.grad_dt,
            _DTYPES[layout.dtype], o["max_grad_norm"], o["prefetch"],
            o["commits"], o["threads"], self.durability, restore_tag or "",
            *device_args, True, self.state_format)

    def call(self, call, *args):
        """engine.<call>(*args), for the calls that write the store: step,
        tag, restore, settle. One that fails part-way (a full disk, a
        path's I/O error) may have committed some subgroups, written new
        values into some of the model's tensors, or poisoned the index: it
        is recorded in `failed` (one process), and the optimizer's next
        call reopens the store and continues from what it holds."""
        eng = self.engine
        try:
            return getattr(eng, call)(*args)
        except (RuntimeError, OSError) as e:
            if self.ranks.world == 1 and (call.endswith("step") or (
                    isinstance(e, RuntimeError) and not _refused(e))):
                # (a failed step leaves the step count where it was)
                # (flush() settles with no argument: the writes of a step
                # that returned failed behind it)
                what = f"step {eng.step_count + 1}" if call.endswith("step") \
                    else f"{call} {args[0]!r}" if args else "flush()"
                self.failed = (what, str(e).split("\n")[0])
            raise

    def read_attribute(self, name, key):
        """Attribute `key` of store `name` of this store's paths, read
        beside its writer (None when it has none)."""
        return _mlpo.read_store_attribute(self.toml_text, self.base_dir,
                                          name, key)

    def reader(self, name, tag=""):
        """A checkpoint reader of store `name` at `tag` ("": its heads)."""
        return _mlpo.CheckpointReader(self.toml_text, self.base_dir, name,
                                      tag)

    def roots(self):
        """The store's paths' root directories."""
        return [os.path.join(self.base_dir, p["root"])
                for p in self.config["path"]]

    def close(self):
        """Closes the engine (its error raised); the session stays, to
        open again."""
        eng, self.engine = self.engine, None
        if eng is not None:
            eng.close()
