#!/usr/bin/env bash
# Before/after comparison of two builds of stokerd on a busy machine.
#
# Wall-clock images/s on a shared machine moves by tens of percent between runs of the same
# binary (other tenants take the cores), so this script measures what load does not change
# much: the CPU seconds stokerd itself spends per image (user + system, from its rusage) and its
# peak resident memory (maxrss), alongside the wall rate for reference. Rounds alternate the
# order (A B, B A, ...) so a drift in the machine's state hits both sides alike; the summary is
# the median of each side and the ratio B/A.
#
# Usage: scripts/bench-compare.sh BUILD_A BUILD_B [IMAGES_DIR] [ROUNDS] [WORKERS]
#   BUILD_A, BUILD_B: build directories holding bin/stokerd and bin/stokerctl (e.g. an older
#   revision built in a git worktree, and this tree's build).
# One job per run: RandomResizedCrop 224 + flip, uint8, batch 64, one epoch over IMAGES_DIR.
# The CPU figure includes the prefetch the daemon runs past the consumer's last batch (the same
# number of batches on both sides), so compare the ratio, not the absolute value.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/benchlib.sh
[[ $# -ge 2 ]] || { sed -n '2,17p' "$0"; exit 2; }
build_a=$1 build_b=$2
images=${3:-/tmp/stoker-bench-images}
rounds=${4:-3}
workers=${5:-1}
for b in "$build_a" "$build_b"; do
  bench_program "$b" stokerd >/dev/null
  bench_program "$b" stokerctl >/dev/null
done
bench_images "$images"
n_files=$(find "$images" -type f -iname '*.jpg' | wc -l)
echo "bench-compare: $n_files JPEGs in $images; $workers worker(s); machine: $(bench_machine)"
echo "bench-compare: load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
find "$images" -type f -exec cat {} + >/dev/null   # warm the page cache: measure decode, not disk

work=$(mktemp -d /tmp/stoker-cmp-XXXXXX)
trap 'rm -rf "$work"' EXIT
cat >"$work/job.yaml" <<YAML
server: {workers: $workers, log_level: warn}
jobs:
  bench:
    source: {type: imagefolder, root: "$images"}
    batch_size: 64
    shuffle: true
    seed: 1
    prefetch: 4
    pipeline:
      - decode: {}
      - random_resized_crop: {size: 224}
      - horizontal_flip: {p: 0.5}
    output: {dtype: uint8, layout: NCHW}
YAML

# run_one BUILD LABEL: one daemon + one consumer over one epoch; appends
# "LABEL images_per_s cpu_ms_per_image maxrss_MiB" to $work/results.
run_one() {
  local build=$1 label=$2 socket="$work/s.sock" t0 t1 samples
  rm -f "$socket"
  t0=$(date +%s.%N)
  # GNU time reports the daemon's own rusage (user, system seconds; peak RSS in KiB).
  /usr/bin/time -f '%U %S %M' -o "$work/rusage" \
    "$build"/bin/stokerd --config "$work/job.yaml" --socket "$socket" 2>"$work/stokerd.log" &
  local time_pid=$!
  for _ in $(seq 1 500); do [[ -S "$socket" ]] && break; sleep 0.01; done
  samples=$("$build"/bin/stokerctl consume --job bench --socket "$socket" --epochs 1 |
    tail -n 1 | sed -E 's/.*"samples":([0-9]+).*/\1/')
  t1=$(date +%s.%N)
  pkill -TERM -P "$time_pid" stokerd || true
  wait "$time_pid" || true
  [[ $samples =~ ^[0-9]+$ && $samples -gt 0 ]] || {
    echo "bench-compare: $label served no samples; stokerd's log:" >&2; cat "$work/stokerd.log" >&2; exit 1; }
  read -r user sys maxrss <"$work/rusage"
  awk -v l="$label" -v n="$samples" -v a="$t0" -v b="$t1" -v u="$user" -v s="$sys" -v m="$maxrss" \
    'BEGIN { printf "%s %.1f %.3f %.1f\n", l, n / (b - a), 1000 * (u + s) / n, m / 1024 }' \
    | tee -a "$work/results"
}

echo "side images/s cpu_ms/image maxrss_MiB"
for r in $(seq 1 "$rounds"); do
  if (( r % 2 )); then run_one "$build_a" A; run_one "$build_b" B
  else run_one "$build_b" B; run_one "$build_a" A; fi
done

# Medians per side and the ratio B/A of each column.
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "bench-compare: medians over $rounds rounds (A = $build_a, B = $build_b)"
printf '%-16s %10s %10s %8s\n' column A B B/A
for col in 2:images/s 3:cpu_ms/image 4:maxrss_MiB; do
  i=${col%%:*} name=${col#*:}
  a=$(awk -v i="$i" '$1 == "A" { print $i }' "$work/results" | median)
  b=$(awk -v i="$i" '$1 == "B" { print $i }' "$work/results" | median)
  awk -v n="$name" -v a="$a" -v b="$b" 'BEGIN { printf "%-16s %10.2f %10.2f %8.3f\n", n, a, b, b / a }'
done
echo "bench-compare: load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
