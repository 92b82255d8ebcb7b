"""Checkpoints of mlpo.torch's optimizers: state_dict()/load_state_dict() as
store tags, checkpoint(), restore() and close() — functions the optimizer's
methods call with it (_optimizer.py) — and what they take: a checkpoint of
W ranks resharded into W' ranks, another namespace's tag, a torch.optim
state dict imported (_torch_import.py)."""
import atexit
import copy
import hashlib
import json
import os
import re
import sys
import tomllib
import weakref

import torch
import torch.distributed as dist

from ._callers import called_from
from ._dcp import dcp_shape, from_dcp_copy, from_dcp_shape
from ._retention import prune_checkpoints, step_tag_key
from ._session import MANIFEST_FORMAT, store_name
from ._stepping import adopt_edits
from ._torch_import import import_torch
from ._warn import warn_user
from . import _mlpo
from ._reshard import CheckpointCoords, fill_from
from ._stand_in import _flat
from ._dict_checks import _check_hyper, _refuse_one_rank_save
from ._tag_ids import (check_reader_tag, check_tag, check_tag_ids,
                       is_store, reader_holds, tag_id)


# Every optimizer made in this process (weakly): closed at interpreter exit.
_MADE = weakref.WeakSet()


@atexit.register
def _close_at_exit():
    """A script that ends, or dies of an uncaught exception, without
    close(): its optimizers are closed here, while the interpreter is whole,
    so the steps that returned are in the store as close() leaves them.
    Left to __del__ in the interpreter's teardown, a rank of a data-parallel
    job that raised sometimes exited before its store was closed (under
    durability="tag" its steps since the last tag were gone at resume, the
    other rank's kept: their stores no longer one state)."""
    for opt in list(_MADE):
        if getattr(opt, "_engine", None) is None:
            continue
        try:
            opt.close()
        except Exception as e:  # noqa: BLE001 (reported, exit goes on)
            print(f"mlpo.torch: closing the optimizer at exit failed: {e}",
                  file=sys.stderr)


def _shaped(flat, pm):
    """A manifest parameter's tensor (its shape and strides) from its flat
    elements in memory order."""
    shape = tuple(pm["shape"])
    stride = tuple(pm.get("stride") or ())
    if not stride or len(stride) != len(shape):
        return flat.clone().view(shape)
    t = torch.empty_strided(shape, stride, dtype=flat.dtype)
    _flat(t).copy_(flat)
    return t


def _parse_manifest(text):
    """A manifest read back from a store; ValueError saying so when it is
    not JSON."""
    try:
        return json.loads(text)
    except ValueError as e:
        raise ValueError(
            f"its parameter manifest is not JSON ({e})") from None


def _model_difference(a, b):
    """The first (name, shape, group) that differs between two manifests'
    parameter lists, as a pair (None where one list is shorter); None when
    they describe the same model. ValueError when `a` (a manifest read back
    from a store) is not one."""
    def key(m):
        return [(p["name"], tuple(p["shape"]), p["group"]) for p in m["params"]]
    try:
        ka = key(a)
    except (KeyError, TypeError, IndexError, AttributeError) as e:
        raise ValueError(
            "its parameter manifest cannot be read (" +
            (f"no key {e}" if isinstance(e, KeyError) else str(e)) +
            ")") from None
    kb = key(b)
    sa, sb = a.get("sharding", "flat"), b.get("sharding", "flat")
    n = max(len(ka), len(kb))
    ka += [None] * (n - len(ka))
    kb += [None] * (n - len(kb))
    diff = next(((x, y) for x, y in zip(ka, kb) if not _same_param(x, y)),
                None)
    if diff is None and sa != sb:  # FSDP's shards or mlpo's own ZeRO chunks
        return (f"{sa} sharding", f"{sb} sharding")
    return diff


_UNNAMED = re.compile(r"param\.[0-9]+")


def _same_param(x, y):
    """Two manifest entries (name, shape, group) of one position. As
    torch.optim loads a state dict by position, an optimizer built from
    parameters() (its names "param.<i>") matches one built from
    named_parameters() by shape and group; names are compared where both
    sides have them."""
    if x is None or y is None:
        return x is y
    if x[1:] != y[1:]:
        return False
    return x[0] == y[0] or bool(_UNNAMED.fullmatch(x[0])) or bool(
        _UNNAMED.fullmatch(y[0]))


def _written_at(store):
    """The path roots a state dict's 'store' entry records, for messages."""
    try:
        config = tomllib.loads(store["toml"])
        return ", ".join(os.path.join(store["base_dir"], p["root"])
                         for p in config["path"])
    except (tomllib.TOMLDecodeError, KeyError, TypeError):
        return "a place the state dict does not say"


def params_digest(layout):
    """sha256 of `layout`'s parameters as the model holds them now (group
    order, as fp32): what a dict taken before the first step
    records, to see that loading it gave them back."""
    h = hashlib.sha256()
    for e in layout.entries:
        h.update(e["param"].detach().float().cpu().contiguous().numpy()
                 .tobytes())
    return h.hexdigest()


def checkpoint_reader(session, info):
    """The reader of the checkpoint of another world size that `info` (a
    dict's "mlpo") names: in `session`'s store when that holds the
    checkpoint's stores or copies of them (`cp -a`, then `mlpo relocate
    --all`), else where the dict says they were written."""
    name = info.get("store_name") or store_name(info["name"],
                                                 info["world_size"])
    try:
        here = session.reader(name, info["tag"])
    except (OSError, ValueError, RuntimeError):
        here = None  # not here (or not readable): try the recorded place
    if here is not None and reader_holds(here, info):
        return here
    store = info["store"]
    try:
        reader = _mlpo.CheckpointReader(store["toml"], store["base_dir"],
                                        name, info["tag"])
    except FileNotFoundError as e:
        roots = ", ".join(session.roots())
        raise FileNotFoundError(
            f"mlpo.torch: the checkpoint of {info['world_size']} ranks "
            f"cannot be read where it was written ({e}), and this "
            f"optimizer's store ({roots}) holds no copy of it (a copy: "
            "`cp -a` the store, then `mlpo relocate --all`)") from None
    if not reader_holds(reader, info):
        raise ValueError("mlpo.torch: the checkpoint's stores were "
                         "replaced since the state dict was written")
    return reader


def check_manifest_of(layout, other):
    """ValueError unless manifest `other` (a checkpoint's) is of
    `layout`'s model (sharded any way)."""
    try:
        diff = _model_difference(other, layout.manifest)
    except ValueError as e:
        raise ValueError(f"mlpo.torch: the checkpoint: {e}") from None
    if diff is not None and not isinstance(diff[0], str):
        raise ValueError(
            "mlpo.torch: the checkpoint was written for another model "
            f"(checkpoint {diff[0]}, model {diff[1]})")


def checkpoint(opt, tag):
    """opt.checkpoint(tag) (_optimizer.py)."""
    if opt._ranks.world > 1:
        opt._ranks.agree_tag("checkpoint", tag,
                             opt._layout.n_params)
    if opt.keep_checkpoints > 0 and step_tag_key(tag) is not None:
        raise ValueError(
            f"mlpo.torch: checkpoint({tag!r}): names of the form "
            "step-<t> are state_dict()'s, and keep_checkpoints="
            f"{opt.keep_checkpoints} drops them as it drops those; "
            "pick another name for a checkpoint of your own")
    opt._require_engine()
    opt._session.call("tag", tag)


def restore(opt, tag):
    """opt.restore(tag): every rank names one tag."""
    if opt._ranks.world > 1:
        opt._ranks.agree_tag("restore", tag, opt._layout.n_params)
    _restore(opt, tag)


def _restore(opt, tag):
    opt._forget_prepared()
    opt._require_engine()
    opt._session.call("restore", tag)
    if opt._engine.state_stored:
        opt._params_from_store()
    else:  # a step-0 tag of an earlier release stored no parameters:
        opt._set_initial()  # the model's own are the initial state
    opt._note_versions()


def close(opt):
    """opt.close(): a step running during backward discarded first; a
    failed step's store closed as it is."""
    opt._forget_prepared()
    late = None  # a step run in backward that failed: raised last
    if opt._engine is not None and opt._engine.stepping_in_backward:
        try:
            opt._bwd.discard("close()")
        except (RuntimeError, OSError) as e:
            late = e
    s = opt._session
    eng = failed = None
    if s is not None:  # (None: a half-made optimizer)
        eng, s.engine = s.engine, None
        failed, s.failed = s.failed, None
    if failed is None:  # (a reopen after a failed step hooks again)
        opt._bwd.remove_hooks()
    if eng is not None:
        try:
            eng.close()
        except RuntimeError:
            if failed is None:
                raise
            # The failed step raised already; what the store holds is
            # what a reopen continues from.
    if late is not None:
        raise late


def state_dict(opt):
    """opt.state_dict(): the prepared dict, or one taken now; torch's
    hooks around it, and DCP's shape for DCP's helpers."""
    for hook in opt._optimizer_state_dict_pre_hooks.values():
        hook(opt)
    prepared = opt._prepared
    if prepared is not None and prepared[0] == opt.step_count:
        # Taken on every rank already (prepare_state_dict), for a
        # caller that asks on one rank only, as Trainer saves.
        state_dict = copy.deepcopy(prepared[1])
    else:
        if opt._ranks.world > 1:
            _refuse_one_rank_save()
        state_dict = _take_state_dict(opt)
    for hook in opt._optimizer_state_dict_post_hooks.values():
        out = hook(opt, state_dict)
        if out is not None:
            state_dict = out
    if called_from("torch.distributed.checkpoint.state_dict",
                   "_get_optim_state_dict"):
        state_dict = dcp_shape(state_dict, opt.param_groups,
                               opt._layout, opt.dcp_state)
    return state_dict


def load_state_dict(opt, state_dict):
    """opt.load_state_dict(state_dict), torch's hooks around it."""
    if isinstance(state_dict, dict):
        state_dict = state_dict.copy()  # torch's: hooks may edit it
    for hook in opt._optimizer_load_state_dict_pre_hooks.values():
        out = hook(opt, state_dict)
        if out is not None:
            state_dict = out
    _load_state_dict(opt, state_dict)
    for hook in opt._optimizer_load_state_dict_post_hooks.values():
        hook(opt)


def prepare_state_dict(opt):
    """opt.prepare_state_dict(): taken now, on every rank."""
    opt._prepared = (opt.step_count, _take_state_dict(opt))


def _loaded_reference(opt, eng, tag):
    """The loaded dict's "mlpo" when this optimizer still holds exactly
    what it copied in from it (`tag`, the copy's own tag, unchanged)
    and the dict's own tag is still there: so that two optimizers that
    loaded one dict hand out equal state dicts, as torch.optim's do.
    Else None (the optimizer's own tag is named)."""
    ref = opt._loaded_ref
    if ref is None or ref[0] != tag or ref[1] != tag_id(eng, tag):
        return None
    try:  # dropped or taken again since: our own tag is the one to name
        check_reader_tag(checkpoint_reader(opt._session, ref[2]), ref[2])
    except (OSError, ValueError, RuntimeError):
        return None
    return copy.deepcopy(ref[2])


def _take_state_dict(opt):
    eng = opt._require_engine()
    if opt._ranks.world > 1:  # every rank here, or a clear error on each
        opt._ranks.agree_call("state_dict", [],
                               opt._layout.n_params)
    adopt_edits(opt)  # the checkpoint holds what the model holds
    # "step-<t>", or "step-<t>.<k>" when a tag of that step already
    # holds another lineage's state (training on after a rollback): a
    # dict never names a tag of another lineage, and no tag is replaced.
    # A tag of this step holding these very versions is that checkpoint
    # again (state_dict() twice, or after loading one).
    # (At step 0 with nothing stored, a tag of that name that is
    # "current" holds nothing: one an earlier release took. Not reused:
    # a new one stores the initial parameters.)
    tags = set(eng.tags())
    t = eng.step_count
    tag = next((n for n in sorted(tags) if eng.state_stored and
                (step_tag_key(n) or (None,))[0] == t and
                eng.tag_is_current(n)), None)
    if opt._ranks.world > 1:
        # One name on every rank: the one each would hand out again,
        # else the first free on all (a rank's tags can differ from
        # the others' where one store was changed alone).
        views = [None] * opt._ranks.world
        dist.all_gather_object(views, (tag, sorted(tags)),
                               group=opt._ranks.pg)
        if any(v[0] != tag for v in views):
            tag = None
        tags = set().union(*(v[1] for v in views))
    if tag is None:  # the first free name of this step
        tag, k = f"step-{t}", 1
        while tag in tags:
            tag, k = f"step-{t}.{k}", k + 1
        opt._session.call("tag", tag)
    prune_checkpoints(eng, opt.keep_checkpoints, tag)
    opt._last_handed = tag
    # "params" lists are empty so that torch.optim's load_state_dict
    # refuses this dict (its groups do not match) instead of loading an
    # optimizer with no moments; the counts are in "mlpo".
    groups = []
    for g in opt.param_groups:
        d = {k: v for k, v in g.items() if k != "params"}
        d["params"] = []
        groups.append(d)
    loaded = _loaded_reference(opt, eng, tag) if opt._ranks.world == 1 \
        else None
    if loaded is not None:
        return {"state": {}, "param_groups": groups, "mlpo": loaded}
    return {
        "state": {},
        "param_groups": groups,
        "mlpo": {"format": MANIFEST_FORMAT,
                 "store": {"toml": opt._session.toml_text,
                           "base_dir": opt._session.base_dir},
                 "name": opt._session.ns, "world_size": opt._ranks.world,
                 "store_name": opt.store_name,
                 "tag": tag, "step": eng.step_count,
                 "param_counts": [len(g["params"])
                                  for g in opt.param_groups],
                 "store_uuids": opt._ranks.gather_objects(
                     eng.store_uuid),
                 "tag_ids": opt._ranks.gather_objects(
                     tag_id(eng, tag)),
                 **({"initial_digest": params_digest(opt._layout)}
                    if eng.step_count == 0 else {})},
    }


def _load_state_dict(opt, state_dict):
    opt._forget_prepared()
    state_dict = from_dcp_copy(from_dcp_shape(state_dict),
                               opt._layout)
    if opt._ranks.world > 1:
        opt._ranks.agree_load(state_dict, opt._layout.n_params)
    if not isinstance(state_dict, dict) or "param_groups" not in \
            state_dict:
        raise ValueError("mlpo.torch: not an optimizer state dict")
    groups = state_dict["param_groups"]
    info = state_dict.get("mlpo")
    counts = info.get("param_counts") if isinstance(info, dict) else None
    if not isinstance(groups, (list, tuple)) or len(groups) != len(
            opt.param_groups) or any(
            not isinstance(a, dict) or
            not isinstance(a.get("params"), (list, tuple))
            for a in groups):
        raise ValueError("mlpo.torch: the state dict has other parameter "
                         "groups than this optimizer")
    if counts is None:
        counts = [len(a["params"]) for a in groups]
    if not isinstance(counts, (list, tuple)) or len(counts) != len(
            groups) or any(not isinstance(c, int) or isinstance(c, bool)
                           or c != len(b["params"]) for c, b in
                           zip(counts, opt.param_groups)):
        raise ValueError("mlpo.torch: the state dict has other parameter "
                         "groups than this optimizer (parameters per "
                         f"group {counts!r}, this optimizer "
                         f"{[len(b['params']) for b in opt.param_groups]})")
    # Everything is checked before anything changes: a bad dict raises
    # and leaves the optimizer and its store as they were.
    eng_rule = opt._engine.rule if opt._engine is not None else None
    for g, group in enumerate(groups):
        _check_hyper(group, g, opt._mode, eng_rule)
    if "mlpo" in state_dict:
        _load_mlpo(opt, state_dict["mlpo"])
        # (a step-0 dict changes no parameter: checked after it loaded,
        # so that a refused dict only raises)
        _warn_if_model_moved(opt, state_dict["mlpo"])
    else:
        tag = import_torch(state_dict, opt._require_engine,
                           opt._layout, opt._mode, opt._initial_slot)
        if tag is not None:
            opt._session.call("tag", tag)
            opt._note_versions()
    for mine, theirs in zip(opt.param_groups, groups):
        for k, v in theirs.items():
            if k != "params":
                mine[k] = tuple(v) if k == "betas" else v


def _warn_if_model_moved(opt, info):
    """A step-0 dict restores the parameters it was taken with: its tag
    holds them as step 0. One written before step 0 was stored (an
    earlier release) restores a fresh optimizer and leaves the model
    as it is: say so when its parameters are not the ones the dict was
    taken with (the model's own state_dict was not loaded with it)."""
    digest = info.get("initial_digest") if isinstance(info, dict) else None
    if isinstance(digest, str) and digest != params_digest(
            opt._layout):
        warn_user(
            f"mlpo.torch: this state dict (tag {info.get('tag')!r}) was "
            "taken before the first step, and its tag holds no "
            "parameters (an earlier mlpo stored none at step 0): "
            "loading it restores a fresh optimizer and "
            "leaves the model's parameters as they are, which are not "
            "the ones it was taken with. Load the model's state_dict "
            "saved with it as well (as with torch.optim)")


def _load_mlpo(opt, info):
    if not isinstance(info, dict):
        raise ValueError("mlpo.torch: the state dict's 'mlpo' entry is "
                         f"{type(info).__name__}, not a dict")
    for k in ("tag", "world_size", "store_uuids", "store", "name"):
        if k not in info:
            raise ValueError(f"mlpo.torch: mlpo state dict lacks {k!r}")
    world, uuids, store = (info["world_size"], info["store_uuids"],
                           info["store"])
    if not isinstance(info["tag"], str) or not isinstance(
            info["name"], str):
        raise ValueError("mlpo.torch: mlpo state dict: 'tag' and 'name' "
                         "must be strings")
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ValueError("mlpo.torch: mlpo state dict: 'world_size' "
                         f"{world!r} is not a positive integer")
    if not isinstance(uuids, (list, tuple)) or len(uuids) != world or \
            not all(isinstance(u, str) for u in uuids):
        raise ValueError("mlpo.torch: mlpo state dict: 'store_uuids' "
                         "must list one identity per rank")
    if not isinstance(store, dict) or not isinstance(
            store.get("toml"), str) or not isinstance(
            store.get("base_dir"), str):
        raise ValueError("mlpo.torch: mlpo state dict: 'store' must name "
                         "the store's config (toml, base_dir)")
    check_tag_ids(info, world)
    tag = info["tag"]
    if info["world_size"] == opt._ranks.world:
        eng = opt._require_engine()
        theirs = info["store_uuids"][opt._ranks.rank]
        ns = info["name"]
        ours = is_store(eng, theirs)
        if not ours and ns != opt._session.ns:
            # Another namespace of the store (another optimizer's, or a
            # run before this one): move there, or copy the tag in when
            # a live optimizer holds it.
            if _switch_namespace(opt, ns, theirs, tag, info):
                return
            own = _reshard(opt, info)
            if opt._ranks.world == 1:
                eng = opt._require_engine()
                opt._loaded_ref = (own, tag_id(eng, own),
                                    copy.deepcopy(info))
            return
        if not ours:
            raise ValueError(
                f"mlpo.torch: the state dict is from another store "
                f"(identity {theirs}, written at "
                f"{_written_at(info['store'])}); this optimizer's store "
                f"{eng.meta_dir} is {eng.store_uuid}. Point store= and "
                "name= at the store that wrote it")
        check_tag(eng, tag, info, theirs, opt._ranks.rank)
        _restore(opt, tag)
        return
    _reshard(opt, info)


def _switch_namespace(opt, ns, uuid, tag, info):
    """Reopens this optimizer in namespace `ns` at `tag`; False (and
    nothing changed) when that namespace is held or is another store."""
    s = opt._session
    old_ns = s.ns
    was_fresh = s.engine.fresh_pending
    s.close()
    try:
        eng = opt._opener().try_open(ns)
    except Exception:
        eng = None
    if eng is not None and not is_store(eng, uuid):
        eng.close()
        eng = None
    refused = None
    if eng is not None:
        try:  # a missing or reused tag changes nothing either
            check_tag(eng, tag, info, uuid, opt._ranks.rank)
        except ValueError as e:
            eng.close()
            eng, refused = None, e
    if eng is None:
        opt._open(ns=old_ns, resume=False)
        if not was_fresh:
            opt._engine.continue_heads()
        if refused is not None:
            raise refused
        return False
    s.ns, s.engine = ns, eng
    eng.set_attribute("manifest", json.dumps(opt._layout.manifest))
    try:
        _restore(opt, tag)
    finally:
        opt._set_initial()
    return True


def _reshard(opt, info):
    """Reads the shards a checkpoint of another world size (or of a
    namespace another live optimizer holds) holds for this rank and
    imports them (into a fresh store); returns the tag it takes."""
    reader = checkpoint_reader(opt._session, info)
    check_reader_tag(reader, info)
    check_manifest_of(opt._layout, json.loads(reader.manifest()))
    eng = opt._require_engine()
    steps = reader.param_steps()
    mine = [steps[e["index"]]
            for (g, e, at, n, off) in opt._layout.pieces]
    fill = fill_from(reader, CheckpointCoords(json.loads(
        reader.manifest())), [list(opt._layout.shard_pieces(g))
                              for g in range(len(opt._layout))])
    eng.reset()  # a new lineage holding the checkpoint's state
    eng.import_state(reader.step, fill, mine)
    tag = f"step-{reader.step}"
    k = 1
    while tag in eng.tags():
        tag, k = f"step-{reader.step}.{k}", k + 1
    opt._session.call("tag", tag)
    opt._params_from_store()
    return tag
