"""The comparison bench's own parts: _mlpo.AioHandle (mlpo's I/O engine
behind the aio calls DeepSpeed's swapper makes) reads back what it wrote,
O_DIRECT-aligned or not, counts the calls a wait() completed, and names
the file of a failed one; the bench's stand-in for page-locked memory is
4 KiB-aligned and known as pinned. With MLPO_SLOW=1 (scripts/test.sh
--slow), DeepSpeed's swapper itself, run by the bench, is checked against
torch.optim.AdamW."""
import importlib.util
import os
import re
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
                 ["--params", "1K", "--subgroup", "4096"], ["--steps", "0"],
                 ["--aio", "libaio"], ["--memory-limit", "lots"],
                 ["--memory-limit", "0"], ["--memory-limit", "nan"]):
        with pytest.raises(SystemExit):
            vs.parse_args(argv)


def test_bench_stores_go_outside_the_checkout():
    vs = bench_module()
    d = os.path.abspath(vs.parse_args([]).dir)
    assert not d.startswith(ROOT + os.sep), d
    # The iteration bench's too, and its --help prints (a bare % in a
    # help text once made it raise).
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench",
                                                     "iteration_bench.py"),
                        "--help"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH":
                                         os.pathsep.join(p for p in sys.path
                                                         if p)})
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"\(default (\S+): outside the checkout\)",
                  " ".join(r.stdout.split()))
    assert m and not os.path.abspath(m.group(1)).startswith(ROOT + os.sep)


def test_a_run_above_the_memory_limit_is_refused_before_any_work(tmp_path,
                                                                  capsys):
    vs = bench_module()
    d = tmp_path / "ds"
    a = vs.parse_args(["--params", "2B", "--aio", "mlpo", "--memory-limit",
                       "8G", "--dir", str(d)])
    with pytest.raises(SystemExit) as e:
        vs.run(a)
    msg = str(e.value)
    assert "GiB at its peak" in msg and "--memory-limit (8.0 GiB)" in msg
    assert "nothing was run" in msg
    assert not d.exists()
    # The estimate grows with what the run holds: modes, rows, size.
    n = 10**9
    one = vs.estimate_peak(vs.parse_args(["--modes", "fp32", "--aio",
                                          "mlpo"]), n)
    three = vs.estimate_peak(vs.parse_args(["--aio", "both"]), n)
    assert three > one + 3 * 4 * n


@pytest.mark.skipif(not os.path.exists("/usr/include/libaio.h"),
                    reason="needs libaio-dev (scripts/deps.sh installs it)")
def test_bench_finds_deepspeeds_own_aio_op():
    pytest.importorskip("deepspeed")
    vs = bench_module()
    ok, what = vs.deepspeed_aio_status()
    assert ok, what
    assert "async_io" in what and "AsyncIOBuilder" in what
    assert [io for _, io in vs.deepspeed_sides("deepspeed")] == ["deepspeed"]
    assert vs.parse_args([]).aio == "deepspeed"  # DeepSpeed as users run it


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


@pytest.mark.skipif(not os.environ.get("MLPO_SLOW"),
                    reason="DeepSpeed builds its async-I/O op on first use "
                           "(minutes): scripts/test.sh --slow")
def test_a_short_run_on_both_ios_names_what_it_measured(tmp_path):
    pytest.importorskip("deepspeed")
    if not os.path.exists("/usr/include/libaio.h"):
        pytest.skip("needs libaio-dev (scripts/deps.sh installs it)")
    d = tmp_path / "ds"
    r = subprocess.run([sys.executable, BENCH, "--params", "16M",
                        "--subgroup", "4194304", "--steps", "1", "--warmup",
                        "0", "--modes", "fp32", "--aio", "both",
                        "--probe-seconds", "0.3", "--dir", str(d), "--json"],
                       capture_output=True, text=True, timeout=1800,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(
                           p for p in sys.path if p)})
    assert r.returncode == 0, r.stderr[-3000:]
    import json
    out = json.loads(r.stdout)
    assert set(out["runs"]) == {"deepspeed", "deepspeed/mlpo-aio",
                                "mlpo fp32"}
    assert out["reference"] == "deepspeed"
    assert out["runs"]["deepspeed"]["vs_deepspeed"] == 1.0
    assert "unscale" in out["includes"]["deepspeed"]
    assert "copy to the model" in out["includes"]["deepspeed"]
    for w in out["validation"].values():
        assert w["param"] < 1e-5 and w["model_copy"] < 1e-5
    assert out["peak_rss_bytes"] > 0
    assert not d.exists()  # removed at the end
