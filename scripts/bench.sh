#!/usr/bin/env bash
# The synthetic update-step benchmark on the embedded default tiers: profile
# both tiers, then `mlpo-bench step` (a 300M-parameter model, about a
# minute: the DeepSpeed-style baseline against mlpo, with the I/O lower bound
# measured in the same run), then `mlpo inspect` of the store mlpo left.
# Needs ~12 GB free under var/. Run scripts/run.sh (or build.sh) first.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p var/nvme var/pfs
echo "== mlpo profile var/nvme var/pfs (read / write / mixed bandwidth)"
build/tools/mlpo profile var/nvme var/pfs
echo "== mlpo-bench step (baseline vs mlpo, 300M params)"
# Durability tag, as DeepSpeed's swapper: neither syncs each step (under
# `step` every commit waits for the device's flush, on this disk most of a
# step; docs/benchmarks.md).
build/bench/mlpo-bench step --params 300000000 --steps 2 --durability tag \
  --paths var/nvme,var/pfs --dir var/bench --keep
echo "== mlpo inspect var/nvme/step-mlpo-fp32/rank-0"
build/tools/mlpo inspect var/nvme/step-mlpo-fp32/rank-0
