#!/usr/bin/env bash
# Installs the Debian packages mlpo builds with, when any is missing.
# Needs root (or sudo) only when something must be installed.
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config git
      librocksdb-dev liburing-dev libxxhash-dev libabsl-dev
      libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
      nlohmann-json3-dev libtomlplusplus-dev fio clang
      # the PyTorch adapter, for Debian's own /usr/bin/python3
      python3-dev pybind11-dev python3-torch python3-numpy python3-pytest
      python3-tqdm python3-hypothesis
      # `pip install .` (pyproject.toml, setup.py) in a venv
      python3-venv python3-pip python3-setuptools python3-wheel
      # `mlpo-bench step --plot`
      python3-matplotlib
      # an optimised BLAS for torch's CPU matmuls (the reference one is ~7x
      # slower); it becomes the libblas.so.3 alternative
      libopenblas0-pthread)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "mlpo: installing missing Debian packages: ${missing[*]}" >&2
if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  echo "mlpo: not root; using sudo for apt-get" >&2
  SUDO=(sudo)
else
  echo "mlpo: these packages are missing and installing them needs root:" >&2
  echo "  apt-get install ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
