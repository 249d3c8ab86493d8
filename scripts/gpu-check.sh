#!/usr/bin/env bash
# One call on a machine with an NVIDIA GPU and the CUDA toolkit (nvcc in $CUDA_HOME or
# /usr/local/cuda): build with the CUDA parts required, run the gpu test tier, run the GPU
# benchmark. Prints the GPU model and every figure; exits non-zero on any failure.
#   scripts/gpu-check.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
[[ -f scripts/setup.sh ]] && scripts/setup.sh --test >/dev/null || true
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
cmake -S . -B "$build" -DSTOKER_CUDA=ON -DSTOKER_PYTHON=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)"
echo "== gpu tier"
ctest --test-dir "$build" -L gpu --output-on-failure
echo "== host tiers on this machine (CUDA build, device present)"
ctest --test-dir "$build" -L 'unit|integration|fault' -j "$(nproc)"
echo "== GPU benchmark"
"$build/bin/stoker_bench_gpu"
