#!/usr/bin/env bash
# Installs what Stoker needs from Debian 12's own packages.
#   scripts/setup.sh          build + run dependencies
#   scripts/setup.sh --test   also the test dependencies (Catch2, Python, PyTorch, pytest), and
#                             s3rver (an S3-compatible server, from npm's default registry) into
#                             .deps/node/ of the clone, git-ignored: the s3:// sources' tests
#   scripts/setup.sh --list [--test]   prints the packages, one a line, and installs nothing
# Idempotent: packages already installed are not fetched again. The lists below are the source
# of the README's (tests/first_hour/test_first_hour.py keeps the two equal).
#
# Another apt (unattended-upgrades on a fresh machine, a second shell) holding apt's locks is
# waited for, with a line saying so, rather than failing with "Could not get lock":
#   STOKER_APT_LOCKS          the lock files to wait on (default: apt's and dpkg's own)
#   STOKER_APT_LOCK_TIMEOUT   seconds to wait before giving up (default 900)
set -euo pipefail

build_pkgs=(build-essential cmake pkg-config libboost-dev libjpeg62-turbo-dev libpng-dev libwebp-dev libtiff-dev
            nlohmann-json3-dev libcli11-dev libcurl4-openssl-dev
            libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libzstd-dev
            libspdlog-dev libyaml-cpp-dev pybind11-dev python3-dev python3-numpy)
test_pkgs=(catch2 python3-pytest python3-torch python3-torchvision python3-pil
           clang libclang-rt-14-dev  # clang: the ASan + fuzz build and the ThreadSanitizer build
           ninja-build lld ccache)   # the test command's build speed (docs/TESTING.md)

with_tests=0 list=0
for arg in "$@"; do
  case $arg in
    --test) with_tests=1 ;;
    --list) list=1 ;;
    *) echo "usage: scripts/setup.sh [--test] [--list]" >&2; exit 2 ;;
  esac
done
pkgs=("${build_pkgs[@]}")
((with_tests)) && pkgs+=("${test_pkgs[@]}")
if ((list)); then
  printf '%s\n' "${pkgs[@]}"
  exit 0
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# s3rver for the object-store tests (tests/support/s3_server.hpp finds it here), with npm,
# into the clone: nothing global, and `rm -rf .deps` undoes it.
install_s3rver() {
  ((with_tests)) || return 0
  local root
  root="$(cd "$(dirname "$0")/.." && pwd)"
  if [[ -x "$root/.deps/node/node_modules/.bin/s3rver" ]]; then
    return 0
  fi
  if ! command -v npm >/dev/null; then
    echo "setup: npm not found; the s3:// tests will be skipped (install Node.js with npm, then run this again)" >&2
    return 0
  fi
  echo "setup: installing s3rver 3.7.1 into $root/.deps/node (npm)"
  npm install --no-audit --no-fund --prefix "$root/.deps/node" s3rver@3.7.1 ||
    echo "setup: npm could not install s3rver; the s3:// tests will be skipped" >&2
}

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#pkgs[@]} packages already installed"
  install_s3rver
  exit 0
fi

# apt takes these with fcntl() (dpkg's frontend lock first; `apt-get update` the lists' lock,
# which apt's DPkg::Lock::Timeout does not cover). /proc/locks shows every lock with its
# holder's pid, so no root is needed to look.
read -r -a apt_locks <<<"${STOKER_APT_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}"
lock_timeout=${STOKER_APT_LOCK_TIMEOUT:-900}

# Prints "PID LOCK_FILE" for the first lock file that a process holds, nothing when none is held.
apt_lock_holder() {
  local f inode
  for f in "${apt_locks[@]}"; do
    [[ -e $f ]] || continue
    inode=$(stat -L -c %i "$f") || continue
    # /proc/locks: "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (FLOCK lines alike;
    # "->" lines are waiters, not holders).
    awk -v ino="$inode" -v f="$f" '$2 != "->" && $6 ~ (":" ino "$") { print $5, f; found = 1; exit }
                                   END { exit !found }' /proc/locks && return 0
  done
  return 0
}

wait_for_apt() {
  local holder pid file waited=0
  while holder=$(apt_lock_holder) && [[ -n $holder ]]; do
    read -r pid file <<<"$holder"
    if ((waited % 10 == 0)); then
      echo "setup: waiting for apt's lock (held by PID $pid $(cat "/proc/$pid/comm" 2>/dev/null || echo '?'): $file)," \
           "${waited} s of at most ${lock_timeout} s"
    fi
    if ((waited >= lock_timeout)); then
      echo "setup: apt's lock $file is still held by PID $pid after ${lock_timeout} s; run scripts/setup.sh again" \
           "once it is done (STOKER_APT_LOCK_TIMEOUT=SECONDS waits longer)" >&2
      exit 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
}

SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
echo "setup: installing ${missing[*]}"
wait_for_apt
# A lock taken between the wait and apt's start: update is retried after another wait; dpkg's
# lock is waited for by apt itself.
if ! $SUDO apt-get -o "DPkg::Lock::Timeout=$lock_timeout" update -q; then
  wait_for_apt
  $SUDO apt-get -o "DPkg::Lock::Timeout=$lock_timeout" update -q
fi
wait_for_apt
DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o "DPkg::Lock::Timeout=$lock_timeout" install -y -q \
  --no-install-recommends "${missing[@]}"
install_s3rver
