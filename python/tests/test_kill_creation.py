"""A store's creation killed at any instant (issue 51 item 4): the job is
SIGKILLed at a random moment while mlpo.torch creates its store (the first
open, the first steps' state, the first checkpoint) and started again
with resume=True. Every rerun opens the store (a creation cut short is
finished, never an index every open refuses), resumes at a step the
killed run had reached, trains on to exactly the parameters of a run
never killed, and `mlpo health` then says OK. MLPO_KILL_CREATION_ROUNDS
kills (default 4; 200 in the slow run)."""
import os
import random
import signal
import subprocess
import sys
import time

import torch

ROUNDS = int(os.environ.get("MLPO_KILL_CREATION_ROUNDS", "4"))

SCRIPT = r"""
import os, sys
sys.path[:0] = sys.argv[1:3]
import torch
import mlpo.torch as mt
from helpers import make_model, loss_of
work = sys.argv[3]
model = make_model()
print("go", flush=True)  # imports done: the store's creation starts now
opt = mt.AdamW(model.named_parameters(), lr=1e-2,
               store=os.path.join(work, "s"), durability="step",
               subgroup_numel=200, resume=True)
start = opt.step_count
print("opened", start, flush=True)
for s in range(start, start + 2):
    opt.zero_grad(set_to_none=True)
    loss_of(model, s).backward()
    opt.step()
opt.checkpoint(f"t{opt.step_count}")
torch.save({n: p.detach().clone() for n, p in model.named_parameters()},
           os.path.join(work, "final.pt"))
print("done", opt.step_count, flush=True)
opt.close()
"""


def reference(n):
    """Parameters after each of n steps of a run never killed."""
    import tempfile
    import mlpo.torch as mt
    from helpers import make_model, loss_of
    with tempfile.TemporaryDirectory() as d:
        model = make_model()
        opt = mt.AdamW(model.named_parameters(), lr=1e-2,
                       store=os.path.join(d, "s"), durability="step",
                       subgroup_numel=200)
        out = [{k: p.detach().clone() for k, p in model.named_parameters()}]
        for s in range(n):
            opt.zero_grad(set_to_none=True)
            loss_of(model, s).backward()
            opt.step()
            out.append({k: p.detach().clone()
                        for k, p in model.named_parameters()})
        opt.close()
    return out


def test_a_creation_killed_anywhere_is_finished_by_the_next_run(
        tmp_path, build_python_path, mlpo_cli):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    tests = os.path.dirname(os.path.abspath(__file__))
    ref = reference(4)

    def start(work):
        p = subprocess.Popen(
            [sys.executable, str(script), build_python_path, tests,
             str(work)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        assert p.stdout.readline().split() == [b"go"], p.stderr.read()
        return p

    # How long a whole creation takes here (from the imports' end).
    work = tmp_path / "timing"
    work.mkdir()
    p = start(work)
    t0 = time.monotonic()
    out, err = p.stdout.read(), p.stderr.read()
    assert p.wait() == 0, err.decode()
    whole = time.monotonic() - t0
    rng = random.Random(51)
    reached = {}
    for r in range(ROUNDS):
        work = tmp_path / f"round-{r}"
        work.mkdir()
        p = start(work)
        time.sleep(rng.uniform(0, whole))
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        p.stderr.close()
        # The rerun: opens, resumes where the killed run got, trains on.
        rerun = subprocess.run(
            [sys.executable, str(script), build_python_path, tests,
             str(work)], stdin=subprocess.DEVNULL, capture_output=True)
        assert rerun.returncode == 0, (r, rerun.stderr.decode())
        words = rerun.stdout.split()
        opened = int(words[words.index(b"opened") + 1])
        done = int(words[words.index(b"done") + 1])
        assert 0 <= opened <= 2 and done == opened + 2, (r, words)
        got = torch.load(work / "final.pt")
        for n, t in got.items():
            assert torch.equal(t, ref[done][n]), (r, opened, n)
        reached[opened] = reached.get(opened, 0) + 1
        h = subprocess.run([mlpo_cli, "health",
                            str(work / "s" / "mlpo" / "rank-0")],
                           capture_output=True, text=True)
        assert h.returncode == 0 and h.stdout.startswith("OK "), \
            (r, h.stdout, h.stderr)
    print(f"kills during creation: {ROUNDS}; resumed at step "
          f"{dict(sorted(reached.items()))}")
