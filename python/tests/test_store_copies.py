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
from helpers import make_model, loss_of


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
        for n, p in m.named_parameters():
            assert torch.equal(p, w[n]), n
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
    for n, p in m.named_parameters():
        assert torch.equal(p, want[0][n]), n
    o.close()
