#!/usr/bin/env bash
# README command 1: install what is missing, build Release, run the main job
# on the embedded default (var/nvme and var/pfs as tiers, embedded RocksDB).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
mkdir -p build
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
mkdir -p var/nvme var/pfs
echo "== mlpo profile (each tier's read / write / mixed bandwidth)"
build/tools/mlpo profile var/nvme var/pfs --size 512M
echo "== mlpo-bench io --quick (engine vs fio; capped two-path sum)"
build/bench/mlpo-bench io --quick --dir var/bench
