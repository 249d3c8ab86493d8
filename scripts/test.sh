#!/usr/bin/env bash
# The test command (also what .ci/run calls). docs/TESTING.md says what each tier catches.
#   scripts/test.sh           every tier, as CI runs it:
#     plain  GCC -O2 -g1, every target; ctest: unit, integration, fault, gpu, python, scripts, package
#     asan   clang ASan + UBSan + libFuzzer coverage, one build for two tiers (tier_asan only:
#            the tests it runs and the harnesses); ctest: unit, integration, fault
#     fuzz   each libFuzzer harness for a fixed number of inputs (scripts/fuzz.sh --runs) from
#            the asan build; the crash regressions are replayed by ctest in the asan tier
#     tsan   clang ThreadSanitizer + -Wthread-safety -Werror (tier_tsan only); ctest:
#            integration
#   scripts/test.sh --quick   the edit loop: the plain build of what the unit and integration
#                             tests run (target tier_quick), then those tests and the scripts'
#                             checks (label scripts)
# Configurations are CMakePresets.json's (plain, asan, tsan). ccache is used when installed.
# Fails on any failure or sanitizer report. Prints "test: N passed, N failed, N skipped", then
# a table of each tier's build and run seconds whose last line is "test time: N s".
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac
jobs=$(nproc)
: "${STOKER_FUZZ_RUNS:=20000}"
start=$SECONDS
failed=0 passed=0 skipped=0 failures=0
table=() logs=()

tally() {  # reads a ctest log, adds its counts
  local log=$1 total fail skip
  total=$(grep -oE 'tests failed out of [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  fail=$(grep -oE '[0-9]+ tests failed out of' "$log" | grep -oE '^[0-9]+' | tail -1)
  skip=$(grep -E '^\s+[0-9]+ - .*\(Skipped\)' "$log" | wc -l)
  total=${total:-0}; fail=${fail:-0}
  passed=$((passed + total - fail - skip)); failed=$((failed + fail)); skipped=$((skipped + skip))
}

row() {  # tier, build seconds, run seconds
  table+=("$(printf '%-8s %8s %8s %8s' "$1" "$2" "$3" "$(($2 + $3))")")
}

summary() {
  # What failed, again at the end (a CI page may show only the tail of a long log): each tier's
  # failed tests by name, and the first assertions that failed, with their expansion.
  local log
  for log in "${logs[@]}"; do
    grep -q 'The following tests FAILED' "$log" 2>/dev/null || continue
    echo "== failed in $log"
    sed -n '/The following tests FAILED/,/^Errors while running/p' "$log"
    grep -A4 -E '^[^ ].*: FAILED:$' "$log" | head -60
  done
  echo "test: $passed passed, $failed failed, $skipped skipped"
  echo "== time per tier (wall seconds; $jobs cores; ccache: $(command -v ccache >/dev/null && echo used || echo none))"
  printf '%-8s %8s %8s %8s\n' tier build run total
  printf '%s\n' "${table[@]}"
  echo "test time: $((SECONDS - start)) s"
}

# Configures a configure preset's build folder and builds a build preset. Sets build_s. A new folder gets Ninja when
# it is installed (setup.sh --test installs it); an existing one keeps its generator.
build() {  # configure preset, [build preset]
  local t0=$SECONDS dir
  dir=$(sed -n "/\"name\": \"$1\"/,/binaryDir/s#.*sourceDir}/\([a-z-]*\)\".*#\1#p" CMakePresets.json | head -1)
  if [[ ! -f "$dir/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
    export CMAKE_GENERATOR=Ninja
  else
    unset CMAKE_GENERATOR
  fi
  cmake --preset "$1" >/dev/null || return 1
  cmake --build --preset "${2:-$1}" -j "$jobs" || return 1
  build_s=$((SECONDS - t0))
}

# Runs a preset's tests; appends to the tally. Sets run_s.
run_tests() {  # preset, log
  local t0=$SECONDS
  logs+=("$2")
  ctest --preset "$1" -j "$jobs" 2>&1 | tee "$2"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || failures=$((failures + 1))
  tally "$2"
  run_s=$((SECONDS - t0))
}

t0=$SECONDS
scripts/setup.sh --test || exit 1
# ccache (installed by setup.sh --test): in a cold run its cache starts empty and it serves the
# compiles the run repeats (the .deb test's build of the plain tier's sources); in a warm run,
# everything unchanged. Paths are taken relative to the clone, so build folders share entries.
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
row setup 0 $((SECONDS - t0))

if ((quick)); then
  echo "== quick: build (GCC -O2 -g1: tier_quick)"
  build plain quick || { echo "test: the build failed" >&2; exit 1; }
  echo "== quick: ctest (unit, integration, scripts)"
  run_tests quick build/ctest.log
  row quick "$build_s" "$run_s"
  summary
  [[ $failures -eq 0 && $failed -eq 0 ]]
  exit
fi

echo "== plain: build (GCC -O2 -g1, every target)"
build plain || { echo "test: the plain build failed" >&2; exit 1; }
echo "== plain: ctest (unit, integration, fault, gpu, python, scripts, package)"
run_tests plain build/ctest.log
row plain "$build_s" "$run_s"

echo "== asan: build (clang ASan + UBSan + fuzzer coverage: tier_asan)"
build asan || { echo "test: the asan build failed" >&2; summary; exit 1; }
echo "== asan: ctest (unit, integration, fault)"
run_tests asan build-asan/ctest.log
if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' build-asan/ctest.log; then
  echo "test: sanitizer report found" >&2
  failures=$((failures + 1))
fi
row asan "$build_s" "$run_s"

echo "== fuzz: each libFuzzer harness for $STOKER_FUZZ_RUNS inputs, fixed seed (scripts/fuzz.sh --runs)"
t0=$SECONDS
if STOKER_FUZZ_BUILD_DIR=build-asan scripts/fuzz.sh --runs "$STOKER_FUZZ_RUNS" > build-asan/fuzz.log 2>&1; then
  grep -E '^==|DONE|^fuzz:' build-asan/fuzz.log || true
else
  tail -40 build-asan/fuzz.log >&2
  echo "test: the fuzz tier found a crash (build-asan/crashes/)" >&2
  failures=$((failures + 1))
fi
row fuzz 0 $((SECONDS - t0))

echo "== tsan: build (clang ThreadSanitizer + -Wthread-safety -Werror: tier_tsan)"
# Reports of every process (stokerd and stokerctl write theirs to their own logs otherwise)
# go to build-tsan/tsan-reports/; any file there fails the run.
if build tsan; then
  rm -rf build-tsan/tsan-reports && mkdir -p build-tsan/tsan-reports
  echo "== tsan: ctest (integration)"
  TSAN_OPTIONS="halt_on_error=0 log_path=$PWD/build-tsan/tsan-reports/report" run_tests tsan build-tsan/ctest.log
  if [[ -n "$(ls -A build-tsan/tsan-reports)" ]]; then
    echo "test: ThreadSanitizer reports in build-tsan/tsan-reports:" >&2
    head -50 build-tsan/tsan-reports/* >&2
    failures=$((failures + 1))
  fi
  row tsan "$build_s" "$run_s"
else
  echo "test: the tsan build failed" >&2
  failures=$((failures + 1))
fi

summary
[[ $failures -eq 0 && $failed -eq 0 ]]
