"""A stateful property test of mlpo.torch against torch.optim: random
sequences of what a user does (steps with random frozen parameters, lr
changes, model edits, state_dict, loading any saved dict, rebuilding the
optimizer, resuming, copying the store and training on in the copy)
applied to both, checked after every operation: parameters within 1e-6 of
the reference, opt.state equal to torch's, and every saved dict loads to
exactly the state it was saved at. A second optimizer steps on the same
store now and then (its own namespace). A copy (`cp -a` or the
hard-linked `cp -al`, then `mlpo relocate` through its root) resumes to
what the heads held, loads the dicts saved on the original (the copy
holds their checkpoints), and never changes the original, which still
resumes to what its heads held when it was copied and refuses the dicts
saved in the copy. A job killed (SIGKILL)
at a random moment of its steps resumes to a state the reference reaches:
the heads after one of its steps (durability "step": a step is all or
nothing), or the newest tag (durability "tag"). Steps take micro-batches
where parameters miss the last one, set_to_none=False, the user's
clipping after backward; an exception in the middle of backward and a
non-finite gradient apply nothing. A dropped checkpoint's dicts are refused from then on, also once a
later checkpoint has taken its name.

It runs for AdamW (with the defaults, which run the update during
backward; with update_in_backward=False; and with accumulation_steps=2,
two micro-batches a step), and for AdamW with amsgrad, SGD with momentum
and Adagrad (each rule's state compared key by key with torch's).

MLPO_WORKFLOW_EXAMPLES sets the number of examples (default 12; the slow
run, scripts/test.sh --slow, uses 1500; a third of them for each other
rule); MLPO_WORKFLOW_KILLS the kills per example (default 1; each starts a
Python process)."""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import pytest
import torch
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize,
                                 invariant, precondition, rule)

import mlpo.torch as mt
from helpers import make_model, loss_of, assert_params_are

EXAMPLES = int(os.environ.get("MLPO_WORKFLOW_EXAMPLES", "12"))
KILLS = int(os.environ.get("MLPO_WORKFLOW_KILLS", "1"))
KILL_STEPS = 8  # steps the killed job would take
HYPER = dict(lr=1e-2, weight_decay=0.05)
NAMES = [n for n, _ in make_model().named_parameters()]
CLI = os.path.join(
    os.environ.get("MLPO_BUILD_DIR",
                   os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "build")), "tools", "mlpo")


KILLED_JOB = r"""
import sys
sys.path[:0] = sys.argv[1:3]
import mlpo.torch as mt
from helpers import make_model, loss_of
import json
store, first, n = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
cls, hyper = getattr(mt, sys.argv[6]), json.loads(sys.argv[7])
durability, tag_at = sys.argv[8], int(sys.argv[9])
model = make_model()
opt = cls(model.named_parameters(), **hyper, store=store, resume=True,
          durability=durability)
print("open", opt.step_count, flush=True)
for k in range(n):
    opt.zero_grad(set_to_none=True)
    loss_of(model, first + k).backward()
    opt.step()
    if k + 1 == tag_at:
        opt.state_dict()
print("done", flush=True)
"""


def params_of(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def current_hyper(group):
    """The group's changeable options: lr, and betas where the rule has
    them."""
    return {k: group[k] for k in ("lr", "betas") if k in group}


class Workflow(RuleBasedStateMachine):
    OURS, THEIRS, HYPER = mt.AdamW, torch.optim.AdamW, HYPER
    OURS_KW = {}  # options of ours alone (update_in_backward)

    @initialize()
    def start(self):
        self.dir = tempfile.mkdtemp(prefix="mlpo-workflow-")
        self.store = os.path.join(self.dir, "s")
        self.model = make_model()
        self.ref = copy.deepcopy(self.model)
        self.opt = self.OURS(self.model.named_parameters(), **self.HYPER,
            **self.OURS_KW,
                            store=self.store)
        self.ropt = self.THEIRS(self.ref.parameters(), **self.HYPER)
        self.saved = []   # (our dict, model params, reference opt dict)
        # What the store's heads hold: nothing until the first step or
        # state_dict (which stores step 0's parameters).
        self.stored = None
        self.batch = 0
        self.copies = 0
        self.originals = []  # (store a copy was made of, what it held)
        self.lineage = []    # the identities of those stores, in order
        self.tag_snaps = {}  # tag -> snapshot, in the order tags were made
        self.kills = 0
        self.dropped = []  # saved entries whose checkpoint was dropped

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
            o = self.OURS(m.parameters(), **self.HYPER,
                **self.OURS_KW, store=self.store)
            assert o.store_name != self.opt.store_name
            self.other = (m, o, r,
                          self.THEIRS(r.parameters(), **self.HYPER))
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

    @rule(frozen=st.sets(st.sampled_from(NAMES)),
          miss=st.sets(st.sampled_from(NAMES)),
          set_to_none=st.booleans(),
          clip=st.sampled_from([None, None, 0.05, 10.0]))
    def step(self, frozen, miss, set_to_none, clip):
        """A step over accumulation_steps micro-batches (1 unless the
        class says): `frozen` parameters get no gradient at all, `miss`
        ones none in the last micro-batch (they keep what the earlier ones
        gave, or the zeros set_to_none=False left); `clip`: the user's
        clip_grad_norm_ after backward."""
        self.batch += 1
        parts = self.OURS_KW.get("accumulation_steps", 1)
        stepped = False
        for m, o in ((self.model, self.opt), (self.ref, self.ropt)):
            o.zero_grad(set_to_none=set_to_none)
            for part in range(parts):
                last = part == parts - 1
                live = [n for n in NAMES
                        if n not in frozen and not (last and n in miss)]
                for n, p in m.named_parameters():
                    p.requires_grad_(n in live)
                if live:
                    loss_of(m, self.batch, part=part,
                            parts=parts).backward()
            for n, p in m.named_parameters():
                if n in frozen:
                    p.grad = None
                p.requires_grad_(True)
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
            o.step()
            stepped = any(p.grad is not None for p in m.parameters())
        if stepped:
            self.stored = self.snapshot()

    @rule()
    def exception_in_backward(self):
        """backward raises half-way (a hook of the user's), then
        zero_grad(): nothing stepped, as with torch.optim (with the update
        in backward, the part already updated is discarded)."""
        self.batch += 1

        class Boom(Exception):
            pass

        def boom(g):
            raise Boom()
        for m, o in ((self.model, self.opt), (self.ref, self.ropt)):
            o.zero_grad(set_to_none=True)
            x = torch.randn(8, 16, generator=torch.Generator().manual_seed(
                self.batch))
            h = m[1](m[0](x))
            h.register_hook(boom)
            with pytest.raises(Boom):
                m[2](h).square().mean().backward()
            o.zero_grad(set_to_none=True)

    @rule()
    def non_finite_gradient(self):
        """An inf in the loss: mlpo skips the step (a warning; torch.optim
        would write NaNs, so the reference just does not step)."""
        self.batch += 1
        self.ropt.zero_grad(set_to_none=True)
        self.opt.zero_grad(set_to_none=True)
        (loss_of(self.model, self.batch) * float("inf")).backward()
        with warnings.catch_warnings():  # (warned at the first, then 10x)
            warnings.simplefilter("ignore")
            self.opt.step()
        assert self.opt.last_report["skipped"]
        self.opt.zero_grad(set_to_none=True)

    @rule(lr=st.sampled_from([1e-3, 5e-3, 2e-2]),
          beta1=st.sampled_from([0.8, 0.9]))
    def change_hyper(self, lr, beta1):
        for o in (self.opt, self.ropt):
            for g in o.param_groups:
                g["lr"] = lr
                if "betas" in g:
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
        self.tag_snaps.setdefault(sd["mlpo"]["tag"], self.stored)
        self.saved.append((sd, params_of(self.model),
                           copy.deepcopy(self.ropt.state_dict())))
        # A tag of the very versions a dropped one held (a state_dict at
        # the same state again) is that checkpoint: its dicts load again.
        back = [d for d in self.dropped
                if d[0]["mlpo"]["tag"] == sd["mlpo"]["tag"] and
                d[0]["mlpo"]["tag_ids"] == sd["mlpo"]["tag_ids"]]
        self.dropped = [d for d in self.dropped
                        if not any(d is b for b in back)]
        self.saved += back

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

    @precondition(lambda self: self.saved)
    @rule(data=st.data())
    def drop_checkpoint(self, data):
        """A checkpoint dropped (keep_checkpoints, `mlpo drop-tag`): its
        name is free for a later one, which may hold other state."""
        sd, _, _ = data.draw(st.sampled_from(self.saved))
        tag, tag_id = sd["mlpo"]["tag"], sd["mlpo"]["tag_ids"][0]
        self.opt._require_engine().drop_tag(tag)
        same = [s for s in self.saved if s[0]["mlpo"]["tag"] == tag]
        assert all(s[0]["mlpo"]["tag_ids"][0] == tag_id for s in same)
        self.saved = [s for s in self.saved if s[0]["mlpo"]["tag"] != tag]
        self.dropped += same
        self.tag_snaps.pop(tag, None)

    @precondition(lambda self: self.dropped)
    @rule(data=st.data())
    def load_dropped(self, data):
        """A dict whose checkpoint was dropped is refused, also once a later
        checkpoint took the name, and nothing changes."""
        sd, _, _ = data.draw(st.sampled_from(self.dropped))
        before = params_of(self.model)
        with pytest.raises(ValueError, match="no tag|not the checkpoint"), \
                warnings.catch_warnings():
            warnings.simplefilter("error")
            self.opt.load_state_dict(sd)
        assert_params_are(self.model, before)

    @rule()
    def rebuild(self):
        """A new optimizer on the same store: fresh, as torch's is."""
        self.opt.close()
        self.opt = self.OURS(self.model.named_parameters(), **self.HYPER,
            **self.OURS_KW,
                            store=self.store)
        self.ropt = self.THEIRS(self.ref.parameters(), **self.HYPER)
        # Nothing is written until it steps or checkpoints: the heads still
        # hold the last run (a resume would continue it).

    @rule()
    def resume(self):
        """resume=True: the state the store's heads hold, and the model's
        parameters with it."""
        self.opt.close()
        self.reopen()

    @precondition(lambda self: self.copies < 2 and os.access(CLI, os.X_OK))
    @rule(link=st.booleans())
    def copy_store(self, link):
        """cp -a (or cp -al: hard links, sharing the files the store writes
        in place) the store, `mlpo relocate` the copy through its root (it
        gives a hard-linked copy files of its own), and go on in the copy
        with resume=True."""
        self.lineage.append(self.opt._require_engine().store_uuid)
        self.opt.close()
        if getattr(self, "other", None):
            self.other[1].close()
            self.other = None
        self.copies += 1
        new = os.path.join(self.dir, f"copy{self.copies}")
        subprocess.run(["cp", "-al" if link else "-a", self.store, new],
                       check=True)
        # The root names its store when it holds one; with the second
        # optimizer's store beside it, --all relocates both.
        stores = sorted(os.path.join(new, d, "rank-0") for d in os.listdir(new)
                        if os.path.exists(os.path.join(new, d, "rank-0")))
        several = len(stores) > 1
        r = subprocess.run([CLI, "relocate", new, "--json"] +
                           (["--all"] if several else []),
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        for one in out["stores"] if several else [out]:
            assert one["copy"] is True, one
            assert bool(one["unshared_files"]) == link, one
        assert len(out["stores"]) == len(stores) if several else True
        self.originals.append((self.store, self.stored))
        # The dicts saved so far name checkpoints the copy holds too: they
        # load there (and the dropped ones stay refused).
        self.store = new
        self.reopen()

    @precondition(lambda self: self.originals)
    @rule(data=st.data())
    def reopen_original(self, data):
        """A store a copy was made of still resumes to what its heads held
        when it was copied: nothing done in the copy reached it."""
        k = data.draw(st.integers(0, len(self.originals) - 1))
        root, stored = self.originals[k]
        m = make_model(seed=5)
        o = self.OURS(m.named_parameters(), **self.HYPER,
            **self.OURS_KW, store=root,
                      resume=True)
        try:
            if stored is not None:
                params = stored[0]
                for n, p in m.named_parameters():
                    d = (p - params[n]).abs().max().item()
                    assert d <= 1e-6, f"original's {n} moved by {d}"
            # A dict saved in a later copy is another store's to the
            # original: refused, and nothing changes.
            later = [s for s in self.saved + self.dropped
                     if s[0]["mlpo"]["store_uuids"][0] in self.lineage[k + 1:]
                     or s[0]["mlpo"]["store_uuids"][0] ==
                     self.opt._require_engine().store_uuid]
            if later:
                sd = data.draw(st.sampled_from(later))[0]
                before = params_of(m)
                with pytest.raises(ValueError, match="another store"):
                    o.load_state_dict(sd)
                assert_params_are(m, before)
        finally:
            o.close()

    @precondition(lambda self: self.kills < KILLS and
                  self.stored is not None and self.tag_snaps)
    @rule(delay=st.sampled_from([0, 0.002, 0.004, 0.007, 0.01, 0.02, 0.05,
                                 0.3]),
          durability=st.sampled_from(["tag", "step"]),
          tag_at=st.integers(0, KILL_STEPS))
    def killed_job(self, delay, durability, tag_at):
        """Another run of the job resumes the store, steps (taking a
        state_dict after step `tag_at`, 0: none), and is SIGKILLed `delay`
        s after it opened; this optimizer then resumes what it left: the
        heads after some of its steps, or (a step cut short) the newest
        tag. Which one is read from the state; that it is one of them, and
        exactly, is the check."""
        self.kills += 1
        self.opt.close()
        params, rsd = self.stored
        g = rsd["param_groups"][0]
        first = 50_000 + 100 * self.kills
        tests = os.path.dirname(os.path.abspath(__file__))
        py = os.path.dirname(os.path.dirname(os.path.abspath(mt.__file__)))
        job = subprocess.Popen(
            [sys.executable, "-c", KILLED_JOB, py, tests, self.store,
             str(first), str(KILL_STEPS), self.OURS.__name__,
             json.dumps({**self.HYPER, **self.OURS_KW,
                         **current_hyper(g)}), durability,
             str(tag_at)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        opened = job.stdout.readline().split()
        assert opened and opened[0] == "open", job.stderr.read()
        time.sleep(delay)
        job.kill()
        job.wait()
        self.opt = self.OURS(self.model.named_parameters(), **self.HYPER,
            **self.OURS_KW,
                            store=self.store, resume=True)
        now = params_of(self.model)

        def close_to(snap_params):
            return all((now[n] - snap_params[n]).abs().max() <= 1e-5
                       for n in NAMES)
        # The reference's candidates: the heads after k of the job's steps.
        ref = copy.deepcopy(self.ref)
        ref.load_state_dict(params)
        ropt = self.THEIRS(ref.parameters(), **self.HYPER)
        ropt.load_state_dict(copy.deepcopy(rsd))
        found, job_tag = None, None
        for k in range(KILL_STEPS + 1):
            if k:
                ropt.zero_grad(set_to_none=True)
                loss_of(ref, first + k - 1).backward()
                ropt.step()
            snap = (params_of(ref), copy.deepcopy(ropt.state_dict()))
            if k == tag_at:
                job_tag = snap
            if found is None and \
                    self.opt.step_count == int(opened[1]) + k and \
                    close_to(snap[0]):
                found = snap
        # The job's tag, when it got to take it: the newest now.
        for t in self.opt.tags():
            if t not in self.tag_snaps and t.startswith("step-"):
                assert job_tag is not None, t
                self.tag_snaps[t] = job_tag
        if found is None:  # a step cut short: the newest tag
            # (durability "step": never; a step is all or nothing and
            # every step that returned but the last is durable)
            assert durability == "tag", (
                f"durability step resumed at step {self.opt.step_count}, "
                f"not at the heads after 0..{KILL_STEPS} of the killed "
                f"job's steps (from step {opened[1]})")
            found = list(self.tag_snaps.values())[-1]
            assert close_to(found[0]), (
                f"resumed at step {self.opt.step_count}: neither the heads "
                f"after 0..{KILL_STEPS} of the killed job's steps (from "
                f"step {opened[1]}) nor the newest tag")
        self.ref.load_state_dict(found[0])
        self.ropt = self.THEIRS(self.ref.parameters(), **self.HYPER)
        self.ropt.load_state_dict(copy.deepcopy(found[1]))
        for g2, rg in zip(self.opt.param_groups, self.ropt.param_groups):
            g2.update(current_hyper(rg))
        self.stored = found

    def reopen(self):
        """A new optimizer on self.store with resume=True, and the
        reference at what the heads hold."""
        self.ropt = self.THEIRS(self.ref.parameters(), **self.HYPER)
        if self.stored is None:  # nothing stored: the model as it is
            self.ref.load_state_dict(params_of(self.model))
        else:
            params, rsd = self.stored
            self.ref.load_state_dict(params)
            self.ropt.load_state_dict(copy.deepcopy(rsd))
        self.opt = self.OURS(self.model.named_parameters(), **self.HYPER,
            **self.OURS_KW,
                            store=self.store, resume=True)
        for g, rg in zip(self.opt.param_groups, self.ropt.param_groups):
            g.update(current_hyper(rg))
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
            assert set(mine) == {k for k, v in theirs.items()
                                 if v is not None}
            if "step" in theirs:
                assert float(mine["step"]) == float(theirs["step"])
            for k in (k for k in mine if k != "step"):
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


class WorkflowPlainStep(Workflow):
    """The same with the update during backward off (the default runs
    it)."""
    OURS_KW = dict(update_in_backward=False)


class WorkflowInBackwardAccumulating(Workflow):
    """The update during backward over two micro-batches a step, where
    parameters miss the last one."""
    OURS_KW = dict(update_in_backward=True, accumulation_steps=2)


class WorkflowAmsgrad(Workflow):
    OURS, THEIRS = mt.AdamW, torch.optim.AdamW
    HYPER = dict(lr=1e-2, weight_decay=0.05, amsgrad=True)


class WorkflowSGD(Workflow):
    OURS, THEIRS = mt.SGD, torch.optim.SGD
    HYPER = dict(lr=1e-2, momentum=0.9, weight_decay=0.05)


class WorkflowAdagrad(Workflow):
    OURS, THEIRS = mt.Adagrad, torch.optim.Adagrad
    HYPER = dict(lr=1e-2, lr_decay=0.01, initial_accumulator_value=0.1)


Workflow.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=25, deadline=None,
    suppress_health_check=list(HealthCheck), database=None)
test_workflow = Workflow.TestCase
for _cls in (WorkflowPlainStep, WorkflowInBackwardAccumulating,
             WorkflowAmsgrad, WorkflowSGD, WorkflowAdagrad):
    _cls.TestCase.settings = settings(
        max_examples=max(2, EXAMPLES // 3), stateful_step_count=25,
        deadline=None, suppress_health_check=list(HealthCheck),
        database=None)
test_workflow_plain_step = WorkflowPlainStep.TestCase
test_workflow_in_backward_accumulating = \
    WorkflowInBackwardAccumulating.TestCase
test_workflow_amsgrad = WorkflowAmsgrad.TestCase
test_workflow_sgd = WorkflowSGD.TestCase
test_workflow_adagrad = WorkflowAdagrad.TestCase
