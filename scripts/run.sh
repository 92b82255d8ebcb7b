#!/usr/bin/env bash
# README command 1: install what is missing, build Release, run the main job
# on the embedded default: var/nvme and var/pfs as the two tiers, with an
# embedded RocksDB index.
#
# The main job is the update-step benchmark (about a minute here): a
# synthetic 300M-parameter model updated by the DeepSpeed-style baseline
# (var/nvme only, fp32 gradients through the store) and by mlpo (both tiers),
# with the I/O lower bound measured in the same run. Then `mlpo inspect`
# shows the store mlpo left behind.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
mkdir -p build
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
mkdir -p var/nvme var/pfs
echo "== mlpo profile var/nvme var/pfs (read / write / mixed bandwidth)"
build/tools/mlpo profile var/nvme var/pfs --size 512M
echo "== mlpo-bench step (baseline vs mlpo, 300M params)"
build/bench/mlpo-bench step --params 300000000 --steps 2 \
  --paths var/nvme,var/pfs --dir var/bench --keep
echo "== mlpo inspect var/nvme/step-mlpo/rank-0"
build/tools/mlpo inspect var/nvme/step-mlpo/rank-0
