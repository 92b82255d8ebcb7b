"""examples/train_gpt.py as a user runs it: --compare trains mlpo and
torch.optim.AdamW from the same model on the same batches (their losses
agree step by step), --summary carries the figures the GPU check reports,
and bad arguments (a device that is not there, a model that cannot be
built) fail with a message before any work."""
import json
import os
import subprocess
import sys

import pytest
import torch

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                       "train_gpt.py")
TINY = ["--d-model", "64", "--layers", "2", "--heads", "2", "--ctx", "64",
        "--batch", "8", "--threads", "1"]


def run(tmp_path, *args):
    return subprocess.run(
        [sys.executable, EXAMPLE, "--tiers",
         f"{tmp_path}/nvme,{tmp_path}/pfs", "--ckpt", f"{tmp_path}/ck.pt",
         *args], capture_output=True, text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)


def test_compare_trains_both_optimizers_alike_and_reports(tmp_path):
    r = run(tmp_path, "--compare", "--steps", "6", "--seconds", "0",
            "--summary", f"{tmp_path}/s.json", *TINY)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.load(open(tmp_path / "s.json"))
    mlpo_run, torch_run = s["runs"]
    assert (mlpo_run["optimizer"], torch_run["optimizer"]) == ("mlpo", "torch")
    for run_ in s["runs"]:
        assert run_["steps"] == 6 and len(run_["losses"]) == 6
        assert run_["tokens_per_s"] > 0
        assert 0 < run_["opt_share"] < 1
        assert run_["losses"][-1] < run_["losses"][0]
    # The same AdamW from the same start: the losses agree step by step.
    assert s["compare"]["max_loss_diff"] < 1e-4, s["compare"]
    # mlpo's bytes per tier: the DRAM tier served every checkout here.
    assert mlpo_run["tiers"]["DRAM tier"]["read"] > 0
    assert "tokens/s ratio" in r.stdout
    assert not os.path.exists(tmp_path / "ck.pt")  # --compare: none


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_cuda_without_a_gpu_says_so(tmp_path):
    r = run(tmp_path, "--device", "cuda", "--steps", "1", *TINY)
    assert r.returncode != 0
    assert "sees no CUDA device" in r.stderr, r.stderr


@pytest.mark.parametrize("args, says", [
    (["--d-model", "65", "--heads", "2"], "not a multiple of --heads"),
    (["--device", "tpu"], "--device tpu"),
    (["--batch", "0"], "--batch must be at least 1"),
    (["--compare", "--resume"], "does not take --resume"),
    (["--summary", "/proc/no/such/s.json"], "--summary /proc/no/such"),
])
def test_bad_arguments_fail_before_any_work(tmp_path, args, says):
    r = run(tmp_path, "--steps", "1", *args)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "nvme")


def test_a_copied_store_is_refused_with_a_message_not_a_traceback(tmp_path):
    first = tmp_path / "first"
    r = run(first, "--steps", "2", "--seconds", "0", "--ckpt-every", "0",
            *TINY)
    assert r.returncode == 0, r.stderr[-3000:]
    import shutil
    shutil.copytree(first, tmp_path / "copy")
    r = run(tmp_path / "copy", "--steps", "2", "--seconds", "0", *TINY)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "moved or copied" in r.stderr and "mlpo relocate" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_rerun_says_it_replaces_the_last_checkpoint_and_resume_goes_on(
        tmp_path):
    """Run twice as a user does: the second run starts at step 0 and says
    that its first checkpoint replaces the first run's (and how to go on
    instead); --resume then continues from the file. Run without
    PYTHONPATH, as from a checkout: the script finds the build tree's
    package (MLPO_BUILD_DIR, as conftest's)."""
    from conftest import BUILD
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", MLPO_BUILD_DIR=BUILD)

    def go(*args):
        return subprocess.run(
            [sys.executable, EXAMPLE, "--tiers",
             f"{tmp_path}/nvme,{tmp_path}/pfs", "--ckpt",
             f"{tmp_path}/ck.pt", "--seconds", "0", "--ckpt-every", "2",
             *TINY, *args], capture_output=True, text=True, env=env,
            cwd=str(tmp_path), timeout=300)

    r = go("--steps", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "replaced" not in r.stdout
    assert torch.load(tmp_path / "ck.pt")["step"] == 2
    r = go("--steps", "4")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "starting at step 0" in r.stdout and "--resume" in r.stdout
    assert torch.load(tmp_path / "ck.pt")["step"] == 4
    r = go("--steps", "6", "--resume")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resumed at step 4" in r.stdout, r.stdout
    assert "replaced" not in r.stdout
