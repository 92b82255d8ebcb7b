#!/usr/bin/env python3
"""No code compiled for AVX2 or AVX-512 can run on a CPU without it.

The ISA units (*_avx2.cc, *_avx512.cc) are compiled with -mavx2 or
-mavx512f. Any inline function or template they emit out of line is a weak
symbol, and the linker keeps one copy of each weak symbol for the whole
program: the AVX-512 copy of a helper could then serve the scalar code on
a CPU without AVX-512 (SIGILL, or worse, nothing at all until the day it
runs there). So an ISA unit may define strong symbols (its entry points,
dispatched on the CPU's features) and weak symbols that are its own ISA's
template instantiations (their names carry `(mlpo::KernelIsa)N`, so no
other unit defines them) - nothing else.

Each ISA unit of the build is checked as built, and compiled again at -O0
(where nothing is inlined unless it must be, as in the sanitizer build).
Exits 1 naming each symbol that breaks the rule.

Run by CTest (test `isa_symbols`) and by hand:
    python3 scripts/check_isa_symbols.py BUILD_DIR
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

# The ISA of a unit (by its file name) and the KernelIsa value its own
# instantiations carry (optimizer/kernel/isa.h: kScalar, kAvx2, kAvx512).
ISAS = {"avx2": 1, "avx512": 2}
UNIT = re.compile(r"_(avx2|avx512)\.cc$")


def weak_symbols(obj):
    """The demangled names of the weak symbols `obj` defines."""
    out = subprocess.run(["nm", "-C", "--defined-only", obj], check=True,
                         capture_output=True, text=True).stdout
    weak = []
    for line in out.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in ("W", "V", "u", "w", "v"):
            weak.append(parts[2])
    return weak


def offenders(obj, isa):
    own = f"(mlpo::KernelIsa){ISAS[isa]}"
    return [s for s in weak_symbols(obj) if own not in s]


def recompile_at_o0(entry, out):
    """`entry`'s compile command with -O0 last and its output at `out`
    (no dependency file)."""
    args = entry.get("arguments") or shlex.split(entry["command"])
    with_value = ("-o", "-MF", "-MT", "-MQ")
    cmd, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in with_value:
            skip = True
        elif not re.fullmatch(r"-O[0-3sgz]?|-MM?D", a):
            cmd.append(a)
    subprocess.run(cmd + ["-O0", "-o", out], check=True,
                   cwd=entry["directory"], capture_output=True, text=True)


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    build = argv[1]
    db = os.path.join(build, "compile_commands.json")
    if not os.path.exists(db):
        print(f"check_isa_symbols: {db} not found (configure with "
              "CMAKE_EXPORT_COMPILE_COMMANDS=ON)", file=sys.stderr)
        return 2
    with open(db) as f:
        entries = [e for e in json.load(f) if UNIT.search(e["file"])]
    if not entries:
        print(f"check_isa_symbols: no ISA units in {db}", file=sys.stderr)
        return 2
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, e in enumerate(entries):
            isa = UNIT.search(e["file"]).group(1)
            unit = os.path.relpath(e["file"], os.path.dirname(
                os.path.dirname(os.path.abspath(__file__))))
            built = e.get("output")
            if built is None:
                args = e.get("arguments") or shlex.split(e["command"])
                built = args[args.index("-o") + 1]
            built = os.path.join(e["directory"], built)
            o0 = os.path.join(tmp, f"{i}.o")
            try:
                recompile_at_o0(e, o0)
            except subprocess.CalledProcessError as err:
                print(f"{unit}: could not compile it at -O0:\n{err.stderr}",
                      file=sys.stderr)
                bad += 1
                continue
            found = 0
            for what, obj in (("as built", built), ("at -O0", o0)):
                if not os.path.exists(obj):
                    print(f"{unit}: {obj} is not built", file=sys.stderr)
                    found += 1
                    continue
                for s in offenders(obj, isa):
                    print(f"{unit} ({what}): weak symbol {s!r} compiled for "
                          f"{isa}: the linker may keep this copy for callers "
                          "on any CPU (make the helper MLPO_ISA_INLINE, "
                          "base/isa_inline.h, or internal to the unit)",
                          file=sys.stderr)
                    found += 1
            bad += found
            print(f"{unit}: " + ("no weak symbol outside its ISA's own "
                                 "instantiations (as built, and at -O0)"
                                 if not found else f"{found} problem(s)"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
