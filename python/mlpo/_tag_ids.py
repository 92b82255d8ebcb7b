"""What a state dict records of its tag besides the name (tag_ids, one per
rank): a tag name can be dropped and taken again by another checkpoint, a
version number is never reused. And check_tag: whether a store (the one
that wrote the dict, or a copy of it) holds the checkpoint a dict names."""
import hashlib
import json


def versions_id(versions):
    """What a state dict records of its tag besides the name: a digest of
    the (object, version) pairs the tag holds. Versions are never reused,
    so a later tag that took a dropped one's name has another."""
    text = json.dumps(sorted(versions.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def tag_id(eng, tag):
    return versions_id(eng.tag_versions(tag) or {})


def check_tag_ids(info, world):
    """ValueError unless the dict's tag_ids is absent (an earlier release)
    or lists one identity per rank."""
    ids = info.get("tag_ids")
    if ids is not None and (not isinstance(ids, (list, tuple)) or
                            len(ids) != world or
                            not all(isinstance(i, str) for i in ids)):
        raise ValueError("mlpo.torch: mlpo state dict: 'tag_ids' must list "
                         "one identity per rank")


def reused_tag_error(where, tag):
    """The refusal of a dict whose tag name now holds another checkpoint."""
    return ValueError(
        f"mlpo.torch: {where}'s tag {tag!r} is not the checkpoint this state "
        "dict was taken with: that one was dropped (keep_checkpoints, `mlpo "
        "drop-tag`) and a later checkpoint took its name; nothing was "
        "changed")


def check_reader_tag(reader, info):
    """A checkpoint read through a CheckpointReader (resharding, export) is
    the one the dict names, on every rank, when the dict says which."""
    ids = info.get("tag_ids")
    if ids is None or len(ids) != reader.world:
        return
    for k, want in enumerate(ids):
        if versions_id(reader.tag_versions(k)) != want:
            raise reused_tag_error(f"rank {k}'s store", info["tag"])


def copied_from(eng):
    """The identities of the stores `eng`'s store is a copy of, oldest
    first (`mlpo relocate` of a `cp -a` copy records the original's)."""
    return (eng.get_attribute("copied_from") or "").split()


def reader_holds(reader, info):
    """Whether `reader` (a CheckpointReader) reads the stores that wrote the
    dict `info`, or copies of them (`cp -a`, then `mlpo relocate --all`)
    whose tag holds the versions the dict names (its tag_ids: without them
    a copy cannot tell). check_reader_tag then compares the versions."""
    uuids = list(info["store_uuids"])
    if reader.world != len(uuids):
        return False
    ours = list(reader.store_uuids)
    if ours == uuids:
        return True
    if info.get("tag_ids") is None:
        return False
    return all(
        o == u or u in (reader.get_attribute(k, "copied_from") or "").split()
        for k, (o, u) in enumerate(zip(ours, uuids)))


def is_store(eng, uuid):
    """Whether a dict of store `uuid` may name a tag of `eng`'s store: the
    same store, or one it is a copy of (its tags then hold the original's
    versions until either side drops them; check_tag compares the tag)."""
    return uuid == eng.store_uuid or uuid in copied_from(eng)


def check_tag(eng, tag, info, theirs, rank):
    """ValueError unless `eng`'s store holds the checkpoint the dict of
    store `theirs` names (for rank `rank`): the same store, or one it is a
    copy of (the copy holds the original's tags as they were when it was
    copied)."""
    copy = theirs != eng.store_uuid
    where = f"store {eng.meta_dir}"
    if copy:
        where = (f"store {eng.meta_dir}, a copy of the store {theirs} "
                 "that wrote the state dict,")
        if info.get("tag_ids") is None:
            raise ValueError(
                f"mlpo.torch: {where} cannot tell whether its tag "
                f"{tag!r} is the dict's checkpoint: the dict names it by "
                "name only (an earlier release wrote it). Load it into "
                "the original; nothing was changed")
    if tag in eng.tags():
        ids = info.get("tag_ids")
        if ids is not None and ids[rank] != tag_id(eng, tag):
            if copy:  # taken on either side since the copy was made
                raise ValueError(
                    f"mlpo.torch: {where} has a tag {tag!r} that is not "
                    "the checkpoint this state dict was taken with: one "
                    "of the two took that name after the copy was "
                    "made; nothing was changed")
            # The dict's tag was dropped (keep_checkpoints, `mlpo
            # drop-tag`) and a later checkpoint took its name.
            raise reused_tag_error(where, tag)
        return
    dropped = json.loads(eng.get_attribute("dropped_tags") or "{}")
    if tag in dropped and isinstance(dropped[tag], str):
        raise ValueError(f"mlpo.torch: {where} no longer has tag {tag!r}: "
                         f"it was dropped {dropped[tag]}")
    if tag in dropped:
        raise ValueError(
            f"mlpo.torch: {where} no longer has tag {tag!r}: "
            f"it was dropped by the retention setting keep_checkpoints="
            f"{dropped[tag]} (the optimizer keeps that many of its newest "
            "checkpoints; keep_checkpoints=0, the default, keeps all)")
    if copy:
        raise ValueError(
            f"mlpo.torch: {where} has no tag {tag!r}: the original took "
            "it after the copy was made (or `mlpo drop-tag` dropped it "
            "here); nothing was changed")
    raise ValueError(f"mlpo.torch: {where} has no tag "
                     f"{tag!r} (dropped with `mlpo drop-tag`?)")
