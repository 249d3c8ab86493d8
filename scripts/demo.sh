#!/usr/bin/env bash
# The main job in one command: install, build, start stokerd on the bundled dataset
# (tests/data/demo, 64 real photos), consume it with a real consumer, print images/s and the
# daemon's status, stop the daemon cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
# Only the two programs the demo runs, in a build folder of their own without the test tiers
# (scripts/build.sh builds every test program too: ~50 objects, many minutes on a small machine).
build=${STOKER_DEMO_BUILD_DIR:-build-demo}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTOKER_BUILD_TESTS=OFF -DSTOKER_PYTHON=OFF >/dev/null
cmake --build "$build" --target stokerd stokerctl -j "$(nproc)"

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

# Five epochs of the 64 photos: the first is mostly prefetched while the consumer connects,
# the rest run at the daemon's real decode rate.
echo "demo: consuming 5 epochs as rank 0 (last batches shown)"
"$build/bin/stokerctl" consume --job demo --socket "$socket" --epochs 5 | tail -n 3
echo "demo: daemon status"
"$build/bin/stokerctl" status --socket "$socket"
echo

kill -TERM "$pid"
if wait "$pid"; then
  echo "demo: stokerd stopped cleanly"
else
  cat "$log"; echo "demo: stokerd exited with an error" >&2; exit 1
fi
pid=""
tail -n 2 "$log"
