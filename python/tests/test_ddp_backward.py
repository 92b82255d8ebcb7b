"""The update during backward under DistributedDataParallel (2 gloo ranks):
DDP's communication hook (mlpo.torch.ddp_comm_hook) hands each averaged
bucket to the running step. Every pattern ends bit for bit where the
plain step ends, on every rank, and near torch.optim.AdamW under the same
DDP (mlpo's kernel rounds an ulp apart from torch's now and then)."""
import json
import os

import pytest

from mlpo._backward_choice import fsdp_hooks_after_reduce
from test_distributed import launch

TORCH_TOL = 1e-6
# Kills of the loop (MLPO_DDP_KILL_ROUNDS; 40 in the slow run)
ROUNDS = int(os.environ.get("MLPO_DDP_KILL_ROUNDS", "3"))


def ddp_run(tmp_path, build_python_path, name, **kw):
    """Both ranks' results of ddp_backward_worker.py."""
    out = tmp_path / name
    res = launch(tmp_path, build_python_path, 2, out,
                 worker="ddp_backward_worker.py", store=tmp_path / f"s-{name}",
                 **kw)
    for rank, (code, text) in enumerate(res):
        assert code == 0, f"rank {rank}:\n" + text[-3000:]
    runs = []
    for rank in range(2):
        with open(f"{out}-{rank}.json") as f:
            runs.append(json.load(f))
    runs[0]["log"] = res[0][1]
    return runs


def max_diff(a, b):
    return max(abs(x - y) for n in a["params"]
               for x, y in zip(a["params"][n], b["params"][n]))


def pattern(run):
    return [(r["in_backward"], r["redone"], r["skipped"]) for r in run["ran"]]


# (what each step of the run ran: in backward, redone, skipped)
IB, REDO, PLAIN, SKIP = (True, False, False), (False, True, False), \
    (False, False, False), (True, False, True)


@pytest.mark.parametrize("kw, want", [
    # no_sync on the first micro-batch; a parameter's gradient dropped
    # after backward (redone); a call on the store between backward and
    # step() (dropped, the plain step); an overflow (skipped whole)
    (dict(accum=2, drop_bias_every=3, read_state_at=2, inf_at=5),
     [IB, REDO, PLAIN, IB, REDO, SKIP, IB, REDO]),
    # DDP reducing every micro-batch: the first step learns the count
    (dict(accum=2, no_sync=0, drop_bias_every=3),
     [PLAIN, REDO, IB, IB, REDO, IB, IB, REDO]),
    # a branch unused every other step (find_unused_parameters): its
    # parameters' gradients stay None, or zeros kept by set_to_none=False
    (dict(unused_every=2), [IB] * 8),
    (dict(unused_every=2, set_to_none=0, steps=4), [IB] * 4),
], ids=["no_sync-dropped-grad-read-overflow", "reduce-every-micro-batch",
        "unused-branch", "unused-branch-zeros-kept"])
def test_in_backward_is_the_plain_step_on_every_rank(tmp_path,
                                                     build_python_path,
                                                     kw, want):
    ib = ddp_run(tmp_path, build_python_path, "ib", in_backward=1, **kw)
    plain = ddp_run(tmp_path, build_python_path, "plain", in_backward=0, **kw)
    for rank in range(2):
        assert pattern(ib[rank]) == want, rank
        assert max_diff(ib[rank], plain[rank]) == 0.0, rank
        assert not any(r["in_backward"] for r in plain[rank]["ran"])
    assert max_diff(ib[0], ib[1]) == 0.0  # the ranks agree
    if "inf_at" not in kw:  # (torch.optim steps an overflow into nan)
        ref = ddp_run(tmp_path, build_python_path, "torch",
                      optimizer="torch", **kw)
        assert max_diff(ib[0], ref[0]) <= TORCH_TOL


def test_clipping_in_backward_redone_or_paused_exactly(tmp_path,
                                                       build_python_path):
    """The user's clip_grad_norm_ (clipping every step: redone, then
    paused) and mlpo's max_grad_norm (decided from every rank's norm)."""
    ib = ddp_run(tmp_path, build_python_path, "ib", in_backward=1,
                 user_clip=0.5, steps=6)
    plain = ddp_run(tmp_path, build_python_path, "plain", in_backward=0,
                    user_clip=0.5, steps=6)
    ref = ddp_run(tmp_path, build_python_path, "torch", optimizer="torch",
                  user_clip=0.5, steps=6)
    assert pattern(ib[0]) == [REDO, REDO, PLAIN, REDO, REDO, PLAIN]
    for rank in range(2):
        assert max_diff(ib[rank], plain[rank]) == 0.0
    assert max_diff(ib[0], ref[0]) <= TORCH_TOL
    # max_grad_norm, and a user clip that never clips (by 1.0: the values
    # are the same, nothing is redone for it)
    kw = dict(max_grad_norm=0.1, user_clip=100, steps=5)
    ib = ddp_run(tmp_path, build_python_path, "ib2", in_backward=1, **kw)
    plain = ddp_run(tmp_path, build_python_path, "plain2", in_backward=0, **kw)
    assert [r["in_backward"] for r in ib[0]["ran"]][:2] == [True, True]
    assert ib[0]["ran"][0]["redone"]  # the first steps' norms are above
    for rank in range(2):
        assert max_diff(ib[rank], plain[rank]) == 0.0


def test_the_default_measures_on_every_rank_alike_and_without_the_hook_says_so(
        tmp_path, build_python_path):
    auto = ddp_run(tmp_path, build_python_path, "auto", steps=10)
    plain = ddp_run(tmp_path, build_python_path, "plain", in_backward=0,
                    steps=10)
    assert pattern(auto[0]) == pattern(auto[1])  # one choice for both
    assert any(r["in_backward"] for r in auto[0]["ran"])
    assert max_diff(auto[0], plain[0]) == 0.0
    # Without the hook in the script (as Trainer and Accelerate wrap the
    # model): step() finds the DDP holding the parameters and hooks it.
    found = ddp_run(tmp_path, build_python_path, "found", hook=0,
                    in_backward=1, steps=4)
    assert pattern(found[0]) == [PLAIN, IB, IB, IB]
    assert max_diff(found[0], found[1]) == 0.0
    # A hook of the script's own: the plain step, and a note that says so
    taken = ddp_run(tmp_path, build_python_path, "taken", hook=2, steps=4)
    assert "has a hook already" in taken[0]["log"]
    assert not any(r["in_backward"] for r in taken[0]["ran"])
    ref = ddp_run(tmp_path, build_python_path, "torch", optimizer="torch",
                  steps=4)
    assert max_diff(found[0], ref[0]) <= TORCH_TOL
    assert max_diff(taken[0], ref[0]) <= TORCH_TOL


def test_state_dict_on_rank_0_only_raises_on_every_rank(
        tmp_path, build_python_path, mlpo_cli):
    """docs/coming-from.md's DDP snippet with the DDP habit `if rank == 0:
    torch.save(opt.state_dict())`: rank 0's state_dict() check paired with
    rank 1's first bucket all-reduce of the next backward and gloo ended
    the job ("collective mismatch", "Connection reset") without a word of
    why. Now every backward's first bucket takes part in the ranks' call
    check: both raise, saying which call each was in and what to do, and
    the store resumes from the step before."""
    res = launch(tmp_path, build_python_path, 2, tmp_path / "r0",
                 worker="ddp_backward_worker.py", store=tmp_path / "s",
                 steps=6, rank0_saves_at=2, timeout=120)
    for rank, (code, text) in enumerate(res):
        assert code not in (0, None), text[-3000:]
        mine, other = ("state_dict", "backward") if rank == 0 else \
            ("backward", "state_dict")
        assert f"rank {rank} is in {mine}() while another rank is in " \
            f"{other}()" in text, f"rank {rank}:\n" + text[-3000:]
        assert "Call state_dict() on every rank" in text
    # Nothing of the stores was lost: each rank's verifies.
    import subprocess
    for rank in range(2):
        r = subprocess.run([mlpo_cli, "verify", str(
            tmp_path / "s" / "mlpo-w2" / f"rank-{rank}")],
            capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("parallel", [
    "ddp", pytest.param("fsdp", marks=pytest.mark.skipif(
        not fsdp_hooks_after_reduce(),
        reason="this torch's FSDP runs the plain step"))])
def test_killed_ranks_resume_or_say_how(tmp_path, build_python_path,
                                        mlpo_cli, parallel):
    """SIGKILL of both ranks (DDP, or FSDP's fully_shard) (one, then the other a moment later) while
    they update during backward, durability="step": every restart resumes
    at the last step rank 0 saw return or the one before, with exactly the
    parameters an unkilled run had there; or, where the kill fell between
    the ranks' commits of one step (each rank commits its own shard), every
    rank refuses, naming the ranks' steps and the command that restores
    them to the newest checkpoint all hold, which then resumes exactly."""
    import random
    import re
    import signal
    import subprocess
    import sys
    import time
    import torch
    from test_distributed import free_port
    rng = random.Random(7)
    work = tmp_path / "w"
    work.mkdir()
    worker = __file__.replace("test_ddp_backward.py", "ddp_kill_worker.py")
    seen, refused = [], 0
    for rnd in range(ROUNDS):
        port = str(free_port())
        procs = []
        for r in range(2):
            env = dict(os.environ, PYTHONPATH=build_python_path,
                       RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                       GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
            procs.append(subprocess.Popen(
                [sys.executable, worker, "--work", str(work), "--out", "-",
                 "--resume", str(int(rnd > 0)), "--parallel", parallel],
                env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        # Killed while training: after rank 0 says it resumed (starting
        # torch takes seconds, more on a loaded machine), or once it ends
        # (a refusal).
        head = []
        while True:
            line = procs[0].stdout.readline()
            head.append(line)
            if not line or line.startswith("START"):
                break
        time.sleep(rng.uniform(1, 3.5))
        first = rng.randrange(2)
        procs[first].send_signal(signal.SIGKILL)
        time.sleep(rng.uniform(0, 0.3))
        procs[1 - first].send_signal(signal.SIGKILL)
        out = "".join(head) + procs[0].communicate()[0]
        procs[1].communicate()
        lines = out.splitlines()
        start = [int(l.split()[1]) for l in lines if l.startswith("START")]
        if not start:
            m = re.search(r"hold different steps \(rank 0 at step (\d+), "
                          r"rank 1 at step (\d+)\).*?`mlpo restore (\S+) "
                          r"(step-\d+)`", out, re.S)
            assert m, out[-3000:]
            assert abs(int(m.group(1)) - int(m.group(2))) == 1, m.group(0)
            refused += 1
            cmd = subprocess.run([mlpo_cli, "restore", m.group(3),
                                  m.group(4)], capture_output=True, text=True)
            assert cmd.returncode == 0, cmd.stdout + cmd.stderr
            seen.append((int(m.group(4)[5:]), None))
            continue
        if seen:
            last = seen[-1][1]
            if last is None:  # restored to the checkpoint
                assert start[0] == seen[-1][0], (start, seen)
            else:
                assert last - 1 <= start[0] <= last + 1, (start, seen)
        rets = [int(l.split()[1]) for l in lines if l.startswith("RET")]
        assert rets and rets[-1] > start[0] + 1, out[-3000:]  # trained on
        seen.append((start[0], rets[-1]))
    print(f"{ROUNDS} kills: {refused} between the ranks' commits")
    starts = sorted({s for s, r in seen if s > 0 and r is not None})
    (tmp_path / "r").mkdir()
    res = launch(tmp_path, build_python_path, 2, tmp_path / "ref",
                 worker="ddp_kill_worker.py", work=tmp_path / "r",
                 stop=max(starts), record=",".join(map(str, starts)),
                 parallel=parallel)
    for rank, (code, text) in enumerate(res):
        assert code == 0, f"rank {rank}:\n" + text[-3000:]
    ref = torch.load(tmp_path / "r" / "reference.pt")
    for s in starts:
        got = torch.load(work / f"start-{s}.pt")
        for n in got:
            assert torch.equal(got[n], ref[s][n]), (s, n)
