#!/usr/bin/env bash
# The adapter's pytest suite against the oldest torch mlpo supports
# ($MLPO_TORCH_OLDEST, scripts/python_env.sh), in a venv of its own
# (.venv-torch-oldest: requirements.txt with that torch; made once per
# machine by scripts/venv.sh --oldest-torch). The _mlpo extension built in
# build/ serves it as it is: it links no torch, only the interpreter, which
# both venvs share. Part of scripts/test.sh --slow.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
scripts/venv.sh --oldest-torch
py=$PWD/.venv-torch-oldest/bin/python
"$py" -c "import torch; assert torch.__version__.startswith('$MLPO_TORCH_OLDEST'), torch.__version__"
PYTHONPATH=build/python "$py" -m pytest -q -p no:cacheprovider python/tests
