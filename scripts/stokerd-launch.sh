#!/usr/bin/env bash
# Starts stokerd in the background for a training script and waits until it serves.
#   eval "$(scripts/stokerd-launch.sh configs/imagenet-train.yaml)"   # sets STOKERD_PID (and
#                                       STOKER_SOCKET, which clients need only for a custom socket)
#   torchrun ... train.py
#   kill "$STOKERD_PID"
set -euo pipefail
config=${1:?usage: stokerd-launch.sh CONFIG [SOCKET]}
# Default: where clients look when nothing is set (proto/names.hpp), so a trainer started
# from any shell of this user finds it without the export line.
if [[ -n "${2:-}" ]]; then socket=$2
elif [[ -n "${STOKER_SOCKET:-}" ]]; then socket=$STOKER_SOCKET
elif [[ -n "${XDG_RUNTIME_DIR:-}" ]]; then socket=$XDG_RUNTIME_DIR/stoker/stoker.sock
elif [[ $(id -u) -eq 0 ]]; then socket=/run/stoker/stoker.sock
else socket=/tmp/stoker-$(id -u)/stoker.sock
fi
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${STOKERD:-$here/build/bin/stokerd}
log=${STOKER_LOG:-$(dirname "$socket")/stokerd.log}
mkdir -p "$(dirname "$socket")"
"$bin" --config "$config" --socket "$socket" >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 400); do
  [[ -S "$socket" ]] && { echo "export STOKER_SOCKET=$socket STOKERD_PID=$pid"; exit 0; }
  kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.05
done
echo "stokerd did not come up in 20 s; log: $log" >&2
exit 1
