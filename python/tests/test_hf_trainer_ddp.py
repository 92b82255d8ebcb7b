"""transformers.Trainer under data parallel (2 gloo ranks on the CPU) with
mlpo.torch.AdamW: side by side with torch.optim.AdamW under the same
Trainer; Trainer's checkpoint (saved on rank 0 only, which
mlpo.hf.TrainerCheckpoints makes possible) resumed on 2 ranks exactly and
on 1 process; without the callback the save is a clear error, not a
hang."""
import json
import os

from conftest import BUILD
from test_distributed import launch

BUILD_PYTHON = os.path.join(BUILD, "python")

TOL = 2e-5  # see test_hf_trainer.TOL


def run(tmp_path, world, name, **kw):
    out = tmp_path / f"{name}.json"
    res = launch(tmp_path, BUILD_PYTHON, world, out,
                 worker="hf_ddp_worker.py", timeout=300, **kw)
    return res, out


def params(out):
    with open(out) as f:
        return json.load(f)


def diff(a, b):
    return max(abs(x - y) for n in a for x, y in zip(a[n], b[n]))


def ok(res):
    for rank, (code, text) in enumerate(res):
        assert code == 0, f"rank {rank}:\n" + text[-3000:]


def test_trainer_data_parallel_matches_torch_and_resumes(tmp_path):
    res, ref = run(tmp_path, 2, "ref", optimizer="torch",
                   dir=tmp_path / "ref-out")
    ok(res)
    res, full = run(tmp_path, 2, "full", store=tmp_path / "s",
                    dir=tmp_path / "out")
    ok(res)
    assert diff(params(full), params(ref)) <= TOL
    # Resume from Trainer's step-3 checkpoint on 2 ranks: exactly.
    res, again = run(tmp_path, 2, "again", store=tmp_path / "s",
                     dir=tmp_path / "out", seed=7,
                     resume=tmp_path / "out" / "checkpoint-3")
    ok(res)
    assert params(again) == params(full)
    # ... and in one process (its state dict reshards 2 -> 1).
    # (one process of batch 4 takes the samples the 2 ranks of 2 took)
    res, one = run(tmp_path, 1, "one", store=tmp_path / "s1",
                   dir=tmp_path / "out1", seed=7, batch=4,
                   resume=tmp_path / "out" / "checkpoint-3")
    ok(res)
    assert diff(params(one), params(full)) <= TOL


def test_trainer_data_parallel_updates_during_backward(tmp_path):
    """Nothing in the script but mlpo's optimizer and callback: step()
    finds the DistributedDataParallel Trainer made and hooks it
    (mlpo.torch.ddp_comm_hook), and the default's probe runs steps during
    backward (here without Trainer's clipping, which clips every step of
    this model and so pauses the speculation), with Trainer's gradient
    accumulation; the result is torch's."""
    kw = dict(max_grad_norm=0, steps=8, gas=4)  # (no_sync but the 4th)
    res, ref = run(tmp_path, 2, "ref", optimizer="torch",
                   dir=tmp_path / "ref-out", **kw)
    ok(res)
    res, got = run(tmp_path, 2, "got", store=tmp_path / "s",
                   dir=tmp_path / "out", **kw)
    ok(res)
    assert diff(params(got), params(ref)) <= TOL
    with open(f"{got}.ran") as f:
        ran = json.load(f)
    assert len(ran) == 8 and ran[2] and ran[4], ran


def test_rank0_save_without_the_callback_is_an_error(tmp_path):
    res, _ = run(tmp_path, 2, "x", store=tmp_path / "s",
                 dir=tmp_path / "out", callback=0)
    codes = [code for code, _ in res]
    assert None not in codes, "a rank hung"
    assert codes[0] != 0
    assert "mlpo.hf.TrainerCheckpoints" in res[0][1]
