#!/usr/bin/env bash
# Configures and builds into build/ (or $STOKER_BUILD_DIR). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${STOKER_BUILD_DIR:-build}
py=()
[[ -x /usr/bin/python3 ]] && py=(-DPython3_EXECUTABLE=/usr/bin/python3)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${py[@]}" "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
