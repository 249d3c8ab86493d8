#!/usr/bin/python3
"""Regenerates the PIL/torchvision reference outputs that tests/unit/image_reference_test.cpp
compares the engine against (mean absolute difference <= 2.0 on the 0-255 scale).

Each reference is what torchvision gives on a PIL image: PIL decode (libjpeg, its own DCT
settings), optional EXIF transpose, then the geometry with bilinear antialiased resampling,
as uint8 HWC. Written as .npy (version 1.0, |u1) beside a manifest.txt that the C++ test
reads, one line per case:
    <npy file> <source under tests/data> <geometry: val|resize> <resize_shorter> <out_h> <out_w> <exif 0|1> <filter>
with <filter> the InterpolationMode: bilinear, bicubic or nearest.

Run with Debian's python (the one with PIL and torchvision):
    /usr/bin/python3 tests/data/reference/make_reference.py
"""
import os

import numpy as np
from PIL import Image, ImageOps
import torchvision.transforms as T

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.dirname(HERE)

# (name, source, geometry, resize_shorter, out_h, out_w, apply_exif[, filter (bilinear)])
CASES = [
    # Upscaling (227x149 -> 389x256): the filter's support is not widened.
    ("testorig_val", "corpus/jpeg-turbo-testimages/testorig.jpg", "val", 256, 224, 224, 0),
    # 1800x1200 photo: the engine decodes at a DCT scale, PIL decodes fully.
    ("landscape1_val", "corpus/exif-orientation/Landscape_1.jpg", "val", 256, 224, 224, 0),
    # EXIF orientation 6 (stored rotated): the engine folds the rotation into its write.
    ("portrait6_exif_val", "corpus/exif-orientation/Portrait_6.jpg", "val", 256, 224, 224, 1),
    # Whole image to a fixed size, aspect not kept.
    ("landscape1_resize", "corpus/exif-orientation/Landscape_1.jpg", "resize", 0, 224, 224, 0),
    # The PNG path (8-bit grayscale, delivered as RGB).
    ("testorig_png_val", "corpus/jpeg-turbo-testimages/testorig.png", "val", 256, 224, 224, 0),
    # interpolation: bicubic / nearest (small outputs keep the files small; h != w catches a
    # swapped axis). Downscaling, upscaling, and EXIF orientations that mirror a stored axis
    # (6: y; 7: both, axes swapped; 3: both), where nearest must pick PIL's pixel, not its mirror.
    ("landscape1_val_bicubic", "corpus/exif-orientation/Landscape_1.jpg", "val", 100, 96, 80, 0, "bicubic"),
    ("landscape1_val_nearest", "corpus/exif-orientation/Landscape_1.jpg", "val", 100, 96, 80, 0, "nearest"),
    ("landscape1_resize_nearest", "corpus/exif-orientation/Landscape_1.jpg", "resize", 0, 97, 131, 0, "nearest"),
    ("testorig_resize_bicubic", "corpus/jpeg-turbo-testimages/testorig.jpg", "resize", 0, 160, 300, 0, "bicubic"),
    ("testorig_resize_nearest", "corpus/jpeg-turbo-testimages/testorig.jpg", "resize", 0, 160, 300, 0, "nearest"),
    ("portrait6_exif_val_nearest", "corpus/exif-orientation/Portrait_6.jpg", "val", 120, 96, 80, 1, "nearest"),
    ("portrait7_exif_val_bicubic", "corpus/exif-orientation/Portrait_7.jpg", "val", 120, 96, 80, 1, "bicubic"),
    ("landscape3_exif_resize_nearest", "corpus/exif-orientation/Landscape_3.jpg", "resize", 0, 75, 90, 1, "nearest"),
    ("landscape1_val_bilinear_small", "corpus/exif-orientation/Landscape_1.jpg", "val", 100, 96, 80, 0, "bilinear"),
]


def reference(source: str, geometry: str, resize: int, out_h: int, out_w: int, exif: int,
              filter: str = "bilinear") -> np.ndarray:
    im = Image.open(os.path.join(DATA, source))
    if exif:
        im = ImageOps.exif_transpose(im)
    im = im.convert("RGB")
    mode = T.InterpolationMode(filter)
    if geometry == "val":
        tf = T.Compose([T.Resize(resize, interpolation=mode), T.CenterCrop((out_h, out_w))])
    else:
        tf = T.Resize((out_h, out_w), interpolation=mode)
    return np.asarray(tf(im), dtype=np.uint8)


def main() -> None:
    lines = []
    for name, source, geometry, resize, out_h, out_w, exif, *rest in CASES:
        filter = rest[0] if rest else "bilinear"
        arr = reference(source, geometry, resize, out_h, out_w, exif, filter)
        assert arr.shape == (out_h, out_w, 3), arr.shape
        np.save(os.path.join(HERE, name + ".npy"), np.ascontiguousarray(arr))
        lines.append(f"{name}.npy {source} {geometry} {resize} {out_h} {out_w} {exif} {filter}")
        print(f"{name}: {source} -> {arr.shape}")
    with open(os.path.join(HERE, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
