#!/usr/bin/env bash
# `pip install .` into a fresh venv made with --system-site-packages (so it
# sees Debian's torch), then use the installed package from outside the
# source tree: mlpo.torch.AdamW against torch.optim.AdamW for a few steps, a
# checkpoint, and the installed `mlpo` command on the store it left.
# Part of scripts/test.sh. MLPO_BUILD_DIR (setup.py) reuses a CMake build.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
venv=${MLPO_PIP_VENV:-$PWD/var/pip-venv}
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
# --no-index: nothing to download (pyproject.toml requires nothing).
"$venv/bin/pip" install --no-index -q "$src"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$venv/bin/python" - <<'PY'
import mlpo, mlpo.torch, torch
assert "site-packages" in mlpo.__file__, f"not the installed package: {mlpo.__file__}"
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
print("pip install: mlpo.torch.AdamW matches torch.optim.AdamW over 5 steps")
PY
"$venv/bin/mlpo" tags store/mlpo/rank-0 | grep -q "step-5" ||
  { echo "pip install: the installed mlpo command does not list tag step-5"; exit 1; }
"$venv/bin/mlpo" verify store/mlpo/rank-0 >/dev/null
echo "pip install: the installed mlpo command reads the store (tags, verify)"
