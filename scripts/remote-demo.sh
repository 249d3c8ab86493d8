#!/usr/bin/env bash
# Remote workers on one machine (README.md, "More CPU than a node has"): builds as
# scripts/demo.sh does, starts two `stokerd --worker` on loopback and a stokerd whose job sends
# every sample to them, consumes a few epochs, checks the batches against the same job decoded
# locally (they must be identical), prints the daemon's status with its `remote` entries, and
# stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
# The demo's build folder and targets (scripts/demo.sh), so each demo reuses the other's build;
# STOKER_REMOTE=ON: a configure without gRPC stops here, naming the packages (scripts/setup.sh
# installs them), rather than building a stokerd without --worker.
build=${STOKER_DEMO_BUILD_DIR:-build-demo}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTOKER_BUILD_TESTS=OFF -DSTOKER_PYTHON=OFF -DSTOKER_REMOTE=ON >/dev/null
cmake --build "$build" --target stokerd stokerctl -j "$(nproc)"

data=$(cd tests/data/demo && pwd)   # the bundled photos; the workers may read nothing else
run_dir=$(mktemp -d /tmp/stoker-remote-demo-XXXXXX)
socket="$run_dir/stoker.sock"
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
  done
  rm -rf "$run_dir"
}
trap cleanup EXIT

# A free loopback port: bound and released by the kernel's choice (another program could take it
# in between; the worker then fails to start and the demo says so).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# A shared secret the workers and the daemon read from a file (never from the command line).
(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$run_dir/token")

workers=()
for i in 1 2; do
  port=$(free_port)
  "$build/bin/stokerd" --worker --listen "127.0.0.1:$port" --allow-root "$data" \
    --token-file "$run_dir/token" --threads 1 >"$run_dir/worker$i.log" 2>&1 &
  pids+=($!)
  workers+=("127.0.0.1:$port")
  echo "demo: worker $i listening on 127.0.0.1:$port (pid $!)"
done
# Up when the port accepts a connection.
for i in 0 1; do
  port=${workers[$i]##*:}
  for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    kill -0 "${pids[$i]}" 2>/dev/null || { cat "$run_dir/worker$((i + 1)).log"; echo "demo: worker $((i + 1)) failed to start" >&2; exit 1; }
    sleep 0.05
  done
done

# Two jobs with the same data, seed and pipeline: `remote` sends every sample to the workers
# (local: false, so the workers visibly do the work; true lets the daemon's own threads take
# their share first), `local` decodes on this daemon. A sample's pixels depend only on (config,
# seed, epoch, sample), so their batches must be equal.
job() {
  cat <<YAML
  $1:
    source: {type: imagefolder, root: "$data"}
    batch_size: 16
    shuffle: true
    seed: 42
    pipeline:
      - decode: {}
      - random_resized_crop: {size: 224, scale: [0.08, 1.0], ratio: [0.75, 1.3333]}
      - horizontal_flip: {p: 0.5}
    output: {dtype: uint8, layout: NCHW}
YAML
}
{
  echo "server: {workers: 1}"
  echo "jobs:"
  job remote
  echo "    remote:"
  echo "      workers: [\"${workers[0]}\", \"${workers[1]}\"]"
  echo "      local: false"
  echo "      token_file: $run_dir/token"
  job local
} >"$run_dir/stoker.yaml"

echo "demo: starting stokerd ($run_dir/stoker.yaml, socket $socket)"
"$build/bin/stokerd" --config "$run_dir/stoker.yaml" --socket "$socket" >"$run_dir/stokerd.log" 2>&1 &
pid=$!
pids+=("$pid")
for _ in $(seq 1 200); do
  [[ -S "$socket" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$run_dir/stokerd.log"; echo "demo: stokerd failed to start" >&2; exit 1; }
  sleep 0.05
done

echo "demo: consuming 3 epochs of the remote job (last batches shown)"
"$build/bin/stokerctl" consume --job remote --socket "$socket" --epochs 3 --dump "$run_dir/remote" | tail -n 3
echo "demo: consuming the same 3 epochs decoded locally"
"$build/bin/stokerctl" consume --job local --socket "$socket" --epochs 3 --dump "$run_dir/local" | tail -n 1
if diff -r -q "$run_dir/remote" "$run_dir/local" >/dev/null; then
  echo "demo: batches identical: $(find "$run_dir/remote" -name '*.images.npy' | wc -l) batches, remote == local"
else
  diff -r -q "$run_dir/remote" "$run_dir/local" | head -n 5
  echo "demo: the remote job's batches differ from the local job's" >&2; exit 1
fi

# The full document is long (every job's definition, rings, counters): show each job's
# `remote` list, one line per worker stream.
echo "demo: stokerctl status, each job's \`remote\` entries"
"$build/bin/stokerctl" status --socket "$socket" | python3 -c '
import json, sys
line = "  job {job}: worker {address}: in_flight {in_flight}, samples {samples}, reissued {reissued}, results over {results}, items over {items}"
for job in json.load(sys.stdin)["jobs"]:
    for w in job.get("remote", []):
        print(line.format(job=job["name"], **w))'

# Stop the daemon first (it closes its streams), then the workers; each must exit cleanly.
for i in 2 0 1; do
  kill -TERM "${pids[$i]}" 2>/dev/null || true   # one that died already is reported by wait
  if ! wait "${pids[$i]}"; then
    tail -n 20 "$run_dir"/*.log; echo "demo: pid ${pids[$i]} exited with an error" >&2; exit 1
  fi
done
pids=()
echo "demo: stokerd and both workers stopped cleanly"
tail -n 2 "$run_dir/stokerd.log"
