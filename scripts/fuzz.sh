#!/usr/bin/env bash
# Runs mlpo's libFuzzer targets from a clang build configured with
# -DMLPO_FUZZ=ON (scripts/test.sh builds them in build-clang).
#   scripts/fuzz.sh [SECONDS] [BUILD_DIR]   each fuzzer SECONDS (default 10)
#   scripts/fuzz.sh 3600                    an hour each, for real hunting
# Seeds come from tests/fuzz/corpus/<fuzzer>; what a run finds grows a copy
# under var/fuzz/<fuzzer> (kept between runs), crashes land in var/fuzz.
# Prints each fuzzer's executions; exits non-zero when one finds a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
build=${2:-build-clang}
status=0
mkdir -p var/fuzz
for f in fuzz_records fuzz_store_options fuzz_sizes fuzz_cli; do
  bin="$build/tests/fuzz/$f"
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is missing (configure $build with -DMLPO_FUZZ=ON)" >&2
    exit 2
  fi
  corpus="var/fuzz/$f"
  mkdir -p "$corpus"
  cp -n tests/fuzz/corpus/$f/* "$corpus"/ 2>/dev/null || true
  log="var/fuzz/$f.log"
  if ASAN_OPTIONS=detect_leaks=0 "$bin" -max_total_time="$secs" \
       -max_len=4096 -timeout=10 -artifact_prefix="var/fuzz/$f-" \
       "$corpus" >"$log" 2>&1; then
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" \
            | grep -o '[0-9]*$' || true)
    [ -z "$execs" ] && execs=$(grep -Eo '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    echo "fuzz: $f: ${execs:-?} executions in ${secs}s, no crash"
  else
    echo "fuzz: $f FOUND A CRASH; see $log and var/fuzz/$f-*" >&2
    tail -30 "$log" >&2
    status=1
  fi
done
exit $status
