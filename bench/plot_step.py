#!/usr/bin/env python3
"""Draws `mlpo-bench step --json` output as stacked bars: read wait,
compute and write wait per mode (the ablation rows in their order), with
each mode's ratio to the baseline on top. Used by `mlpo-bench step --plot`.

Usage: /usr/bin/python3 bench/plot_step.py RESULT.json OUT.png
Needs python3-matplotlib (scripts/deps.sh installs it)."""
import json
import sys


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_step.py: matplotlib is missing: apt-get install "
              "python3-matplotlib (scripts/deps.sh does)", file=sys.stderr)
        return 3
    with open(argv[1], encoding="utf-8") as f:
        res = json.load(f)
    modes = res.get("mode_order") or list(res["modes"])
    rows = [res["modes"][m] for m in modes]
    parts = [("read_wait_s", "read wait", "#4878d0"),
             ("compute_s", "compute", "#6acc64"),
             ("write_wait_s", "write wait", "#d65f5f")]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(modes)), 4.5))
    bottom = [0.0] * len(rows)
    for key, label, color in parts:
        vals = [r[key] for r in rows]
        ax.bar(modes, vals, bottom=bottom, label=label, color=color)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, r in enumerate(rows):
        ax.plot([i - 0.4, i + 0.4], [r["step_s"]] * 2, color="black", lw=1)
        if "ratio_to_baseline" in r:
            ax.text(i, r["step_s"] * 1.02, f"{r['ratio_to_baseline']:.2f}x",
                    ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("seconds per update step")
    ax.set_title(f"{res['params'] / 1e6:.0f}M params, durability "
                 f"{res.get('durability', 'step')}, cache {res.get('cache', '-')}"
                 " (line: measured step; bars: its parts)", fontsize=9)
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=110)
    print(f"wrote {argv[2]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
