#!/usr/bin/python3
"""Fidelity of the deterministic val pipeline against torchvision, on real photos.

Runs a real stokerd (Resize 256 + CenterCrop 224, uint8, dataset order) over two ImageFolders
of real photographs: tests/data/demo (short side under 512 px) and tests/data/large (short
side 1000 px or more, where a DCT-scaled decode would be used if it were allowed), dumps the
batches with `stokerctl consume --dump`, and compares every image with what torchvision gives
for the same file: PIL decode, Resize(256) (bilinear, antialias), CenterCrop(224),
PILToTensor. Prints per image and per set the mean absolute difference (0-255 scale) and the
worst single value, and fails when an image's mean is above MEAN_LIMIT or any value is more
than PIXEL_LIMIT levels off.

usage: val_fidelity.py BIN_DIR DATA_DIR [--dct-scale auto|always|never] [--report-only]
(`--dct-scale always --report-only` measures the reduced-decode path for docs/PERFORMANCE.md.)
"""
import argparse
import os
import sys
import tempfile

import numpy as np

from val_job import dump_val_epoch

try:
    from PIL import Image
    import torchvision.transforms as T
except ImportError as e:  # reported as skipped by ctest (SKIP_RETURN_CODE 77)
    print(f"SKIP: {e}")
    sys.exit(77)

# Eval decodes at full scale (decode.dct_scale: auto), as PIL does: what is left is the
# bilinear filter's 14-bit fixed point (PIL: 22), one level at most (measured: image means up
# to 0.2, every value within 1; the limit leaves one level for another libjpeg-turbo build).
# With `--dct-scale always` the large photos gave image means up to 2.7 and values 87 off.
MEAN_LIMIT = 0.5
PIXEL_LIMIT = 2


def image_files(root):
    files = []
    for cls in sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))):
        for dirpath, _, names in sorted(os.walk(os.path.join(root, cls))):
            files += [os.path.join(dirpath, n) for n in sorted(names) if n.lower().endswith(".jpg")]
    return files


def check_set(bin_dir, root, dct_scale):
    """(ok, per-image means, worst value) of one folder; prints a line per image."""
    with tempfile.TemporaryDirectory(prefix="stoker-fidelity-") as tmp:
        samples, _ = dump_val_epoch(bin_dir, root, tmp, decode=f"{{dct_scale: {dct_scale}}}")
    files = image_files(root)
    tv = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])
    means, worst = [], 0
    for img, sid in samples:
        with Image.open(files[sid]) as im:
            short = min(im.size)
            ref = tv(im.convert("RGB")).numpy()
        d = np.abs(img.astype(np.int16) - ref.astype(np.int16))
        means.append(float(d.mean()))
        worst = max(worst, int(d.max()))
        print(f"{os.path.relpath(files[sid], root)} (short side {short}): mean abs diff {means[-1]:.3f}, "
              f"max {int(d.max())}")
    ok = len(means) == len(files)
    if not ok:
        print(f"FAIL: {len(means)} images delivered, {len(files)} in {root}")
    return ok, means, worst


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("data_dir")
    ap.add_argument("--dct-scale", default="auto", choices=["auto", "always", "never"])
    ap.add_argument("--report-only", action="store_true", help="print the figures, never fail on them")
    a = ap.parse_args()
    bin_dir, data_dir = os.path.abspath(a.bin_dir), os.path.abspath(a.data_dir)
    ok = True
    for name in ("demo", "large"):
        good, means, worst = check_set(bin_dir, os.path.join(data_dir, name), a.dct_scale)
        print(f"val fidelity vs torchvision, {name} (dct_scale: {a.dct_scale}): {len(means)} images, "
              f"mean {np.mean(means):.3f}, worst image mean {max(means):.3f} (limit {MEAN_LIMIT}), "
              f"worst value {worst} (limit {PIXEL_LIMIT})")
        ok = ok and good and (a.report_only or (max(means) <= MEAN_LIMIT and worst <= PIXEL_LIMIT))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
