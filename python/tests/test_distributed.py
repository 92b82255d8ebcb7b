"""Data parallel over torch.distributed (gloo on CPU, launched by torchrun):
two ranks equal one process, and a checkpoint written by W ranks restores
into W' ranks (2 -> 1 and 1 -> 2) and continues with the same losses."""
import json
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(__file__)
TOL = 1e-5  # gradient averaging sums in another order than one process


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(tmp_path, build_python_path, world, out, **kw):
    for rank, (code, text) in enumerate(
            launch(tmp_path, build_python_path, world, out, **kw)):
        assert code == 0, f"rank {rank}:\n" + text[-3000:]
    with open(out) as f:
        return json.load(f)


def launch(tmp_path, build_python_path, world, out, timeout=600,
           worker="dist_worker.py", **kw):
    """Each rank's (exit status, output) of `worker` (a script beside this
    file); every rank killed at `timeout` (status None)."""
    args = [os.path.join(HERE, worker), "--out", str(out)]
    for k, v in kw.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    env = dict(os.environ, PYTHONPATH=build_python_path, GLOO_SOCKET_IFNAME="lo",
               OMP_NUM_THREADS="1")
    # torchrun's environment, set here: Debian 12's torchrun 1.13 trips over
    # Python 3.11 unless given --redirects/--tee per rank (see README).
    port = str(free_port())
    procs = []
    for rank in range(world):
        e = dict(env)
        if world > 1:
            e.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable] + args, env=e,
                                      stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True,
                                      cwd=tmp_path))
    results = []
    for p in procs:
        try:
            results.append((p.communicate(timeout=timeout)[0], p.returncode))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            results.append((p.communicate()[0], None))
    return [(code, text) for text, code in results]


def launch_json(tmp_path, build_python_path, world, out, **kw):
    """launch(), every rank required to succeed; what rank 0 wrote to
    `out` (JSON)."""
    for rank, (code, text) in enumerate(launch(
            tmp_path, build_python_path, world, out, **kw)):
        assert code == 0, f"rank {rank}:\n" + text[-3000:]
    with open(out) as f:
        return json.load(f)


def close(a, b, steps):
    return max(abs(a["losses"][str(s)] - b["losses"][str(s)]) for s in steps)


def params_close(a, b):
    return max(abs(x - y) for n in a["params"]
               for x, y in zip(a["params"][n], b["params"][n]))


def test_two_ranks_equal_one_process(tmp_path, build_python_path):
    one = run(tmp_path, build_python_path, 1, tmp_path / "one.json",
              store=tmp_path / "s1")
    two = run(tmp_path, build_python_path, 2, tmp_path / "two.json",
              store=tmp_path / "s2")
    assert two["world"] == 2
    assert close(one, two, range(10)) <= TOL
    assert params_close(one, two) <= TOL


def test_a_model_wrapped_in_ddp_trains_as_one_process(tmp_path,
                                                      build_python_path):
    """DistributedDataParallel averages the gradients in backward; mlpo's
    own average of those equal gradients leaves them as they are."""
    one = run(tmp_path, build_python_path, 1, tmp_path / "one.json",
              store=tmp_path / "s1")
    two = run(tmp_path, build_python_path, 2, tmp_path / "two.json",
              store=tmp_path / "s2", ddp=1)
    assert close(one, two, range(10)) <= TOL
    assert params_close(one, two) <= TOL


def test_reshard_two_ranks_into_one_and_one_into_two(tmp_path, build_python_path):
    st = tmp_path / "store"
    # 2 -> 1
    two = run(tmp_path, build_python_path, 2, tmp_path / "two.json", store=st,
              save=tmp_path / "c2.pt", save_at=5)
    one = run(tmp_path, build_python_path, 1, tmp_path / "one.json", store=st,
              load=tmp_path / "c2.pt", start=5)
    assert close(two, one, range(5, 10)) <= TOL
    assert params_close(two, one) <= TOL
    # 1 -> 2 (another store root: the world-1 store of this root is taken)
    st2 = tmp_path / "store2"
    base = run(tmp_path, build_python_path, 1, tmp_path / "b.json", store=st2,
               save=tmp_path / "c1.pt", save_at=5)
    two_b = run(tmp_path, build_python_path, 2, tmp_path / "b2.json",
                store=st2, load=tmp_path / "c1.pt", start=5)
    assert close(base, two_b, range(5, 10)) <= TOL
    assert params_close(base, two_b) <= TOL


def test_reshard_int8_moments_two_ranks_into_one(tmp_path, build_python_path):
    """Compact moments reshard through the checkpoint reader: dequantised,
    then quantised again in the new shards' blocks, so the run continues
    within int8's rounding of the uninterrupted two-rank run."""
    st = tmp_path / "store"
    two = run(tmp_path, build_python_path, 2, tmp_path / "two.json", store=st,
              save=tmp_path / "c2.pt", save_at=5, state_format="int8-moments")
    one = run(tmp_path, build_python_path, 1, tmp_path / "one.json", store=st,
              load=tmp_path / "c2.pt", start=5, state_format="int8-moments")
    assert one["world"] == 1
    # lr 1e-2, 5 steps, each update's m / sqrt(v) within int8's rounding.
    assert params_close(two, one) <= 0.25 * 1e-2 * 5
    assert close(two, one, range(5, 10)) <= 0.05 * abs(two["losses"]["9"])


def test_reshard_reads_a_copy_not_the_original(tmp_path, build_python_path,
                                               mlpo_cli):
    """A checkpoint of two ranks, copied (`cp -a`, `mlpo relocate --all`)
    and loaded into one rank on the copy, is read from the copy: it loads
    with the original gone, continues as the two-rank run did, and writes
    nothing to the original. An unrelocated copy is no copy: the error says
    where the checkpoint was written and how to make one."""
    import shutil
    import subprocess
    import torch
    import mlpo.torch as mt
    from helpers import make_model, two_groups

    orig, copy, raw = tmp_path / "orig", tmp_path / "copy", tmp_path / "raw"
    two = run(tmp_path, build_python_path, 2, tmp_path / "two.json",
              store=orig, save=tmp_path / "c2.pt", save_at=5)
    subprocess.run(["cp", "-a", str(orig), str(copy)], check=True)
    subprocess.run(["cp", "-a", str(orig), str(raw)], check=True)
    subprocess.run([mlpo_cli, "relocate", "--all", str(copy)], check=True,
                   capture_output=True)
    gone = tmp_path / "gone"
    orig.rename(gone)
    one = run(tmp_path, build_python_path, 1, tmp_path / "one.json",
              store=copy, load=tmp_path / "c2.pt", start=5)
    assert close(two, one, range(5, 10)) <= TOL
    assert params_close(two, one) <= TOL
    assert (copy / "mlpo").is_dir() and not (gone / "mlpo").exists()

    ckpt = torch.load(tmp_path / "c2.pt")
    opt = mt.AdamW(two_groups(make_model(), named=True), lr=1e-2, store=raw,
                   subgroup_numel=100)
    with pytest.raises(FileNotFoundError) as e:
        opt.load_state_dict(ckpt["opt"])
    assert str(orig) in str(e.value) and "mlpo relocate --all" in str(e.value)
    assert opt.state_dict()["mlpo"]["tag"]  # still usable, a fresh run
    opt.close()
    with pytest.raises(FileNotFoundError) as e:
        mt.export_state_dict(ckpt["opt"])
    assert "name='mlpo-w2', tag='step-5'" in str(e.value)
    out = mt.export_state_dict(str(copy), name="mlpo-w2", tag="step-5")
    gone.rename(orig)  # the original, back: both read the same checkpoint
    ref = mt.export_state_dict(ckpt["opt"])
    for i, s in ref["state"].items():
        assert torch.equal(s["exp_avg_sq"], out["state"][i]["exp_avg_sq"])
    shutil.rmtree(raw)


@pytest.mark.parametrize("where", ["store", "resume"])
def test_a_rank_that_cannot_open_stops_every_rank(tmp_path, build_python_path,
                                                  where):
    """One rank's store fails to open (its node's path is a file; or later,
    as it loads the state): every rank raises naming that rank and its
    error. The others used to wait for it in a collective of opening and
    fail with gloo's "Connection closed by peer" once it exited (or, while
    it lived on, only at the process group's timeout)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    kw = dict(rank1_store=blocker / "store") if where == "store" else \
        dict(rank1_fails_opening=1)
    res = launch(tmp_path, build_python_path, 2, tmp_path / "out.json",
                 timeout=120, store=tmp_path / "s", **kw)
    (code0, text0), (code1, text1) = res
    assert code0 not in (0, None) and code1 not in (0, None), res
    assert "rank 1 of 2 could not open its store" in text0, text0[-3000:]
    assert ("a-file" if where == "store" else "injected") in text0
    # Rank 1 raises its own error.
    assert "could not open its store" not in text1, text1[-3000:]
    # Nothing was changed: the two ranks train on the same store.
    run(tmp_path, build_python_path, 2, tmp_path / "o.json",
        store=tmp_path / "s", stop=2)


def test_resume_on_another_number_of_ranks_says_so(tmp_path,
                                                   build_python_path):
    """resume=True looks in the namespace of its own number of ranks
    ("mlpo" for one, "mlpo-w2" for two): a run of 2 ranks resumed on 1 found
    nothing there and started afresh without a word. That is refused,
    naming the state and the way (the state dict reshards), and that way
    works; where the namespace holds an older state than another number of
    ranks wrote since, resuming it warns."""
    st = tmp_path / "store"
    two = run(tmp_path, build_python_path, 2, tmp_path / "two.json",
              store=st, save=tmp_path / "c.pt", save_at=5, stop=5)
    (code, text), = launch(tmp_path, build_python_path, 1,
                           tmp_path / "x.json", store=st, resume=1, stop=6)
    assert code not in (0, None)
    assert ("namespace 'mlpo-w2' of the store holds this model's state at "
            "step 5, written by 2 ranks, and this run has 1 rank") in text, \
        text[-3000:]
    assert "opt.load_state_dict reshards it onto 1 rank" in text
    one = run(tmp_path, build_python_path, 1, tmp_path / "one.json",
              store=st, load=tmp_path / "c.pt", start=5)
    assert abs(one["losses"]["5"] - two["losses"]["4"]) < 0.5
    # 2 ranks resume their own state at step 5, and say that 1 rank wrote
    # a later one.
    res = launch(tmp_path, build_python_path, 2, tmp_path / "y.json",
                 store=st, resume=1, start=5, stop=6, timeout=300)
    for code, text in res:
        assert code == 0, text[-3000:]
        assert "continuing 'mlpo-w2' at step 5, while namespace 'mlpo' of " \
            "the store holds this model's state at step 10, written by 1 " \
            "rank" in text, text[-3000:]
    again = run(tmp_path, build_python_path, 1, tmp_path / "z.json",
                store=st, resume=1, start=10, stop=12)
    assert set(again["losses"]) == {"10", "11"}


def test_ranks_at_different_steps_are_refused_and_mended_by_restore(
        tmp_path, build_python_path, mlpo_cli):
    """One node's disk restored from a backup (or one rank's store
    restored by hand) leaves the ranks at different steps; resuming trained
    on that mixed state without a word. Every rank refuses, naming the
    steps and the newest tag all hold; `mlpo restore` of the store's
    directory moves every rank there, and training goes on as it went."""
    import shutil
    st = tmp_path / "store"
    run(tmp_path, build_python_path, 2, tmp_path / "a.json", store=st,
        stop=4, save=tmp_path / "c4.pt", save_at=4)
    rank0 = st / "mlpo-w2" / "rank-0"
    shutil.copytree(rank0, tmp_path / "backup", symlinks=True)
    on = run(tmp_path, build_python_path, 2, tmp_path / "b.json", store=st,
             resume=1, start=4, stop=8, save=tmp_path / "c8.pt", save_at=8)
    shutil.rmtree(rank0)
    shutil.copytree(tmp_path / "backup", rank0, symlinks=True)
    res = launch(tmp_path, build_python_path, 2, tmp_path / "c.json",
                 store=st, resume=1, start=8, stop=9, timeout=300)
    for code, text in res:
        assert code not in (0, None)
        assert ("the ranks' stores of 'mlpo-w2' hold different steps (rank "
                "0 at step 4, rank 1 at step 8)") in text, text[-3000:]
        assert "the newest all hold is 'step-4'" in text
    r = subprocess.run([mlpo_cli, "restore", str(st / "mlpo-w2"), "step-4"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "done (2 ranks)" in r.stdout, r.stderr
    # The store's directory also exports (every rank read from it).
    r = subprocess.run([mlpo_cli, "export", str(st / "mlpo-w2"),
                        str(tmp_path / "w.safetensors"), "--tag", "step-4",
                        "--json"], capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)["world"] == 2, r.stderr
    again = run(tmp_path, build_python_path, 2, tmp_path / "d.json",
                store=st, resume=1, start=4, stop=8,
                save=tmp_path / "d8.pt", save_at=8)
    assert close(on, again, range(4, 8)) <= TOL
    assert params_close(on, again) <= TOL
    # Rank 1 still holds the first 'step-8' and rank 0 not: the new
    # checkpoint takes one name on both ranks, so its dict loads (each rank
    # chose for itself: 'step-8' on rank 0 and 'step-8.1' on rank 1).
    last = run(tmp_path, build_python_path, 2, tmp_path / "e.json",
               store=st, load=tmp_path / "d8.pt", start=8, stop=9)
    assert set(last["losses"]) == {"8"}


def test_state_dict_on_one_rank_only_is_an_error_on_every_rank(
        tmp_path, build_python_path):
    """A torch.optim script under DDP saves the optimizer on rank 0 only
    (`if rank == 0: torch.save(opt.state_dict())`); mlpo's state is
    sharded, and rank 0's state_dict() collectives paired with rank 1's
    step() ones until both waited forever. Both raise, saying what to do;
    the store keeps the steps taken before."""
    res = launch(tmp_path, build_python_path, 2, tmp_path / "o.json",
                 store=tmp_path / "s", save=tmp_path / "c.pt", save_at=3,
                 save_on_rank0_only=1, timeout=120)
    for rank, (code, text) in enumerate(res):
        assert code not in (0, None), text[-3000:]
        other = "step" if rank == 0 else "state_dict"
        assert (f"rank {rank} is in {'state_dict' if rank == 0 else 'step'}"
                f"() while another rank is in {other}()") in text, \
            text[-3000:]
        assert "Call state_dict() on every rank" in text
    again = run(tmp_path, build_python_path, 2, tmp_path / "a.json",
                store=tmp_path / "s", resume=1, start=3, stop=4)
    assert set(again["losses"]) == {"3"}


def test_load_state_dict_on_one_rank_or_of_other_dicts_is_refused(
        tmp_path, build_python_path):
    """Loading the optimizer on rank 0 only, or another checkpoint on one
    rank (or restore(tag) on one rank), left the ranks' shards at different
    states, trained on as one.
    Every rank raises before anything changes, and the same dict on every
    rank loads."""
    st = tmp_path / "s"
    run(tmp_path, build_python_path, 2, tmp_path / "a.json", store=st,
        stop=4, save=tmp_path / "c2.pt", save_at=2)
    b = run(tmp_path, build_python_path, 2, tmp_path / "b.json", store=st,
            resume=1, start=4, stop=7, save=tmp_path / "c6.pt", save_at=6)
    for kw, says in (
            (dict(load_on_rank0_only=1), ("load_state_dict", "step")),
            (dict(rank1_load=tmp_path / "c2.pt"), None)):
        res = launch(tmp_path, build_python_path, 2, tmp_path / "x.json",
                     store=st, load=tmp_path / "c6.pt", start=6, stop=7,
                     timeout=120, **kw)
        for rank, (code, text) in enumerate(res):
            assert code not in (0, None), text[-3000:]
            if says is None:
                want = "the ranks load different state dicts (this rank's " \
                    f"names tag {'step-6' if rank == 0 else 'step-2'!r})"
            else:
                me, other = says if rank == 0 else says[::-1]
                want = f"rank {rank} is in {me}() while another rank is " \
                    f"in {other}()"
            assert want in text, text[-3000:]
    again = run(tmp_path, build_python_path, 2, tmp_path / "c.json",
                store=st, load=tmp_path / "c6.pt", start=6, stop=7)
    assert abs(again["losses"]["6"] - b["losses"]["6"]) <= TOL
    # opt.restore(tag) on one rank: the same.
    res = launch(tmp_path, build_python_path, 2, tmp_path / "y.json",
                 store=st, load=tmp_path / "c6.pt", start=6, stop=9,
                 save=tmp_path / "c8.pt", save_at=8, rank0_restores="step-6",
                 timeout=120)
    for rank, (code, text) in enumerate(res):
        assert code not in (0, None), text[-3000:]
        me, other = ("restore", "step")[::1 if rank == 0 else -1]
        assert f"rank {rank} is in {me}() while another rank is in " \
            f"{other}()" in text, text[-3000:]
