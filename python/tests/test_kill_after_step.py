"""Both durabilities as the docs promise them, with write-behind and
read-ahead on (the defaults), the update during backward on or off and
the three state formats: the training process is SIGKILLed at random
moments, right after a step() returned among them, and started again
with resume=True. Every run resumes at a step boundary with exactly the
parameters and state a run never killed had at that step, no earlier
than the contract names: under durability="step" the step before the
last that returned (a step's writes land behind it: the one in flight
may be lost, never more); under durability="tag" the newest tag whose
checkpoint() returned (one every TAG_EVERY steps).
MLPO_KILL_AFTER_STEP_ROUNDS kills per configuration (default 3; 60 in
the slow run, 360 in all)."""
import os
import random
import signal
import subprocess
import sys

import pytest
import torch

ROUNDS = int(os.environ.get("MLPO_KILL_AFTER_STEP_ROUNDS", "3"))
STEPS = 400  # more than any round reaches before its kill

SCRIPT = r"""
import os, sys, torch
sys.path[:0] = sys.argv[1:3]
import mlpo.torch as mt
from helpers import make_model, loss_of
work, fmt, in_bwd, steps = sys.argv[3], sys.argv[4], sys.argv[5] == "1", \
    int(sys.argv[6])
durability, tag_every = sys.argv[7], int(sys.argv[8])
model = make_model()
opt = mt.AdamW(model.named_parameters(), lr=1e-2, weight_decay=0.1,
               store=os.path.join(work, "s"), durability=durability,
               subgroup_numel=200, state_format=fmt,
               update_in_backward=in_bwd,
               resume=os.path.exists(os.path.join(work, "started")))
open(os.path.join(work, "started"), "w").close()
start = opt.step_count
torch.save({"step": start,
            "params": {n: p.detach().clone()
                       for n, p in model.named_parameters()},
            "avg": {n: opt.state[p]["exp_avg"].clone()
                    for n, p in model.named_parameters() if opt.state[p]}},
           os.path.join(work, "resumed.pt"))
print("resumed", start, flush=True)
sys.stdin.readline()  # the test has read what it resumed to: go
for s in range(start, steps):
    opt.zero_grad(set_to_none=True)
    loss_of(model, s).backward()
    opt.step()
    print("step", s + 1, flush=True)  # step() returned
    if tag_every and (s + 1) % tag_every == 0:
        opt.checkpoint(f"t{s + 1}")
        print("tag", s + 1, flush=True)  # checkpoint() returned
    if s + 1 == steps:
        torch.save({n: p.detach().clone() for n, p in model.named_parameters()},
                   os.path.join(work, "final.pt"))
"""

CONFIGS = [("step", "fp32", False), ("step", "int8-moments", True),
           ("step", "bf16-moments", False), ("step", "fp32", True),
           ("tag", "bf16-moments", True), ("tag", "int8-moments", False)]
TAG_EVERY = 4  # under durability="tag"


def reference(fmt, n):
    """The parameters and exp_avg after each of n steps of a run never
    killed (the same optimizer, in one process)."""
    import mlpo.torch as mt
    from helpers import make_model, loss_of
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        model = make_model()
        opt = mt.AdamW(model.named_parameters(), lr=1e-2, weight_decay=0.1,
                       store=os.path.join(d, "s"), durability="step",
                       subgroup_numel=200, state_format=fmt)
        out = [({n: p.detach().clone() for n, p in model.named_parameters()},
                {})]
        for s in range(n):
            opt.zero_grad(set_to_none=True)
            loss_of(model, s).backward()
            opt.step()
            out.append(({k: p.detach().clone()
                         for k, p in model.named_parameters()},
                        {k: opt.state[p]["exp_avg"].clone()
                         for k, p in model.named_parameters()}))
        opt.close()
    return out


@pytest.mark.parametrize("durability, fmt, in_bwd", CONFIGS,
                         ids=[f"{d}-{f}{'-in-backward' if b else ''}"
                              for d, f, b in CONFIGS])
def test_a_kill_right_after_step_loses_at_most_what_durability_allows(
        tmp_path, build_python_path, durability, fmt, in_bwd):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    tests = os.path.dirname(os.path.abspath(__file__))
    work = tmp_path / "work"
    work.mkdir()
    rng = random.Random(hash((durability, fmt, in_bwd)) & 0xffff)
    tag_every = TAG_EVERY if durability == "tag" else 0
    ref = None
    last_returned = 0
    last_tag = 0
    kills = 0
    for r in range(ROUNDS + 1):
        p = subprocess.Popen(
            [sys.executable, str(script), build_python_path, tests,
             str(work), fmt, "1" if in_bwd else "0", str(STEPS),
             durability, str(tag_every)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        line = p.stdout.readline().split()
        assert line[:1] == [b"resumed"], (line, p.stderr.read().decode())
        resumed = int(line[1])
        if durability == "step":
            # The contract: the last step that returned, or the one before.
            assert resumed >= max(0, last_returned - 1), (
                f"round {r}: resumed at step {resumed}, but step "
                f"{last_returned} had returned")
        else:
            # The newest tag that returned, or a later step boundary
            # (steps between tags may have landed; none that had not run).
            assert resumed >= last_tag, (
                f"round {r}: resumed at step {resumed}, but the tag of "
                f"step {last_tag} had returned")
        assert resumed <= last_returned + 1, (r, resumed, last_returned)
        got = torch.load(work / "resumed.pt")
        if ref is None or len(ref) <= resumed + 40:
            ref = reference(fmt, resumed + 60)
        want_p, want_avg = ref[resumed]
        for n, t in got["params"].items():
            assert torch.equal(t, want_p[n]), (r, resumed, n)
        for n, t in got["avg"].items():
            assert torch.equal(t, want_avg[n]), (r, resumed, n, "exp_avg")
        if r == ROUNDS:
            p.kill()
            p.communicate()
            break
        p.stdin.write(b"go\n")
        p.stdin.flush()
        # Kill right after step() returns (at once), or a moment later
        # (inside the next step, its writes, its backward).
        target = resumed + rng.randint(1, 12)
        now = rng.random() < 0.5
        for line in p.stdout:
            w = line.split()
            if w[:1] == [b"tag"]:
                last_tag = int(w[1])
            if w[:1] == [b"step"]:
                last_returned = int(w[1])
                if last_returned >= target:
                    if not now:
                        import time
                        time.sleep(rng.uniform(0, 0.02))
                    p.send_signal(signal.SIGKILL)
                    break
        # (Not communicate(): it reads the pipe's descriptor and drops the
        # lines p.stdout had already buffered.)
        out, err = p.stdout.read(), p.stderr.read()
        p.wait()
        for line in out.split(b"\n"):  # (printed before the kill landed)
            if line.startswith(b"step "):
                last_returned = int(line.split()[1])
            if line.startswith(b"tag "):
                last_tag = int(line.split()[1])
        assert p.returncode == -signal.SIGKILL, err.decode()
        kills += 1
    assert kills == ROUNDS
