# Shell helpers shared by the benchmark scripts (source it; the Python ones use benchlib.py):
# the real-photograph set they measure on, the machine line every figure is quoted with, and
# the benchmark programs they run. Never benchmark decode speed on synthetic images.

# bench_images DIR: makes the set (scripts/bench-images.sh, from Debian's photographs) if absent.
bench_images() {
  [[ -d $1 ]] || scripts/bench-images.sh "$1"
}

# bench_machine: "CPU model, N cores" (the figures' context in docs/PERFORMANCE.md).
bench_machine() {
  echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
}

# bench_program BUILD_DIR NAME: the path of a benchmark program of daemon/bench, or exits
# naming the build commands that make it (benchmarks are built with STOKER_BUILD_BENCHMARKS,
# on with the tests and off in a -DSTOKER_BUILD_TESTS=OFF build).
bench_program() {
  local p=$1/bin/$2
  [[ -x $p ]] || { echo "missing $p (cmake -B $1 -DSTOKER_BUILD_BENCHMARKS=ON && cmake --build $1 --target $2)" >&2; exit 1; }
  echo "$p"
}
