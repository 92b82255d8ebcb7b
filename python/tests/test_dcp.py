"""torch.distributed.checkpoint (DCP) with mlpo.torch optimizers, the way
torchtitan checkpoints: get_state_dict / set_state_dict around dcp.save /
dcp.load (and dcp.async_save). The optimizer's part of a DCP checkpoint
is a reference to a tag of the store (no copy of the state): resumed in
one process, under mlpo's own data parallel, under FSDP (fully_shard),
and into another number of ranks, each against the run that went on
without stopping."""
import json
import os
import shutil

import pytest
import torch
from torch.distributed.checkpoint.state_dict import (
    get_optimizer_state_dict, set_optimizer_state_dict)

import mlpo.torch as mt
from conftest import BUILD
from helpers import dcp_load, dcp_save
from test_distributed import launch_json, params_close
from test_fsdp import needs_cpu_fsdp

pytestmark = pytest.mark.filterwarnings(
    "ignore:torch.distributed is disabled")


def model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 2))


def groups(m):
    named = list(m.named_parameters())
    return [{"params": [x for x in named if x[0].endswith("weight")],
             "weight_decay": 0.1},
            {"params": [x for x in named if x[0].endswith("bias")],
             "weight_decay": 0.0}]


def train(m, opt, start, stop):
    for s in range(start, stop):
        g = torch.Generator().manual_seed(s)
        m(torch.randn(5, 4, generator=g)).pow(2).sum().backward()
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("how", ["sync", "async"])
def test_one_process_resumes_exactly_and_copies_nothing(tmp_path, how):
    m = model()
    opt = mt.AdamW(groups(m), lr=0.05, store=str(tmp_path / "s"))
    train(m, opt, 0, 3)
    osd = get_optimizer_state_dict(m, opt)
    # torch.optim's shape, keyed by parameter name; no tensor in it
    assert sorted(osd["state"]) == sorted(n for n, _ in m.named_parameters())
    assert not any(isinstance(v, torch.Tensor) for s in osd["state"].values()
                   for v in s.values())
    dcp_save(tmp_path / "ck", m, opt, how)
    size = sum(os.path.getsize(os.path.join(r, f))
               for r, _, fs in os.walk(tmp_path / "ck") for f in fs)
    train(m, opt, 3, 6)
    want = [p.detach().clone() for p in m.parameters()]
    opt.close()
    # Another model's seed and a fresh optimizer on the same store.
    m2 = model(7)
    o2 = mt.AdamW(groups(m2), lr=0.05, store=str(tmp_path / "s"))
    dcp_load(tmp_path / "ck", m2, o2)
    assert o2.step_count == 3
    train(m2, o2, 3, 6)
    assert all(torch.equal(a, b) for a, b in zip(want, m2.parameters()))
    o2.close()
    # The checkpoint holds the model (160 B of parameters here) and a
    # reference: far less than the optimizer state would be in a copy.
    assert size < 64 * 1024


def test_matches_torch_optim_through_dcp(tmp_path):
    """The same save/load with torch.optim.AdamW: mlpo's resumed run ends
    within 1e-6 of torch.optim's resumed run."""
    runs = {}
    for kind in ("torch", "mlpo"):
        m = model()
        opt = torch.optim.AdamW(groups(m), lr=0.05) if kind == "torch" \
            else mt.AdamW(groups(m), lr=0.05, store=str(tmp_path / "s"))
        train(m, opt, 0, 3)
        dcp_save(tmp_path / kind, m, opt)
        if kind == "mlpo":
            opt.close()
        m2 = model(7)
        o2 = torch.optim.AdamW(groups(m2), lr=0.05) if kind == "torch" \
            else mt.AdamW(groups(m2), lr=0.05, store=str(tmp_path / "s"))
        dcp_load(tmp_path / kind, m2, o2)
        train(m2, o2, 3, 6)
        runs[kind] = [p.detach().clone() for p in m2.parameters()]
        if kind == "mlpo":
            o2.close()
    assert max((a - b).abs().max().item()
               for a, b in zip(runs["torch"], runs["mlpo"])) <= 1e-6


def test_a_dropped_tag_or_a_missing_store_is_a_clear_error(tmp_path):
    m = model()
    opt = mt.AdamW(groups(m), lr=0.05, store=str(tmp_path / "s"))
    train(m, opt, 0, 2)
    dcp_save(tmp_path / "ck", m, opt)
    tag = get_optimizer_state_dict(m, opt)["param_groups"][0]["mlpo"]
    tag = json.loads(tag)["tag"]
    train(m, opt, 2, 3)
    opt._engine.drop_tag(tag)
    with pytest.raises(ValueError, match=tag):
        dcp_load(tmp_path / "ck", m, opt)
    assert opt.step_count == 3  # nothing changed
    opt.close()
    # The store gone: the error names where the checkpoint was written.
    m3 = model()
    o3 = mt.AdamW(groups(m3), lr=0.05, store=str(tmp_path / "s3"))
    train(m3, o3, 0, 2)
    dcp_save(tmp_path / "ck3", m3, o3)
    o3.close()
    shutil.rmtree(tmp_path / "s3")
    m4 = model()
    o4 = mt.AdamW(groups(m4), lr=0.05, store=str(tmp_path / "s4"))
    with pytest.raises((ValueError, FileNotFoundError),
                       match=str(tmp_path / "s3")):
        dcp_load(tmp_path / "ck3", m4, o4)
    # (get_state_dict, the template, made the fresh optimizer's state as
    # torch does: one step with zero gradients and lr 0; the failed load
    # changed nothing after it)
    assert o4.step_count == 1
    o4.close()


def test_torch_optim_refuses_a_plain_mlpo_dict_still(tmp_path):
    """Only DCP's helpers get the FQN-shaped dict: the dict state_dict()
    returns to a script stays one torch.optim refuses."""
    m = model()
    opt = mt.AdamW(groups(m), lr=0.05, store=str(tmp_path / "s"))
    train(m, opt, 0, 1)
    sd = opt.state_dict()
    opt.close()
    with pytest.raises(ValueError):
        torch.optim.AdamW(groups(model())).load_state_dict(sd)
    # ... and a DCP-shaped dict into torch.optim through DCP's helper
    # fails loudly (its states have no 'step') rather than starting from
    # nothing.
    m2 = model()
    o2 = mt.AdamW(groups(m2), lr=0.05, store=str(tmp_path / "s"))
    osd = get_optimizer_state_dict(m2, o2)
    o2.close()
    m5 = model()
    t5 = torch.optim.AdamW(groups(m5), lr=0.05)
    with pytest.raises(KeyError, match="step"):
        set_optimizer_state_dict(m5, t5, osd)


def _run(tmp_path, worker, world, name, **kw):
    return launch_json(tmp_path, os.path.join(BUILD, "python"), world,
                       tmp_path / f"{name}.json", worker=worker, **kw)


def test_data_parallel_resumes_on_two_ranks_and_on_one(tmp_path):
    """mlpo's own data parallel (2 gloo ranks, each a store of its own):
    get_state_dict on every rank, dcp.save; loaded on 2 ranks exactly and
    in one process (the reference reshards 2 -> 1) within 1e-6."""
    full = _run(tmp_path, "dist_worker.py", 2, "full", store=tmp_path / "s",
                save_at=4, save=tmp_path / "ck", dcp="sync", stop=8)
    again = _run(tmp_path, "dist_worker.py", 2, "again",
                 store=tmp_path / "s", load=tmp_path / "ck", dcp="sync",
                 start=4, stop=8)
    assert again["params"] == full["params"]
    one = _run(tmp_path, "dist_worker.py", 1, "one", store=tmp_path / "s1",
               load=tmp_path / "ck", dcp="sync", start=4, stop=8)
    assert params_close(one, full) <= 1e-6


@needs_cpu_fsdp
def test_fsdp_resumes_on_two_ranks_and_on_one(tmp_path):
    """FSDP (fully_shard on 2 gloo ranks): DCP saves the sharded model and
    the optimizer's reference (dcp.async_save); loaded on 2 ranks exactly,
    and in one process without FSDP within 1e-6."""
    full = _run(tmp_path, "fsdp_worker.py", 2, "full", store=tmp_path / "s",
                save_at=4, save=tmp_path / "ck", dcp="async")
    again = _run(tmp_path, "fsdp_worker.py", 2, "again",
                 store=tmp_path / "s", load=tmp_path / "ck", dcp="sync",
                 start=4)
    assert again["params"] == full["params"]
    one = _run(tmp_path, "fsdp_worker.py", 1, "one", store=tmp_path / "s1",
               load=tmp_path / "ck", dcp="sync", start=4)
    assert params_close(one, full) <= 1e-6


def test_copy_mode_stands_alone_and_a_torch_optim_dcp_checkpoint_loads(
        tmp_path):
    """dcp_state="copy": the DCP checkpoint holds the state itself; with
    the store deleted it still resumes exactly. A DCP checkpoint a
    torch.optim.AdamW wrote continues under mlpo within 1e-6 of
    torch.optim's own resume."""
    m = model()
    opt = mt.AdamW(groups(m), lr=0.05, store=str(tmp_path / "s"))
    opt.dcp_state = "copy"
    train(m, opt, 0, 3)
    osd = get_optimizer_state_dict(m, opt)
    assert isinstance(osd["state"]["0.weight"]["exp_avg"], torch.Tensor)
    dcp_save(tmp_path / "ck", m, opt)
    train(m, opt, 3, 6)
    want = [p.detach().clone() for p in m.parameters()]
    opt.close()
    shutil.rmtree(tmp_path / "s")
    m2 = model(7)
    o2 = mt.AdamW(groups(m2), lr=0.05, store=str(tmp_path / "s2"))
    o2.dcp_state = "copy"  # (the template's shape: the checkpoint's)
    dcp_load(tmp_path / "ck", m2, o2)
    assert o2.step_count == 3
    train(m2, o2, 3, 6)
    assert all(torch.equal(a, b) for a, b in zip(want, m2.parameters()))
    o2.close()
    # torch.optim's own DCP checkpoint
    t = model()
    topt = torch.optim.AdamW(groups(t), lr=0.05)
    train(t, topt, 0, 3)
    dcp_save(tmp_path / "tck", t, topt)
    train(t, topt, 3, 6)
    m3 = model(7)
    o3 = mt.AdamW(groups(m3), lr=0.05, store=str(tmp_path / "s3"))
    o3.dcp_state = "copy"
    dcp_load(tmp_path / "tck", m3, o3)
    train(m3, o3, 3, 6)
    assert max((a - b).abs().max().item()
               for a, b in zip(t.parameters(), m3.parameters())) <= 1e-6
    o3.dcp_state = "neither"
    with pytest.raises(ValueError, match="dcp_state"):
        get_optimizer_state_dict(m3, o3)
    o3.close()
