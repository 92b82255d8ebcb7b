"""A store copied with hard links (`cp -al`, `rsync --link-dest`), as a user
makes a cheap snapshot of the adapter's store= root: the store writes its
segments and seal in place, so neither copy may be written while they are
shared. Both optimizers of the root are refused, naming `mlpo unshare`;
`mlpo unshare ROOT --all` ends it; each resumes exactly; the copy,
relocated, trains on without touching the original."""
import json
import subprocess

import pytest
import torch

import mlpo.torch as mt
from helpers import make_model, loss_of, assert_params_are


def train(model, opt, steps, first=0):
    for s in range(first, first + steps):
        opt.zero_grad()
        loss_of(model, s).backward()
        opt.step()


def params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def model_of(kind, seed):
    """Two models of other shapes: each gets a namespace of its own."""
    if kind == 0:
        return make_model(seed=seed)
    torch.manual_seed(seed)
    return torch.nn.Linear(16, 8)


def two_optimizers(root):
    """Two models on one store root (namespaces mlpo and mlpo.2), 3 steps
    each, closed; their parameters."""
    out = []
    for kind in (0, 1):
        m = model_of(kind, seed=0)
        o = mt.AdamW(m.named_parameters(), lr=1e-2, store=root)
        train(m, o, 3)
        o.state_dict()
        o.close()
        out.append(params(m))
    return out


def resume(root, kind):
    m = model_of(kind, seed=10)  # other weights: resuming must load
    o = mt.AdamW(m.named_parameters(), lr=1e-2, store=root, resume=True)
    return m, o


def test_a_hard_linked_copy_is_refused_until_unshared(tmp_path, mlpo_cli):
    root = str(tmp_path / "run")
    want = two_optimizers(root)
    snap = str(tmp_path / "snap")
    subprocess.run(["cp", "-al", root, snap], check=True)

    m = make_model(seed=10)
    with pytest.raises(RuntimeError, match="hard links") as e:
        mt.AdamW(m.named_parameters(), lr=1e-2, store=root, resume=True)
    assert "mlpo unshare" in str(e.value) and "Nothing was changed" in \
        str(e.value)

    r = subprocess.run([mlpo_cli, "unshare", root], capture_output=True,
                       text=True)
    assert r.returncode == 1 and "--all" in r.stderr, r.stderr
    r = subprocess.run([mlpo_cli, "unshare", root, "--all", "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    stores = json.loads(r.stdout)["stores"]
    assert len(stores) == 2 and all(s["files"] for s in stores), stores

    # Each optimizer resumes exactly (the model-match picks its namespace)
    # and trains on.
    for kind, w in enumerate(want):
        m, o = resume(root, kind)
        assert_params_are(m, w)
        train(m, o, 2, first=3)
        o.close()

    # The copy: nothing shared any more, so relocating copies nothing; it
    # resumes to the snapshot's state, not to the original's steps 4-5.
    r = subprocess.run([mlpo_cli, "relocate", snap, "--all", "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert all(s["copy"] and not s["unshared_files"]
               for s in json.loads(r.stdout)["stores"]), r.stdout
    m, o = resume(snap, 0)
    assert_params_are(m, want[0])
    o.close()


def test_a_dict_of_the_original_loads_into_a_relocated_copy(tmp_path,
                                                            mlpo_cli):
    """Forking an experiment: `cp -a` the store, `mlpo relocate` the copy
    (a new identity), load a checkpoint file the original run saved. The
    copy holds that checkpoint, so it loads and trains on exactly as the
    original would; a dict whose tag the copy does not hold as the same
    versions is refused, changing nothing."""
    root, snap = str(tmp_path / "run"), str(tmp_path / "fork")
    m = make_model(seed=0)
    o = mt.AdamW(m.named_parameters(), lr=1e-2, store=root)
    train(m, o, 2)
    d2 = o.state_dict()
    o.close()
    subprocess.run(["cp", "-a", root, snap], check=True)
    r = subprocess.run([mlpo_cli, "relocate", snap], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    m, o = make_model(seed=0), None
    o = mt.AdamW(m.named_parameters(), lr=1e-2, store=root, resume=True)
    train(m, o, 1, first=2)
    d3 = o.state_dict()  # a tag the copy never saw
    o.close()
    # What the original gives: d2 loaded there, two more steps.
    ref = make_model(seed=10)
    o = mt.AdamW(ref.named_parameters(), lr=1e-2, store=root)
    o.load_state_dict(d2)
    train(ref, o, 2, first=2)
    o.close()

    r = subprocess.run([mlpo_cli, "inspect", snap, "--json"],
                       capture_output=True, text=True, check=True)
    info = json.loads(r.stdout)
    assert info["copied_from"] == d2["mlpo"]["store_uuids"], info
    assert info["uuid"] not in d2["mlpo"]["store_uuids"]

    m = make_model(seed=10)
    o = mt.AdamW(m.named_parameters(), lr=1e-2, store=snap)
    with pytest.raises(ValueError, match="no tag 'step-3'.*after the copy"):
        o.load_state_dict(d3)
    old = {k: v for k, v in d2["mlpo"].items() if k != "tag_ids"}
    with pytest.raises(ValueError, match="by name only"):
        o.load_state_dict({**d2, "mlpo": old})
    o.load_state_dict(d2)
    train(m, o, 2, first=2)
    assert_params_are(m, ref.state_dict())
    o.close()

    # The copy's step-2 dropped and its name taken by another run there:
    # the original's dict names other versions and is refused.
    subprocess.run([mlpo_cli, "drop-tag", snap, "step-2"], check=True,
                   capture_output=True)
    m = make_model(seed=20)
    o = mt.AdamW(m.named_parameters(), lr=1e-2, store=snap)
    train(m, o, 2)
    assert o.state_dict()["mlpo"]["tag"] == "step-2"
    before = params(m)
    with pytest.raises(ValueError, match="not the checkpoint.*after the copy"):
        o.load_state_dict(d2)
    assert all(torch.equal(p, before[n]) for n, p in m.named_parameters())
    o.close()

    # A store that is no copy of the original still refuses its dicts.
    m = make_model(seed=0)
    o = mt.AdamW(m.named_parameters(), lr=1e-2, store=str(tmp_path / "x"))
    with pytest.raises(ValueError, match="from another store"):
        o.load_state_dict(d2)
    o.close()
