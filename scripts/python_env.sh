# Sourced by every script that runs Python: the one place that names mlpo's
# interpreter and venv. The venv is made by scripts/venv.sh from
# requirements.txt with Debian's /usr/bin/python3 (whatever python3 comes
# first on PATH: a pyenv or conda one has no torch of ours).
#   MLPO_VENV    the project's venv (default: .venv in the source tree, a
#                link to the machine's shared copy that venv.sh keeps)
#   MLPO_PYTHON  its interpreter
#   MLPO_BASE_PYTHON  the interpreter venvs are made with
_mlpo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export MLPO_BASE_PYTHON=${MLPO_BASE_PYTHON:-/usr/bin/python3}
export MLPO_VENV=${MLPO_VENV:-$_mlpo_root/.venv}
export MLPO_PYTHON=$MLPO_VENV/bin/python
# The oldest torch mlpo supports, tested by scripts/test.sh --slow in a venv
# of its own (.venv-torch-oldest): requirements.txt with torch at this pin.
export MLPO_TORCH_OLDEST=${MLPO_TORCH_OLDEST:-2.6.0}
# What mlpo asks for itself (requirements.txt pins these and what they pull
# in); the oldest-torch venv takes these pins and lets the rest follow.
export MLPO_TOP_LEVEL="pytest|pytest-xdist|hypothesis|tqdm|numpy|matplotlib|safetensors|transformers|accelerate|lightning|scikit_build_core|pybind11"
unset _mlpo_root
