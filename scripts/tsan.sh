#!/usr/bin/env bash
# ThreadSanitizer build of the unit tests (build-tsan), run clean:
#   scripts/tsan.sh        build, then every unit test except those TSan
#                          cannot run (below); exits non-zero on a report.
# Locks are std::mutex in this build (base/mutex.h), which TSan sees;
# tests/tsan.supp names the one abseil internal it cannot (absl::Status's
# refcount, dropped inside Debian's uninstrumented libabsl_status).
# Left out: tests that fork children which start threads (TSan does not
# support threads after a multi-threaded fork), the resident-memory bound
# (TSan's shadow memory is resident too) and the adaptive-placement timing
# test (it needs the capped path, not TSan's 5-15x slower CPU, to be the
# bottleneck).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLPO_TSAN=ON \
  -DMLPO_WERROR=ON -DMLPO_WITH_CUDA=OFF -DMLPO_WITH_PYTHON=OFF \
  -DMLPO_BUILD_BENCH=OFF
export MLPO_TEST_TMPDIR=${MLPO_TEST_TMPDIR:-$PWD/var/test-tmp}
mkdir -p "$MLPO_TEST_TMPDIR"
export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1"
cd build-tsan
ctest -j "$(nproc)" --output-on-failure --timeout 900 -L unit -LE slow \
  -E 'Sigkill|OptimizerCrashTest.RestoreNewestTag|ReadOnlyOpenWorksForAUserWhoCanOnlyRead|ResidentMemoryStaysWithinTheBudget|AdaptivePlacementTest'
