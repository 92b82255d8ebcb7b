#!/usr/bin/python3
"""The PyTorch adapter's cost, measured in one run:

  adapter   mlpo.torch.AdamW.step() on a bf16 model of P parameters
            (gradients already in .grad), state in an mlpo store
  engine    `mlpo-bench step --modes mlpo` at the same P, paths, subgroup
            size and durability: the C++ facade alone, gradient staging
            (its "backward" phase) plus the update, the same work the
            adapter's step does
  torch     torch.optim.AdamW.step() on fp32 parameters in memory

and prints adapter/engine (the adapter's overhead; goal < 1.10) and
adapter/torch. Rounds alternate adapter and engine so that the disk's
minute-to-minute swings hit both; each figure is the median step.

    PYTHONPATH=build/python /usr/bin/python3 bench/adapter_bench.py --quick
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import torch

import mlpo.torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def make_params(p, tensors, dtype):
    n = p // tensors
    g = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter((torch.randn(n, generator=g) * 0.02).to(dtype))
          for _ in range(tensors)]
    for x in ps:
        x.grad = (torch.randn(n, generator=g) * 1e-3).to(dtype)
    return ps


def time_adapter(a, paths, steps):
    for root in paths:
        shutil.rmtree(os.path.join(root, "adapter-bench"), ignore_errors=True)
    ps = make_params(a.params, a.tensors, torch.bfloat16)
    opt = mlpo.torch.AdamW(ps, lr=1e-4, store=paths, name="adapter-bench",
                           subgroup_numel=a.subgroup, durability=a.durability,
                           prefetch=a.prefetch)
    opt.step()  # creates the state (not timed, as in mlpo-bench step)
    out, pipeline = [], []
    for _ in range(steps):
        t = time.perf_counter()
        opt.step()
        out.append(time.perf_counter() - t)
        pipeline.append(opt.last_report["total_s"])
    opt.close()
    return out, pipeline


def time_engine(a, paths, steps):
    bench = os.path.join(a.build, "bench", "mlpo-bench")
    cmd = [bench, "step", "--params", str(a.params), "--subgroup",
           str(a.subgroup), "--steps", str(steps), "--modes", "mlpo",
           "--paths", ",".join(paths), "--durability", a.durability,
           "--prefetch", str(a.prefetch), "--probe-seconds", "0.5",
           "--dir", a.dir, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"adapter_bench: {' '.join(cmd)} failed:\n{r.stderr}")
    j = json.loads(r.stdout)["modes"]["mlpo"]
    return j["step_s"] + j["backward_s"], j["step_s"]


def time_torch(a, steps):
    ps = make_params(a.params, a.tensors, torch.float32)
    opt = torch.optim.AdamW(ps, lr=1e-4)
    opt.step()
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        opt.step()
        out.append(time.perf_counter() - t)
    return out


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=int, default=128_000_000)
    ap.add_argument("--tensors", type=int, default=8,
                    help="the parameters are this many tensors")
    ap.add_argument("--subgroup", type=int, default=8_000_000)
    ap.add_argument("--steps", type=int, default=3, help="timed steps a round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--paths", default="var/bench/nvme,var/bench/pfs")
    ap.add_argument("--durability", default="step", choices=["step", "tag"])
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--dir", default="var/bench")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--quick", action="store_true",
                    help="32M parameters, one round")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.params, a.rounds, a.subgroup = 32_000_000, 1, 4_000_000
    paths = a.paths.split(",")
    for p in paths:
        os.makedirs(p, exist_ok=True)
    adapter, pipeline, engine, engine_update = [], [], [], []
    for r in range(a.rounds):
        print(f"round {r + 1}/{a.rounds}: adapter", file=sys.stderr, flush=True)
        x, y = time_adapter(a, paths, a.steps)
        adapter += x
        pipeline += y
        print(f"round {r + 1}/{a.rounds}: engine", file=sys.stderr, flush=True)
        x, y = time_engine(a, paths, a.steps)
        engine.append(x)
        engine_update.append(y)
    print("torch.optim.AdamW in memory", file=sys.stderr, flush=True)
    ref = time_torch(a, a.steps)
    t_a, t_e, t_t = (statistics.median(x) for x in (adapter, engine, ref))
    t_p, t_u = statistics.median(pipeline), statistics.median(engine_update)
    res = {"params": a.params, "paths": paths, "durability": a.durability,
           "adapter_step_s": t_a, "engine_step_s": t_e, "torch_step_s": t_t,
           "adapter_update_s": t_p, "engine_update_s": t_u,
           "adapter_vs_engine": t_a / t_e, "adapter_vs_torch": t_a / t_t,
           "adapter_steps": adapter, "engine_steps": engine,
           "torch_steps": ref}
    if a.json:
        print(json.dumps(res, indent=2))
        return
    print(f"{a.params / 1e6:.0f}M parameters on {', '.join(paths)} "
          f"(durability {a.durability})")
    print(f"  mlpo.torch.AdamW.step   {t_a:8.3f} s  (update pipeline {t_p:.3f} s)")
    print(f"  mlpo-bench step (C++)   {t_e:8.3f} s  (stage {t_e - t_u:.3f} + "
          f"update {t_u:.3f} s)")
    print(f"  torch.optim.AdamW (RAM) {t_t:8.3f} s")
    print(f"adapter_vs_engine {t_a / t_e:.3f}  (goal < 1.10)")
    print(f"adapter_vs_torch  {t_a / t_t:.3f}")


if __name__ == "__main__":
    main()
