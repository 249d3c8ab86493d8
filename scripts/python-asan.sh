#!/usr/bin/env bash
# The Python suite with the native module (_stoker) under clang's AddressSanitizer and UBSan.
#
# Why by hand, not a CI tier: the module is C against CPython's API (reference counts, GIL
# hand-offs, buffer exports), which no CI tier sanitizes (the asan and tsan presets build no
# Python). A run takes ~3 minutes on 2 cores: run it after changing client/python/src.
#
#   scripts/python-asan.sh [PLAIN_BUILD [PYTEST ARGS]]   (default build: its stokerd and tools serve the tests)
#
# The interpreter itself is not instrumented, so the sanitizer runtime is preloaded into it and
# its objects are allocated with malloc (PYTHONMALLOC), where ASan sees a freed one used; the
# daemon and tools the tests start get it unset (they are the plain build's, through wrappers).
# Reports go to files ($out/sanitizer.PID), since pytest captures the test's stderr. Leak
# checking is off (CPython keeps its objects at exit). Left out: the packaging tests and one
# that uploads with curl (the preload breaks the build, install and upload tools they run),
# and test_reference_port.py and test_gpu_tools.py, which run torch's DataLoader with forked
# workers: they hung once in three runs with the runtime preloaded, and that side is torch's.
# test_ten_thousand_batches_without_memory_growth runs apart, with no quarantine of freed
# memory (ASan's holding it back would read as growth).
set -euo pipefail
cd "$(dirname "$0")/.."
plain=${1:-build}
[ $# -gt 0 ] && shift  # the rest goes to pytest
out=build-pyasan
[ -x "$plain/bin/stokerd" ] || { echo "python-asan: no $plain/bin/stokerd: build the plain preset first" >&2; exit 2; }
rt=$(clang -print-file-name=libclang_rt.asan-x86_64.so)
[ -f "$rt" ] || { echo "python-asan: clang's ASan runtime not found ($rt)" >&2; exit 2; }
flags="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer"
mkdir -p "$out"
cmake -S . -B "$out" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DSTOKER_CUDA=OFF -DSTOKER_PYTHON=ON -DPython3_EXECUTABLE=/usr/bin/python3 -DSTOKER_BUILD_BENCHMARKS=OFF > "$out/configure.log"
cmake --build "$out" --target stoker_python_native -j "$(nproc)"
bin="$out/plain-bin"
rm -rf "$bin" && mkdir -p "$bin"
for f in "$PWD/$plain"/bin/*; do
  printf '#!/bin/sh\nunset LD_PRELOAD ASAN_OPTIONS UBSAN_OPTIONS\nexec %s "$@"\n' "$f" > "$bin/$(basename "$f")"
  chmod +x "$bin/$(basename "$f")"
done
log="$out/pytest.log"
rm -f "$out"/sanitizer.* "$log"
growth=tests/python/test_loader.py::test_ten_thousand_batches_without_memory_growth
# quarantine: MiB of freed memory ASan holds back, to see it used (256 is its default).
pytest_under_asan() {
  local quarantine=$1
  shift
  PYTHONMALLOC=malloc LD_PRELOAD="$rt" \
    ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:quarantine_size_mb=$quarantine:log_path="$PWD/$out/sanitizer" \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path="$PWD/$out/sanitizer" PYTHONPATH="$out/python" \
    STOKER_BIN_DIR="$PWD/$bin" /usr/bin/python3 -m pytest -q -p no:cacheprovider "$@" >> "$log" 2>&1
}
set +e
pytest_under_asan 256 tests/python --ignore=tests/python/test_packaging.py \
  --ignore=tests/python/test_reference_port.py --ignore=tests/python/test_gpu_tools.py --deselect "$growth" \
  --deselect tests/python/test_remote.py::test_workers_read_a_bucket_with_their_own_credentials "$@"
rc=$?
pytest_under_asan 0 "$growth"  # a filling quarantine would read as growth
[ $? -eq 0 ] || rc=1
set -e
grep -E "(passed|failed)" "$log"
if compgen -G "$out/sanitizer.*" > /dev/null; then
  head -20 "$out"/sanitizer.* >&2
  echo "python-asan: the sanitizers reported: $(ls "$out"/sanitizer.*)" >&2
  exit 1
fi
exit "$rc"
