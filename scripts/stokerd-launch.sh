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
# The stokerd to run: $STOKERD, else this tree's build (scripts/build.sh's build/, then
# scripts/demo.sh's build-demo/), else an installed one on PATH.
if [[ -n "${STOKERD:-}" ]]; then bin=$STOKERD
elif [[ -x $here/build/bin/stokerd ]]; then bin=$here/build/bin/stokerd
elif [[ -x $here/build-demo/bin/stokerd ]]; then bin=$here/build-demo/bin/stokerd
elif command -v stokerd >/dev/null; then bin=$(command -v stokerd)
else
  echo "stokerd-launch.sh: no stokerd in $here/build/bin or $here/build-demo/bin, nor on PATH: build it" \
       "(scripts/build.sh, or cmake -S . -B build -DSTOKER_BUILD_TESTS=OFF && cmake --build build --target stokerd" \
       "-j \$(nproc)), or run scripts/demo.sh, or name one with STOKERD=PATH" >&2
  exit 1
fi
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
