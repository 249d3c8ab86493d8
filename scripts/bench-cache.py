#!/usr/bin/env python3
"""The finished-sample cache (issue #12): a validation job (Resize 256 + CenterCrop 224, uint8)
read for several epochs with `cache: {bytes: ...}` large enough for the whole set, beside the
same job without a cache, in one run. Prints images/s and daemon CPU per epoch for each.

    scripts/bench-cache.py [BUILD_DIR] [IMAGES_DIR] [--epochs E] [--workers W]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

CONFIG = """server: {{workers: {workers}, log_level: warn}}
jobs:
  val:
    source: {{root: "{images}"}}
    batch_size: 64
    shuffle: false
    prefetch: 4
{cache}
    pipeline:
      - decode: {{}}
      - resize: {{size: 256}}
      - center_crop: {{size: 224}}
    output: {{dtype: uint8, layout: NCHW}}
"""


def epochs_of(build: str, images: str, workers: int, epochs: int, cache: str):
    """[(images/s, daemon CPU s)] per epoch, one consumer reading epoch after epoch."""
    d = benchlib.Daemon(build, CONFIG.format(workers=workers, images=images, cache=cache))
    out = []
    try:
        for e in range(epochs):
            cpu0 = d.cpu()
            t0 = time.monotonic()
            s = benchlib.summary(d.consume(["--job", "val", "--start-epoch", str(e), "--epochs", "1"]))
            out.append((s["samples"] / (time.monotonic() - t0), d.cpu() - cpu0))
        hits = d.status()["jobs"][0].get("cache")
    finally:
        d.close()
    return out, hits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("images", nargs="?", default="/tmp/stoker-bench-images")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    a = ap.parse_args()
    if not os.path.isdir(a.images):
        subprocess.run([os.path.join(os.path.dirname(__file__), "bench-images.sh"), a.images], check=True)
    files = sum(len(f) for _, _, f in os.walk(a.images))
    print(f"bench-cache: {files} files in {a.images}; {benchlib.machine()}; workers {a.workers}; "
          f"val pipeline (Resize 256 + CenterCrop 224, uint8)")
    cached, stats = epochs_of(a.build, a.images, a.workers, a.epochs, "    cache: {bytes: 4GiB}")
    plain, _ = epochs_of(a.build, a.images, a.workers, a.epochs, "")
    print(f"{'epoch':>5} {'cache img/s':>12} {'CPU s':>7} | {'no cache img/s':>15} {'CPU s':>7} | {'speed-up':>8}")
    for e, ((cr, cc), (pr, pc)) in enumerate(zip(cached, plain)):
        print(f"{e:>5} {cr:>12.0f} {cc:>7.2f} | {pr:>15.0f} {pc:>7.2f} | {cr / pr:>7.2f}x")
    print(f"cache: {stats}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
