#!/usr/bin/env bash
# The test command (also what .ci/run calls): install test dependencies, build, run the
# unit / integration / fault / gpu / python tiers, then the unit / integration / fault tiers
# again in an AddressSanitizer + UndefinedBehaviorSanitizer build, the integration / fault
# tiers in a ThreadSanitizer build (compiled with clang -Wthread-safety -Werror, the compile-time
# check of lock discipline), and the fuzz tier (each harness for a bounded time).
# Fails on any failure or sanitizer report. The last line is "test: N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
failed=0
passed=0
skipped=0
failures=0

tally() {  # reads a ctest log, adds its counts
  local log=$1 total fail skip
  total=$(grep -oE 'tests failed out of [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  fail=$(grep -oE '[0-9]+ tests failed out of' "$log" | grep -oE '^[0-9]+' | tail -1)
  skip=$(grep -E '^\s+[0-9]+ - .*\(Skipped\)' "$log" | wc -l)
  total=${total:-0}; fail=${fail:-0}
  passed=$((passed + total - fail - skip)); failed=$((failed + fail)); skipped=$((skipped + skip))
}

scripts/setup.sh --test || exit 1

echo "== build (RelWithDebInfo)"
scripts/build.sh || exit 1
echo "== ctest: unit, integration, fault, gpu, python"
ctest --test-dir build -j "$jobs" --output-on-failure --timeout 600 2>&1 | tee build/ctest.log
[[ ${PIPESTATUS[0]} -eq 0 ]] || failures=$((failures + 1))
tally build/ctest.log

echo "== build (ASan + UBSan)"
STOKER_BUILD_DIR=build-asan scripts/build.sh -DSTOKER_SANITIZE=ON -DSTOKER_CUDA=OFF -DSTOKER_PYTHON=OFF \
  -DCMAKE_BUILD_TYPE=Debug || exit 1
echo "== ctest under sanitizers: unit, integration, fault"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan -j "$jobs" -L 'unit|integration|fault' --output-on-failure --timeout 900 \
  2>&1 | tee build-asan/ctest.log
[[ ${PIPESTATUS[0]} -eq 0 ]] || failures=$((failures + 1))
tally build-asan/ctest.log
if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' build-asan/ctest.log; then
  echo "test: sanitizer report found" >&2
  failures=$((failures + 1))
fi

echo "== build (ThreadSanitizer + the compile-time lock-discipline check: clang -Wthread-safety -Werror)"
# Reports of every process (stokerd and stokerctl write theirs to their own logs otherwise)
# go to build-tsan/tsan-reports/; any file there fails the run.
CC=clang CXX=clang++ STOKER_BUILD_DIR=build-tsan scripts/build.sh -DSTOKER_TSAN=ON -DSTOKER_THREAD_SAFETY=ON \
  -DSTOKER_CUDA=OFF -DSTOKER_PYTHON=OFF || exit 1
rm -rf build-tsan/tsan-reports && mkdir -p build-tsan/tsan-reports
echo "== ctest under ThreadSanitizer: integration, fault"
TSAN_OPTIONS="halt_on_error=0 log_path=$PWD/build-tsan/tsan-reports/report" \
  ctest --test-dir build-tsan -j "$jobs" -L 'integration|fault' --output-on-failure --timeout 900 \
  2>&1 | tee build-tsan/ctest.log
[[ ${PIPESTATUS[0]} -eq 0 ]] || failures=$((failures + 1))
tally build-tsan/ctest.log
if [[ -n "$(ls -A build-tsan/tsan-reports)" ]]; then
  echo "test: ThreadSanitizer reports in build-tsan/tsan-reports:" >&2
  head -50 build-tsan/tsan-reports/* >&2
  failures=$((failures + 1))
fi

echo "== fuzz tier: each libFuzzer harness for ${STOKER_FUZZ_RUNS:=200000} inputs, fixed seed (scripts/fuzz.sh)"
if scripts/fuzz.sh --runs "$STOKER_FUZZ_RUNS" > build/fuzz.log 2>&1; then
  grep -E '^==|DONE' build/fuzz.log || true
else
  tail -40 build/fuzz.log >&2
  echo "test: the fuzz tier found a crash (build-fuzz/crashes/)" >&2
  failures=$((failures + 1))
fi

echo "test: $passed passed, $failed failed, $skipped skipped"
[[ $failures -eq 0 && $failed -eq 0 ]]
