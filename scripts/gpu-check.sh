#!/usr/bin/env bash
# One command on a machine with an NVIDIA GPU and the CUDA toolkit (nvcc in $CUDA_HOME,
# /usr/local/cuda or PATH): build with the CUDA parts required, run the gpu test tier (a
# missing device is a failure here, not a skip), the device path end to end through stokerd
# with the cuda backend, the Python Loader on the GPU where torch has CUDA, then the GPU
# benchmark; prints the GPU model and every figure. Exits non-zero on any failure or missed
# target.
#   scripts/gpu-check.sh [BUILD_DIR]      default build-gpu
# Environment:
#   STOKER_CUDA_ARCHITECTURES  e.g. "90" (default: the compute capability nvidia-smi reports)
#   GPU_CHECK_ALL_TIERS=1      afterwards also run unit|integration|fault on this machine
#   JOBS                       parallel build jobs (default: nproc)
# A GPU machine without the build dependencies (no Boost, spdlog ..., no registry): build here
# and carry the programs with scripts/gpu-bundle.sh instead.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
jobs=${JOBS:-$(nproc)}
status=0
step() { printf '\n== %s\n' "$*"; }

if [[ -x scripts/setup.sh ]]; then
  step "dependencies (scripts/setup.sh --test)"
  scripts/setup.sh --test || echo "setup.sh failed (offline?); continuing with what is installed"
fi

cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [[ -x "$cuda_home/bin/nvcc" ]]; then
  export CUDA_HOME=$cuda_home PATH="$cuda_home/bin:$PATH"
elif ! command -v nvcc >/dev/null; then
  echo "gpu-check: no nvcc (set CUDA_HOME)" >&2
  exit 1
fi

step "machine"
echo "CUDA toolkit: $(nvcc --version | grep -o 'release [0-9.]*' | head -n 1)"
if command -v nvidia-smi >/dev/null; then
  # Driver version and the CUDA version it supports (the banner's "CUDA Version").
  nvidia-smi | grep -m 1 -o 'Driver Version: [0-9.]* *CUDA Version: [0-9.]*' || true
  nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,compute_cap,pcie.link.gen.max,pcie.link.width.max \
    --format=csv || true
else
  echo "nvidia-smi not found"
fi
arch=${STOKER_CUDA_ARCHITECTURES:-}
if [[ -z "$arch" ]] && command -v nvidia-smi >/dev/null; then
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
fi
arch=${arch:-80;90}
echo "CUDA architectures: $arch"

step "configure + build ($build, CUDA parts required)"
cmake -S . -B "$build" -DSTOKER_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DSTOKER_CUDA_ARCHITECTURES=$arch" >/dev/null || exit 1
cmake --build "$build" -j "$jobs" || exit 1

step "gpu tier (ctest -L gpu): normalize == table, no leak over 100 rings, IPC to another process"
export STOKER_REQUIRE_GPU=1   # a test that would skip fails instead: this machine must have a GPU
ctest --test-dir "$build" -L gpu --output-on-failure 2>&1 | tee "$build/gpu-tier.log" | \
  grep -E 'Test +#|tests passed|tests failed|Skipped|Failed'
if ((PIPESTATUS[0] != 0)) || grep -q 'Skipped' "$build/gpu-tier.log"; then
  echo "gpu tier FAILED or skipped on a GPU machine (full log: $build/gpu-tier.log)"
  status=1
fi

step "device path end to end through stokerd on the real GPU (ctest -L device, backend cuda)"
# The same cases CI runs under the host simulation and the driver emulation; those that need
# a simulated device list or its object counts return early here. (-LE device-emu: the
# emulated copies would load the emulation, not this GPU's driver.)
STOKER_TEST_DEVICE_BACKEND=cuda STOKER_DEVICE_BACKEND=cuda \
  ctest --test-dir "$build" -L device -LE device-emu --output-on-failure 2>&1 | tee "$build/device-tier.log" | \
  grep -E 'Test +#|tests passed|tests failed|Failed'
((PIPESTATUS[0] == 0)) || { echo "device tier on cuda FAILED"; status=1; }

step "python: stoker.Loader(device='cuda') (needs a torch built with CUDA)"
if PYTHONPATH="$build/python" /usr/bin/python3 -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  STOKER_TEST_DEVICE_BACKEND=cuda STOKER_BIN_DIR="$build/bin" PYTHONPATH="$build/python" \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/test_device.py || { echo "python device tests FAILED"; status=1; }
else
  echo "SKIPPED: this interpreter's torch has no CUDA (Debian's python3-torch is CPU-only)"
fi

step "GPU benchmark (stoker_bench_gpu)"
"$build/bin/stoker_bench_gpu" --strict
bench=$?
case $bench in
  0) ;;
  2) echo "benchmark: a target was missed"; status=1 ;;
  *) echo "benchmark FAILED (exit $bench)"; status=1 ;;
esac

step "Loader on the GPU: ready -> tensor latency, images/s vs DataLoader (scripts/bench-gpu-loader.py)"
/usr/bin/python3 scripts/bench-gpu-loader.py "$build" "${BENCH_IMAGES:-tests/data/demo}" --batches 400
case $? in
  0) ;;
  77) echo "SKIPPED: this interpreter's torch has no CUDA" ;;
  *) echo "bench-gpu-loader FAILED"; status=1 ;;
esac

if [[ "${GPU_CHECK_ALL_TIERS:-0}" == 1 ]]; then
  step "everything else on this machine (CUDA build, device present)"
  ctest --test-dir "$build" -L 'unit|integration|fault' -j "$jobs" --output-on-failure || status=1
fi

step "result"
((status == 0)) && echo "gpu-check: PASSED" || echo "gpu-check: FAILED"
exit $status
