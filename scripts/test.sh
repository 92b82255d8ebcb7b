#!/usr/bin/env bash
# README command 2: install what is missing, build, run every test.
#   scripts/test.sh           default suite (Release unit tests, pytest, the
#                             pip install check): about 20 minutes from a
#                             clean clone on 2 cores
#   scripts/test.sh --slow    also the slow tests (crash loops, big runs),
#                             the clang ASan+UBSan build's unit tests with
#                             -Wthread-safety, the fuzzers, the oldest torch
#                             and the ThreadSanitizer build (scripts/tsan.sh)
#   MLPO_SANITIZERS=1 scripts/test.sh   the default suite plus the
#                             sanitizer build and fuzzers (no slow tests)
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
slow=0
[ "${1:-}" = "--slow" ] && slow=1
scripts/deps.sh
source scripts/python_env.sh
mkdir -p build
export MLPO_TEST_TMPDIR=${MLPO_TEST_TMPDIR:-$PWD/var/test-tmp}
mkdir -p "$MLPO_TEST_TMPDIR"
echo "== [${SECONDS}s] build (Release, warnings as errors)"
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DMLPO_WERROR=ON
sanitize=$slow
[ "${MLPO_SANITIZERS:-0}" = 1 ] && sanitize=1
if [ $sanitize -eq 1 ]; then
  # One sanitizer build: clang with ASan + UBSan, -Wthread-safety and the
  # fuzzers' coverage (deps.sh installs clang). GCC's ASan build stands in
  # where clang is missing (then no thread-safety analysis and no fuzzers).
  have_clang=0
  if command -v clang++ >/dev/null 2>&1; then
    have_clang=1
    san=build-clang
    echo "== [${SECONDS}s] build (clang: ASan + UBSan, -Wthread-safety, warnings as errors;" \
         "unit tests, tools, fuzzers)"
    mkdir -p build-clang
    CC=clang CXX=clang++ scripts/build.sh build-clang -DCMAKE_BUILD_TYPE=Debug \
      -DMLPO_WERROR=ON -DMLPO_WITH_CUDA=OFF -DBUILD_TESTING=ON \
      -DMLPO_SANITIZE=ON -DMLPO_WITH_PYTHON=OFF -DMLPO_FUZZ=ON \
      -DMLPO_BUILD_BENCH=OFF
  else
    san=build-asan
    echo "== [${SECONDS}s] clang++ not found: GCC's ASan + UBSan build, no -Wthread-safety" \
         "and no fuzzers"
    mkdir -p build-asan
    scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DMLPO_SANITIZE=ON \
      -DMLPO_WERROR=ON -DMLPO_WITH_CUDA=OFF -DMLPO_WITH_PYTHON=OFF \
      -DMLPO_BUILD_BENCH=OFF
  fi
fi
labels=(-LE slow)
[ $slow -eq 1 ] && labels=()
if [ $slow -eq 1 ]; then
  # The adapter's long property runs (python/tests/test_workflow_model.py,
  # test_retention_model.py, test_kill_resume.py, test_fuzz_state_dict.py).
  export MLPO_WORKFLOW_EXAMPLES=${MLPO_WORKFLOW_EXAMPLES:-1500}
  export MLPO_KILL_ROUNDS=${MLPO_KILL_ROUNDS:-12}
  # Kills right after step() returns: 6 configurations x 60 (test_kill_after_step.py).
  export MLPO_KILL_AFTER_STEP_ROUNDS=${MLPO_KILL_AFTER_STEP_ROUNDS:-60}
  # Kills of a job while it creates its store (test_kill_creation.py).
  export MLPO_KILL_CREATION_ROUNDS=${MLPO_KILL_CREATION_ROUNDS:-200}
  # Kills of a 2-rank DDP job updating during backward (test_ddp_backward.py).
  export MLPO_DDP_KILL_ROUNDS=${MLPO_DDP_KILL_ROUNDS:-40}
  # State formats against fp32 on the example's own model, two seeds
  # (python/tests/test_state_formats.py).
  export MLPO_FORMAT_STEPS=${MLPO_FORMAT_STEPS:-300}
  # DeepSpeed against torch.optim.AdamW (python/tests/test_vs_deepspeed.py).
  export MLPO_SLOW=1
fi
status=0
echo "== [${SECONDS}s] tests (Release)"
(cd build && ctest -j "$(nproc)" --output-on-failure --timeout 600 "${labels[@]}") || status=1
echo "== [${SECONDS}s] tests (PyTorch adapter, pytest, $("$MLPO_PYTHON" -c 'import torch; print("torch", torch.__version__)'))"
# Two pytest workers (MLPO_TEST_WORKERS), each taking whole files
# (--dist loadfile: a file's module fixtures and its order stay as
# written): most tests wait on subprocesses, ranks and the disk, and two
# cores run two of them in about 80% of the time of one after the other.
PYTHONPATH=build/python "$MLPO_PYTHON" -m pytest -q -p no:cacheprovider \
  -n "${MLPO_TEST_WORKERS:-2}" --dist loadfile python/tests || status=1
echo "== [${SECONDS}s] pip wheel . / pip install into a fresh venv"
MLPO_PIP_BUILD_DIR=build scripts/check_pip_install.sh || status=1
if [ $sanitize -eq 1 ]; then
  echo "== [${SECONDS}s] tests (ASan + UBSan)"
  (cd "$san" && ASAN_OPTIONS=detect_leaks=1 ctest -j "$(nproc)" \
    --output-on-failure --timeout 900 -L unit -LE slow) || status=1
  if [ $have_clang -eq 1 ]; then
    echo "== [${SECONDS}s] fuzzers (libFuzzer, ${MLPO_FUZZ_SECONDS:-10} s each)"
    scripts/fuzz.sh "${MLPO_FUZZ_SECONDS:-10}" build-clang || status=1
  fi
fi
if [ $slow -eq 1 ]; then
  echo "== [${SECONDS}s] tests (PyTorch adapter, pytest, the oldest torch: $MLPO_TORCH_OLDEST)"
  scripts/test_oldest_torch.sh || status=1
  echo "== [${SECONDS}s] tests (ThreadSanitizer, unit tests)"
  scripts/tsan.sh || status=1
fi
echo "== [${SECONDS}s] done (exit $status)"
exit $status
