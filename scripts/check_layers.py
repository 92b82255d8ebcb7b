#!/usr/bin/env python3
"""The include graph between the source folders: each folder may include
only folders of a lower layer (so there are no cycles, and nothing below
includes anything above). Prints the graph; exits 1 naming each include
that breaks the order, or a folder the table below does not know.

Run by CTest (test `include_layers`) and by hand:
    python3 scripts/check_layers.py [SOURCE_DIR] [--graph]
"""
import os
import re
import sys

# Lower number = lower layer. A folder includes only folders with a lower
# number (and itself).
LAYERS = {
    "base": 0,
    "store/io": 1, "store/checksum": 1, "store/cache": 1, "gpu": 1,
    "optimizer/kernel": 1,
    "store/fs": 2, "store/placement": 2,
    "store/path": 3, "store/meta": 3,
    "store": 4,
    "store/admin": 5, "tools/probe": 5, "tools/plan": 5,
    "optimizer": 6,
    "tools": 7, "python": 7,
    "bench": 8,
}
SKIP = ("tests", "build", "var", ".git", "examples", "docs", "scripts",
        "config", ".gpu", "build-pip")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = os.path.abspath(args[0] if args else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), ".."))
    edges, bad = {}, []
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        top = rel.split(os.sep)[0]
        if rel != "." and (top in SKIP or top.startswith("build")):
            dirs[:] = []
            continue
        for f in files:
            if not f.endswith((".h", ".cc", ".cu")):
                continue
            src = rel
            text = open(os.path.join(d, f), errors="replace").read()
            for inc in re.findall(r'^#include "([^"]+)"', text, re.M):
                if not os.path.exists(os.path.join(root, inc)):
                    continue  # a system or generated header
                dst = os.path.dirname(inc)
                if dst == src:
                    continue
                edges.setdefault(src, set()).add(dst)
                for x in (src, dst):
                    if x not in LAYERS:
                        bad.append(f"{x}: a folder the layer table does not "
                                   f"know ({rel}/{f} includes {inc})")
                if src in LAYERS and dst in LAYERS and \
                        LAYERS[dst] >= LAYERS[src]:
                    bad.append(f"{rel}/{f} (layer {LAYERS[src]}) includes "
                               f"{inc} (layer {LAYERS[dst]}): only lower "
                               "layers may be included")
    if "--graph" in sys.argv or bad:
        for src in sorted(edges, key=lambda s: (LAYERS.get(s, 99), s)):
            print(f"{src} ({LAYERS.get(src, '?')}) -> "
                  + ", ".join(sorted(edges[src])))
    for b in sorted(set(bad)):
        print("include_layers:", b)
    if bad:
        return 1
    print(f"include_layers: {sum(len(v) for v in edges.values())} folder "
          f"edges between {len(edges)} folders, all from higher to lower "
          "layers (no cycles)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
