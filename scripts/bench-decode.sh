#!/usr/bin/env bash
# The decode + augment engine on one core beside torchvision's DataLoader on the same files:
#   scripts/bench-decode.sh [IMAGES_DIR] [BUILD_DIR] [SECONDS]
# IMAGES_DIR defaults to /tmp/stoker-bench-images (made by scripts/bench-images.sh when
# absent); BUILD_DIR must hold bin/stoker_bench_decode (default build). Prints the engine's
# images/s per pipeline (median of interleaved rounds, as a multiple of plain libjpeg-turbo
# full decode), torchvision's images/s with 1 and with all cores' workers, and the engine's
# speed per core over torchvision's.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/benchlib.sh
images=${1:-/tmp/stoker-bench-images}
build=${2:-build}
seconds=${3:-10}
bench_images "$images"
bench=$(bench_program "$build" stoker_bench_decode)
cores=$(nproc)

echo "== engine, 1 thread: $bench $images $seconds 5"
engine=$("$bench" "$images" "$seconds" 5)
echo "$engine"
declare -A tv1 tvn
echo "== torchvision DataLoader, 1 worker"
while read -r name rate; do tv1[$name]=$rate; echo "$name $rate"; done \
  < <(/usr/bin/python3 scripts/bench-torchvision.py "$images" --workers 1 --epochs 2)
echo "== torchvision DataLoader, $cores workers"
while read -r name rate; do tvn[$name]=$rate; echo "$name $rate"; done \
  < <(/usr/bin/python3 scripts/bench-torchvision.py "$images" --workers "$cores" --epochs 2)

echo "== per core: engine (1 thread) / torchvision ($cores workers / $cores cores)"
while read -r name rate _; do
  [[ -n ${tvn[$name]:-} ]] || continue
  awk -v n="$name" -v e="$rate" -v t="${tvn[$name]}" -v c="$cores" \
    'BEGIN { printf "%s engine %.0f/s, torchvision %.0f/s per core: %.2fx\n", n, e, t / c, e / (t / c) }'
done <<< "$engine"
