#!/usr/bin/env python3
"""Reads that never stall the decoders (issue #10): one training epoch (RandomResizedCrop 224 +
flip, uint8, batch 64, shuffled) of the benchmark photos with read-ahead off and on, side by
side, on storage in three states:
  - warm:      files in the page cache (the reference the others should reach),
  - cold:      page cache dropped before each run (echo 3 > /proc/sys/vm/drop_caches; skipped
               when not permitted). On a VM the host may still cache the disk image: the
               script prints the cold sequential read rate it saw so the figure can be judged,
  - slow:      every read of a photo delayed by --delay-ms in the reading thread (an LD_PRELOAD
               shim, build/lib/libstoker_slow_read.so, tests/support/slow_read.c): storage
               with a per-request latency and a deep queue (NFS, a cloud disk, object storage
               through FUSE). Reads in different threads wait at the same time.
Prints images/s and the decode threads' wait for bytes (status read_wait_s, summed over the
workers) per run.

    scripts/bench-coldread.py [BUILD_DIR] [IMAGES_DIR] [--workers W] [--delay-ms D] [--epochs E] [--repeat N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

CONFIG = """server: {{workers: {workers}, log_level: warn}}
jobs:
  train:
    source: {{root: "{images}"}}
    batch_size: 64
    shuffle: true
    prefetch: 4
    read_ahead: {read_ahead}
    pipeline:
      - decode: {{}}
      - random_resized_crop: {{size: 224}}
      - horizontal_flip: {{p: 0.5}}
    output: {{dtype: uint8, layout: NCHW}}
"""




def cold_read_mb_s(images: str) -> float:
    """MB/s reading every photo once in one thread right after a drop (storage's own speed)."""
    benchlib.drop_caches()
    t0 = time.monotonic()
    total = 0
    for d, _, files in os.walk(images):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                total += len(fh.read())
    return total / 1e6 / (time.monotonic() - t0)


def run(build: str, images: str, workers: int, read_ahead: str, epochs: int, env: dict, cold: bool):
    """(images/s, read_wait_s, daemon CPU s) over `epochs` epochs after the daemon is up."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        d = benchlib.Daemon(build, CONFIG.format(workers=workers, images=images, read_ahead=read_ahead))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        if cold:
            benchlib.drop_caches()  # the daemon prefetched a few batches at start: drop those too
        wait0 = d.status()["jobs"][0]["read_wait_s"]
        cpu0 = d.cpu()
        t0 = time.monotonic()
        s = benchlib.summary(d.consume(["--job", "train", "--epochs", str(epochs)]))
        secs = time.monotonic() - t0
        wait = d.status()["jobs"][0]["read_wait_s"] - wait0
        return s["samples"] / secs, wait, d.cpu() - cpu0
    finally:
        d.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("images", nargs="?", default="/tmp/stoker-bench-images")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--delay-ms", type=float, default=5.0)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--read-ahead", default="{bytes: 256MiB, requests: 64}")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each pair, interleaved; medians shown")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    if not os.path.isdir(a.images):
        subprocess.run([os.path.join(os.path.dirname(__file__), "bench-images.sh"), a.images], check=True)
    files = sum(len(f) for _, _, f in os.walk(a.images))
    shim = os.path.join(build, "lib", "libstoker_slow_read.so")
    print(f"machine: {benchlib.machine()}; {files} photos in {a.images}; {a.workers} workers; "
          f"read-ahead {a.read_ahead}")
    can_drop = benchlib.drop_caches()
    if can_drop:
        print(f"cold sequential read of the photos, one thread: {cold_read_mb_s(a.images):.0f} MB/s")
    else:
        print("page cache drop not permitted: no cold runs")
    slow_env = {"LD_PRELOAD": shim, "STOKER_SLOW_READ": f"{os.path.abspath(a.images)}/:{int(a.delay_ms * 1000)}"}
    states = [("warm", {}, False)] + ([("cold", {}, True)] if can_drop else []) + \
             [(f"slow {a.delay_ms:g} ms/read", slow_env, False)]
    print(f"load average before: {os.getloadavg()[0]:.1f}; medians of {a.repeat} runs (images/s range beside)")
    print(f"{'storage':20} {'read-ahead':>10} {'images/s':>9} {'range':>11} {'read_wait_s':>12} {'CPU s':>7}")
    for name, env, cold in states:
        results = {"off": [], "on": []}
        for _ in range(a.repeat):  # off and on alternate, so a burst of load hits both alike
            for label, ra in (("off", "false"), ("on", a.read_ahead)):
                if cold:
                    benchlib.drop_caches()
                else:  # warm the page cache (the slow state's files too: only the shim is slow)
                    for d_, _, fs in os.walk(a.images):
                        for f in fs:
                            with open(os.path.join(d_, f), "rb") as fh:
                                fh.read()
                results[label].append(run(build, a.images, a.workers, ra, a.epochs, env, cold))
        for label in ("off", "on"):
            rs = sorted(results[label])
            ips = statistics.median(r[0] for r in rs)
            wait = statistics.median(r[1] for r in rs)
            cpu = statistics.median(r[2] for r in rs)
            spread = f"{min(r[0] for r in rs):.0f}..{max(r[0] for r in rs):.0f}"
            print(f"{name:20} {label:>10} {ips:9.0f} {spread:>11} {wait:12.2f} {cpu:7.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
