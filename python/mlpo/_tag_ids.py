"""What a state dict records of its tag besides the name (tag_ids, one per
rank): a tag name can be dropped and taken again by another checkpoint, a
version number is never reused."""
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


def is_store(eng, uuid):
    """Whether a dict of store `uuid` may name a tag of `eng`'s store: the
    same store, or one it is a copy of (its tags then hold the original's
    versions until either side drops them; check_tag compares the tag)."""
    return uuid == eng.store_uuid or uuid in copied_from(eng)
