#!/usr/bin/env python3
"""Decode once, feed many (issue #12): K readers of one rank (`readers: K`) against K separate
loaders of the same data (K jobs, each decoding for itself), side by side in one run.

For K = 1, 2, 4, 8 it prints the daemon's CPU time per epoch and images/s per reader. The goal
is K fan-out readers at <= 1.1x the decode CPU of one (K separate loaders cost K x).

    scripts/bench-fanout.py [BUILD_DIR] [IMAGES_DIR] [--epochs E] [--workers W] [--readers 1,2,4,8]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

JOB = """  {name}:
    source: {{root: "{images}"}}
    batch_size: 64
    seed: 1
    prefetch: 4
    readers: {readers}
    pipeline:
      - decode: {{}}
      - random_resized_crop: {{size: 224}}
      - horizontal_flip: {{p: 0.5}}
    output: {{dtype: uint8, layout: NCHW}}
"""


def run(build: str, images: str, workers: int, epochs: int, k: int, fanout: bool):
    """(daemon CPU s per epoch, [images/s of each reader], wall s)."""
    if fanout:
        jobs = JOB.format(name="bench", images=images, readers=k)
        consumers = [["--job", "bench", "--reader", str(i)] for i in range(k)]
    else:
        jobs = "".join(JOB.format(name=f"bench{i}", images=images, readers=1) for i in range(k))
        consumers = [["--job", f"bench{i}"] for i in range(k)]
    d = benchlib.Daemon(build, f"server: {{workers: {workers}, log_level: warn}}\njobs:\n{jobs}")
    try:
        t0 = time.monotonic()
        procs = [d.consume(c + ["--epochs", str(epochs)]) for c in consumers]
        sums = [benchlib.summary(p) for p in procs]
        wall = time.monotonic() - t0
        cpu = d.cpu()
    finally:
        d.close()
    return cpu / epochs, [s["samples"] / s["seconds"] for s in sums], wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("images", nargs="?", default="/tmp/stoker-bench-images")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--readers", default="1,2,4,8")
    a = ap.parse_args()
    if not os.path.isdir(a.images):
        subprocess.run([os.path.join(os.path.dirname(__file__), "bench-images.sh"), a.images], check=True)
    files = sum(len(f) for _, _, f in os.walk(a.images))
    print(f"bench-fanout: {files} files in {a.images}; {benchlib.machine()}; workers {a.workers}; "
          f"{a.epochs} epoch(s); train pipeline (RandomResizedCrop 224 + flip, uint8)")
    print(f"{'K':>3} {'fan-out CPU s/epoch':>20} {'x one':>6} {'img/s per reader':>17} | "
          f"{'separate CPU s/epoch':>21} {'x one':>6} {'img/s per loader':>17}")
    base = None
    for k in [int(x) for x in a.readers.split(",")]:
        f_cpu, f_rates, _ = run(a.build, a.images, a.workers, a.epochs, k, True)
        s_cpu, s_rates, _ = run(a.build, a.images, a.workers, a.epochs, k, False)
        if base is None:
            base = f_cpu
        print(f"{k:>3} {f_cpu:>20.2f} {f_cpu / base:>6.2f} {min(f_rates):>17.0f} | "
              f"{s_cpu:>21.2f} {s_cpu / base:>6.2f} {min(s_rates):>17.0f}", flush=True)
    print("img/s: the slowest reader's (loader's) samples over its own wall time.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
