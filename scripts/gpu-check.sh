#!/usr/bin/env bash
# One command on a machine with an NVIDIA GPU and the CUDA toolkit (nvcc in $CUDA_HOME,
# /usr/local/cuda or PATH): build with the CUDA parts required, run the gpu test tier (a
# missing device is a failure here, not a skip), run the GPU benchmark, print the GPU model and
# every figure. Exits non-zero on any failure or missed target.
#   scripts/gpu-check.sh [BUILD_DIR]      default build-gpu
# Environment:
#   STOKER_CUDA_ARCHITECTURES  e.g. "90" (default: the compute capability nvidia-smi reports)
#   GPU_CHECK_ALL_TIERS=1      afterwards also build everything and run unit|integration|fault
#   JOBS                       parallel build jobs (default: nproc)
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
nvcc --version | tail -n 1
if command -v nvidia-smi >/dev/null; then
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

step "configure + build the CUDA parts ($build)"
cmake -S . -B "$build" -DSTOKER_CUDA=ON -DSTOKER_PYTHON=OFF -DCMAKE_BUILD_TYPE=Release \
  "-DSTOKER_CUDA_ARCHITECTURES=$arch" >/dev/null || exit 1
gpu_targets=(stoker_cuda_exporter stoker_cuda_importer stoker_bench_gpu stoker_gpu_ipc_peer
             gpu_normalize_test gpu_ipc_test cuda_fallback_test cuda_stub_test)
cmake --build "$build" -j "$jobs" --target "${gpu_targets[@]}" || exit 1

step "gpu tier (ctest -L gpu)"
export STOKER_REQUIRE_GPU=1   # a test that would skip fails instead: this machine must have a GPU
ctest --test-dir "$build" -L gpu -V 2>&1 | tee "$build/gpu-tier.log" | \
  grep -E '^[0-9]+: (normalize |device normalize|seed|peer|device 0|device free|SKIP|FAILED)|Test +#|tests passed|Skipped|Failed'
tier=${PIPESTATUS[0]}
if ((tier != 0)); then
  echo "gpu tier FAILED (full log: $build/gpu-tier.log)"
  status=1
fi
if grep -q 'Skipped' "$build/gpu-tier.log"; then
  echo "gpu tier: some tests were skipped on a GPU machine"
  status=1
fi
ctest --test-dir "$build" -R '^(stub_build\.)?(device delivery|a GPU UUID|device bytes|rings are keyed)' \
  --output-on-failure >/dev/null || { echo "cuda fallback unit tests FAILED"; status=1; }

step "GPU benchmark (stoker_bench_gpu)"
"$build/bin/stoker_bench_gpu" --strict
bench=$?
case $bench in
  0) ;;
  2) echo "benchmark: a target was missed"; status=1 ;;
  *) echo "benchmark FAILED (exit $bench)"; status=1 ;;
esac

if [[ "${GPU_CHECK_ALL_TIERS:-0}" == 1 ]]; then
  step "everything else on this machine (CUDA build, device present)"
  if cmake --build "$build" -j "$jobs"; then
    ctest --test-dir "$build" -L 'unit|integration|fault' -j "$jobs" --output-on-failure || status=1
  else
    echo "full build FAILED"
    status=1
  fi
fi

step "result"
((status == 0)) && echo "gpu-check: PASSED" || echo "gpu-check: FAILED"
exit $status
