# Source this (`source scripts/env.sh`, bash or zsh) after scripts/run.sh
# built the checkout: `mlpo` and `mlpo-bench` (build/tools, build/bench)
# and the venv's python come first on PATH, `import mlpo` finds the build's
# package (PYTHONPATH=build/python), and bash completes mlpo's subcommands
# and flags (`mlpo completion bash`). Changes nothing on disk.
_mlpo_root=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)
if [ ! -x "$_mlpo_root/build/tools/mlpo" ]; then
  echo "scripts/env.sh: $_mlpo_root/build/tools/mlpo is not built yet:" \
       "run scripts/run.sh (or scripts/build.sh build) first" >&2
else
  export PATH="$_mlpo_root/build/tools:$_mlpo_root/build/bench:$_mlpo_root/.venv/bin:$PATH"
  export PYTHONPATH="$_mlpo_root/build/python${PYTHONPATH:+:$PYTHONPATH}"
  if [ -n "${BASH_VERSION:-}" ]; then
    eval "$("$_mlpo_root/build/tools/mlpo" completion bash)"
  fi
fi
unset _mlpo_root
