#!/usr/bin/env python3
"""Convergence of the state formats: examples/train_gpt.py for the same
steps and seeds in each format (fp32, bf16-moments, int8-moments), runs
interleaved seed by seed; prints each run's final loss (mean of the last 20
steps) and its ratio to fp32's with the same seed, and draws every curve
into one PNG.

    PYTHONPATH=build/python /usr/bin/python3 bench/format_convergence.py \\
        --steps 300 --seeds 0,1 --png var/formats.png [--json]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

FORMATS = ["fp32", "bf16-moments", "int8-moments"]
HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "..", "examples", "train_gpt.py")


def run(fmt, seed, steps, work, extra):
    log = os.path.join(work, f"{fmt}-{seed}.jsonl")
    store = os.path.join(work, f"store-{fmt}-{seed}")
    os.makedirs(store, exist_ok=True)  # mlpo makes the paths, not parents
    cmd = [sys.executable, TRAIN, "--steps", str(steps), "--seconds", "0",
           "--seed", str(seed), "--state-format", fmt, "--log", log,
           "--tiers", f"{store}/nvme,{store}/pfs", "--ckpt",
           os.path.join(work, f"{fmt}-{seed}.pt"), "--ckpt-every",
           str(10 ** 9)] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"format_convergence: {' '.join(cmd)} failed:\n{r.stderr}")
    shutil.rmtree(store, ignore_errors=True)
    with open(log) as f:
        return [json.loads(line)["loss"] for line in f]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--png", help="write the curves here")
    ap.add_argument("--json", action="store_true",
                    help="print the results as JSON")
    ap.add_argument("train_args", nargs="*",
                    help="more train_gpt.py arguments (after --)")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    work = tempfile.mkdtemp(prefix="mlpo-formats-")
    curves = {}
    try:
        for seed in seeds:
            for fmt in FORMATS:
                print(f"format_convergence: {fmt}, seed {seed}, {a.steps} "
                      "steps", file=sys.stderr, flush=True)
                curves[(fmt, seed)] = run(fmt, seed, a.steps, work,
                                          a.train_args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {"steps": a.steps, "runs": []}
    for (fmt, seed), c in curves.items():
        final = sum(c[-20:]) / len(c[-20:])
        base = curves[("fp32", seed)]
        ref = sum(base[-20:]) / len(base[-20:])
        out["runs"].append(dict(state_format=fmt, seed=seed, final_loss=final,
                                ratio_to_fp32=final / ref))
    if a.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 5))
        styles = {"fp32": "-", "bf16-moments": "--", "int8-moments": ":"}
        for (fmt, seed), c in curves.items():
            ax.plot(range(1, len(c) + 1), c, styles[fmt],
                    label=f"{fmt} seed {seed}", linewidth=1)
        ax.set_xlabel("step")
        ax.set_ylabel("training loss")
        ax.set_title("train_gpt.py: loss by state format")
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.png, dpi=100)
        out["png"] = a.png
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{'format':14} {'seed':>4} {'final loss':>11} {'vs fp32':>8}")
    for r in out["runs"]:
        print(f"{r['state_format']:14} {r['seed']:>4} {r['final_loss']:>11.5f} "
              f"{r['ratio_to_fp32']:>8.5f}")


if __name__ == "__main__":
    main()
