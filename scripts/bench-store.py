#!/usr/bin/env python3
"""The decoded-pixel store (issue #26): a training job (RandomResizedCrop 224 + flip, uint8)
read epoch after epoch without a store and with `decoded_store` at max_side 320 and 256, in
one run. Prints images/s and images per daemon CPU second (the per-core figure: on a shared
machine wall time is noisy, the daemon's own CPU time much less) per epoch; epoch 0 fills the
store, epochs >= 1 read it. Then, with --diff, the mean absolute difference (0..255) of the
output pixels of the same samples with each max_side against the job without a store and
against a full decode (dct_scale: never).

    scripts/bench-store.py [BUILD_DIR] [IMAGES_DIR] [--epochs E] [--workers W] [--diff]
"""
from __future__ import annotations

import argparse
import glob
import os
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
{store}
    pipeline:
      - decode: {{dct_scale: {dct}}}
      - random_resized_crop: {{size: 224}}
      - horizontal_flip: {{p: 0.5}}
    output: {{dtype: uint8, layout: NCHW}}
"""


def store_key(max_side: int, path: str) -> str:
    return f"    decoded_store: {{max_side: {max_side}, path: \"{path}\", bytes: 64GiB}}" if max_side else ""


def epochs_of(build, images, workers, epochs, max_side, store_dir):
    """[(images/s, images per daemon CPU s)] per epoch, and the store's status at the end."""
    d = benchlib.Daemon(build, CONFIG.format(workers=workers, images=images, store=store_key(max_side, store_dir),
                                             dct="auto"))
    out = []
    try:
        for e in range(epochs):
            cpu0 = d.cpu()
            t0 = time.monotonic()
            s = benchlib.summary(d.consume(["--job", "train", "--start-epoch", str(e), "--epochs", "1"]))
            wall, cpu = time.monotonic() - t0, d.cpu() - cpu0
            out.append((s["samples"] / wall, s["samples"] / cpu))
        st = d.status()["jobs"][0].get("decoded_store")
    finally:
        d.close()
    return out, st


def dump(build, images, max_side, store_dir, dct, into, batches):
    d = benchlib.Daemon(build, CONFIG.format(workers=os.cpu_count(), images=images,
                                             store=store_key(max_side, store_dir), dct=dct))
    try:
        benchlib.summary(d.consume(["--job", "train", "--batches", str(batches), "--dump", into]))
    finally:
        d.close()


def images_of(folder):
    import numpy as np
    return np.concatenate([np.load(f) for f in sorted(glob.glob(os.path.join(folder, "*.images.npy")))])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("images", nargs="?", default="/tmp/stoker-bench-images")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--diff", action="store_true", help="also measure the pixel difference each max_side makes")
    ap.add_argument("--sides", default="320,256", help="max_side values, comma separated")
    a = ap.parse_args()
    if not os.path.isdir(a.images):
        subprocess.run([os.path.join(os.path.dirname(__file__), "bench-images.sh"), a.images], check=True)
    files = sum(len(f) for _, _, f in os.walk(a.images))
    sides = [int(s) for s in a.sides.split(",")]
    print(f"bench-store: {files} files in {a.images}; {benchlib.machine()}; workers {a.workers}; "
          f"RandomResizedCrop 224 + flip, uint8")
    with tempfile.TemporaryDirectory(prefix="stoker-bench-store-") as tmp:
        runs = {0: epochs_of(a.build, a.images, a.workers, a.epochs, 0, "")}
        for s in sides:
            runs[s] = epochs_of(a.build, a.images, a.workers, a.epochs, s, os.path.join(tmp, f"s{s}"))
        print(f"{'':>14} " + " ".join(f"{'epoch ' + str(e):>22}" for e in range(a.epochs)))
        print(f"{'':>14} " + " ".join(f"{'img/s':>10} {'img/CPU s':>11}" for _ in range(a.epochs)))
        for s, (per_epoch, _) in runs.items():
            name = "no store" if s == 0 else f"max_side {s}"
            print(f"{name:>14} " + " ".join(f"{w:>10.0f} {c:>11.0f}" for w, c in per_epoch))
        base = sum(c for _, c in runs[0][0]) / a.epochs
        for s in sides:
            per_epoch, st = runs[s]
            later = sum(c for _, c in per_epoch[1:]) / max(1, a.epochs - 1)
            print(f"max_side {s}: epochs>=1 {later / base:.2f}x per CPU s vs no store, {later / per_epoch[0][1]:.2f}x "
                  f"vs its epoch 0; store {st['entries']} entries, {st['bytes'] / 2**20:.0f} MiB "
                  f"({st['bytes'] / max(1, st['entries']) / 1024:.0f} KiB each), hits {st['hits']}, misses {st['misses']}")
        if a.diff:
            import numpy as np
            batches = 8
            dump(a.build, a.images, 0, "", "auto", os.path.join(tmp, "plain"), batches)
            dump(a.build, a.images, 0, "", "never", os.path.join(tmp, "full"), batches)
            plain, full = images_of(os.path.join(tmp, "plain")), images_of(os.path.join(tmp, "full"))
            print(f"pixel difference over {len(plain)} samples, mean |a-b| of uint8 (0..255):")
            print(f"  no store (DCT-scaled) vs full decode: {np.abs(plain.astype(int) - full).mean():.2f}")
            for s in sorted(set(sides + [512, 384, 224])):
                into = os.path.join(tmp, f"d{s}")
                dump(a.build, a.images, s, os.path.join(tmp, f"ds{s}"), "auto", into, batches)
                got = images_of(into).astype(int)
                print(f"  max_side {s}: vs no store {np.abs(got - plain).mean():.2f}, vs full decode "
                      f"{np.abs(got - full).mean():.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
