"""examples/finetune_hf.py, the quick start, as a newcomer runs it: a
first run, then --resume further; Trainer's checkpoint folders and the
store's tags agree after each, and the tiers moved bytes."""
import os
import re
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                       "finetune_hf.py")


def run(tmp_path, *args):
    r = subprocess.run(
        [sys.executable, EXAMPLE, "--out", f"{tmp_path}/out", "--tiers",
         f"{tmp_path}/nvme,{tmp_path}/pfs", "--block", "32",
         "--save-steps", "3", *args], capture_output=True, text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r.stdout + r.stderr


def test_quick_start_runs_and_resumes(tmp_path):
    out = run(tmp_path, "--steps", "6")
    assert "6 steps in" in out
    assert "checkpoints ['checkpoint-3', 'checkpoint-6']" in out
    assert "the store's tags: ['step-3', 'step-6']" in out
    moved = [float(x) for x in re.findall(r"'nvme_MB': '([0-9.]+)'", out)]
    assert moved and all(x > 0 for x in moved)  # the capped tier was used
    out = run(tmp_path, "--steps", "9", "--resume")
    assert "resuming from" in out and "checkpoint-6" in out
    assert "9 steps in" in out
    assert "checkpoints ['checkpoint-6', 'checkpoint-9']" in out
    assert "the store's tags: ['step-6', 'step-9']" in out


def test_resume_without_a_checkpoint_says_so(tmp_path):
    r = subprocess.run([sys.executable, EXAMPLE, "--out", f"{tmp_path}/o",
                        "--tiers", f"{tmp_path}/a,{tmp_path}/b", "--resume"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert "no checkpoint folder under" in r.stderr
