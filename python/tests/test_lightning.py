"""PyTorch Lightning as a client of mlpo.torch: a LightningModule whose
configure_optimizers returns mlpo.torch.AdamW, trained side by side with
torch.optim.AdamW from the same seed; ModelCheckpoint's files resumed with
fit(ckpt_path=) bit-identical to an uninterrupted run; a torch.optim
run's checkpoint continued by mlpo; save_top_k with
mlpo.lightning.StoreCheckpoints leaving the store's tags exactly the
files Lightning kept; the DDP strategy on 2 gloo ranks, resumed on 2
ranks and (slow) on 1 process; ModelParallelStrategy (FSDP2) on 2 ranks,
its DCP checkpoints resumed exactly."""
import os

import pytest
import torch
from lightning.pytorch.callbacks import Callback

import mlpo.lightning
import mlpo.torch as mt
from conftest import BUILD
from lightning_helpers import TOL, Net, ckpts, fit, max_diff
from test_distributed import launch_json, params_close
from test_fsdp import needs_cpu_fsdp

BUILD_PYTHON = os.path.join(BUILD, "python")


@pytest.mark.parametrize("kw", [
    {},
    # Lightning's own clipping (clip_grad_norm_ on the parameters) and
    # gradient accumulation over 2 batches.
    dict(gradient_clip_val=0.05, accumulate_grad_batches=2),
], ids=["plain", "clip-accumulate"])
def test_fit_matches_torch_and_resumes_exactly(tmp_path, kw):
    # batch 16: 4 steps an epoch, so the step-4 checkpoint ends an epoch
    # (Lightning restarts a cut epoch from its first batch)
    steps = 4 if not kw else 2
    ref, _ = fit(tmp_path / "r", "torch", every=steps, batch=16,
                 trainer_kw=kw)
    got, _ = fit(tmp_path / "m", store=tmp_path / "s", every=steps,
                 batch=16, trainer_kw=kw)
    assert max_diff(ref, got) <= TOL
    init = {n: p.detach() for n, p in Net("torch").named_parameters()}
    assert max_diff(ref, init) > 100 * TOL  # (training moved them)
    first = ckpts(tmp_path / "m")[0]
    assert os.path.basename(first) == f"step={steps}.ckpt"
    # Resumed from it in a new Trainer with a model of another seed (the
    # checkpoint gives the model back too): exactly the same parameters.
    again, _ = fit(tmp_path / "m2", store=tmp_path / "s", every=steps,
                   batch=16, seed=5, ckpt_path=first, trainer_kw=kw)
    assert max_diff(again, got) == 0.0


def test_a_torch_optim_checkpoint_continues_under_mlpo(tmp_path):
    """A Lightning checkpoint written with torch.optim.AdamW, resumed with
    mlpo.torch.AdamW (its moments and steps imported): where torch.optim's
    own resume of that file ends."""
    fit(tmp_path / "r", "torch", every=4, batch=16)
    first = ckpts(tmp_path / "r")[0]
    ref, _ = fit(tmp_path / "r2", "torch", batch=16, seed=5, ckpt_path=first)
    got, _ = fit(tmp_path / "m", store=tmp_path / "s", batch=16, seed=5,
                 ckpt_path=first)
    assert max_diff(ref, got) <= TOL


def test_save_top_k_and_the_store_follow_each_other(tmp_path):
    """save_top_k=2 of a checkpoint every step: with StoreCheckpoints the
    store keeps exactly the tags of the files left, each of those loads,
    and a dict of a deleted file says why it cannot. Without it every
    step's tag stays."""
    taken = []

    class Keep(Callback):
        def on_save_checkpoint(self, trainer, pl_module, checkpoint):
            taken.append(checkpoint["optimizer_states"][0])

    fit(tmp_path / "m", store=tmp_path / "s", every=1, top_k=2,
        follow=True, callbacks=[Keep()])
    files = ckpts(tmp_path / "m")
    # (a step whose loss is not among the best 2 is not saved)
    assert len(files) == 2 and len(taken) >= 4
    named = {torch.load(f, weights_only=True)["optimizer_states"][0]["mlpo"]
             ["tag"] for f in files}
    opt = Net(store=tmp_path / "s").configure_optimizers()
    try:
        steps = {t for t in opt._engine.tags() if t.startswith("step-")}
        assert steps == named
        for f in files:  # each file left loads
            opt.load_state_dict(
                torch.load(f, weights_only=True)["optimizer_states"][0])
        gone = [sd for sd in taken if sd["mlpo"]["tag"] not in named]
        assert len(gone) == len(taken) - 2
        with pytest.raises(ValueError, match="save_top_k"):
            opt.load_state_dict(gone[0])
    finally:
        opt.close()
    # The same run without the callback: every save's tag stays.
    taken.clear()
    fit(tmp_path / "n", store=tmp_path / "t", every=1, top_k=2,
        callbacks=[Keep()])
    opt = Net(store=tmp_path / "t").configure_optimizers()
    try:
        assert sorted(t for t in opt._engine.tags()
                      if t.startswith("step-")) == \
            sorted(sd["mlpo"]["tag"] for sd in taken)
        assert len(taken) > 2
    finally:
        opt.close()


def test_a_resumed_run_elsewhere_keeps_the_checkpoint_it_came_from(
        tmp_path):
    """A careless rerun: resumed from run A's file into another directory
    on the same store, with StoreCheckpoints. The callback drops only
    tags it saw taken or named there: A's files still load."""
    fit(tmp_path / "a", store=tmp_path / "s", every=4, top_k=-1, batch=16,
        follow=True)
    a_files = ckpts(tmp_path / "a")
    fit(tmp_path / "b", store=tmp_path / "s", every=2, top_k=1, batch=16,
        follow=True, ckpt_path=a_files[0], seed=5)
    opt = Net(store=tmp_path / "s").configure_optimizers()
    try:
        for f in a_files:
            opt.load_state_dict(
                torch.load(f, weights_only=True)["optimizer_states"][0])
    finally:
        opt.close()


def test_a_checkpoint_whose_store_is_gone_is_a_clear_error(tmp_path):
    fit(tmp_path / "m", store=tmp_path / "s", every=4, batch=16)
    first = ckpts(tmp_path / "m")[0]
    sd = torch.load(first, weights_only=True)["optimizer_states"][0]
    import shutil
    shutil.rmtree(tmp_path / "s")
    opt = Net(store=tmp_path / "other").configure_optimizers()
    try:
        with pytest.raises((FileNotFoundError, ValueError, RuntimeError),
                           match=str(tmp_path / "s")):
            opt.load_state_dict(sd)
        assert opt.step_count == 0  # nothing changed
    finally:
        opt.close()


def _run(tmp_path, world, name, **kw):
    return launch_json(tmp_path, BUILD_PYTHON, world,
                       tmp_path / f"{name}.json",
                       worker="lightning_worker.py", timeout=300, **kw)


def test_ddp_strategy_matches_torch_and_resumes(tmp_path):
    """Lightning's DDP strategy on 2 gloo ranks (ModelCheckpoint on rank 0
    with save_top_k=2 and StoreCheckpoints): within TOL of torch.optim, the
    store's tags those of the files kept, and the step-4 file resumed on 2
    ranks bit-identical."""
    ref = _run(tmp_path, 2, "ref", optimizer="torch", root=tmp_path / "r")
    got = _run(tmp_path, 2, "got", store=tmp_path / "s", root=tmp_path / "m")
    assert params_close(ref, got) <= TOL
    assert got["ckpts"] == ["step=4.ckpt", "step=8.ckpt"]
    assert [t for t in got["tags"] if t.startswith("step-")] == \
        ["step-4", "step-8"]
    again = _run(tmp_path, 2, "again", store=tmp_path / "s",
                 root=tmp_path / "m2", resume="first",
                 resume_root=tmp_path / "m", seed=5)
    assert params_close(again, got) == 0.0


@needs_cpu_fsdp
def test_model_parallel_strategy_fsdp2_matches_torch_and_resumes(tmp_path):
    """Lightning's ModelParallelStrategy (FSDP2: fully_shard in
    configure_model, 2 gloo ranks): its checkpoints are DCP folders, which
    get_optimizer_state_dict fills with the reference to the tag; within
    TOL of torch.optim, and the step-4 folder resumed bit-identical."""
    ref = _run(tmp_path, 2, "ref", optimizer="torch", root=tmp_path / "r",
               fsdp=1)
    got = _run(tmp_path, 2, "got", store=tmp_path / "s",
               root=tmp_path / "m", fsdp=1)
    assert params_close(ref, got) <= TOL
    assert got["ckpts"] == ["step=4.ckpt", "step=8.ckpt"]
    again = _run(tmp_path, 2, "again", store=tmp_path / "s",
                 root=tmp_path / "m2", resume="first",
                 resume_root=tmp_path / "m", seed=5, fsdp=1)
    assert params_close(again, got) == 0.0


@pytest.mark.skipif(not os.environ.get("MLPO_SLOW"),
                    reason="slow: scripts/test.sh --slow runs it")
def test_ddp_checkpoint_resumes_in_one_process(tmp_path):
    """A 2-rank DDP run's step-4 file resumed in 1 process (2 -> 1
    reshard): where torch.optim's own 2 -> 1 resume of its file ends
    (Lightning's DistributedSampler orders the samples otherwise than one
    process does, so both differ from the 2-rank run alike)."""
    _run(tmp_path, 2, "ref", optimizer="torch", root=tmp_path / "r")
    _run(tmp_path, 2, "got", store=tmp_path / "s", root=tmp_path / "m")
    one = _run(tmp_path, 1, "one", store=tmp_path / "s1",
               root=tmp_path / "m3", resume="first",
               resume_root=tmp_path / "m", seed=5, batch=16)
    t1 = _run(tmp_path, 1, "t1", optimizer="torch", root=tmp_path / "r3",
              resume="first", resume_root=tmp_path / "r", seed=5, batch=16)
    assert params_close(one, t1) <= TOL
