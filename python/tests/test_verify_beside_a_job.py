"""`mlpo verify --deep` run again and again beside a training job that
tags every step (each tag replaces the index backups): a reader never
calls a healthy store damaged. The backup it reads may be renamed away
and deleted under it by the next tag; it reads the new one instead of
reporting BAD BACKUP (11 of 593 runs did, with a tag every 2 steps).
MLPO_VERIFY_BESIDE_RUNS verifies (default 12)."""
import json
import os
import subprocess
import sys

import pytest

RUNS = int(os.environ.get("MLPO_VERIFY_BESIDE_RUNS", "12"))

JOB = r"""
import sys, torch
sys.path[:0] = sys.argv[1:3]
import mlpo.torch as mt
from helpers import make_model, loss_of
model = make_model()
opt = mt.AdamW(model.parameters(), lr=1e-2, store=sys.argv[3],
               durability="step", keep_checkpoints=3)
s = 0
while True:
    opt.zero_grad()
    loss_of(model, s).backward()
    opt.step()
    opt.state_dict()  # a tag, and new index backups
    s += 1
    if s == 3:
        print("tagging", flush=True)
"""


def test_verify_deep_beside_a_job_that_tags_every_step(
        tmp_path, build_python_path, mlpo_cli):
    store = str(tmp_path / "s")
    tests = os.path.dirname(os.path.abspath(__file__))
    job = subprocess.Popen([sys.executable, "-c", JOB, build_python_path,
                            tests, store], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "tagging", job.stderr.read()
        for k in range(RUNS):
            r = subprocess.run([mlpo_cli, "verify", "--deep", "--json",
                                store], capture_output=True, text=True,
                               timeout=120)
            assert r.stdout, (k, r.returncode, r.stderr)
            rep = json.loads(r.stdout)
            assert rep["backup_problems"] == [], (k, rep["backup_problems"])
            assert rep["index_problems"] == [], (k, rep["index_problems"])
            assert rep["ok"], (k, rep)
            assert job.poll() is None, job.stderr.read()
    finally:
        job.kill()
        job.wait()
