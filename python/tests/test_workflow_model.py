"""A stateful property test of mlpo.torch against torch.optim.AdamW: random
sequences of what a user does (steps with random frozen parameters, lr
changes, model edits, state_dict, loading any saved dict, rebuilding the
optimizer, resuming, copying the store and training on in the copy)
applied to both, checked after every operation: parameters within 1e-6 of
the reference, opt.state equal to torch's, and every saved dict loads to
exactly the state it was saved at. A second optimizer steps on the same
store now and then (its own namespace). A copy (`cp -a`, then `mlpo
relocate` through its root) resumes to what the heads held, refuses the
dicts saved on the original, and never changes the original, which still
resumes to what its heads held when it was copied.

MLPO_WORKFLOW_EXAMPLES sets the number of examples (default 12; the slow
run, scripts/test.sh --slow, uses 1500)."""
import copy
import json
import os
import shutil
import subprocess
import tempfile
import warnings

import pytest
import torch
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize,
                                 invariant, precondition, rule)

import mlpo.torch as mt
from helpers import make_model, loss_of

EXAMPLES = int(os.environ.get("MLPO_WORKFLOW_EXAMPLES", "12"))
HYPER = dict(lr=1e-2, weight_decay=0.05)
NAMES = [n for n, _ in make_model().named_parameters()]
CLI = os.path.join(
    os.environ.get("MLPO_BUILD_DIR",
                   os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "build")), "tools", "mlpo")


def params_of(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


class Workflow(RuleBasedStateMachine):
    @initialize()
    def start(self):
        self.dir = tempfile.mkdtemp(prefix="mlpo-workflow-")
        self.store = os.path.join(self.dir, "s")
        self.model = make_model()
        self.ref = copy.deepcopy(self.model)
        self.opt = mt.AdamW(self.model.named_parameters(), **HYPER,
                            store=self.store)
        self.ropt = torch.optim.AdamW(self.ref.parameters(), **HYPER)
        self.saved = []   # (our dict, model params, reference opt dict)
        # What the store's heads hold: nothing until the first step or
        # state_dict (which stores step 0's parameters).
        self.stored = None
        self.batch = 0
        self.copies = 0
        self.originals = []  # (store a copy was made of, what it held)
        self.foreign = []    # dicts saved on a store this one copied

    def teardown(self):
        if hasattr(self, "opt"):
            self.opt.close()
            if getattr(self, "other", None):
                self.other[1].close()
            shutil.rmtree(self.dir, ignore_errors=True)

    @rule()
    def other_optimizer_steps(self):
        """A second optimizer on the same store (a GAN's other network):
        its own namespace, its own state, never the first one's."""
        if getattr(self, "other", None) is None:
            m = make_model(seed=9)
            r = copy.deepcopy(m)
            o = mt.AdamW(m.parameters(), **HYPER, store=self.store)
            assert o.store_name != self.opt.store_name
            self.other = (m, o, r, torch.optim.AdamW(r.parameters(), **HYPER))
        m, o, r, ro = self.other
        self.batch += 1
        for mm, oo in ((m, o), (r, ro)):
            oo.zero_grad(set_to_none=True)
            loss_of(mm, self.batch).backward()
            oo.step()
        for p, q in zip(m.parameters(), r.parameters()):
            assert (p - q).abs().max() <= 1e-6
        with torch.no_grad():
            for p, q in zip(m.parameters(), r.parameters()):
                q.copy_(p)

    def snapshot(self):
        return (params_of(self.ref), copy.deepcopy(self.ropt.state_dict()))

    @rule(frozen=st.sets(st.sampled_from(NAMES)))
    def step(self, frozen):
        self.batch += 1
        for m, o in ((self.model, self.opt), (self.ref, self.ropt)):
            o.zero_grad(set_to_none=True)
            loss_of(m, self.batch).backward()
            for n, p in m.named_parameters():
                if n in frozen:
                    p.grad = None
            o.step()
        if len(frozen) < len(NAMES):
            self.stored = self.snapshot()

    @rule(lr=st.sampled_from([1e-3, 5e-3, 2e-2]),
          beta1=st.sampled_from([0.8, 0.9]))
    def change_hyper(self, lr, beta1):
        for o in (self.opt, self.ropt):
            for g in o.param_groups:
                g["lr"] = lr
                g["betas"] = (beta1, g["betas"][1])

    @rule(name=st.sampled_from(NAMES), how=st.sampled_from(
        ["clamp", "data", "load"]))
    def edit_model(self, name, how):
        for m in (self.model, self.ref):
            p = dict(m.named_parameters())[name]
            with torch.no_grad():
                if how == "clamp":
                    p.clamp_(-0.1, 0.1)
                elif how == "data":
                    p.data.mul_(0.5)
                else:
                    p.copy_(torch.full_like(p, 0.01))

    @rule()
    def state_dict(self):
        sd = self.opt.state_dict()
        self.stored = self.snapshot()
        self.saved.append((sd, params_of(self.model),
                           copy.deepcopy(self.ropt.state_dict())))

    @precondition(lambda self: self.saved)
    @rule(data=st.data(), with_model=st.booleans())
    def load(self, data, with_model):
        """A dict loaded with the model's own state_dict saved beside it,
        or alone: the dict restores the parameters either way (one taken
        before the first step too)."""
        sd, params, rsd = data.draw(st.sampled_from(self.saved))
        self.ref.load_state_dict(params)
        if with_model:
            self.model.load_state_dict(params)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            self.opt.load_state_dict(sd)
        self.ropt.load_state_dict(copy.deepcopy(rsd))
        for n, p in self.model.named_parameters():
            assert torch.equal(p, params[n]), f"{n} after loading"
        self.stored = self.snapshot()

    @rule()
    def rebuild(self):
        """A new optimizer on the same store: fresh, as torch's is."""
        self.opt.close()
        self.opt = mt.AdamW(self.model.named_parameters(), **HYPER,
                            store=self.store)
        self.ropt = torch.optim.AdamW(self.ref.parameters(), **HYPER)
        # Nothing is written until it steps or checkpoints: the heads still
        # hold the last run (a resume would continue it).

    @rule()
    def resume(self):
        """resume=True: the state the store's heads hold, and the model's
        parameters with it."""
        self.opt.close()
        self.reopen()

    @precondition(lambda self: self.copies < 2 and os.access(CLI, os.X_OK))
    @rule()
    def copy_store(self):
        """cp -a the store, `mlpo relocate` the copy through its root, and
        go on in the copy with resume=True."""
        self.opt.close()
        if getattr(self, "other", None):
            self.other[1].close()
            self.other = None
        self.copies += 1
        new = os.path.join(self.dir, f"copy{self.copies}")
        subprocess.run(["cp", "-a", self.store, new], check=True)
        # The root names its store when it holds one; with the second
        # optimizer's store beside it, each is relocated by its directory.
        stores = sorted(os.path.join(new, d, "rank-0") for d in os.listdir(new)
                        if os.path.exists(os.path.join(new, d, "rank-0")))
        for target in [new] if len(stores) == 1 else stores:
            r = subprocess.run([CLI, "relocate", target, "--json"],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout)["copy"] is True
        self.originals.append((self.store, self.stored))
        self.foreign += self.saved
        self.saved = []
        self.store = new
        self.reopen()

    @precondition(lambda self: self.foreign)
    @rule(data=st.data())
    def load_foreign(self, data):
        """A dict saved on the store this one is a copy of is refused, and
        nothing changes."""
        sd, _, _ = data.draw(st.sampled_from(self.foreign))
        before = params_of(self.model)
        with pytest.raises(ValueError, match="another store"), \
                warnings.catch_warnings():
            warnings.simplefilter("error")  # refused, and nothing else said
            self.opt.load_state_dict(sd)
        for n, p in self.model.named_parameters():
            assert torch.equal(p, before[n]), n

    @precondition(lambda self: self.originals)
    @rule(data=st.data())
    def reopen_original(self, data):
        """A store a copy was made of still resumes to what its heads held
        when it was copied: nothing done in the copy reached it."""
        root, stored = data.draw(st.sampled_from(self.originals))
        m = make_model(seed=5)
        o = mt.AdamW(m.named_parameters(), **HYPER, store=root, resume=True)
        try:
            if stored is not None:
                params = stored[0]
                for n, p in m.named_parameters():
                    d = (p - params[n]).abs().max().item()
                    assert d <= 1e-6, f"original's {n} moved by {d}"
        finally:
            o.close()

    def reopen(self):
        """A new optimizer on self.store with resume=True, and the
        reference at what the heads hold."""
        self.ropt = torch.optim.AdamW(self.ref.parameters(), **HYPER)
        if self.stored is None:  # nothing stored: the model as it is
            self.ref.load_state_dict(params_of(self.model))
        else:
            params, rsd = self.stored
            self.ref.load_state_dict(params)
            self.ropt.load_state_dict(copy.deepcopy(rsd))
        self.opt = mt.AdamW(self.model.named_parameters(), **HYPER,
                            store=self.store, resume=True)
        for g, rg in zip(self.opt.param_groups, self.ropt.param_groups):
            g["lr"], g["betas"] = rg["lr"], rg["betas"]
        if self.stored is None:
            assert self.opt.step_count == 0

    @invariant()
    def matches_torch(self):
        if not hasattr(self, "opt"):
            return
        for (n, p), q in zip(self.model.named_parameters(),
                             self.ref.parameters()):
            d = (p - q).abs().max().item()
            assert d <= 1e-6, f"{n} differs by {d}"
        assert len(self.opt.state) == len(self.ropt.state)
        for p, q in zip(self.model.parameters(), self.ref.parameters()):
            if q not in self.ropt.state:
                assert p not in self.opt.state
                continue
            mine, theirs = self.opt.state[p], self.ropt.state[q]
            assert float(mine["step"]) == float(theirs["step"])
            for k in ("exp_avg", "exp_avg_sq"):
                assert (mine[k] - theirs[k]).abs().max() <= 1e-6, k
                # The next operation starts from identical numbers: Debian's
                # torch 1.13 rounds a few operations differently (FMA), and
                # over many steps a one-ulp difference in a parameter can
                # turn into a visible one in a gradient formed by
                # cancellation (|g| ~ eps). Each check is then of one
                # operation's semantics, not of chaotic drift.
                theirs[k].copy_(mine[k])
        with torch.no_grad():
            for p, q in zip(self.model.parameters(), self.ref.parameters()):
                q.copy_(p)


Workflow.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=25, deadline=None,
    suppress_health_check=list(HealthCheck), database=None)
test_workflow = Workflow.TestCase
