"""A DeepSpeed user's own checkpoints into mlpo (mlpo.deepspeed): ZeRO
checkpoints made by DeepSpeed itself (its engine on the CPU, 2 gloo
ranks) loaded into mlpo.torch.AdamW in one process, which then trains on
to where DeepSpeed's own resume of the same checkpoint ends; and the bad
inputs (a checkpoint of another model, a rank's file missing) refused
naming the file, with nothing changed."""
import json
import os
import shutil

import pytest
import torch

import mlpo.deepspeed
import mlpo.torch as mt
from conftest import BUILD
from ds_helpers import LR, WD, ds_batch, ds_model
from test_distributed import launch_json

# DeepSpeed's torch AdamW and mlpo's kernel round differently (fused
# multiply-adds); the parameters move by ~5e-2 in these steps.
TOL = 1e-5
SAVE_AT, STOP = 3, 6


def make(tmp_path, stage):
    """DeepSpeed on 2 ranks: the checkpoint at SAVE_AT and the parameters
    its own resume reaches at STOP."""
    return launch_json(tmp_path, os.path.join(BUILD, "python"), 2,
                       tmp_path / f"ds{stage}.json", worker="ds_worker.py",
                       timeout=300, stage=stage, ckpt=tmp_path / "ck",
                       save_at=SAVE_AT, stop=STOP)


def continue_in_mlpo(tmp_path, seed=7, **kw):
    model = ds_model(seed)
    opt = mt.AdamW(model.named_parameters(), lr=LR, weight_decay=WD,
                   store=str(tmp_path / "s"))
    try:
        step = mlpo.deepspeed.load_checkpoint(opt, str(tmp_path / "ck"), **kw)
        assert step == SAVE_AT and opt.step_count == SAVE_AT
        for s in range(SAVE_AT, STOP):
            x, y = ds_batch(s)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    finally:
        opt.close()
    return {n: p.detach().reshape(-1).tolist()
            for n, p in model.named_parameters()}


def diff(ds, mine):
    return max(abs(a - b) for n in mine
               for a, b in zip(ds["params"][n], mine[n]))


@pytest.mark.parametrize("stage", [2, 3] + (
    [1] if os.environ.get("MLPO_SLOW") else []))
def test_zero_checkpoint_continues_where_deepspeed_resumes(tmp_path, stage):
    ds = make(tmp_path, stage)
    mine = continue_in_mlpo(tmp_path, model=ds_model(0) if stage < 3
                            else None)
    assert diff(ds, mine) <= TOL
    # (the model it started from, seed 7, is far from there)
    far = {n: p.detach().reshape(-1).tolist()
           for n, p in ds_model(7).named_parameters()}
    assert diff(ds, far) > 100 * TOL


def test_bad_deepspeed_checkpoints_are_refused_and_change_nothing(
        tmp_path):
    make(tmp_path, 2)
    # Another model: a layer of other width.
    other = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 9), torch.nn.Tanh(),
                                torch.nn.Linear(9, 4))
    opt = mt.AdamW(other.named_parameters(), lr=LR,
                   store=str(tmp_path / "s"))
    before = [p.detach().clone() for p in other.parameters()]
    with pytest.raises(ValueError, match="another model"):
        mlpo.deepspeed.load_checkpoint(opt, str(tmp_path / "ck"))
    assert opt.step_count == 0
    assert all(torch.equal(a, b) for a, b in zip(before, other.parameters()))
    opt.close()
    # A rank's file missing.
    tag = (tmp_path / "ck" / "latest").read_text().strip()
    rank1 = tmp_path / "ck" / tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    shutil.move(rank1, tmp_path / "moved.pt")
    model = ds_model(7)
    opt = mt.AdamW(model.named_parameters(), lr=LR,
                   store=str(tmp_path / "s2"))
    with pytest.raises(FileNotFoundError, match="rank\\(s\\) 1"):
        mlpo.deepspeed.load_checkpoint(opt, str(tmp_path / "ck"))
    assert opt.step_count == 0
    # No checkpoint there at all; not an mlpo optimizer.
    with pytest.raises(FileNotFoundError, match="latest"):
        mlpo.deepspeed.load_checkpoint(opt, str(tmp_path / "nowhere"))
    with pytest.raises(TypeError, match="mlpo.torch optimizer"):
        mlpo.deepspeed.load_checkpoint(
            torch.optim.AdamW(model.parameters()), str(tmp_path / "ck"))
    opt.close()
