#!/usr/bin/env bash
# Installs what Stoker needs from Debian 12's own packages.
#   scripts/setup.sh          build + run dependencies
#   scripts/setup.sh --test   also the test dependencies (Catch2, Python, PyTorch, pytest)
# Idempotent: packages already installed are not fetched again.
set -euo pipefail

build_pkgs=(build-essential cmake pkg-config libboost-dev libjpeg62-turbo-dev libpng-dev libwebp-dev libtiff-dev
            nlohmann-json3-dev libcli11-dev
            libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libzstd-dev
            libspdlog-dev libyaml-cpp-dev pybind11-dev python3-dev python3-numpy)
test_pkgs=(catch2 python3-pytest python3-torch python3-torchvision python3-pil
           clang libclang-rt-14-dev  # clang: the ASan + fuzz build and the ThreadSanitizer build
           ninja-build lld ccache)   # the test command's build speed (docs/TESTING.md)

pkgs=("${build_pkgs[@]}")
[[ "${1:-}" == "--test" ]] && pkgs+=("${test_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#pkgs[@]} packages already installed"
  exit 0
fi

SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
