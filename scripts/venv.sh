#!/usr/bin/env bash
# Makes mlpo's Python venv from requirements.txt, once per machine:
#   scripts/venv.sh                  .venv: requirements.txt as pinned
#   scripts/venv.sh --oldest-torch   .venv-torch-oldest: the same with torch
#                                    at $MLPO_TORCH_OLDEST (python_env.sh)
# The venv itself lives in the machine's cache, named by a hash of what it
# installs (${MLPO_VENV_HOME:-~/.cache/mlpo}/venv-<hash>), and the source
# tree's .venv is a link to it: every checkout on the machine (a CI clone
# included) reuses the few GB of torch, and a second run installs nothing.
# A pin changed in requirements.txt makes a new venv beside the old one.
# An install cut off half-way is redone (the venv is marked good last).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python_env.sh
link=$MLPO_VENV
req=requirements.txt
if [ "${1:-}" = "--oldest-torch" ]; then
  link=$PWD/.venv-torch-oldest
  req=$(mktemp); trap 'rm -f "$req"' EXIT
  # The top-level packages at their pins, torch at the oldest; what they
  # pull in (torch's CUDA wheels, triton, sympy, ...) follows that torch.
  grep -iE "^($MLPO_TOP_LEVEL)==" requirements.txt >"$req"
  echo "torch==$MLPO_TORCH_OLDEST" >>"$req"
elif [ -n "${1:-}" ]; then
  echo "usage: scripts/venv.sh [--oldest-torch]" >&2; exit 2
fi
if [ ! -x "$MLPO_BASE_PYTHON" ]; then
  echo "mlpo: $MLPO_BASE_PYTHON is missing (scripts/deps.sh installs python3)" >&2
  exit 1
fi
ver=$("$MLPO_BASE_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
hash=$( (echo "$MLPO_BASE_PYTHON $ver"; cat "$req") | sha256sum | cut -c1-12)
# (HOME may be unset, as under some CI runners: the user's home from passwd.)
user_home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
home=${MLPO_VENV_HOME:-${XDG_CACHE_HOME:-${user_home:-/tmp}/.cache}/mlpo}
venv=$home/venv-$hash
stamp=$venv/.mlpo-installed
mkdir -p "$home"
exec 9>"$home/.lock"
flock 9   # two checkouts setting up at once: one installs, the other waits
if [ ! -f "$stamp" ]; then
  rm -rf "$venv"
  echo "mlpo: making the Python venv $venv from $(basename "$req")" \
       "(torch is a few GB: minutes, once per machine)" >&2
  "$MLPO_BASE_PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  # DeepSpeed (the comparison bench's) is an sdist whose setup imports
  # torch: everything else first, then it without build isolation (its
  # own requirements are pinned in the file too; its ops are built when
  # first used, DS_BUILD_OPS=0).
  rest=$(mktemp)
  grep -v -i '^deepspeed==' "$req" >"$rest"
  "$venv/bin/python" -m pip install --progress-bar off -r "$rest" >&2
  rm -f "$rest"
  if ds=$(grep -i '^deepspeed==' "$req"); then
    DS_BUILD_OPS=0 "$venv/bin/python" -m pip install --progress-bar off \
      --no-build-isolation --no-deps "$ds" >&2
  fi
  cp "$req" "$stamp"
fi
# The source tree's name for it: a link (a real directory there is left
# alone only if it is a venv this script made).
if [ -L "$link" ] || [ ! -e "$link" ]; then
  ln -sfn "$venv" "$link"
elif [ ! -f "$link/.mlpo-installed" ]; then
  echo "mlpo: $link is a directory scripts/venv.sh did not make; move it" \
       "away (the venv is $venv)" >&2
  exit 1
fi
