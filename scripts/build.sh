#!/usr/bin/env bash
# Configures and builds one build tree: scripts/build.sh DIR [cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1; shift
mkdir -p "$dir"
cmake -S . -B "$dir" -G Ninja "$@" >"$dir/configure.log" 2>&1 || {
  cat "$dir/configure.log" >&2; exit 1; }
ninja -C "$dir" -j "$(nproc)"
