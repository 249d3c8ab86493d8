#!/usr/bin/env bash
# For a GPU machine that has the NVIDIA driver but not Stoker's build dependencies (no Boost,
# spdlog, yaml-cpp, gRPC ...) and no package registry: pack what scripts/gpu-check.sh runs
# from a build made here (any CUDA build: the driver is dlopen'ed, no CUDA runtime is linked),
# with the shared libraries those programs load (all but glibc's own), into one folder, and
# write its run.sh. Copy the folder into a checkout of the same commit on the GPU machine and
# run `bash FOLDER/run.sh` from the checkout's root: the gpu tier, the device integration
# cases through stokerd on the real driver, the kill storm and stoker_bench_gpu.
#   scripts/gpu-bundle.sh [BUILD_DIR] [FOLDER]     defaults: build .devgpu
# The test programs hold this machine's absolute paths (STOKER_BIN_DIR, STOKER_TEST_DATA_DIR);
# run.sh links those paths to the checkout and the folder where they are missing (as root).
# The Python Loader on the GPU: a GPU image's torch usually sits on another Python than this
# machine's, so the bundle carries the client's static libraries and the package's .py files,
# and run.sh compiles the module's three sources there with that machine's compiler, its
# python3's headers and its pybind11 (it needs nothing else), then runs the python device tests
# and scripts/bench-gpu-loader.py. Where that python3 has no headers, pybind11 or torch.cuda,
# those steps say so and the rest still runs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
out=${2:-.devgpu}
programs=(stokerd stokerctl device_test device_storm_test cuda_backend_test stoker_gpu_ipc_peer stoker_bench_gpu)
for p in "${programs[@]}"; do
  [[ -x "$build/bin/$p" ]] || { echo "gpu-bundle: $build/bin/$p is missing: cmake --build $build" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/libfallback"
for p in "${programs[@]}"; do strip -o "$out/bin/$p" "$build/bin/$p"; done
# Every library the programs load but glibc's (the target's glibc must be as new as this
# one's). libstdc++/libgcc_s go aside: run.sh uses them only where the target's are older.
for p in "$out"/bin/*; do ldd "$build/bin/$(basename "$p")"; done | awk '/=> \//{print $3}' | sort -u |
  while read -r lib; do
    case $(basename "$lib") in
      libc.so.*|libm.so.*|libresolv.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
      libstdc++.so.*|libgcc_s.so.*) cp -L "$lib" "$out/libfallback/" ;;
      *) cp -L "$lib" "$out/lib/" && strip --strip-unneeded "$out/lib/$(basename "$lib")" 2>/dev/null || true ;;
    esac
  done
# The Python package: its .py files, and what its native module links (built here, position
# independent: the module is a shared object).
mkdir -p "$out/python/stoker" "$out/pylib"
cp "$build"/python/stoker/*.py "$out/python/stoker/"
for a in stoker_client_static stoker_device stoker_base; do cp "$build/lib/lib$a.a" "$out/pylib/"; done
source_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
printf '%s\n%s\n' "$source_dir" "$build" > "$out/paths"
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Made by scripts/gpu-bundle.sh. Run from the root of a checkout of the same commit:
#   bash BUNDLE/run.sh            (figures and logs also go to $OUT when it is set)
set -uo pipefail
root=$PWD
bundle=$(cd "$(dirname "$0")" && pwd)
logs=${OUT:-$bundle/logs}
mkdir -p "$logs"
exec > >(tee "$logs/gpu-check.log") 2>&1
step() { printf '\n== %s  (%s s)\n' "$*" "$SECONDS"; }
{ read -r source_dir; read -r build_dir; } < "$bundle/paths"
# The programs look for stokerd in $build_dir/bin and for test data under $source_dir.
if [[ "$source_dir" != "$root" && ! -e "$source_dir" ]]; then mkdir -p "$(dirname "$source_dir")" && ln -s "$root" "$source_dir"; fi
if [[ ! -e "$build_dir" ]]; then ln -s "$bundle" "$build_dir"; fi
[[ "$(readlink -f "$build_dir/bin/stokerd")" == "$bundle/bin/stokerd" ]] ||
  { echo "run.sh: $build_dir is another build; run where it is free"; exit 1; }
export LD_LIBRARY_PATH=$bundle/lib
if ! "$bundle/bin/stokerd" --version >/dev/null 2>&1; then
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$bundle/libfallback
  echo "using the packing machine's libstdc++"
fi
step machine
grep -m1 PRETTY_NAME /etc/os-release; uname -r; nproc
nvidia-smi | grep -m1 -o 'Driver Version: [0-9.]* *CUDA Version: [0-9.]*'
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,compute_cap --format=csv
if ldd "$bundle/bin/stokerd" | grep 'not found'; then echo "MISSING LIBRARIES"; exit 1; fi
status=0
tier() {  # name timeout program [args]
  local name=$1 t=$2; shift 2; step "$name"
  timeout "$t" "$@" -w NoTests -d yes > "$logs/$name.log" 2>&1
  local rc=$?
  grep -E '^[0-9.]+ s:|^All tests|^test cases|FAILED|failed' "$logs/$name.log"
  echo "-- $name rc=$rc"; ((rc == 0)) || status=1
}
pystatus=0
step "python: the stoker module for this machine's python3"
py=${PYTHON:-python3}
ext=$($py -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
pyinc=$($py -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
pybind=$($py -c 'import pybind11; print(pybind11.get_include())' 2>/dev/null)
[[ -z "$pybind" && -f /usr/include/pybind11/pybind11.h ]] && pybind=/usr/include  # Debian's pybind11-dev
pybind_flag=(); [[ "$pybind" == /usr/include ]] || pybind_flag=(-isystem "$pybind")  # (-isystem /usr/include breaks libstdc++'s include_next)
echo "$($py --version) ($py), headers $pyinc, pybind11 ${pybind:-missing}, $(${CXX:-g++} --version | head -n 1)"
if [[ ! -f "$pyinc/Python.h" || -z "$pybind" ]]; then
  echo "SKIPPED: no Python.h or no pybind11 for $py"; pystatus=1
else
  # The three sources at once (8-9 s on the H200 machine, against 25-35 s one after another).
  objs=() pids=()
  mkdir -p "$bundle/pyobj"
  for src in "$root"/client/python/src/*.cpp; do
    obj="$bundle/pyobj/$(basename "$src" .cpp).o"; objs+=("$obj")
    ${CXX:-g++} -std=c++20 -O2 -fPIC -fvisibility=hidden -DNDEBUG -DSTOKER_VERSION='"bundle"' \
      -I"$root/client/include" -I"$root" -isystem "$pyinc" "${pybind_flag[@]}" -c "$src" -o "$obj" \
      > "$obj.log" 2>&1 &
    pids+=($!)
  done
  built=1
  for p in "${pids[@]}"; do wait "$p" || built=0; done
  cat "$bundle"/pyobj/*.log > "$logs/python-module.log"
  if ((built)) && ${CXX:-g++} -shared "${objs[@]}" "$bundle"/pylib/libstoker_client_static.a \
      "$bundle"/pylib/libstoker_device.a "$bundle"/pylib/libstoker_base.a -ldl -lrt -lpthread \
      -o "$bundle/python/stoker/_stoker$ext" >> "$logs/python-module.log" 2>&1; then
    echo "built $bundle/python/stoker/_stoker$ext"
  else
    tail -n 30 "$logs/python-module.log"; echo "python module: build FAILED"; pystatus=1; status=1
  fi
fi
if ((pystatus == 0)) && ! $py -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "SKIPPED: this python3's torch has no CUDA"; pystatus=1
fi
if ((pystatus == 0)); then
  step "python: stoker.Loader(device='cuda') (tests/python/test_device.py on cuda)"
  STOKER_TEST_DEVICE_BACKEND=cuda STOKER_BIN_DIR="$bundle/bin" PYTHONPATH="$bundle/python" \
    timeout 240 $py -m pytest -q -p no:cacheprovider tests/python/test_device.py 2>&1 | tee "$logs/python-device.log" | tail -n 40
  ((PIPESTATUS[0] == 0)) || { echo "python device tests FAILED"; status=1; }
  step "Loader on the GPU: ready -> tensor latency, images/s vs DataLoader (scripts/bench-gpu-loader.py)"
  PYTHONUNBUFFERED=1 timeout 240 $py scripts/bench-gpu-loader.py "$bundle" "${BENCH_IMAGES:-tests/data/demo}" \
    --batches "${BENCH_BATCHES:-300}" 2>&1 | tee "$logs/bench-gpu-loader.log"
  ((PIPESTATUS[0] == 0)) || { echo "bench-gpu-loader FAILED"; status=1; }
fi
export STOKER_REQUIRE_GPU=1
tier gpu-tier 120 "$bundle/bin/cuda_backend_test"
export STOKER_TEST_DEVICE_BACKEND=cuda STOKER_DEVICE_BACKEND=cuda
tier device-tier 240 "$bundle/bin/device_test"
tier device-storm 120 "$bundle/bin/device_storm_test"
step "GPU benchmark (stoker_bench_gpu --strict)"
timeout 90 "$bundle/bin/stoker_bench_gpu" --strict 2>&1 | tee "$logs/bench-gpu.log"
case ${PIPESTATUS[0]} in 0) ;; 2) echo "benchmark: a target was missed"; status=1 ;; *) echo "benchmark FAILED"; status=1 ;; esac
step result
((status == 0)) && echo "gpu-check (bundle): PASSED" || echo "gpu-check (bundle): FAILED"
exit $status
RUN
chmod +x "$out/run.sh"
echo "gpu-bundle: $out ($(du -sh "$out" | cut -f1)); on the GPU machine, from the checkout's root: bash $out/run.sh"
