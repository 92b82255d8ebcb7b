"""Checkpoints: state_dict/load_state_dict map to tags, a SIGKILLed run
resumes to the same losses, torch.optim state moves in and out, and
safetensors exports read back with a reader written from the format's
specification."""
import copy
import json
import os
import random
import signal
import struct
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest
import torch

import mlpo.torch as mt
from helpers import (make_model, two_groups, loss_of, max_diff,
                     assert_params_are)


def train(model, opt, steps):
    losses = []
    for step in steps:
        opt.zero_grad()
        loss = loss_of(model, step)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_state_dict_is_a_tag_and_load_restores_model_and_state(store_dir):
    model = make_model()
    opt = mt.AdamW(two_groups(model, named=True), lr=1e-2, store=store_dir)
    train(model, opt, range(5))
    sd = opt.state_dict()
    assert sd["mlpo"]["tag"] == "step-5" and sd["state"] == {}
    at5 = [p.detach().clone() for p in model.parameters()]
    later = train(model, opt, range(5, 8))
    assert opt.step_count == 8
    opt.load_state_dict(sd)
    assert opt.step_count == 5
    assert all(torch.equal(a, b) for a, b in zip(at5, model.parameters()))
    assert train(model, opt, range(5, 8)) == later  # bit for bit again


@pytest.mark.parametrize("backend", ["", "host"])
def test_a_dict_from_before_the_first_step_restores_the_model(store_dir,
                                                              backend):
    """A dict taken before the first step stores the initial parameters as
    step 0 (they were kept nowhere before: loading such a dict after
    training used to leave the trained parameters with fresh moments).
    Loaded alone it gives them back, and training on repeats the first run
    exactly; an edit made at step 0 between two dicts is in the second
    only (on the device path too, where edits go in as overrides); a new
    optimizer (a new run, other weights) gets them from the dict, and
    resume=True from the store's heads."""
    kw = {"device_backend": backend} if backend else {}
    model = make_model()
    opt = mt.AdamW(model.named_parameters(), lr=1e-2, store=store_dir,
                   **kw)
    init = [p.detach().clone() for p in model.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sd0 = opt.state_dict()
        assert sd0["mlpo"]["tag"] == "step-0"
        first = train(model, opt, range(3))
        opt.load_state_dict(sd0)
        assert opt.step_count == 0
        assert all(torch.equal(a, b) for a, b in zip(init,
                                                     model.parameters()))
        assert train(model, opt, range(3)) == first
        opt.load_state_dict(sd0)
        # An edit before the first step, then another dict: its own tag.
        with torch.no_grad():
            next(model.parameters()).add_(1.0)
        edited = [p.detach().clone() for p in model.parameters()]
        sd0b = opt.state_dict()
        assert sd0b["mlpo"]["tag"] == "step-0.1"
        train(model, opt, range(2))
        opt.load_state_dict(sd0)
        assert all(torch.equal(a, b) for a, b in zip(init,
                                                     model.parameters()))
        opt.load_state_dict(sd0b)
        assert all(torch.equal(a, b) for a, b in zip(edited,
                                                     model.parameters()))
        assert opt.step_count == 0
        # Exported, step 0 is the initial parameters and no moments.
        out = mt.export_state_dict(sd0)
        assert out["state"] == {}
        for (n, _), a in zip(model.named_parameters(), init):
            assert torch.equal(out["master_params"][n], a), n
        opt.close()
        # A new run: other weights, a fresh optimizer, the old dict loaded.
        model2 = make_model(seed=123)
        assert not torch.equal(next(model2.parameters()), init[0])
        opt2 = mt.AdamW(model2.named_parameters(), lr=1e-2,
                        store=store_dir, **kw)
        opt2.load_state_dict(sd0)
        assert all(torch.equal(a, b) for a, b in zip(init,
                                                     model2.parameters()))
        assert train(model2, opt2, range(3)) == first
        opt2.close()
    # resume=True where the last run only checkpointed step 0.
    model3 = make_model(seed=7)
    opt3 = mt.AdamW(model3.named_parameters(), lr=1e-2, store=store_dir,
                    name="other", **kw)
    sd = opt3.state_dict()
    kept = [p.detach().clone() for p in model3.parameters()]
    opt3.close()
    model4 = make_model(seed=8)
    opt4 = mt.AdamW(model4.named_parameters(), lr=1e-2, store=store_dir,
                    name="other", resume=True, **kw)
    assert opt4.step_count == 0 and sd["mlpo"]["tag"] == "step-0"
    assert not torch.equal(next(make_model(seed=8).parameters()), kept[0])
    assert all(torch.equal(a, b) for a, b in zip(kept, model4.parameters()))
    opt4.close()


CLI = os.path.join(os.environ.get("MLPO_BUILD_DIR", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "build")),
    "tools", "mlpo")


@pytest.mark.skipif(not os.access(CLI, os.X_OK), reason="no mlpo CLI built")
@pytest.mark.parametrize("backend", ["", "host"])
def test_an_empty_step_0_tag_is_not_reused_and_its_dicts_warn(store_dir,
                                                              backend):
    """A step-0 tag that stores nothing (taken by an earlier release, here
    with `mlpo tag` on a store that never stepped) is not what a new dict
    names: state_dict takes step-0.1, which stores the parameters. A dict
    naming the empty tag restores a fresh optimizer, leaves the model as
    it is, and warns when the model's parameters are not the dict's; the
    model's parameters are then the initial state a new dict stores."""
    kw = {"device_backend": backend} if backend else {}
    model = make_model()
    opt = mt.AdamW(model.named_parameters(), lr=1e-2, store=store_dir, **kw)
    opt.close()
    r = subprocess.run([CLI, "tag", store_dir, "step-0"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    opt = mt.AdamW(model.named_parameters(), lr=1e-2, store=store_dir, **kw)
    init = [p.detach().clone() for p in model.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sd = opt.state_dict()
    assert sd["mlpo"]["tag"] == "step-0.1"
    old = copy.deepcopy(sd)  # as an earlier release wrote it
    old["mlpo"]["tag"] = "step-0"
    del old["mlpo"]["tag_ids"]
    train(model, opt, range(2))
    trained = [p.detach().clone() for p in model.parameters()]
    with pytest.warns(UserWarning, match="holds no parameters"):
        opt.load_state_dict(old)
    assert opt.step_count == 0
    assert all(torch.equal(a, b) for a, b in zip(trained, model.parameters()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept = opt.state_dict()  # step 0 again: the trained parameters
        opt.load_state_dict(sd)
        assert all(torch.equal(a, b) for a, b in zip(init,
                                                     model.parameters()))
        opt.load_state_dict(kept)
    assert all(torch.equal(a, b) for a, b in zip(trained, model.parameters()))
    opt.close()


def test_state_dict_keeps_the_newest_checkpoints_and_frees_the_rest(store_dir):
    model = make_model()
    opt = mt.AdamW(model.parameters(), lr=1e-2, store=store_dir,
                   keep_checkpoints=2)
    opt.checkpoint("mine")  # a user tag is never pruned
    for s in range(5):
        train(model, opt, [s])
        opt.state_dict()
    assert sorted(opt.tags()) == ["mine", "step-4", "step-5"]
    # A tag of one's own named like state_dict's would be dropped with them.
    with pytest.raises(ValueError, match="pick another name"):
        opt.checkpoint("step-7")
    assert "step-7" not in opt.tags()


def test_a_dict_whose_tag_was_dropped_and_its_name_reused_is_refused(
        store_dir, mlpo_cli):
    # Run A keeps two checkpoints: step-2's dict outlives its tag. A rerun
    # in the same store (fresh, as torch.optim is) reaches step 2 and takes
    # the free name "step-2" for other state. A's dict must not load it.
    model = make_model()
    opt = mt.AdamW(model.parameters(), lr=1e-2, store=store_dir,
                   keep_checkpoints=2)
    dicts = {}
    for s in range(1, 5):
        train(model, opt, [s])
        dicts[s] = copy.deepcopy(opt.state_dict())
    assert "step-2" not in opt.tags()
    opt.close()
    model = make_model()
    opt = mt.AdamW(model.parameters(), lr=1e-2, store=store_dir)
    train(model, opt, [100, 101])
    mine = opt.state_dict()
    assert mine["mlpo"]["tag"] == "step-2"  # the name is free again
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="not the checkpoint this state dict"):
        opt.load_state_dict(dicts[2])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert opt.step_count == 2
    # Nor export it (the checkpoint reader, as resharding uses it, checks
    # the same digest; the rerun's own dict exports).
    with pytest.raises(ValueError, match="not the checkpoint this state dict"):
        mt.export_state_dict(dicts[2])
    assert mt.export_state_dict(mine)["state"]
    # Kept checkpoints of run A and the rerun's own still load.
    opt.load_state_dict(dicts[4])
    assert opt.step_count == 4
    opt.load_state_dict(mine)
    assert opt.step_count == 2 and all(
        torch.equal(before[k], v) for k, v in model.state_dict().items())
    # The same through `mlpo drop-tag` by hand and a tag of the same name
    # (step-3.1: run A's step-3 is kept and holds other state).
    train(model, opt, [102])
    third = copy.deepcopy(opt.state_dict())
    name = third["mlpo"]["tag"]
    assert name.startswith("step-3")
    meta = os.path.dirname(opt._require_engine().meta_dir)
    opt.close()
    r = subprocess.run([mlpo_cli, "drop-tag", meta, name],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    model = make_model()
    opt = mt.AdamW(model.parameters(), lr=1e-2, store=store_dir)
    opt.load_state_dict(mine)
    train(model, opt, [200])
    assert opt.state_dict()["mlpo"]["tag"] == name
    with pytest.raises(ValueError, match="took its name"):
        opt.load_state_dict(third)
    # A dict of an earlier release (no tag_ids) still loads by name.
    old = copy.deepcopy(dicts[4])
    del old["mlpo"]["tag_ids"]
    opt.load_state_dict(old)
    assert opt.step_count == 4
    bad = copy.deepcopy(dicts[4])
    bad["mlpo"]["tag_ids"] = "x"
    with pytest.raises(ValueError, match="tag_ids"):
        opt.load_state_dict(bad)
    opt.close()


def test_a_refused_dict_of_another_namespace_leaves_the_optimizer_as_it_was(
        store_dir):
    # B loads a dict of run A (another namespace of the same store) whose
    # checkpoint A dropped: refused before B moves to A's namespace.
    a_model = make_model()
    a = mt.AdamW(a_model.parameters(), lr=1e-2, store=store_dir)
    train(a_model, a, [1, 2])
    sd = copy.deepcopy(a.state_dict())
    b_model = make_model()
    b = mt.AdamW(b_model.parameters(), lr=1e-2, store=store_dir)
    assert b.store_name != a.store_name
    a._require_engine().drop_tag(sd["mlpo"]["tag"])
    a.close()
    train(b_model, b, [5, 6, 7])
    name, before = b.store_name, copy.deepcopy(b_model.state_dict())
    with pytest.raises(ValueError, match="no tag"):
        b.load_state_dict(sd)
    assert b.store_name == name and b.step_count == 3
    assert all(torch.equal(before[k], v)
               for k, v in b_model.state_dict().items())
    train(b_model, b, [8])
    assert b.step_count == 4
    b.close()


RESUME_SCRIPT = textwrap.dedent("""
    import os, sys, time, torch
    sys.path.insert(0, {helpers!r})
    import mlpo.torch as mt
    from helpers import make_model, two_groups, loss_of
    store, ckpt, start, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    model = make_model()
    opt = mt.AdamW(two_groups(model, named=True), lr=1e-2, store=store)
    if start > 0:
        c = torch.load(ckpt)
        model.load_state_dict(c["model"])
        opt.load_state_dict(c["opt"])
    for step in range(start, stop):
        opt.zero_grad()
        loss = loss_of(model, step)
        loss.backward()
        opt.step()
        print(f"loss {{step}} {{loss.item()!r}}", flush=True)
        if step + 1 == 10:
            torch.save({{"model": model.state_dict(), "opt": opt.state_dict()}}, ckpt)
            print("checkpoint", flush=True)
        if step >= 10:
            time.sleep(0.05)  # room for the kill to land mid-run
""")


def run_script(script, args, env):
    return subprocess.Popen([sys.executable, "-c", script] + [str(a) for a in args],
                            stdout=subprocess.PIPE, env=env, text=True)


def losses_of(out):
    return {int(l.split()[1]): float(l.split()[2])
            for l in out.splitlines() if l.startswith("loss ")}


def test_sigkill_after_checkpoint_then_resume_gives_the_same_losses(
        tmp_path, build_python_path):
    here = os.path.dirname(__file__)
    script = RESUME_SCRIPT.format(helpers=here)
    env = dict(os.environ, PYTHONPATH=build_python_path)
    # The uninterrupted run.
    p = run_script(script, [tmp_path / "a", tmp_path / "a.pt", 0, 20], env)
    want = losses_of(p.communicate(timeout=300)[0])
    assert sorted(want) == list(range(20))
    # Killed at a random point after the checkpoint at step 10.
    p = run_script(script, [tmp_path / "b", tmp_path / "b.pt", 0, 20], env)
    seen = []
    for line in p.stdout:
        seen.append(line)
        if line.startswith("loss 11"):
            time.sleep(random.uniform(0, 0.3))
            p.send_signal(signal.SIGKILL)
            break
    p.wait()
    assert p.returncode == -signal.SIGKILL
    # Resume from the checkpoint: the store may hold a cut step (some
    # objects at a later step); load_state_dict restores the tag.
    q = run_script(script, [tmp_path / "b", tmp_path / "b.pt", 10, 20], env)
    got = losses_of(q.communicate(timeout=300)[0])
    assert q.returncode == 0
    assert [got[s] for s in range(10, 20)] == [want[s] for s in range(10, 20)]


def test_torch_optim_state_moves_in_and_out(store_dir):
    model = make_model()
    ref = copy.deepcopy(model)
    ropt = torch.optim.AdamW(two_groups(ref), lr=1e-2)
    train(ref, ropt, range(5))
    # Switch a running job to mlpo without losing its moments.
    model.load_state_dict(ref.state_dict())
    opt = mt.AdamW(two_groups(model, named=True), lr=1e-2, store=store_dir)
    opt.load_state_dict(ropt.state_dict())
    assert opt.step_count == 5
    a = train(model, opt, range(5, 10))
    b = train(ref, ropt, range(5, 10))
    assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-6
    assert max_diff(model, ref) <= 1e-6
    # And back out: a torch.optim dict that torch.optim.AdamW loads.
    out = mt.export_state_dict(opt.state_dict())
    back = copy.deepcopy(model)
    bopt = torch.optim.AdamW(two_groups(back), lr=1e-2)
    bopt.load_state_dict({k: out[k] for k in ("state", "param_groups")})
    c = train(back, bopt, range(10, 13))
    d = train(model, opt, range(10, 13))
    assert max(abs(x - y) for x, y in zip(c, d)) <= 1e-5
    assert set(out["master_params"]) == {n for n, _ in model.named_parameters()}


def read_safetensors(path):
    """A reader written from the safetensors specification: u64 LE header
    length, JSON header {name: {dtype, shape, data_offsets}}, raw data."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32"
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"])
    return out, header.get("__metadata__", {})


def test_safetensors_export_reads_back_with_an_independent_reader(
        tmp_path, store_dir, mlpo_cli):
    model = make_model()
    opt = mt.AdamW(two_groups(model, named=True), lr=1e-2, store=store_dir)
    train(model, opt, range(3))
    sd = opt.state_dict()
    opt.close()
    out = tmp_path / "w.safetensors"
    store = os.path.join(store_dir, "mlpo", "rank-0")
    r = subprocess.run([mlpo_cli, "export", store, str(out), "--tag",
                        sd["mlpo"]["tag"], "--moments", "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tensors, meta = read_safetensors(out)
    assert meta["mlpo_step"] == "3"
    ref = mt.export_state_dict(sd)
    names = [n for n, _ in model.named_parameters()]
    assert set(tensors) == set(names) | {n + ".exp_avg" for n in names} | \
        {n + ".exp_avg_sq" for n in names}
    index = {n: i for i, n in enumerate(ref["param_names"])}
    for name, p in model.named_parameters():
        i = index[name]
        assert tensors[name].shape == tuple(p.shape)
        # fp32 masters equal the model's fp32 parameters
        assert np.array_equal(tensors[name], p.detach().numpy())
        assert np.array_equal(tensors[name + ".exp_avg"],
                              ref["state"][i]["exp_avg"].numpy())
        assert np.array_equal(tensors[name + ".exp_avg_sq"],
                              ref["state"][i]["exp_avg_sq"].numpy())
    # A missing tag is an error naming it; nothing is written.
    r = subprocess.run([mlpo_cli, "export", store, str(tmp_path / "x"),
                        "--tag", "nosuch"], capture_output=True, text=True)
    assert r.returncode == 1 and "nosuch" in r.stderr
    assert not (tmp_path / "x").exists()
    # Issue 17, reproduction 4: outputs never land on state. Over the
    # store's own segment file, into its index, or beside its descriptor:
    # refused, even with --force, and the store still opens.
    seg = os.path.join(store, "seg-000000")
    before = open(seg, "rb").read(4096)
    for target in (seg, os.path.join(store, "meta", "x.safetensors"),
                   os.path.join(store, "new.safetensors")):
        for force in ([], ["--force"]):
            r = subprocess.run([mlpo_cli, "export", store, target] + force,
                               capture_output=True, text=True)
            assert r.returncode == 1, (target, r.stdout)
            assert "inside the store directory" in r.stderr, r.stderr
    assert open(seg, "rb").read(4096) == before
    assert not os.path.exists(os.path.join(store, "new.safetensors"))
    # An existing file is kept unless --force.
    mine = tmp_path / "mine.txt"
    mine.write_text("keep me")
    r = subprocess.run([mlpo_cli, "export", store, str(mine)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "--force" in r.stderr
    assert mine.read_text() == "keep me"
    r = subprocess.run([mlpo_cli, "export", store, str(mine), "--force"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert read_safetensors(mine)[0].keys() == {n for n, _ in
                                                model.named_parameters()}
    r = subprocess.run([mlpo_cli, "verify", store], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_rollback_and_train_on_keeps_every_checkpoint(store_dir):
    """Issue 17, reproduction 1: train to 10 and 20 (a dict each), load the
    dict of step 10, train to 30. The step-20 dict still loads the first
    lineage bit for bit, the new lineage's dict at step 20 names a tag of
    its own, and a fresh optimizer on the store opens and loads them all."""
    model = make_model()
    opt = mt.AdamW(model.parameters(), lr=1e-2, store=store_dir)
    train(model, opt, range(10))
    sd10 = opt.state_dict()
    train(model, opt, range(10, 20))
    sd20 = opt.state_dict()
    at20 = [p.detach().clone() for p in model.parameters()]
    opt.load_state_dict(sd10)
    # Another lineage: other batches than the first time.
    train(model, opt, range(100, 110))
    sd20b = opt.state_dict()
    assert sd20b["mlpo"]["tag"] != sd20["mlpo"]["tag"]
    at20b = [p.detach().clone() for p in model.parameters()]
    assert not all(torch.equal(a, b) for a, b in zip(at20, at20b))
    train(model, opt, range(110, 120))
    opt.state_dict()  # step 30
    opt.load_state_dict(sd20)
    assert opt.step_count == 20
    assert all(torch.equal(a, b) for a, b in zip(at20, model.parameters()))
    opt.load_state_dict(sd20b)
    assert all(torch.equal(a, b) for a, b in zip(at20b, model.parameters()))
    # The same dict asked for twice names the same tag.
    assert opt.state_dict()["mlpo"]["tag"] == sd20b["mlpo"]["tag"]
    opt.close()
    model2 = make_model()
    opt2 = mt.AdamW(model2.parameters(), lr=1e-2, store=store_dir)
    opt2.load_state_dict(sd20)
    assert all(torch.equal(a, b) for a, b in zip(at20, model2.parameters()))


def test_moving_a_bf16_models_state_keeps_its_fp32_masters(tmp_path):
    """The documented way to move state to another store: export it, load
    it into an optimizer on the new store. A bf16 model's weights are its
    masters rounded; loading took them as masters and dropped the
    exported fp32 ones (5.4e-4 off after 5 steps, silently). The moved
    state now trains on bit-identically to the old store's."""
    model = make_model(dtype=torch.bfloat16)
    old = mt.AdamW(model.named_parameters(), lr=1e-2,
                   store=str(tmp_path / "old"))

    def steps(m, o, start, n):
        for s in range(start, start + n):
            o.zero_grad()
            loss_of(m, s, dtype=torch.bfloat16).backward()
            o.step()

    steps(model, old, 0, 5)
    moved = mt.export_state_dict(old.state_dict())
    twin = make_model(dtype=torch.bfloat16)
    twin.load_state_dict(model.state_dict())
    new = mt.AdamW(twin.named_parameters(), lr=1e-2,
                   store=str(tmp_path / "new"))
    new.load_state_dict(moved)
    steps(model, old, 5, 5)
    steps(twin, new, 5, 5)
    a = mt.export_state_dict(old.state_dict())
    b = mt.export_state_dict(new.state_dict())
    for n in a["master_params"]:
        assert torch.equal(a["master_params"][n], b["master_params"][n]), n
    for i in a["state"]:
        for k in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(a["state"][i][k], b["state"][i][k]), (i, k)
    assert_params_are(twin, dict(model.named_parameters()))
    # A dict whose masters do not fit the model is refused, nothing moved.
    bad = dict(moved, master_params=dict(moved["master_params"]))
    bad["master_params"]["0.weight"] = torch.zeros(3)
    with pytest.raises(ValueError, match="master_params"):
        new.load_state_dict(bad)
    assert new.step_count == 10


@pytest.mark.parametrize("saved_named,loaded_named",
                         [(True, False), (False, True)])
def test_named_and_unnamed_dicts_load_into_each_other(store_dir, saved_named,
                                                      loaded_named):
    """As torch.optim: a dict of an optimizer built from named_parameters()
    loads into one built from parameters() and the reverse, by position;
    training on matches torch.optim trained without the break."""
    model = make_model()
    ref_model = make_model()
    ref = torch.optim.AdamW(two_groups(ref_model), lr=1e-2)
    opt = mt.AdamW(two_groups(model, named=saved_named), lr=1e-2,
                   store=store_dir)
    train(model, opt, range(3))
    train(ref_model, ref, range(3))
    sd = opt.state_dict()
    opt.close()
    again = mt.AdamW(two_groups(model, named=loaded_named), lr=1e-2,
                     store=store_dir)
    again.load_state_dict(sd)
    assert again.step_count == 3
    train(model, again, range(3, 6))
    train(ref_model, ref, range(3, 6))
    assert max_diff(model, ref_model) <= 1e-6
    again.close()


def test_named_dicts_of_other_names_are_refused(store_dir):
    """Names are compared where both sides have them: the same shapes
    under other names are another model."""
    model = make_model()
    opt = mt.AdamW(two_groups(model, named=True), lr=1e-2, store=store_dir)
    train(model, opt, range(2))
    sd = opt.state_dict()
    opt.close()
    renamed = [{**g, "params": [("x." + n, p) for n, p in g["params"]]}
               for g in two_groups(model, named=True)]
    other = mt.AdamW(renamed, lr=1e-2, store=store_dir)
    with pytest.raises(ValueError, match="another model"):
        other.load_state_dict(sd)
    assert other.step_count == 0
    other.close()
