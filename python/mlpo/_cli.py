"""The `mlpo` and `mlpo-bench` commands of an installed package: the C++
binaries shipped inside it (mlpo/bin/), run with this process's
arguments."""
import os
import sys


def _run(name, source_tree_path):
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name)
    if not os.access(exe, os.X_OK):
        sys.exit(f"{name}: {exe} is missing; this package was not installed "
                 f"with `pip install .` (in a source tree use "
                 f"{source_tree_path})")
    os.execv(exe, [name] + sys.argv[1:])


def main():
    _run("mlpo", "build/tools/mlpo")


def bench():
    _run("mlpo-bench", "build/bench/mlpo-bench")


if __name__ == "__main__":
    main()
