#!/usr/bin/env bash
# `pip wheel .` (scikit-build-core running mlpo's CMake build), then the
# wheel installed into a fresh venv that has torch and used from outside the
# source tree: mlpo.torch.AdamW against torch.optim.AdamW for a few steps, a
# checkpoint, the installed `mlpo` command on the store it left, and the
# installed `mlpo-bench`.
# Part of scripts/test.sh.
#   MLPO_PIP_BUILD_DIR=build   reuse that CMake build tree (scripts/test.sh
#                              does: its options are passed back unchanged)
# The fresh venv sees torch through a .pth naming mlpo's venv's
# site-packages (torch is a few GB; the wheel itself goes in alone).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
src=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=()
if [ -n "${MLPO_PIP_BUILD_DIR:-}" ]; then
  # The ninja that scripts/build.sh runs (the one on PATH) builds the tree
  # here too: scikit-build-core would pick the venv's (PyPI) ninja, whose
  # build log does not read the other version's, so every object was built
  # again (about 4 minutes on 2 cores).
  make_program=$(command -v ninja || true)
  args=(-C "build-dir=$MLPO_PIP_BUILD_DIR"
        -C cmake.define.BUILD_TESTING=ON -C cmake.define.MLPO_BUILD_BENCH=ON
        -C cmake.define.MLPO_WERROR=ON)
  [ -n "$make_program" ] &&
    args+=(-C "cmake.define.CMAKE_MAKE_PROGRAM=$make_program")
fi
# --no-build-isolation: the backend (scikit-build-core, pybind11) is pinned
# in mlpo's venv, so nothing is downloaded.
"$MLPO_PYTHON" -m pip wheel -q --no-deps --no-build-isolation \
  "${args[@]}" -w "$work/dist" "$src"
wheel=$(ls "$work"/dist/mlpo-*.whl)
echo "pip wheel: built $(basename "$wheel")"
venv=$work/venv
# --without-pip: the venv's own old pip and setuptools would shadow the
# ones torch asks for; mlpo's venv's pip installs into it (--python).
"$MLPO_BASE_PYTHON" -m venv --without-pip "$venv"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$MLPO_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
  >"$site/mlpo-venv-torch.pth"
# --no-index: torch and numpy are there already; nothing to download.
"$MLPO_PYTHON" -m pip --python "$venv/bin/python" install -q --no-index \
  "$wheel"
cd "$work"
"$venv/bin/python" - <<'PY'
import mlpo, mlpo.torch, torch
assert "site-packages" in mlpo.__file__ and "/venv/" in mlpo.__file__, \
    f"not the installed package: {mlpo.__file__}"
torch.manual_seed(0)
model = torch.nn.Linear(16, 8)
ref = torch.nn.Linear(16, 8)
ref.load_state_dict(model.state_dict())
opt = mlpo.torch.AdamW(model.parameters(), lr=1e-2, store="store")
ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
for _ in range(5):
    x = torch.randn(4, 16)
    for m, o in ((model, opt), (ref, ref_opt)):
        o.zero_grad()
        m(x).square().sum().backward()
        o.step()
for a, b in zip(model.parameters(), ref.parameters()):
    d = (a - b).abs().max().item()
    assert d < 1e-6, f"installed mlpo.torch.AdamW differs from torch by {d}"
opt.state_dict()  # tag step-5
print("pip install: mlpo.torch.AdamW matches torch.optim.AdamW over 5 steps "
      f"(torch {torch.__version__})")
PY
"$venv/bin/mlpo" tags store/mlpo/rank-0 | grep -q "step-5" ||
  { echo "pip install: the installed mlpo command does not list tag step-5"; exit 1; }
"$venv/bin/mlpo" verify store/mlpo/rank-0 >/dev/null
"$venv/bin/mlpo" health store/mlpo/rank-0 | grep -q "^OK " ||
  { echo "pip install: the installed mlpo health does not say OK"; exit 1; }
echo "pip install: the installed mlpo command reads the store (tags, verify, health)"
"$venv/bin/mlpo-bench" kernel --quick --json >kernel.json ||
  { echo "pip install: the installed mlpo-bench kernel --quick failed"; exit 1; }
"$venv/bin/python" -c 'import json; json.load(open("kernel.json"))'
echo "pip install: the installed mlpo-bench runs (kernel --quick --json)"
