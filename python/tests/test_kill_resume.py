"""The training process killed (SIGKILL) at random moments and started again
from its last saved file, as a user's job is: it ends with exactly the
parameters of a run that was never killed. MLPO_KILL_ROUNDS kills (default
3; more in the slow run)."""
import os
import random
import signal
import subprocess
import sys
import time

import torch

ROUNDS = int(os.environ.get("MLPO_KILL_ROUNDS", "3"))
STEPS = 40

SCRIPT = r"""
import os, sys, torch
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
import mlpo.torch as mt
from helpers import make_model, loss_of
work, steps = sys.argv[3], int(sys.argv[4])
ckpt = os.path.join(work, "ckpt.pt")
model = make_model()
frozen_at = lambda s: {"0.bias"} if s % 4 == 1 else set()
opt = mt.AdamW(model.named_parameters(), lr=1e-2, store=os.path.join(work, "s"))
start = 0
if os.path.exists(ckpt):
    saved = torch.load(ckpt)
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    start = saved["step"]
for s in range(start, steps):
    opt.zero_grad(set_to_none=True)
    loss_of(model, s).backward()
    for n, p in model.named_parameters():
        if n in frozen_at(s):
            p.grad = None
    opt.step()
    if (s + 1) % 3 == 0:
        tmp = ckpt + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                    "step": s + 1}, tmp)
        os.replace(tmp, ckpt)
    print("step", s + 1, flush=True)
torch.save(model.state_dict(), os.path.join(work, "final.pt"))
print("done", flush=True)
"""


def run(tmp_path, build_python_path, work, kill_at=None, rng=None):
    """Runs the script; with `kill_at`, SIGKILLs it a random moment after it
    reports that step."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    tests = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.Popen([sys.executable, str(script), build_python_path,
                          tests, str(work), str(STEPS)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if kill_at is not None:
        for line in p.stdout:
            if line.split()[:1] == [b"step"] and int(line.split()[1]) >= kill_at:
                time.sleep(rng.uniform(0, 0.01))  # inside a step or a save
                p.send_signal(signal.SIGKILL)
                break
    out, err = p.communicate()
    return p.returncode, out.decode(), err.decode()


def test_killed_training_resumes_from_its_last_file(tmp_path,
                                                    build_python_path):
    clean = tmp_path / "clean"
    clean.mkdir()
    rc, out, err = run(tmp_path, build_python_path, clean)
    assert rc == 0, err
    want = torch.load(clean / "final.pt")

    work = tmp_path / "killed"
    work.mkdir()
    rng = random.Random(int(os.environ.get("MLPO_KILL_SEED", "7")))
    kills = 0
    at = 0
    for _ in range(ROUNDS):
        at = rng.randint(at + 1, at + STEPS // ROUNDS)
        rc, out, err = run(tmp_path, build_python_path, work, kill_at=at,
                           rng=rng)
        if rc == 0:
            break
        assert rc == -signal.SIGKILL, err
        kills += 1
    assert kills >= 1
    rc, out, err = run(tmp_path, build_python_path, work)
    assert rc == 0, err
    got = torch.load(work / "final.pt")
    for k in want:
        assert torch.equal(got[k], want[k]), (k, kills)


HOLDER = r"""
import sys, torch
sys.path[:0] = sys.argv[1:3]
import mlpo.torch as mt
from helpers import make_model, loss_of
model = make_model()
opt = mt.AdamW(model.named_parameters(), lr=1e-2, store=sys.argv[3])
for s in range(3):
    opt.zero_grad()
    loss_of(model, s).backward()
    opt.step()
print("holding", flush=True)
sys.stdin.read()  # until the test closes it
"""


def test_resume_while_the_last_job_still_holds_the_store_is_refused(
        tmp_path, build_python_path):
    """resume=True while another process (the last job, not dead yet) has
    this model's namespace open used to pass it over and start afresh in
    the next one ("nothing to resume"); it is refused naming the process,
    nothing is created, and the resume works once that process is gone. A
    model of other shapes still passes the held namespace over."""
    import pytest
    import mlpo.torch as mt
    from helpers import make_model
    store = str(tmp_path / "s")
    tests = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.Popen([sys.executable, "-c", HOLDER, build_python_path,
                          tests, store], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "holding"
        with pytest.raises(RuntimeError,
                           match=rf"this model's state.*pid {p.pid} has"):
            mt.AdamW(make_model().named_parameters(), store=store,
                     resume=True)
        assert sorted(os.listdir(store)) == [".mlpo", "mlpo"]
        other = mt.AdamW(torch.nn.Linear(3, 2).parameters(), store=store,
                         resume=True)
        assert other.store_name == "mlpo.2" and other.step_count == 0
        other.close()
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    opt = mt.AdamW(make_model().named_parameters(), store=store, resume=True)
    assert opt.store_name == "mlpo" and opt.step_count == 3
    opt.close()
