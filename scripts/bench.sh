#!/usr/bin/env bash
# End-to-end benchmark, everything side by side in one run on the same files:
#   - libjpeg-turbo plain full decode on one core (the reference ceiling) and the engine's
#     per-stage breakdown (stoker_bench_decode);
#   - stokerd feeding a real consumer (stokerctl consume) for the train pipeline
#     (RandomResizedCrop 224 + flip, uint8; and float32 normalized) and the val pipeline
#     (Resize 256 + CenterCrop 224), at 1 worker and at all cores;
#   - torchvision's DataLoader with the same transforms, same files, same number of workers
#     (when Debian's python3-torchvision is installed);
# then prints the ratios. Usage: scripts/bench.sh [IMAGES_DIR] [EPOCHS]
# BUILD_DIR=DIR measures the programs already built there (e.g. another revision's build, for a
# before/after comparison run back to back) instead of building this tree into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/benchlib.sh
images=${1:-/tmp/stoker-bench-images}
epochs=${2:-1}
cores=$(nproc)

bench_images "$images"
build=${BUILD_DIR:-build}
[[ -n ${BUILD_DIR:-} ]] || scripts/build.sh -DSTOKER_BUILD_BENCHMARKS=ON >/dev/null
n_files=$(find "$images" -type f -iname '*.jpg' | wc -l)
echo "bench: $n_files JPEGs in $images; machine: $(bench_machine)"
find "$images" -type f -exec cat {} + >/dev/null   # warm the page cache: measure decode, not disk

work=$(mktemp -d /tmp/stoker-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT

# stokerd + one consumer over one epoch; prints images/s.
stoker_rate() {  # $1 pipeline yaml, $2 dtype, $3 workers, $4 normalize (yes|no)
  local cfg="$work/bench.yaml" socket="$work/s.sock" norm=""
  [[ $4 == yes ]] && norm="      - normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}"
  cat >"$cfg" <<YAML
server: {workers: $3, log_level: warn}
jobs:
  bench:
    source: {type: imagefolder, root: "$images"}
    batch_size: 64
    shuffle: true
    seed: 1
    prefetch: 6
    pipeline:
      - decode: {}
$1
$norm
    output: {dtype: $2, layout: NCHW}
YAML
  # The clock starts before the daemon does, so its prefetch is inside the measured window.
  local t0 t1 samples
  t0=$(date +%s.%N)
  "$build"/bin/stokerd --config "$cfg" --socket "$socket" 2>"$work/stokerd.log" &
  local pid=$!
  for _ in $(seq 1 400); do [[ -S "$socket" ]] && break; sleep 0.01; done
  samples=$("$build"/bin/stokerctl consume --job bench --socket "$socket" --epochs "$epochs" |
    tail -n 1 | sed -E 's/.*"samples":([0-9]+).*/\1/')
  t1=$(date +%s.%N)
  kill -TERM "$pid"; wait "$pid" || true
  awk -v n="$samples" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", n / (b - a) }'
}

train='      - random_resized_crop: {size: 224}
      - horizontal_flip: {p: 0.5}'
val='      - resize: {size: 256}
      - center_crop: {size: 224}'

echo "bench: engine on one core (no daemon)"
"$build"/bin/stoker_bench_decode "$images" | tee "$work/engine.txt"
full=$(grep -E '^full_decode' "$work/engine.txt" | awk '{print $2}')

declare -A R
for w in 1 "$cores"; do
  R[train_u8_$w]=$(stoker_rate "$train" uint8 "$w" no)
  R[train_f32_$w]=$(stoker_rate "$train" float32 "$w" yes)
  R[val_u8_$w]=$(stoker_rate "$val" uint8 "$w" no)
done

tv=""
if /usr/bin/python3 -c 'import torchvision' 2>/dev/null; then
  echo "bench: torchvision DataLoader, $cores workers"
  /usr/bin/python3 scripts/bench-torchvision.py "$images" --workers "$cores" --epochs "$epochs" | tee "$work/tv.txt"
  tv=yes
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo
echo "== results (images/s; $cores cores; $n_files files; $epochs epoch(s))"
printf '%-44s %10s\n' "libjpeg-turbo full decode, 1 core" "$full"
for w in 1 "$cores"; do
  printf '%-44s %10s\n' "stokerd train uint8, $w worker(s)" "${R[train_u8_$w]}"
  printf '%-44s %10s\n' "stokerd train float32 normalized, $w worker(s)" "${R[train_f32_$w]}"
  printf '%-44s %10s\n' "stokerd val uint8, $w worker(s)" "${R[val_u8_$w]}"
done
echo "ratio stokerd train uint8 1 worker / full decode 1 core: $(ratio "${R[train_u8_1]}" "$full")  (target >= 1.05)"
if [[ -n "$tv" ]]; then
  tv_u8=$(grep -E '^train_uint8' "$work/tv.txt" | awk '{print $2}')
  tv_f32=$(grep -E '^train_float32' "$work/tv.txt" | awk '{print $2}')
  tv_val=$(grep -E '^val_uint8' "$work/tv.txt" | awk '{print $2}')
  echo "ratio train uint8 vs torchvision ($cores vs $cores workers): $(ratio "${R[train_u8_$cores]}" "$tv_u8")  (target >= 2.2)"
  echo "ratio train float32 vs torchvision ($cores vs $cores workers): $(ratio "${R[train_f32_$cores]}" "$tv_f32")  (target >= 2.4)"
  echo "ratio val uint8 vs torchvision ($cores vs $cores workers): $(ratio "${R[val_u8_$cores]}" "$tv_val")"
fi
