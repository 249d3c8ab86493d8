#!/usr/bin/env bash
# The Debian package, from ctest (label package).
#   deb_test.sh build WORK   builds it with scripts/package.sh into WORK and checks its files,
#                            control fields, maintainer scripts, copyright file, the demo
#                            dataset and the unit (dpkg-deb -c / -I)
#   deb_test.sh install WORK as root: installs WORK's .deb into this machine with apt, runs
#                            stokerd (on the shipped demo example, as installed), stokerctl,
#                            `import stoker`, pkg-config and a status query through the
#                            installed files; checks the unit's enablement survives remove and
#                            reinstall and goes with the purge; then, in a private mount
#                            namespace that shows a running systemd and a systemctl that logs,
#                            that install/remove reload systemd and remove stops the daemon;
#                            checks the purge leaves nothing. Exits 77 (ctest: Skipped) when
#                            not root, when dpkg/apt are missing, or when a stoker package is
#                            already installed here (it is not ours to remove).
set -euo pipefail
mode=${1:?usage: deb_test.sh build|install WORK}
work=${2:?usage: deb_test.sh build|install WORK}
src=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "deb_test: FAIL: $*" >&2; exit 1; }

if [[ $mode == build ]]; then
  rm -f "$work"/stoker_*.deb
  # The flags of the build that runs this test (STOKER_DEB_FLAGS, from tests/service.cmake):
  # the same compiles, so ccache serves them in the test command (docs/TESTING.md).
  flags=()
  [[ -n ${STOKER_DEB_FLAGS:-} ]] && flags=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$STOKER_DEB_FLAGS" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$STOKER_DEB_FLAGS")
  deb=$(STOKER_DEB_BUILD_DIR="$work" "$src/scripts/package.sh" "${flags[@]}" | tail -1)
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
  # Debian policy 12.5: a machine-readable copyright file, not compressed.
  grep -qxF ./usr/share/doc/stoker/copyright <<<"$files" || fail "no /usr/share/doc/stoker/copyright"
  copyright=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/stoker/copyright)
  grep -q '^Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' <<<"$copyright" ||
    fail "the copyright file is not in the DEP-5 format"
  grep -q '^Files: tests/data/demo/\*' <<<"$copyright" || fail "the copyright file does not cover the demo photos"
  # The demo example runs as shipped: its root is the dataset the package installs.
  [[ $(grep -cE '^\./usr/share/stoker/demo/[a-z]+/[a-z]+_[0-9]+\.jpg$' <<<"$files") -eq 64 ]] ||
    fail "the 64 demo photos are not in /usr/share/stoker/demo"
  grep -qxF ./usr/share/stoker/demo/LICENSE <<<"$files" || fail "the demo photos' LICENSE is not shipped"
  demo=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/stoker/examples/demo.yaml)
  grep -qE '^ +root: /usr/share/stoker/demo$' <<<"$demo" || fail "examples/demo.yaml's root is not /usr/share/stoker/demo"
  # Maintainer scripts: ours (ldconfig and the unit's systemd steps), executable.
  ctrl=$(mktemp -d)
  dpkg-deb -e "$deb" "$ctrl"
  for script in postinst prerm postrm; do
    [[ -x $ctrl/$script ]] || { rm -rf "$ctrl"; fail "no executable $script"; }
    sh -n "$ctrl/$script" || { rm -rf "$ctrl"; fail "$script is not valid sh"; }
  done
  grep -q ldconfig "$ctrl/postinst" && grep -q ldconfig "$ctrl/postrm" || { rm -rf "$ctrl"; fail "ldconfig is not run"; }
  rm -rf "$ctrl"
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
# The installed daemon serves the shipped demo example, as installed, to the installed stokerctl.
/usr/bin/stokerd --config /usr/share/doc/stoker/examples/demo.yaml --socket "$tmp/s.sock" >stokerd.log 2>&1 &
pid=$!
for _ in $(seq 1 200); do [[ -S $tmp/s.sock ]] && break; sleep 0.05; done
/usr/bin/stokerctl consume --job demo --socket "$tmp/s.sock" --batches 2 >consume.log 2>&1 ||
  { cat stokerd.log consume.log >&2; kill "$pid"; fail "the installed stokerctl could not consume from the installed stokerd"; }
kill "$pid"; wait "$pid" || true

# The unit as an admin enables it, here without a running systemd (the maintainer scripts must
# not fail for that): enabled -> removed (masked: it must not start while the package is gone,
# the config kept) -> reinstalled (unmasked, enabled again) -> purged (links gone).
wants=/etc/systemd/system/multi-user.target.wants/stokerd.service
systemctl enable stokerd.service >/dev/null 2>&1 || fail "systemctl enable stokerd.service (offline)"
[[ -L $wants ]] || fail "enabling made no $wants"
DEBIAN_FRONTEND=noninteractive apt-get remove -y -q stoker >/dev/null || fail "apt-get remove stoker failed"
[[ $(readlink /etc/systemd/system/stokerd.service) == /dev/null ]] || fail "the removed package's unit is not masked"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$deb" >/dev/null \
  || fail "reinstalling $deb failed"
[[ ! -e /etc/systemd/system/stokerd.service && ! -L /etc/systemd/system/stokerd.service ]] ||
  fail "the reinstalled unit is still masked"
[[ -L $wants ]] || fail "the reinstalled unit is no longer enabled"

# With systemd running (simulated in a private mount namespace: /run/systemd/system exists and
# systemctl logs its arguments instead of acting): the package reloads systemd when its unit
# comes and goes, restarts the daemon on upgrade and stops it on removal.
cat >"$tmp/systemctl" <<EOF2
#!/bin/sh
echo "\$*" >>"$tmp/systemctl.log"
case "\$*" in *is-enabled*) echo enabled ;; esac
exit 0
EOF2
chmod 755 "$tmp/systemctl"
# A container's policy-rc.d (exit 101: "start nothing") would hide the start/stop requests; a
# host that runs systemd has none, so inside the namespace one that allows all stands in.
printf '#!/bin/sh\nexit 0\n' >"$tmp/policy-rc.d"
chmod 755 "$tmp/policy-rc.d"
policy=""
[[ -e /usr/sbin/policy-rc.d ]] && policy="mount --bind $tmp/policy-rc.d /usr/sbin/policy-rc.d &&"
if ! unshare -m true 2>/dev/null; then
  echo "deb_test: NOTE: no mount namespace here (unshare -m): the running-systemd half is not checked"
else
unshare -m bash -c "mkdir -p /run/systemd && mount -t tmpfs stoker-test /run/systemd && mkdir /run/systemd/system && $policy
  PATH=$tmp:\$PATH && export PATH && echo '-- reinstall' >>$tmp/systemctl.log &&
  dpkg -i $deb >/dev/null && echo '-- remove' >>$tmp/systemctl.log && dpkg -r stoker >/dev/null &&
  echo '-- install' >>$tmp/systemctl.log && dpkg -i $deb >/dev/null" || fail "dpkg under a (simulated) running systemd failed"
log=$(cat "$tmp/systemctl.log")
echo "$log"
sed -n '/^-- reinstall/,/^-- remove/p' <<<"$log" | grep -q 'daemon-reload' || fail "the upgrade did not reload systemd"
sed -n '/^-- reinstall/,/^-- remove/p' <<<"$log" | grep -q 'restart stokerd.service' || fail "the upgrade did not restart the daemon"
sed -n '/^-- remove/,/^-- install/p' <<<"$log" | grep -q 'stop stokerd.service' || fail "removing the package did not stop the daemon"
sed -n '/^-- remove/,/^-- install/p' <<<"$log" | grep -q 'daemon-reload' || fail "removing the package did not reload systemd"
sed -n '/^-- install/,$p' <<<"$log" | grep -q 'daemon-reload' || fail "installing the package did not reload systemd"
[[ -d /run/systemd/system ]] && fail "the simulated systemd leaked out of its mount namespace"
fi

DEBIAN_FRONTEND=noninteractive apt-get purge -y -q stoker >/dev/null || fail "apt-get purge stoker failed"
[[ ! -e $wants && ! -L $wants ]] || fail "$wants is left after the purge"
[[ ! -L /etc/systemd/system/stokerd.service ]] || fail "the unit's mask is left after the purge"
for gone in /usr/bin/stokerd /usr/bin/stokerctl /usr/lib/python3/dist-packages/stoker /etc/stoker \
            /lib/systemd/system/stokerd.service /usr/include/stoker /usr/share/stoker /usr/share/doc/stoker; do
  [[ ! -e $gone ]] || fail "$gone is left after the purge"
done
! ls /usr/lib/*/libstoker.so* >/dev/null 2>&1 || fail "libstoker is left after the purge"
dpkg-query -W -f='${Status}' stoker 2>/dev/null | grep -q ' installed' && fail "dpkg still lists stoker"
echo "deb_test: installed with apt, stokerd/stokerctl/python3 -c 'import stoker'/pkg-config ran from /usr, the shipped demo example was served, the unit's enablement followed remove/reinstall/purge, systemd was reloaded and the daemon stopped on removal, and the purge left nothing"
