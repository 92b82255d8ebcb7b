#!/usr/bin/env bash
# Installs what mlpo builds and runs with, when any of it is missing: the
# Debian packages below (needs root, or sudo, only when something must be
# installed), then the Python venv from requirements.txt (scripts/venv.sh,
# once per machine). A second run installs nothing.
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config git
      librocksdb-dev liburing-dev libxxhash-dev libabsl-dev
      libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
      nlohmann-json3-dev libtomlplusplus-dev fio clang
      # DeepSpeed's own async-I/O op, built on first use by
      # bench/vs_deepspeed.py (the comparison runs DeepSpeed as users do)
      libaio-dev
      # the interpreter mlpo's venv is made with (scripts/venv.sh: torch,
      # transformers, pytest, ... from PyPI, pinned in requirements.txt)
      python3 python3-dev python3-venv)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
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
fi
exec "$(dirname "$0")/venv.sh"
