#!/usr/bin/env bash
# The remote-worker tests (tests/python/test_remote.py) against the ThreadSanitizer build's
# stokerd and workers (ctest `remote_workers_tsan`, TSan tier). gRPC, protobuf and abseil are
# Debian's uninstrumented libraries: they synchronise with futexes TSan cannot see, so every
# hand-off inside them looks like a race. Those libraries are suppressed by name (the list is
# read from the binary's own dependencies, so it follows Debian's library versions); our code's
# accesses — the dispatcher, the work queue, the job, the worker's pool — are still checked, and
# a report about them lands where TSAN_OPTIONS' log_path says (scripts/test.sh fails on any).
#   remote_under_tsan.sh PYTHON BIN_DIR TEST_FILE    (PYTHON: the interpreter that has pytest)
set -euo pipefail
python=$1
bin=$2
test_file=$3
supp=$(mktemp /tmp/stoker-tsan-grpc-XXXXXX.supp)
trap 'rm -f "$supp"' EXIT
{
  ldd "$bin/stokerd" | awk '{print $1}' |
    grep -E '^lib(grpc|gpr|upb|protobuf|absl_|cares|re2|address_sorting|ssl|crypto|z)[^/]*\.so' |
    sed 's/^/called_from_lib:/'
  printf '%s\n' 'race:grpc_' 'race:grpc::' 'race:google::protobuf::' 'race:absl::'
} | sort -u >"$supp"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=0} suppressions=$supp"
export STOKER_BIN_DIR=$bin
export STOKER_TEST_TSAN=1  # test_remote.py: timing claims that a TSan slowdown breaks are skipped
exec "$python" -m pytest -q -p no:cacheprovider "$test_file"
