#!/usr/bin/python3
"""Fidelity of the deterministic val pipeline against torchvision, on real photos.

Runs a real stokerd over tests/data/demo (Resize 256 + CenterCrop 224, uint8, dataset order),
dumps the batches with `stokerctl consume --dump`, and compares every image with what
torchvision gives for the same file: PIL decode, Resize(256) (bilinear, antialias),
CenterCrop(224), PILToTensor. Prints the mean absolute difference (0-255 scale) per image
and fails when any image is above 2.0.

usage: val_fidelity.py BIN_DIR DATA_DIR
"""
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

LIMIT = 2.0


def main(bin_dir: str, data_dir: str) -> int:
    root = os.path.join(data_dir, "demo")
    with tempfile.TemporaryDirectory(prefix="stoker-fidelity-") as tmp:
        samples, _ = dump_val_epoch(bin_dir, root, tmp)
        files = []
        for cls in sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))):
            for dirpath, _, names in sorted(os.walk(os.path.join(root, cls))):
                files += [os.path.join(dirpath, n) for n in sorted(names) if n.lower().endswith(".jpg")]

        tv = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])
        worst, diffs = 0.0, []
        for img, sid in samples:
            ref = tv(Image.open(files[sid]).convert("RGB")).numpy()
            d = float(np.abs(img.astype(np.int16) - ref.astype(np.int16)).mean())
            diffs.append(d)
            worst = max(worst, d)
            print(f"{os.path.relpath(files[sid], root)}: mean abs diff {d:.3f}")
        print(f"val fidelity vs torchvision: {len(diffs)} images, mean {np.mean(diffs):.3f}, "
              f"max {worst:.3f} (limit {LIMIT})")
        if len(diffs) != len(files):
            print(f"FAIL: {len(diffs)} images delivered, {len(files)} in the dataset")
            return 1
        return 0 if worst <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])))
