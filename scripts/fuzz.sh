#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang (ASan + UBSan) into build-fuzz/ and runs each for
# SECONDS (default 60), starting from the seeds in tests/data; new crashes land in
# build-fuzz/crashes/<harness>/. Copy a crash into tests/data/fuzz-regressions/ (replayed by
# ctest) once it is fixed.
#   scripts/fuzz.sh [SECONDS]
#   scripts/fuzz.sh --runs N      N inputs per harness, fixed seed, fresh corpus: the same
#                                 inputs every time (what the test tier runs, so CI is
#                                 reproducible)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
limit=(-max_total_time="$secs")
corpus_root=build-fuzz/corpus
if [[ "${1:-}" == "--runs" ]]; then
  limit=(-runs="$2" -seed=1)
  secs="$2 runs"
  corpus_root=build-fuzz/corpus-fixed
  rm -rf "$corpus_root"
fi
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTOKER_FUZZ=ON \
  -DSTOKER_SANITIZE=ON -DSTOKER_CUDA=OFF -DSTOKER_PYTHON=OFF >/dev/null
targets=(fuzz_sample_processor fuzz_config fuzz_control fuzz_metrics_http)
# The remote worker's harness exists when gRPC/protobuf/zstd were found (cmake/remote.cmake).
# (grep reads all of help's output: with -q, pipefail could see cmake die of SIGPIPE.)
remote=0
if cmake --build build-fuzz --target help | grep -E '(^\.\.\. |^)fuzz_remote_worker(:|$)' >/dev/null; then
  targets+=(fuzz_remote_worker)
  remote=1
fi
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]}"
run() {  # harness, dictionary, seed folders...
  local h=$1 dict=$2; shift 2
  mkdir -p "$corpus_root/$h" "build-fuzz/crashes/$h"
  echo "== $h for $secs"
  "build-fuzz/bin/fuzz_$h" "${limit[@]}" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -dict="$dict" -artifact_prefix="build-fuzz/crashes/$h/" "$corpus_root/$h" "$@"
}
run sample_processor tests/fuzz/image.dict tests/data/demo tests/data/corpus tests/data/formats tests/data/fuzz-regressions
run config tests/fuzz/config.dict tests/data/configs-malformed configs
run control tests/fuzz/control.dict tests/data/control-messages
run metrics_http tests/fuzz/http.dict tests/data/http-requests
if ((remote)); then
  STOKER_FUZZ_STATS=1 run remote_worker tests/fuzz/remote.dict tests/data/remote-messages
else
  echo "== remote_worker skipped (built without gRPC: scripts/setup.sh installs it)"
fi
echo "fuzz: no crash in $secs per harness"
