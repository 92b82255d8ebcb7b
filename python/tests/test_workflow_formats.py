"""The workflow model's history checks in the compact state formats, where
torch is no reference (their moments are rounded): random sequences of
steps (random frozen parameters), state_dict, loading any saved dict
(older ones after training on included), training on from a saved dict,
rebuilding and resuming, checked against what mlpo itself held: a loaded
dict gives exactly the parameters and opt.state it was saved with, a
resume exactly what the store's heads held, and the same batch stepped
from the same saved dict gives the same numbers however much happened in
between; a dropped checkpoint's dicts are refused, also once a later
checkpoint has taken its name. MLPO_WORKFLOW_EXAMPLES as in test_workflow_model.py (default 12),
at most 400 here (an example takes ~1.5 s) unless
MLPO_FORMAT_WORKFLOW_EXAMPLES says otherwise.
"""
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
from helpers import make_model, loss_of

EXAMPLES = int(os.environ.get(
    "MLPO_FORMAT_WORKFLOW_EXAMPLES",
    min(400, int(os.environ.get("MLPO_WORKFLOW_EXAMPLES", "12")))))
HYPER = dict(lr=1e-2, weight_decay=0.05)
NAMES = [n for n, _ in make_model().named_parameters()]


class FormatWorkflow(RuleBasedStateMachine):
    @initialize(fmt=st.sampled_from(["bf16-moments", "int8-moments"]))
    def start(self, fmt):
        self.fmt = fmt
        self.dir = tempfile.mkdtemp(prefix="mlpo-formats-")
        self.store = os.path.join(self.dir, "s")
        self.model = make_model()
        self.opt = self.open()
        self.saved = []              # (dict, snapshot)
        self.stored = None  # what the store's heads hold: nothing yet
        self.after = {}              # saved index -> snapshot one step on
        self.gone = set()  # saved indices whose checkpoint was dropped
        self.batch = 0

    def teardown(self):
        if hasattr(self, "opt"):
            self.opt.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def open(self, resume=False):
        return mt.AdamW(self.model.named_parameters(), **HYPER,
                        store=self.store, state_format=self.fmt,
                        resume=resume)

    def snapshot(self):
        """The model's parameters and opt.state (the moments as the format
        holds them, decoded), copied."""
        params = {n: p.detach().clone()
                  for n, p in self.model.named_parameters()}
        state = {}
        for n, p in self.model.named_parameters():
            if p in self.opt.state:
                s = self.opt.state[p]
                state[n] = (float(s["step"]), s["exp_avg"].clone(),
                            s["exp_avg_sq"].clone())
        return params, state

    def check(self, snap, what):
        params, state = snap
        now_params, now = self.snapshot()
        for n in NAMES:
            assert torch.equal(now_params[n], params[n]), f"{what}: {n}"
        assert now.keys() == state.keys(), what
        for n, (step, m, v) in state.items():
            assert now[n][0] == step, f"{what}: {n} step"
            assert torch.equal(now[n][1], m), f"{what}: {n} exp_avg"
            assert torch.equal(now[n][2], v), f"{what}: {n} exp_avg_sq"

    def one_step(self, batch, frozen):
        self.opt.zero_grad(set_to_none=True)
        loss_of(self.model, batch).backward()
        for n, p in self.model.named_parameters():
            if n in frozen:
                p.grad = None
        self.opt.step()

    @rule(frozen=st.sets(st.sampled_from(NAMES)))
    def step(self, frozen):
        self.batch += 1
        self.one_step(self.batch, frozen)
        if len(frozen) < len(NAMES):
            self.stored = self.snapshot()

    def live(self):
        return [i for i in range(len(self.saved)) if i not in self.gone]

    @rule()
    def state_dict(self):
        sd = self.opt.state_dict()
        self.stored = self.snapshot()
        self.saved.append((sd, self.stored))
        # A tag of the very versions a dropped one held is that checkpoint.
        self.gone -= {i for i in self.gone
                      if self.saved[i][0]["mlpo"]["tag"] == sd["mlpo"]["tag"]
                      and self.saved[i][0]["mlpo"]["tag_ids"] ==
                      sd["mlpo"]["tag_ids"]}

    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def drop_checkpoint(self, data):
        """A checkpoint dropped (keep_checkpoints, `mlpo drop-tag`): its
        name is free for a later one."""
        i = data.draw(st.sampled_from(self.live()))
        tag = self.saved[i][0]["mlpo"]["tag"]
        self.opt._require_engine().drop_tag(tag)
        self.gone |= {j for j in self.live()
                      if self.saved[j][0]["mlpo"]["tag"] == tag}

    @precondition(lambda self: self.gone)
    @rule(data=st.data())
    def load_dropped(self, data):
        """Its dicts are refused, also once a later checkpoint took the
        name, and nothing changes."""
        sd, _ = self.saved[data.draw(st.sampled_from(sorted(self.gone)))]
        before = self.snapshot()
        with pytest.raises(ValueError, match="no tag|not the checkpoint"), \
                warnings.catch_warnings():
            warnings.simplefilter("error")
            self.opt.load_state_dict(sd)
        self.check(before, "after a refused dict")

    def load_dict(self, sd, snap):
        """The dict alone, without the model's state_dict: it restores the
        parameters (one taken before the first step too); no warning."""
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            self.opt.load_state_dict(sd)

    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def load(self, data):
        sd, snap = self.saved[data.draw(st.sampled_from(self.live()))]
        self.load_dict(sd, snap)
        self.check(snap, "after loading")
        self.stored = snap

    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def train_on_from_saved(self, data):
        """Back to a saved dict and one step on with that dict's own batch:
        the same numbers every time, whatever ran in between."""
        i = data.draw(st.sampled_from(self.live()))
        sd, snap = self.saved[i]
        self.load_dict(sd, snap)
        self.check(snap, f"after loading dict {i}")
        self.one_step(10_000 + i, frozen=set())
        self.stored = self.snapshot()
        if i in self.after:
            self.check(self.after[i], f"one step on from dict {i}")
        else:
            self.after[i] = self.stored

    @rule()
    def rebuild(self):
        """A new optimizer on the same store: fresh; the heads still hold
        the last run."""
        self.opt.close()
        self.opt = self.open()

    @rule()
    def resume(self):
        self.opt.close()
        self.opt = self.open(resume=True)
        if self.stored is not None:
            self.check(self.stored, "after resuming")
            self.stored = self.snapshot()
        else:
            assert self.opt.step_count == 0


FormatWorkflow.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=25, deadline=None,
    suppress_health_check=list(HealthCheck), database=None)
test_format_workflow = FormatWorkflow.TestCase
