#!/usr/bin/env python3
"""Remote workers (issue #27) on one machine, CPUs split with taskset: a training job
(RandomResizedCrop 224 + flip + TrivialAugmentWide, uint8) served by

  0 workers  the GPU node's own decode pool: 1 thread on core 1 (the daemon pinned there)
  1 worker   the daemon on core 0 with `remote: {local: false}`, one 1-thread worker on core 1
  2 workers  as 1, plus a second 1-thread worker on core 0 (beside the daemon)
  1 worker + zstd   as 1 worker, samples compressed on the wire
  1 worker + auto   as 1 worker with `remote.compression: auto`: compressed only while the
                    worker's results wait on the connection (case `a`, not run by default;
                    with --link KIB_PER_S every worker's results connection is paced at that
                    rate, a link slower than loopback, through the worker's test fault)
  1 worker, stream  as 1 worker, with the results on the gRPC stream (remote.results: stream)
                    instead of their own TCP connection (the default; issue #36)
  1 worker, no verify   as 1 worker with `remote.verify: 0`: R without the node's own re-making
                    of a fraction of the answers (0.01 by default; docs/SECURITY.md, A6)
  1 worker, verify all  as 1 worker with `remote.verify: 1` (case `w`, not run by default): with
                    case `v`, the line `a pick re-made back to back / local` prices one pick made
                    warm, in local decodes

Prints images/s of each (and the ratio to 0 workers), the GPU node's daemon CPU per sample
(remote: what is left on the GPU node; 0 workers: decoding it locally) and their ratio (the
goal: <= 5%), the daemon's context switches per sample (its threads' voluntary and
involuntary switches, /proc/PID/task/*/status), the bytes on the wire per sample, and what
link a given images/s needs. For each remote case, a line `node threads a sample:` splits the
daemon's cost by thread name (remote-results, remote-link, stokerd, ...): CPU µs and voluntary
switches (sleeps) per sample. The line `node cpu per remote sample / local: R` gives the ratio
for "1 worker" against "0 workers" (with --rounds N, the median of the rounds' ratios, each
from one round's own pair of runs). Every figure comes from runs on this machine, one after
another; the machine is noisy: compare figures of one invocation.

The yardstick, in the same round: stoker_bench_tcp_floor receives the same bytes at the "1
worker" rate on the same two cores with no framework at all (straight into a shared ring, or
through a buffer and one copy); the line `tcp receive floor / local: F` is the cheaper way's
receiver CPU per sample over the local decode's. No transport over TCP on this machine can
bring R below F plus remote.verify's share: the floor of the goal R <= 0.05. That share is 0.01
of a local decode nominally (the default remote.verify re-makes 1% of the answers); the case `v`
measures it as R - R0, where R0 is the line `node cpu per remote sample / local at remote.verify
0: R0` (the same job with `remote.verify: 0`).

    scripts/bench-remote.py [BUILD_DIR] [IMAGES_DIR] [--batches N] [--cores A,B] [--rounds N]
                            [--cases 0,1,2,z,a,s,v,w] [--link KIB_PER_S]
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

CONFIG = """server: {{workers: {workers}, log_level: warn}}
jobs:
  train:
    source: {{root: "{images}"}}
    batch_size: 64
    shuffle: true
    seed: 3
    prefetch: 4
    pipeline:
      - decode: {{}}
      - random_resized_crop: {{size: 224}}
      - horizontal_flip: {{p: 0.5}}
      - trivial_augment_wide: {{}}
    output: {{dtype: uint8, layout: NCHW}}
{remote}"""


class Worker:
    def __init__(self, build, images, core, tmp, name, link_kib=None):
        self.log = os.path.join(tmp, f"{name}.log")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(["taskset", "-c", str(core), os.path.join(build, "bin", "stokerd"), "--worker",
                                          "--listen", "127.0.0.1:0", "--allow-root", images, "--threads", "1",
                                          "--log-level", "warn"] +
                                         # a link slower than loopback: the worker's results paced (a test fault)
                                         ([] if link_kib is None else ["--inject-fault", f"slow-results:{link_kib}"]),
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            m = re.search(r"listening on port (\d+)", open(self.log).read())
            if m:
                self.address = f"127.0.0.1:{m.group(1)}"
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start: {open(self.log).read()}")
            time.sleep(0.05)
        self.cpu0 = benchlib.cpu_seconds(self.proc.pid)

    def close(self):
        self.proc.terminate()
        self.proc.wait(30)


def switches(pid):
    """Context switches (voluntary + involuntary) of all of a process's live threads so far."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if "ctxt_switches:" in line:  # voluntary_... and nonvoluntary_...
                        total += int(line.split()[-1])
        except OSError:  # a thread that ended meanwhile
            pass
    return total


PERF = None  # --perf: the events `perf stat` counts on the daemon over each measured window


def perf_start(pid):
    if not PERF:
        return None
    return subprocess.Popen(["perf", "stat", "-x", ",", "-e", PERF, "-p", str(pid)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def perf_stop(proc, samples):
    """`perf stat`'s counts per sample, as text ("" without --perf)."""
    if proc is None:
        return ""
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    out = []
    for line in err.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[0].replace(".", "", 1).isdigit():
            out.append(f"{f[2]} {float(f[0]) / samples:.3g}")
    return "perf stat per sample: " + ", ".join(out)


def threads(pid):
    """{thread name: [voluntary switches, CPU seconds]} of a process's live threads so far, threads
    of one name summed (the remote link's are named remote-link, remote-results, ...)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            base = f"/proc/{pid}/task/{tid}"
            name = open(f"{base}/comm").read().strip()
            vol = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", open(f"{base}/status").read(), re.M).group(1))
            # schedstat's first field: the thread's time on a CPU in ns (stat's utime and stime
            # are in 10 ms ticks: a thread's few ms a window came out as 0, 1.6 or 3.2 µs a sample)
            ran_ns = int(open(f"{base}/schedstat").read().split()[0])
            t = out.setdefault(name, [0, 0.0])
            t[0] += vol
            t[1] += ran_ns * 1e-9
        except (OSError, AttributeError):  # a thread that ended meanwhile
            pass
    return out


def thread_line(before, after, samples):
    """Each thread name's voluntary switches and CPU µs per sample between two threads() reads,
    the busiest first (threads that neither slept nor ran are left out)."""
    rows = []
    for name, (vol, cpu) in after.items():
        v0, c0 = before.get(name, [0, 0.0])
        if vol - v0 or cpu - c0:
            rows.append((cpu - c0, name, (vol - v0) / samples))
    rows.sort(reverse=True)
    return ", ".join(f"{name} {cpu / samples * 1e6:.1f} us {sw:.3f} sleeps" for cpu, name, sw in rows)


def run(build, images, batches, cores, n_workers, zstd, tmp, stream=False, verify=None, link_kib=None):
    """(images/s, daemon CPU s per sample, wire bytes per sample or None, daemon switches per sample).
    zstd: False (none), True (zstd) or "auto" (remote.compression)."""
    workers = [Worker(build, images, cores[1 - (i % 2)], tmp, f"w{i}", link_kib) for i in range(n_workers)]
    try:
        remote = ""
        if workers:
            remote = ("    remote: {workers: [" + ", ".join(f'"{w.address}"' for w in workers) + "], local: false" +
                      ("" if not zstd else ", compression: auto" if zstd == "auto" else ", compression: zstd") + (", results: stream" if stream else "") +
                      ("" if verify is None else f", verify: {verify}") + "}\n")
        core = cores[1] if not workers else cores[0]
        d = benchlib.Daemon(build, CONFIG.format(workers=1, images=images, remote=remote), prefix=["taskset", "-c", str(core)])
        try:
            if workers:  # links up before measuring (the first prefetch may be made locally)
                deadline = time.monotonic() + 30
                while not all(w["connected"] for w in d.status()["jobs"][0]["remote"]):
                    if time.monotonic() > deadline:
                        raise RuntimeError("workers did not connect")
                    time.sleep(0.1)
            benchlib.summary(d.consume(["--job", "train", "--batches", "4"]))  # warm: page cache, links
            st0 = d.status()["jobs"][0]
            perf = perf_start(d.proc.pid)
            cpu0, sw0, th0, t0 = d.cpu(), switches(d.proc.pid), threads(d.proc.pid), time.monotonic()
            s = benchlib.summary(d.consume(["--job", "train", "--start-batch", "4", "--batches", str(batches)]))
            wall, cpu, sw = time.monotonic() - t0, d.cpu() - cpu0, switches(d.proc.pid) - sw0
            if workers:  # where the node's cost per remote sample goes, thread by thread
                print(f"  {n_workers} worker(s){'' if not zstd else ' + auto' if zstd == 'auto' else ' + zstd'}"
                      f"{', stream' if stream else ''}"
                      f"{'' if verify is None else f', verify {verify}'}, node threads a sample: " +
                      thread_line(th0, threads(d.proc.pid), s["samples"]))
            if perf:
                print(f"  {n_workers} worker(s){' + zstd' if zstd else ''}: " + perf_stop(perf, s["samples"]))
            st = d.status()["jobs"][0]
            wire = None
            if workers:
                got = sum(w["bytes_received"] for w in st["remote"]) - sum(w["bytes_received"] for w in st0["remote"])
                made = sum(w["samples"] for w in st["remote"]) - sum(w["samples"] for w in st0["remote"])
                wire = got / max(1, made)
            return s["samples"] / wall, cpu / s["samples"], wire, sw / s["samples"]
        finally:
            d.close()
    finally:
        for w in workers:
            w.close()


def tcp_floor(build, rate, samples, cores):
    """stoker_bench_tcp_floor's receiver CPU per sample, in seconds: the cheaper of its two ways
    (None when the program is not built)."""
    prog = os.path.join(build, "bin", "stoker_bench_tcp_floor")
    if not os.path.exists(prog):
        return None
    out = subprocess.run([prog, "150528", "5", f"{rate:.0f}", str(samples), str(cores[0]), str(cores[1])],
                         check=True, capture_output=True, text=True).stdout
    print("  " + out.strip().replace("\n", "\n  "))
    return min(float(m) for m in re.findall(r"total ([0-9.]+) us/sample", out)) * 1e-6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("images", nargs="?", default="/tmp/stoker-bench-images")
    # 100 batches (about 6 s a case) and 3 rounds by default: a 12-batch run was mostly the
    # dispatcher's first second (its window still growing), and on a shared 2-core machine one
    # run's R moves by +-0.02; the median of three rounds of 100 is what docs/PERFORMANCE.md quotes.
    ap.add_argument("--batches", type=int, default=100, help="measured batches of 64 per case")
    ap.add_argument("--cores", default="0,1", help="the two cores to split (daemon, first worker)")
    ap.add_argument("--rounds", type=int, default=3, help="run the cases this many times, one round after another")
    ap.add_argument("--cases", default="0,1,v,2,z", help="which cases: 0, 1, 2 workers, z (1 worker + zstd), "
                    "a (1 worker, compression auto), s (1 worker, results on the gRPC stream), v (1 worker, "
                    "remote.verify 0), w (1 worker, remote.verify 1: with v, what a pick re-made back to back "
                    "costs)")
    ap.add_argument("--link", type=int, default=None, metavar="KIB_PER_S",
                    help="pace each worker's results connection at this rate (the worker's test fault "
                         "slow-results): a link slower than loopback, for the compression cases")
    ap.add_argument("--perf", nargs="?", const="task-clock,context-switches,page-faults", default=None,
                    help="also count these events on the daemon with `perf stat` (default: task-clock, "
                         "context-switches, page-faults)")
    a = ap.parse_args()
    if not os.path.isdir(a.images):
        subprocess.run([os.path.join(os.path.dirname(__file__), "bench-images.sh"), a.images], check=True)
    cores = [int(c) for c in a.cores.split(",")]
    global PERF
    PERF = a.perf
    files = sum(len(f) for _, _, f in os.walk(a.images))
    print(f"bench-remote: {files} photos in {a.images}; {benchlib.machine()}; RandomResizedCrop 224 + flip + "
          f"TrivialAugmentWide, uint8, batches of 64, {a.batches} measured per case; cores {cores}")
    every = {"0": ("0 workers (local pool, 1 thread)", 0, False, False, None), "1": ("1 worker", 1, False, False, None),
             "2": ("2 workers", 2, False, False, None), "z": ("1 worker + zstd", 1, True, False, None),
             "a": ("1 worker + auto", 1, "auto", False, None),
             "s": ("1 worker, results on stream", 1, False, True, None),
             "v": ("1 worker, no verify", 1, False, False, 0),
             "w": ("1 worker, verify all", 1, False, False, 1)}
    wanted = set(a.cases.split(",")) | {"0", "1"}  # the ratio needs both
    cases = [every[k] for k in ("0", "1", "v", "w", "s", "2", "z", "a") if k in wanted]
    ratios, floors, stream_ratios, unverified, warm_picks = [], [], [], [], []
    raw = packed = None
    for rnd in range(a.rounds):
        with tempfile.TemporaryDirectory(prefix="stoker-bench-remote-") as tmp:
            res = {name: run(a.build, a.images, a.batches, cores, n, z, tmp, st, v, a.link) for name, n, z, st, v in cases}
        base_rate, base_cpu, _, _ = res[cases[0][0]]
        if a.rounds > 1:
            print(f"round {rnd + 1} of {a.rounds}")
        print(f"{'':>34} {'img/s':>8} {'vs 0':>6} {'daemon CPU ms/img':>18} {'vs local decode':>16} {'switches/img':>13} "
              f"{'wire KiB/img':>13}")
        for name, (rate, cpu, wire, sw) in res.items():
            print(f"{name:>34} {rate:>8.1f} {rate / base_rate:>5.2f}x {cpu * 1e3:>18.3f} {cpu / base_cpu:>15.1%} "
                  f"{sw:>13.2f} {'-' if wire is None else f'{wire / 1024:.1f}':>13}")
        ratios.append(res["1 worker"][1] / base_cpu)
        if "1 worker, no verify" in res:
            unverified.append(res["1 worker, no verify"][1] / base_cpu)
        if "1 worker, verify all" in res and "1 worker, no verify" in res:
            warm_picks.append((res["1 worker, verify all"][1] - res["1 worker, no verify"][1]) / base_cpu)
        if "1 worker, results on stream" in res:
            stream_ratios.append(res["1 worker, results on stream"][1] / base_cpu)
        floor = tcp_floor(a.build, res["1 worker"][0], max(5000, a.batches * 64), cores)
        if floor is not None:
            floors.append(floor / base_cpu)
        raw = res["1 worker"][2]
        if "1 worker + zstd" in res:
            packed = res["1 worker + zstd"][2]
    print(f"wire bytes per remote sample: {raw:.0f} raw" + ("" if packed is None else f", {packed:.0f} zstd"))
    if packed:
        print(f"wire: {raw / 1024:.1f} KiB/sample raw, {packed / 1024:.1f} KiB zstd ({raw / packed:.2f}x smaller)")
        for rate in (1000, 5000, 20000):
            print(f"  {rate} img/s needs {rate * raw * 8 / 1e9:.2f} Gbit/s raw, {rate * packed * 8 / 1e9:.2f} Gbit/s with zstd")
    if len(ratios) > 1:
        print("rounds' ratios: " + ", ".join(f"{r:.3f}" for r in ratios))
    if warm_picks:  # every answer re-made, less none: a pick made warm, in local decodes
        print(f"a pick re-made back to back / local: {statistics.median(warm_picks):.2f}")
    # remote.verify's share of R: measured where the case ran (a pick costs more than its
    # nominal 0.01 of a local decode: made on a cold reader thread, and its compare reads a slot
    # the kernel wrote; docs/PERFORMANCE.md), else that nominal figure.
    share = statistics.median(ratios) - statistics.median(unverified) if unverified else None
    if floors:
        f = statistics.median(floors)
        what = f"measured share {share:.3f}" if share is not None else "nominal 0.01"
        print(f"tcp receive floor / local: {f:.3f} (with remote.verify's {what}: "
              f"{f + (0.01 if share is None else max(0.0, share)):.3f}, the least R any TCP transport could reach here)")
    if unverified:
        print(f"node cpu per remote sample / local at remote.verify 0: {statistics.median(unverified):.3f} "
              f"(remote.verify's share: {share:.3f})")
    if stream_ratios:
        print(f"node cpu per remote sample / local, results on the gRPC stream: {statistics.median(stream_ratios):.3f}")
    print(f"node cpu per remote sample / local: {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
