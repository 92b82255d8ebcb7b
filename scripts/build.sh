#!/usr/bin/env bash
# Configures and builds one build tree: scripts/build.sh DIR [cmake args...]
# The PyTorch adapter is built for mlpo's venv (scripts/python_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
dir=$1; shift
mkdir -p "$dir"
cmake -S . -B "$dir" -G Ninja -DPython_EXECUTABLE="$MLPO_PYTHON" "$@" \
  >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log" >&2; exit 1; }
ninja -C "$dir" -j "$(nproc)"
