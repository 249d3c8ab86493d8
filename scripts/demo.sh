#!/usr/bin/env bash
# The main job in one command: install, build, start stokerd on the bundled dataset
# (tests/data/demo, 64 real photos), consume it with a real consumer for a few seconds, stop
# the daemon cleanly, and say in a few lines what ran and how fast; the last line is
#   demo: 1234 images/s over 3.0 s, the consumer waited 97% of the time for data
#   scripts/demo.sh [--json] [--prebuilt DIR]
#     --json          also print the raw JSON: the consumer's lines and the daemon's status
#     --prebuilt DIR  run the programs in DIR/bin as they are (no setup, no build)
#   STOKER_DEMO_SECONDS   how long the consumer takes batches (default 3)
#   STOKER_DEMO_BUILD_DIR where to build (default build-demo)
set -euo pipefail
cd "$(dirname "$0")/.."

json=0 prebuilt=""
while (($#)); do
  case $1 in
    --json) json=1 ;;
    --prebuilt) prebuilt=${2:?--prebuilt needs a build folder}; shift ;;
    *) echo "usage: scripts/demo.sh [--json] [--prebuilt DIR]" >&2; exit 2 ;;
  esac
  shift
done
seconds=${STOKER_DEMO_SECONDS:-3}

if [[ -n $prebuilt ]]; then
  build=$prebuilt
else
  scripts/setup.sh
  # Only the two programs the demo runs, in a build folder of their own without the test tiers
  # or the benchmarks (scripts/build.sh builds every test program too: many minutes on a small
  # machine). scripts/stokerd-launch.sh finds the stokerd built here.
  build=${STOKER_DEMO_BUILD_DIR:-build-demo}
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTOKER_BUILD_TESTS=OFF -DSTOKER_PYTHON=OFF >/dev/null
  cmake --build "$build" --target stokerd stokerctl -j "$(nproc)"
fi

run_dir=$(mktemp -d /tmp/stoker-demo-XXXXXX)
socket="$run_dir/stoker.sock"
log="$run_dir/stokerd.log"
cleanup() {
  if [[ -n "${pid:-}" ]] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
  rm -rf "$run_dir"
}
trap cleanup EXIT

echo "demo: starting stokerd (configs/demo.yaml, socket $socket)"
"$build/bin/stokerd" --config configs/demo.yaml --socket "$socket" >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do
  [[ -S "$socket" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "demo: stokerd failed to start" >&2; exit 1; }
  sleep 0.05
done

# Seconds rather than epochs: the 64 photos are a few batches, and a rate over a fraction of a
# second (the first batches prefetched while the consumer connects) means little.
echo "demo: consuming for $seconds s as rank 0"
"$build/bin/stokerctl" consume --job demo --socket "$socket" --seconds "$seconds" >"$run_dir/consume.jsonl" ||
  { cat "$log"; echo "demo: the consumer failed" >&2; exit 1; }
"$build/bin/stokerctl" status --socket "$socket" >"$run_dir/status.json"

kill -TERM "$pid"
if ! wait "$pid"; then
  cat "$log"; echo "demo: stokerd exited with an error" >&2; exit 1
fi
pid=""
if ((json)); then
  cat "$run_dir/consume.jsonl" "$run_dir/status.json"
fi

# The human lines, from the consumer's summary (its last line) and the daemon's status.
python3 - "$run_dir/consume.jsonl" "$run_dir/status.json" <<'EOF'
import json, sys

summary = json.loads(open(sys.argv[1]).read().splitlines()[-1])
status = json.loads(open(sys.argv[2]).read())
job = next(j for j in status["jobs"] if j["name"] == "demo")
consumer = job["consumers"][0]
print(f"demo: ran stokerd ({status['workers']} decode threads) on the {consumer['samples_per_epoch']} bundled photos "
      f"(tests/data/demo; job 'demo' of configs/demo.yaml: decode, random-resized-crop 224, flip, batches of "
      f"{job['batch_size']}) and one consumer (stokerctl consume): {summary['batches']} batches, "
      f"{summary['epochs']} epochs; stokerd stopped cleanly")
print("demo: next: scripts/stokerd-launch.sh configs/demo.yaml runs it in the background (README, Running the "
      "daemon); a trainer reads it with `import stoker` (README, Python / PyTorch); your own data: copy "
      "configs/demo.yaml and set source.root (configs/README.md); --json prints the raw JSON")
rate, span = summary["images_per_s"], summary.get("steady_seconds")
if rate is None:  # too short for a steady rate: say so rather than print a flattering one
    rate, span, how = summary["images_per_s_with_prefetched"], summary["seconds"], " (too short a run to leave out the prefetched batches)"
else:
    how = ""
print(f"demo: {rate:.0f} images/s over {span:.1f} s{how}, the consumer (which does no work of its own) "
      f"waited {100 * consumer['wait_fraction']:.0f}% of the time for data")
EOF
