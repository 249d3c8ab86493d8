#!/usr/bin/env bash
# Runs the libFuzzer harnesses (clang ASan + UBSan), starting from the seeds in tests/data; new
# crashes land in <build>/crashes/<harness>/. Copy a crash into tests/data/fuzz-regressions/
# (replayed by ctest in the unit tier) once it is fixed.
#   scripts/fuzz.sh [SECONDS]     each harness for SECONDS (default 60): the long, exploring
#                                 run, from the `fuzz` preset's optimised build (build-fuzz/)
#   scripts/fuzz.sh --runs N      N inputs per harness, fixed seed, fresh corpus: the same
#                                 inputs every time (what the test command's fuzz tier runs)
# STOKER_FUZZ_BUILD_DIR=DIR uses an existing build with STOKER_FUZZ=ON instead (scripts/test.sh
# passes its asan build, which holds the harnesses: one build for both tiers).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
limit=(-max_total_time="$secs")
build=${STOKER_FUZZ_BUILD_DIR:-build-fuzz}
corpus_root=$build/corpus
if [[ "${1:-}" == "--runs" ]]; then
  limit=(-runs="$2" -seed=1)
  secs="$2 runs"
  corpus_root=$build/corpus-fixed
  rm -rf "$corpus_root"
fi
if [[ -z "${STOKER_FUZZ_BUILD_DIR:-}" ]]; then
  [[ -f build-fuzz/CMakeCache.txt ]] || ! command -v ninja >/dev/null || export CMAKE_GENERATOR=Ninja
  cmake --preset fuzz >/dev/null
fi
cmake --build "$build" -j "$(nproc)" --target tier_fuzz
# The remote worker's harness exists when gRPC/protobuf/zstd were found (cmake/remote.cmake).
remote=0
[[ -x "$build/bin/fuzz_remote_worker" ]] && remote=1
# Each harness is one thread: as many run at once as there are cores (on CI's two, the fuzz
# tier takes about half the wall time it took one after another). Each writes its own log,
# printed in order once all are done; any harness's failure fails the run.
max_jobs=$(nproc)
names=()
reap() { wait -n || true; }  # a slot is free; each harness's status is in its .rc file
run() {  # harness, dictionary, seed folders...
  local h=$1 dict=$2; shift 2
  mkdir -p "$corpus_root/$h" "$build/crashes/$h"
  while (( $(jobs -rp | wc -l) >= max_jobs )); do reap; done
  names+=("$h")
  rm -f "$build/fuzz-$h.rc"
  { "$build/bin/fuzz_$h" "${limit[@]}" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      -dict="$dict" -artifact_prefix="$build/crashes/$h/" "$corpus_root/$h" "$@" > "$build/fuzz-$h.log" 2>&1 &&
      echo 0 > "$build/fuzz-$h.rc" || echo 1 > "$build/fuzz-$h.rc"; } &
}
run sample_processor tests/fuzz/image.dict tests/data/demo tests/data/corpus tests/data/formats tests/data/fuzz-regressions
run config tests/fuzz/config.dict tests/data/configs-malformed configs
run control tests/fuzz/control.dict tests/data/control-messages
run metrics_http tests/fuzz/http.dict tests/data/http-requests
run segment_check tests/fuzz/segment.dict tests/data/segment-headers
run list_xml tests/fuzz/list_xml.dict tests/data/list-xml
run tar_sidecar tests/fuzz/tar_sidecar.dict tests/data/tar-sidecars
if ((remote)); then
  STOKER_FUZZ_STATS=1 run remote_worker tests/fuzz/remote.dict tests/data/remote-messages
  run remote_reply tests/fuzz/remote.dict tests/data/remote-replies
else
  echo "== remote_worker skipped (built without gRPC: scripts/setup.sh installs it)"
fi
wait
failed=0
for h in "${names[@]}"; do
  echo "== $h for $secs"
  cat "$build/fuzz-$h.log"
  [[ "$(cat "$build/fuzz-$h.rc" 2>/dev/null)" == 0 ]] || failed=1
done
if ((failed)); then
  echo "fuzz: a harness failed (crash, leak or timeout; its log above, the input in $build/crashes/)" >&2
  exit 1
fi
echo "fuzz: no crash in $secs per harness"
