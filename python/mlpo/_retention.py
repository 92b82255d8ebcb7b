"""keep_checkpoints: which automatic checkpoints ("step-<t>" tags) the
store keeps, and dropping the others so that load_state_dict of a dict
naming one says why. A mixin of the optimizer class in torch.py (its
engine; keep_checkpoints)."""
import json

from ._checkpoints import _step_tag_key


class Retention:
    def _prune_checkpoints(self, newest):
        """Keeps the keep_checkpoints automatic tags ("step-<t>") that
        state_dict() handed out last (`newest` now; 0 keeps all) and frees
        what only the others held. Handed out, not numbered: in a rerun or
        after a rollback, the tags taken now have lower steps than the
        older run's, and the dict just returned must stay loadable."""
        if self.keep_checkpoints <= 0:
            return
        eng = self._engine
        was = json.loads(eng.get_attribute("checkpoint_order") or "[]")
        # Automatic tags it does not list (taken by an earlier release, or
        # while every checkpoint was kept) go first, oldest state first.
        auto = [t for t in eng.tag_order() if _step_tag_key(t) is not None]
        listed = [t for t in was if t in auto and t != newest]
        order = [t for t in auto if t not in listed and t != newest]
        order += listed + [newest]
        old, keep = (order[:-self.keep_checkpoints],
                     order[-self.keep_checkpoints:])
        if _step_tag_key(newest)[0] == 0:
            # A dict of a fresh start (Accelerate's prepare() takes one and
            # loads it back) drops older step-0 ones only: checkpoints of
            # trained state wait for the next trained one, or a resumed
            # run would lose the checkpoint it is about to load.
            spared = [t for t in old if _step_tag_key(t)[0] != 0]
            old = [t for t in old if t not in spared]
            keep = spared + keep
        if keep != was:
            eng.set_attribute("checkpoint_order", json.dumps(keep))
        self._drop_checkpoints(old, self.keep_checkpoints)

    def _drop_checkpoints(self, tags, why):
        """Drops `tags` and frees what only they held; load_state_dict of a
        dict naming one says why (`why`: the keep_checkpoints number, or
        a sentence)."""
        if not tags:
            return
        eng = self._engine
        dropped = json.loads(eng.get_attribute("dropped_tags") or "{}")
        for t in tags:
            eng.drop_tag(t)
            dropped[t] = why
        # The newest 1000 names, for load_state_dict's message.
        dropped = dict(list(dropped.items())[-1000:])
        eng.set_attribute("dropped_tags", json.dumps(dropped))
        eng.gc()

    def _names_this_store(self, info):
        """Whether a state dict's 'mlpo' entry names this optimizer's
        namespace and store (this rank's)."""
        uuids = info.get("store_uuids") or []
        return info.get("name") == self._ns and self._rank < len(uuids) \
            and uuids[self._rank] == self._engine.store_uuid

    def _drop_unfollowed(self, named, known, why):
        """The trainer callbacks' retention (mlpo.hf, mlpo.lightning): drops
        the automatic tags that `known` holds ((name, store uuid, tag) the
        callback saw taken or named) and no file names (`named`, plus the
        checkpoint just handed out: on the ranks that do not write it, its
        file may not be there yet)."""
        named = set(named) | {self._last_handed}
        mine = (self._ns, self._engine.store_uuid)
        stale = [t for t in self._engine.tags()
                 if _step_tag_key(t) is not None and t not in named
                 and (*mine, t) in known]
        self._drop_checkpoints(stale, why)

