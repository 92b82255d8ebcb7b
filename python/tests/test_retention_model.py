"""keep_checkpoints against a model of what it promises: the last K
checkpoints state_dict() handed out stay loadable, whatever their step
numbers (a dict taken at step 0 drops only older step-0 ones). Random sequences of steps, state_dict, loading any saved dict
(kept or dropped), training on after such a rollback, a rerun (a fresh
optimizer on the same store, as torch.optim starts) and a resume; after
each state_dict the store's automatic tags are exactly the last K handed
out, and a saved dict loads exactly when its checkpoint is among them
(else it is refused and nothing changes). state_dict() at a checkpoint's
state (again, or after loading it) hands that checkpoint out again.
Retention by step number failed this: a rerun's checkpoints (lower steps
than the last run's) were dropped as they were made.
MLPO_WORKFLOW_EXAMPLES as in test_workflow_model.py (default 12)."""
import os
import shutil
import tempfile
import warnings

import pytest
import torch
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize,
                                 precondition, rule)

import mlpo.torch as mt
from helpers import make_model, loss_of, assert_params_are

EXAMPLES = int(os.environ.get("MLPO_WORKFLOW_EXAMPLES", "12"))


def params_of(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


class Retention(RuleBasedStateMachine):
    @initialize(keep=st.integers(1, 3))
    def start(self, keep):
        self.dir = tempfile.mkdtemp(prefix="mlpo-retention-")
        self.store = os.path.join(self.dir, "s")
        self.keep = keep
        self.model = make_model()
        self.opt = self.new_optimizer(resume=False)
        self.batch = 0
        self.handed = []  # tag names, the one handed out last at the end
        self.step_of = {}  # tag name -> the step it holds
        self.current = {}  # kept tag name -> its tag_ids
        self.saved = []  # (dict, the model's parameters when it was taken)
        # The checkpoint the heads are at, when one is: state_dict() there
        # hands it out again rather than a second tag of the same state.
        self.at = None

    def teardown(self):
        if hasattr(self, "opt"):
            self.opt.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def new_optimizer(self, resume):
        return mt.AdamW(self.model.named_parameters(), lr=1e-2,
                        store=self.store, keep_checkpoints=self.keep,
                        resume=resume)

    def kept(self, sd):
        info = sd["mlpo"]
        return self.current.get(info["tag"]) == info["tag_ids"]

    @rule()
    def step(self):
        self.batch += 1
        self.opt.zero_grad(set_to_none=True)
        loss_of(self.model, self.batch).backward()
        self.opt.step()
        self.at = None

    @rule()
    def state_dict(self):
        sd = self.opt.state_dict()
        tag = sd["mlpo"]["tag"]
        if self.at is not None:
            assert tag == self.at, (tag, self.at)
        self.at = tag
        if tag in self.handed:
            self.handed.remove(tag)
        self.handed.append(tag)
        self.current[tag] = sd["mlpo"]["tag_ids"]
        self.step_of[tag] = sd["mlpo"]["step"]
        excess = self.handed[:-self.keep]
        if sd["mlpo"]["step"] == 0:
            # A fresh start's dict drops older step-0 ones only; trained
            # checkpoints wait for the next trained one (a resumed run's
            # prepare() would drop the one it is about to load).
            excess = [t for t in excess if self.step_of[t] == 0]
        for old in excess:
            del self.current[old]
            self.handed.remove(old)
        self.saved.append((sd, params_of(self.model)))
        auto = {t for t in self.opt.tags() if t.startswith("step-")}
        assert auto == set(self.handed), (auto, self.handed)

    @precondition(lambda self: self.saved)
    @rule(data=st.data())
    def load(self, data):
        """Any saved dict: loads when its checkpoint is one of the last K
        handed out, else is refused with the model left as it was."""
        sd, params = data.draw(st.sampled_from(self.saved))
        before = params_of(self.model)
        if self.kept(sd):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                self.opt.load_state_dict(sd)
            assert self.opt.step_count == sd["mlpo"]["step"]
            self.at = sd["mlpo"]["tag"]
            assert_params_are(self.model, params)
            return
        with pytest.raises(ValueError,
                           match="keep_checkpoints|not the checkpoint"):
            self.opt.load_state_dict(sd)
        assert_params_are(self.model, before)

    @rule()
    def rerun(self):
        """The script run again: a fresh optimizer on the same store."""
        self.opt.close()
        self.model = make_model(seed=self.batch)
        self.opt = self.new_optimizer(resume=False)
        assert self.opt.step_count == 0
        self.at = None

    @rule()
    def resume(self):
        self.opt.close()
        self.opt = self.new_optimizer(resume=True)


Retention.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=30, deadline=None,
    suppress_health_check=list(HealthCheck), database=None)
test_retention = Retention.TestCase
