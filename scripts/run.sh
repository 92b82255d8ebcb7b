#!/usr/bin/env bash
# README command 1: install what is missing, build Release, run the main job
# on the embedded default: var/nvme and var/pfs as the two tiers, with an
# embedded RocksDB index.
#
# The main job is a real training run: examples/train_gpt.py trains a small
# GPT (character level, ~2M parameters) on the CPU for about a minute with
# mlpo.torch.AdamW keeping its optimizer state on both tiers (loss falling
# in the progress bar), checkpointing every 25 steps. Then `mlpo inspect`
# shows the store it left. The synthetic update-step benchmark is
# scripts/bench.sh. Arguments go to train_gpt.py: `scripts/run.sh --resume`
# continues the last run from its newest checkpoint (--help lists them all).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
source scripts/python_env.sh
mkdir -p build
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
mkdir -p var/nvme var/pfs
echo "== examples/train_gpt.py (about a minute; optimizer state on var/nvme + var/pfs)"
PYTHONPATH=build/python "$MLPO_PYTHON" examples/train_gpt.py --seconds "${MLPO_TRAIN_SECONDS:-60}" "$@"
echo "== build/tools/mlpo inspect var/nvme/train_gpt/rank-0"
build/tools/mlpo inspect var/nvme/train_gpt/rank-0
echo "== the commands are build/tools/mlpo and build/bench/mlpo-bench" \
  "(\`source scripts/env.sh\` puts them, and the venv's python, on PATH)"
