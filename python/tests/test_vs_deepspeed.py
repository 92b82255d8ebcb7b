"""The comparison bench's own parts: _mlpo.AioHandle (mlpo's I/O engine
behind the aio calls DeepSpeed's swapper makes) reads back what it wrote,
O_DIRECT-aligned or not, counts the calls a wait() completed, and names
the file of a failed one; the bench's stand-in for page-locked memory is
4 KiB-aligned and known as pinned. With MLPO_SLOW=1 (scripts/test.sh
--slow), DeepSpeed's swapper itself, run by the bench, is checked against
torch.optim.AdamW."""
import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from mlpo import _mlpo

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BENCH = os.path.join(ROOT, "bench", "vs_deepspeed.py")


def bench_module():
    spec = importlib.util.spec_from_file_location("vs_deepspeed", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_aio_handle_round_trips_aligned_and_unaligned(tmp_path):
    vs = bench_module()
    aio = vs.ProjectAio(block_size=1 << 16, queue_depth=4)
    a = aio.new_cpu_locked_tensor(300_000, torch.empty(0))  # 1.2 MB
    assert a.data_ptr() % 4096 == 0 and aio.is_pinned(a)
    assert aio.is_pinned(a.narrow(0, 1000, 10))
    assert not aio.is_pinned(torch.empty(10))
    a.copy_(torch.arange(300_000, dtype=torch.float32))
    odd = torch.arange(1001, dtype=torch.float32)  # neither aligned
    f1, f2 = str(tmp_path / "a"), str(tmp_path / "b")
    assert aio.async_pwrite(a, f1) == 0
    assert aio.async_pwrite(odd, f2, 0) == 0
    assert aio.wait() == 2
    b = aio.new_cpu_locked_tensor(300_000, torch.empty(0))
    back = torch.empty(1001)
    aio.async_pread(b, f1)
    aio.async_pread(back, f2)
    assert aio.wait() == 2
    assert torch.equal(a, b) and torch.equal(odd, back)
    aio.free_cpu_locked_tensor(a)
    assert not aio.is_pinned(a)


def test_aio_handle_names_what_failed(tmp_path):
    h = _mlpo.AioHandle(1 << 20, 4)
    t = torch.empty(1024)
    missing = str(tmp_path / "no" / "such")
    with pytest.raises((OSError, RuntimeError, ValueError), match="such"):
        h.pread(t.data_ptr(), 4096, missing, 0)
    f = str(tmp_path / "short")
    with open(f, "wb") as out:
        out.write(b"x" * 100)
    h.pread(t.data_ptr(), 4096, f, 0)  # past the end of the file
    with pytest.raises((OSError, RuntimeError), match="short"):
        h.wait()
    with pytest.raises(ValueError, match="block_size"):
        _mlpo.AioHandle(1000, 4)


def test_bench_refuses_bad_arguments():
    vs = bench_module()
    for argv in (["--modes", "fp64"], ["--subgroup", "1000"],
                 ["--params", "1K", "--subgroup", "4096"], ["--steps", "0"]):
        with pytest.raises(SystemExit):
            vs.parse_args(argv)


@pytest.mark.skipif(not os.environ.get("MLPO_SLOW"),
                    reason="DeepSpeed's CPU Adam builds on first use (about "
                           "a minute): scripts/test.sh --slow")
def test_deepspeed_swapper_computes_torch_adamw(tmp_path):
    pytest.importorskip("deepspeed")
    r = subprocess.run([sys.executable, BENCH, "--validate-only", "--dir",
                        str(tmp_path / "ds")], capture_output=True,
                       text=True, timeout=900,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(
                           p for p in sys.path if p)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "-> the same" in r.stderr
