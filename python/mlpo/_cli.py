"""The `mlpo` command of an installed package: the C++ binary shipped
inside it (mlpo/bin/mlpo), run with this process's arguments."""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "mlpo")
    if not os.access(exe, os.X_OK):
        sys.exit(f"mlpo: {exe} is missing; this package was not installed "
                 "with `pip install .` (in a source tree use build/tools/mlpo)")
    os.execv(exe, ["mlpo"] + sys.argv[1:])


if __name__ == "__main__":
    main()
