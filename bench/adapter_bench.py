#!/usr/bin/env python3
"""The PyTorch adapter's cost, measured in one run. Two comparisons:

--vs-torch (the state fits in RAM): mlpo.torch.AdamW with its defaults
against torch.optim.AdamW(foreach=True), both on an fp32 model of P
parameters (default 33.6M) with the same threads (default 2), each in its
own process (rounds alternate) so that each one's peak RSS is its own;
prints mlpo/torch (goal <= 0.5) and both peak RSS.

default (the state spills): the adapter on a bf16 model against the C++
engine at the same size, paths, subgroup size, durability and DRAM tier
(--cache, e.g. 25% = a state 4x the tier):

  adapter   mlpo.torch.AdamW.step() (gradients already in .grad)
  engine    `mlpo-bench step --modes mlpo` (mlpo+cache with --cache): the
            C++ facade alone, gradient staging plus the update, the same
            work the adapter's step does
  torch     torch.optim.AdamW.step() on fp32 parameters in memory

and prints adapter/engine (the adapter's overhead; goal < 1.10) and
adapter/torch. Rounds alternate adapter and engine so that the disk's
minute-to-minute swings hit both; each figure is the median step.

    PYTHONPATH=build/python /usr/bin/python3 bench/adapter_bench.py --vs-torch
    PYTHONPATH=build/python /usr/bin/python3 bench/adapter_bench.py --quick \
        --cache 25%
"""
import argparse
import json
import os
import resource
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
    store = {"path": paths, "cache": a.cache or 0}
    opt = mlpo.torch.AdamW(ps, lr=1e-4, store=store, name="adapter-bench",
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
           str(a.subgroup), "--steps", str(steps), "--modes",
           "mlpo+cache" if a.cache else "mlpo", "--cache", a.cache or "0",
           "--paths", ",".join(paths), "--durability", a.durability,
           "--prefetch", str(a.prefetch), "--probe-seconds", "0.5",
           "--dir", a.dir, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"adapter_bench: {' '.join(cmd)} failed:\n{r.stderr}")
    j = json.loads(r.stdout)["modes"]["mlpo+cache" if a.cache else "mlpo"]
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


def child(a):
    """One side of --vs-torch, in its own process: prints the median step
    and the peak RSS as JSON."""
    torch.set_num_threads(a.threads)
    ps = make_params(a.params, a.tensors, torch.float32)
    if a.child == "mlpo":
        shutil.rmtree(os.path.join(a.dir, "vs-torch"), ignore_errors=True)
        opt = mlpo.torch.AdamW(ps, lr=1e-4, threads=a.threads,
                               store=os.path.join(a.dir, "vs-torch"))
    else:
        opt = torch.optim.AdamW(ps, lr=1e-4, foreach=True)
    opt.step()  # creates the state (not timed)
    out = []
    for _ in range(a.steps):
        t = time.perf_counter()
        opt.step()
        out.append(time.perf_counter() - t)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if a.child == "mlpo":
        opt.close()
    print(json.dumps({"step_s": statistics.median(out), "steps": out,
                      "peak_rss": rss}))


def vs_torch(a):
    os.makedirs(a.dir, exist_ok=True)  # mlpo makes the store, not its parent
    sides = {"mlpo": [], "torch": []}
    rss = {"mlpo": 0, "torch": 0}
    for r in range(a.rounds):
        # Alternate which goes first: the first of a pair has the cooler
        # machine.
        order = ["mlpo", "torch"] if r % 2 == 0 else ["torch", "mlpo"]
        for side in order:
            print(f"round {r + 1}/{a.rounds}: {side}", file=sys.stderr,
                  flush=True)
            cmd = [sys.executable, os.path.abspath(__file__), "--child", side,
                   "--params", str(a.params), "--tensors", str(a.tensors),
                   "--steps", str(a.steps), "--threads", str(a.threads),
                   "--dir", a.dir]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                sys.exit(f"adapter_bench: {side} failed:\n{res.stderr}")
            j = json.loads(res.stdout)
            sides[side] += j["steps"]
            rss[side] = max(rss[side], j["peak_rss"])
    t_m, t_t = (statistics.median(sides[k]) for k in ("mlpo", "torch"))
    res = {"params": a.params, "threads": a.threads, "mlpo_step_s": t_m,
           "torch_step_s": t_t, "mlpo_vs_torch": t_m / t_t,
           "mlpo_peak_rss": rss["mlpo"], "torch_peak_rss": rss["torch"],
           "mlpo_steps": sides["mlpo"], "torch_steps": sides["torch"]}
    if a.json:
        print(json.dumps(res, indent=2))
        return
    print(f"{a.params / 1e6:.1f}M fp32 parameters, {a.threads} threads, "
          f"defaults (mlpo: store {a.dir}/vs-torch)")
    print(f"  mlpo.torch.AdamW.step           {t_m * 1e3:8.1f} ms  "
          f"peak RSS {rss['mlpo'] / 2**20:7.0f} MiB")
    print(f"  torch.optim.AdamW(foreach=True) {t_t * 1e3:8.1f} ms  "
          f"peak RSS {rss['torch'] / 2**20:7.0f} MiB")
    print(f"mlpo_vs_torch {t_m / t_t:.3f}  (goal <= 0.5)")


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
    ap.add_argument("--cache", default="",
                    help="DRAM tier of the adapter and the engine: a size or "
                         "a percentage of the state ('25%%' = a state 4x "
                         "the tier); default none")
    ap.add_argument("--vs-torch", action="store_true",
                    help="defaults against torch.optim.AdamW(foreach=True) "
                         "on an fp32 model (default 33.6M parameters)")
    ap.add_argument("--threads", type=int, default=2,
                    help="--vs-torch: threads of both")
    ap.add_argument("--child", choices=["mlpo", "torch"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.child:
        return child(a)
    if a.vs_torch:
        if a.params == 128_000_000:
            a.params = 33_600_000
        a.rounds = max(a.rounds, 4) if a.rounds == 2 else a.rounds
        a.steps = max(a.steps, 5) if a.steps == 3 else a.steps
        return vs_torch(a)
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
           "adapter_vs_engine": t_a / t_e,
           "adapter_vs_engine_update": t_a / t_u,
           "adapter_vs_torch": t_a / t_t,
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
    print(f"adapter_vs_engine_update {t_a / t_u:.3f}  (the adapter's whole "
          "step against the engine's update alone: the adapter lends its "
          "gradients, the engine stages a copy)")
    print(f"adapter_vs_torch  {t_a / t_t:.3f}")


if __name__ == "__main__":
    main()
