#!/usr/bin/python3
"""Every image format of torchvision's IMG_EXTENSIONS decodes as torchvision's default loader
sees it (issue #16): the same photos saved by PIL as WebP (lossy, lossless, with alpha), TIFF
(LZW, Deflate, PackBits, palette, gray), BMP (24, 32-bit, 8-bit palette, gray), PPM and PGM, plus
a PNG and a WebP named .jpg (chosen by content, not name), go through a real stokerd's val
pipeline (Resize 256 + CenterCrop 224) and are compared with torchvision on
`PIL.Image.open(f).convert("RGB")`. Fails when a file is not delivered or any mean absolute
difference is above 2.0 (0-255 scale).

usage: formats_fidelity.py BIN_DIR DATA_DIR
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


def make_variants(photo, out_dir):
    im = Image.open(photo).convert("RGB")
    im = im.resize((im.width * 320 // max(im.size), im.height * 320 // max(im.size)), Image.BILINEAR)
    rgba = im.copy()
    rgba.putalpha(Image.linear_gradient("L").resize(im.size))
    v = {
        "webp_lossy.webp": (im, dict(format="WEBP", quality=90)),
        "webp_lossless.webp": (im, dict(format="WEBP", lossless=True)),
        "webp_alpha.webp": (rgba, dict(format="WEBP", lossless=True)),
        "tiff_lzw.tif": (im, dict(format="TIFF", compression="tiff_lzw")),
        "tiff_deflate.tiff": (im, dict(format="TIFF", compression="tiff_adobe_deflate")),
        "tiff_packbits.TIF": (im, dict(format="TIFF", compression="packbits")),
        "tiff_palette.tif": (im.convert("P", palette=Image.ADAPTIVE), dict(format="TIFF")),
        "tiff_gray.tif": (im.convert("L"), dict(format="TIFF")),
        "bmp24.bmp": (im, dict(format="BMP")),
        "bmp32.bmp": (rgba, dict(format="BMP")),
        "bmp8.bmp": (im.convert("P", palette=Image.ADAPTIVE), dict(format="BMP")),
        "bmp_gray.BMP": (im.convert("L"), dict(format="BMP")),
        "ppm.ppm": (im, dict(format="PPM")),
        "pgm.pgm": (im.convert("L"), dict(format="PPM")),
        "png_named.jpg": (im, dict(format="PNG")),
        "webp_named.jpg": (im, dict(format="WEBP", quality=90)),
    }
    stem = os.path.splitext(os.path.basename(photo))[0]
    for name, (img, kw) in v.items():
        img.save(os.path.join(out_dir, f"{stem}_{name}"), **kw)


def main(bin_dir: str, data_dir: str) -> int:
    with tempfile.TemporaryDirectory(prefix="stoker-formats-") as tmp:
        root = os.path.join(tmp, "data")
        os.makedirs(os.path.join(root, "all"))
        for photo in ("flower/flower_00.jpg", "landscape/landscape_03.jpg"):
            make_variants(os.path.join(data_dir, "demo", photo), os.path.join(root, "all"))
        samples, log = dump_val_epoch(bin_dir, root, tmp, batch_size=8)

        files = sorted(os.path.join(root, "all", n) for n in os.listdir(os.path.join(root, "all")))
        tv = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])
        seen, worst, failed = set(), 0.0, False
        for img, sid in samples:
            ref = tv(Image.open(files[sid]).convert("RGB")).numpy()
            d = float(np.abs(img.astype(np.int16) - ref.astype(np.int16)).mean())
            seen.add(sid)
            worst = max(worst, d)
            flag = "" if d <= LIMIT else "   ABOVE LIMIT"
            failed |= d > LIMIT
            print(f"{os.path.basename(files[sid])}: mean abs diff {d:.3f}{flag}")
        missing = [os.path.basename(files[i]) for i in range(len(files)) if i not in seen]
        if missing:
            print("NOT DELIVERED: " + ", ".join(missing))
            print(log)
            failed = True
        print(f"formats vs torchvision: {len(seen)} of {len(files)} files, max mean abs diff {worst:.3f} (limit {LIMIT})")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])))
