"""keep_checkpoints: which automatic checkpoints ("step-<t>" tags) the
store keeps, and dropping the others so that load_state_dict of a dict
naming one says why. Plain functions of the open engine (the namespace's
store) and what they are told."""
import json


def step_tag_key(tag):
    """(step, k) of an automatic tag "step-<t>" or "step-<t>.<k>", else
    None."""
    if not tag.startswith("step-"):
        return None
    step, _, k = tag[5:].partition(".")
    if not step.isdigit() or (k and not k.isdigit()):
        return None
    return (int(step), int(k) if k else 0)


def prune_checkpoints(eng, keep_checkpoints, newest):
    """Keeps the `keep_checkpoints` automatic tags ("step-<t>") that
    state_dict() handed out last (`newest` now; 0 keeps all) and frees
    what only the others held. Handed out, not numbered: in a rerun or
    after a rollback, the tags taken now have lower steps than the older
    run's, and the dict just returned must stay loadable."""
    if keep_checkpoints <= 0:
        return
    was = json.loads(eng.get_attribute("checkpoint_order") or "[]")
    # Automatic tags it does not list (taken by an earlier release, or
    # while every checkpoint was kept) go first, oldest state first.
    auto = [t for t in eng.tag_order() if step_tag_key(t) is not None]
    listed = [t for t in was if t in auto and t != newest]
    order = [t for t in auto if t not in listed and t != newest]
    order += listed + [newest]
    old, keep = order[:-keep_checkpoints], order[-keep_checkpoints:]
    if step_tag_key(newest)[0] == 0:
        # A dict of a fresh start (Accelerate's prepare() takes one and
        # loads it back) drops older step-0 ones only: checkpoints of
        # trained state wait for the next trained one, or a resumed run
        # would lose the checkpoint it is about to load.
        spared = [t for t in old if step_tag_key(t)[0] != 0]
        old = [t for t in old if t not in spared]
        keep = spared + keep
    if keep != was:
        eng.set_attribute("checkpoint_order", json.dumps(keep))
    drop_checkpoints(eng, old, keep_checkpoints)


def drop_checkpoints(eng, tags, why):
    """Drops `tags` and frees what only they held; load_state_dict of a
    dict naming one says why (`why`: the keep_checkpoints number, or a
    sentence)."""
    if not tags:
        return
    dropped = json.loads(eng.get_attribute("dropped_tags") or "{}")
    for t in tags:
        eng.drop_tag(t)
        dropped[t] = why
    # The newest 1000 names, for load_state_dict's message.
    dropped = dict(list(dropped.items())[-1000:])
    eng.set_attribute("dropped_tags", json.dumps(dropped))
    eng.gc()


def names_this_store(opt, info):
    """Whether a state dict's 'mlpo' entry names optimizer `opt`'s
    namespace and store (this rank's)."""
    uuids = info.get("store_uuids") or []
    rank = opt._ranks.rank
    return info.get("name") == opt._session.ns and rank < len(uuids) \
        and uuids[rank] == opt._engine.store_uuid


def drop_unfollowed(opt, named, known, why):
    """The trainer callbacks' retention (mlpo.hf, mlpo.lightning): drops
    optimizer `opt`'s automatic tags that `known` holds ((name, store
    uuid, tag) the callback saw taken or named) and no file names
    (`named`, plus the checkpoint just handed out: on the ranks that do
    not write it, its file may not be there yet)."""
    eng = opt._engine
    named = set(named) | {opt._last_handed}
    mine = (opt._session.ns, eng.store_uuid)
    stale = [t for t in eng.tags()
             if step_tag_key(t) is not None and t not in named
             and (*mine, t) in known]
    drop_checkpoints(eng, stale, why)
