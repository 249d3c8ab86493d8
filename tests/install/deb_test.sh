#!/usr/bin/env bash
# The Debian package, from ctest (label package).
#   deb_test.sh build WORK   builds it with scripts/package.sh into WORK and checks its files,
#                            control fields and the unit (dpkg-deb -c / -I)
#   deb_test.sh install WORK as root: installs WORK's .deb into this machine with apt, runs
#                            stokerd, stokerctl, `import stoker`, pkg-config and a status query
#                            through the installed files, then purges it and checks nothing is
#                            left. Exits 77 (ctest: Skipped) when not root, when dpkg/apt are
#                            missing, or when a stoker package is already installed here (it
#                            is not ours to remove).
set -euo pipefail
mode=${1:?usage: deb_test.sh build|install WORK}
work=${2:?usage: deb_test.sh build|install WORK}
src=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "deb_test: FAIL: $*" >&2; exit 1; }

if [[ $mode == build ]]; then
  rm -f "$work"/stoker_*.deb
  deb=$(STOKER_DEB_BUILD_DIR="$work" "$src/scripts/package.sh" | tail -1)
  [[ -f $deb ]] || fail "scripts/package.sh made no .deb (last line: $deb)"
  files=$(dpkg-deb -c "$deb" | awk '{print $6}')
  for want in ./usr/bin/stokerd ./usr/bin/stokerctl ./usr/include/stoker/stoker.h ./usr/include/stoker/stoker.hpp \
              ./usr/lib/python3/dist-packages/stoker/__init__.py ./usr/lib/python3/dist-packages/stoker/loader.py \
              ./lib/systemd/system/stokerd.service ./etc/stoker/stoker.yaml; do
    grep -qxF "$want" <<<"$files" || fail "$want is not in the package"
  done
  for pattern in '^\./usr/lib/[^/]+/libstoker\.so\.0$' '^\./usr/lib/[^/]+/pkgconfig/stoker\.pc$' \
                 '^\./usr/lib/[^/]+/cmake/stoker/stokerConfig\.cmake$' \
                 '^\./usr/lib/python3/dist-packages/stoker/_stoker\..*\.so$'; do
    grep -qE "$pattern" <<<"$files" || fail "nothing matching $pattern in the package"
  done
  info=$(dpkg-deb -I "$deb")
  depends=$(dpkg-deb -f "$deb" Depends)
  # From dpkg-shlibdeps: the decoders' and the config parser's libraries, and the interpreter.
  for dep in libjpeg62-turbo libpng16-16 libwebp7 libtiff6 libyaml-cpp libspdlog libc6 python3; do
    grep -q "$dep" <<<"$depends" || fail "Depends lacks $dep: $depends"
  done
  grep -q '/etc/stoker/stoker.yaml' <(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles) ||
    fail "/etc/stoker/stoker.yaml is not a conffile"
  [[ $(dpkg-deb -f "$deb" Package) == stoker ]] || fail "package name: $(dpkg-deb -f "$deb" Package)"
  unit=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./lib/systemd/system/stokerd.service)
  grep -q '^ExecStart=/usr/bin/stokerd ' <<<"$unit" || fail "the unit does not start /usr/bin/stokerd"
  grep -q '^Type=notify' <<<"$unit" || fail "the unit is not Type=notify"
  echo "$info" | sed -n '/Package:/,$p'
  echo "deb_test: $deb has its files, conffile, unit and Depends: $depends"
  exit 0
fi

[[ $mode == install ]] || fail "unknown mode $mode"
if [[ $(id -u) -ne 0 ]]; then echo "deb_test: SKIPPED: installing the .deb needs root"; exit 77; fi
if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then echo "deb_test: SKIPPED: no apt/dpkg"; exit 77; fi
if dpkg-query -W -f='${Status}' stoker 2>/dev/null | grep -q installed; then
  echo "deb_test: SKIPPED: a stoker package is already installed on this machine"; exit 77
fi
deb=$(ls -1 "$work"/stoker_*.deb | tail -1)
# Dependencies are Debian's and already here (scripts/setup.sh): nothing is downloaded.
purge() { DEBIAN_FRONTEND=noninteractive apt-get purge -y -q stoker >/dev/null 2>&1 || dpkg --purge stoker >/dev/null 2>&1 || true; }
trap purge EXIT
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$deb" \
  || fail "apt-get install $deb failed"

# From a neutral folder, with no variable pointing into the build.
tmp=$(mktemp -d)
trap 'purge; rm -rf "$tmp"' EXIT
cd "$tmp"
unset PYTHONPATH LD_LIBRARY_PATH PKG_CONFIG_PATH STOKER_SOCKET
/usr/bin/stokerd --version | grep -q '^stokerd ' || fail "stokerd --version"
/usr/bin/stokerctl --version | grep -q '^stokerctl ' || fail "stokerctl --version"
where=$(/usr/bin/python3 -c 'import stoker, os; print(os.path.dirname(stoker.__file__)); stoker.Loader')
[[ $where == /usr/lib/python3/dist-packages/stoker ]] || fail "python3 imported stoker from $where"
pkg-config --libs stoker | grep -q -- '-lstoker' || fail "pkg-config does not find the installed stoker.pc"
[[ -f /etc/stoker/stoker.yaml ]] || fail "no /etc/stoker/stoker.yaml"
# The installed daemon serves the demo job to the installed stokerctl.
sed "s|root: ../tests/data/demo|root: $src/tests/data/demo|" "$src/configs/demo.yaml" > demo.yaml
/usr/bin/stokerd --config demo.yaml --socket "$tmp/s.sock" >stokerd.log 2>&1 &
pid=$!
for _ in $(seq 1 200); do [[ -S $tmp/s.sock ]] && break; sleep 0.05; done
/usr/bin/stokerctl consume --job demo --socket "$tmp/s.sock" --batches 2 >consume.log 2>&1 ||
  { cat stokerd.log consume.log >&2; kill "$pid"; fail "the installed stokerctl could not consume from the installed stokerd"; }
kill "$pid"; wait "$pid" || true

DEBIAN_FRONTEND=noninteractive apt-get purge -y -q stoker >/dev/null || fail "apt-get purge stoker failed"
for gone in /usr/bin/stokerd /usr/bin/stokerctl /usr/lib/python3/dist-packages/stoker /etc/stoker \
            /lib/systemd/system/stokerd.service /usr/include/stoker; do
  [[ ! -e $gone ]] || fail "$gone is left after the purge"
done
! ls /usr/lib/*/libstoker.so* >/dev/null 2>&1 || fail "libstoker is left after the purge"
dpkg-query -W -f='${Status}' stoker 2>/dev/null | grep -q ' installed' && fail "dpkg still lists stoker"
echo "deb_test: installed with apt, stokerd/stokerctl/python3 -c 'import stoker'/pkg-config ran from /usr, a batch was served, and the purge left nothing"
