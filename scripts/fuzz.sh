#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang (ASan + UBSan) into build-fuzz/ and runs each for
# SECONDS (default 60), starting from the seeds in tests/data; new crashes land in
# build-fuzz/crashes/<harness>/. Copy a crash into tests/data/fuzz-regressions/ (replayed by
# ctest) once it is fixed.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTOKER_FUZZ=ON \
  -DSTOKER_SANITIZE=ON -DSTOKER_CUDA=OFF -DSTOKER_PYTHON=OFF >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target fuzz_sample_processor fuzz_config
run() {  # harness, seed folders...
  local h=$1; shift
  mkdir -p "build-fuzz/corpus/$h" "build-fuzz/crashes/$h"
  echo "== $h for ${secs}s"
  "build-fuzz/bin/fuzz_$h" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=5 \
    -artifact_prefix="build-fuzz/crashes/$h/" "build-fuzz/corpus/$h" "$@"
}
run sample_processor tests/data/demo tests/data/corpus tests/data/formats
run config tests/data/configs-malformed configs
echo "fuzz: no crash in ${secs}s per harness"
