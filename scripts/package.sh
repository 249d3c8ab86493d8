#!/usr/bin/env bash
# Builds the Debian package: a release build configured for /usr with the systemd unit and
# /etc/stoker/stoker.yaml, packed by CPack (DEB). Prints the .deb's path on its last line.
#   scripts/package.sh                 -> build-deb/stoker_<version>_<arch>.deb
#   STOKER_DEB_BUILD_DIR=DIR scripts/package.sh [cmake args...]
# Install it with `sudo apt install ./build-deb/stoker_*.deb` (README, "Operations").
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath -m "${STOKER_DEB_BUILD_DIR:-build-deb}")
py=()
[[ -x /usr/bin/python3 ]] && py=(-DPython3_EXECUTABLE=/usr/bin/python3)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr -DSTOKER_SYSTEM_FILES=ON \
  -DSTOKER_BUILD_TESTS=OFF "${py[@]}" "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"  # tests off: the daemon, the client, the Python module
if ! (cd "$build" && cpack -G DEB >cpack.log 2>&1); then
  cat "$build/cpack.log" >&2
  exit 1
fi
ls -1 "$build"/stoker_*.deb | tail -1
