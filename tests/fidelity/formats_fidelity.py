#!/usr/bin/python3
"""Every image format of torchvision's IMG_EXTENSIONS decodes as torchvision's default loader
sees it (issue #16): the same photos saved by PIL as WebP (lossy, lossless, with alpha), TIFF
(LZW, Deflate, PackBits, palette, gray, unassociated alpha), BMP (24, 32-bit, 8-bit palette,
gray), PPM and PGM (also maxval 100 and 31, and 16-bit), PNG (alpha, gray, 16-bit gray), plus a
PNG and a WebP named .jpg (chosen by content, not name), each format its own class folder, go
through a real stokerd's val pipeline (Resize 256 + CenterCrop 224) and are compared with
torchvision on `PIL.Image.open(f).convert("RGB")`; 16-bit files are compared with the 8-bit
image they were made from (Stoker scales 16-bit samples, PIL clips them to white). A large WebP
(the 1800x1200 corpus photo) exercises the reduced WebP decode. Labels and sample order must
equal torchvision's ImageFolder. Fails when a file is not delivered, a label differs, or any
mean absolute difference is above 2.0 (0-255 scale).

usage: formats_fidelity.py BIN_DIR DATA_DIR
"""
import os
import sys
import tempfile

import numpy as np

from val_job import dump_val_epoch

try:
    from PIL import Image
    import torchvision
    import torchvision.transforms as T
except ImportError as e:  # reported as skipped by ctest (SKIP_RETURN_CODE 77)
    print(f"SKIP: {e}")
    sys.exit(77)

LIMIT = 2.0


def write_pnm(path, img, maxval):
    """Binary PGM/PPM with a maxval PIL cannot write: the 8-bit samples rescaled to maxval."""
    a = np.asarray(img).astype(np.float64)
    v = np.rint(a * maxval / 255.0).astype(np.uint16 if maxval > 255 else np.uint8)
    magic = b"P6" if v.ndim == 3 else b"P5"
    with open(path, "wb") as f:
        f.write(magic + b"\n%d %d\n%d\n" % (img.width, img.height, maxval))
        f.write(v.astype(">u2").tobytes() if maxval > 255 else v.tobytes())


def make_variants(photo, root, refs):
    """Saves the variants of `photo` into root/<variant>/ (one class per format). `refs` gets
    path -> the 8-bit image a 16-bit file was made from (compared against it)."""
    im = Image.open(photo).convert("RGB")
    im = im.resize((im.width * 320 // max(im.size), im.height * 320 // max(im.size)), Image.BILINEAR)
    rgba = im.copy()
    rgba.putalpha(Image.linear_gradient("L").resize(im.size))
    gray = im.convert("L")
    gray16 = Image.fromarray(np.asarray(gray).astype(np.uint16) * 257)  # mode I;16
    v = {
        "webp_lossy.webp": (im, dict(format="WEBP", quality=90)),
        "webp_lossless.webp": (im, dict(format="WEBP", lossless=True)),
        "webp_alpha.webp": (rgba, dict(format="WEBP", lossless=True)),
        "tiff_lzw.tif": (im, dict(format="TIFF", compression="tiff_lzw")),
        "tiff_deflate.tiff": (im, dict(format="TIFF", compression="tiff_adobe_deflate")),
        "tiff_packbits.TIF": (im, dict(format="TIFF", compression="packbits")),
        "tiff_palette.tif": (im.convert("P", palette=Image.ADAPTIVE), dict(format="TIFF")),
        "tiff_gray.tif": (gray, dict(format="TIFF")),
        "tiff_alpha.tif": (rgba, dict(format="TIFF", compression="tiff_lzw")),  # unassociated alpha
        "bmp24.bmp": (im, dict(format="BMP")),
        "bmp32.bmp": (rgba, dict(format="BMP")),
        "bmp8.bmp": (im.convert("P", palette=Image.ADAPTIVE), dict(format="BMP")),
        "bmp_gray.BMP": (gray, dict(format="BMP")),
        "ppm.ppm": (im, dict(format="PPM")),
        "pgm.pgm": (gray, dict(format="PPM")),
        "png_alpha.png": (rgba, dict(format="PNG")),
        "png_gray.png": (gray, dict(format="PNG")),
        "png_gray16.png": (gray16, dict(format="PNG")),
        "png_named.jpg": (im, dict(format="PNG")),
        "webp_named.jpg": (im, dict(format="WEBP", quality=90)),
    }
    stem = os.path.splitext(os.path.basename(photo))[0]

    def target(name):
        d = os.path.join(root, os.path.splitext(name)[0].lower())
        os.makedirs(d, exist_ok=True)
        return os.path.join(d, f"{stem}_{name}")

    for name, (img, kw) in v.items():
        img.save(target(name), **kw)
    refs[target("png_gray16.png")] = gray.convert("RGB")
    write_pnm(target("ppm_maxval100.ppm"), im, 100)
    write_pnm(target("pgm_maxval31.pgm"), gray, 31)
    write_pnm(target("pgm16.pgm"), gray, 65535)
    refs[target("pgm16.pgm")] = gray.convert("RGB")


def make_large_webp(photo, root):
    """The photo at full size (1800x1200): Resize 256 reads it reduced by libwebp's rescaler."""
    d = os.path.join(root, "webp_large")
    os.makedirs(d, exist_ok=True)
    Image.open(photo).convert("RGB").save(os.path.join(d, "large.webp"), format="WEBP", quality=90)


def labels_of_dump(tmp):
    """id -> label from the dump stokerctl wrote (tmp/dump/*.ids.npy and *.labels.npy)."""
    out = {}
    dump = os.path.join(tmp, "dump")
    for n in os.listdir(dump):
        if n.endswith(".ids.npy"):
            ids = np.load(os.path.join(dump, n))
            labels = np.load(os.path.join(dump, n[: -len(".ids.npy")] + ".labels.npy"))
            out.update(zip((int(i) for i in ids), (int(x) for x in labels)))
    return out


def main(bin_dir: str, data_dir: str) -> int:
    with tempfile.TemporaryDirectory(prefix="stoker-formats-") as tmp:
        root = os.path.join(tmp, "data")
        refs = {}
        for photo in ("flower/flower_00.jpg", "landscape/landscape_03.jpg"):
            make_variants(os.path.join(data_dir, "demo", photo), root, refs)
        make_large_webp(os.path.join(data_dir, "corpus", "exif-orientation", "Landscape_1.jpg"), root)
        samples, log = dump_val_epoch(bin_dir, root, tmp, batch_size=8)
        labels = labels_of_dump(tmp)

        # torchvision's ImageFolder decides the order and the labels Stoker must match.
        tv_ds = torchvision.datasets.ImageFolder(root)
        files = [p for p, _ in tv_ds.samples]
        tv = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])
        seen, worst, failed = set(), 0.0, False
        for img, sid in samples:
            ref_img = refs.get(files[sid]) or Image.open(files[sid]).convert("RGB")
            ref = tv(ref_img).numpy()
            d = float(np.abs(img.astype(np.int16) - ref.astype(np.int16)).mean())
            seen.add(sid)
            worst = max(worst, d)
            flag = "" if d <= LIMIT else "   ABOVE LIMIT"
            failed |= d > LIMIT
            if labels.get(sid) != tv_ds.samples[sid][1]:
                flag += f"   LABEL {labels.get(sid)} != torchvision's {tv_ds.samples[sid][1]}"
                failed = True
            print(f"{os.path.relpath(files[sid], root)}: mean abs diff {d:.3f}{flag}")
        missing = [os.path.relpath(files[i], root) for i in range(len(files)) if i not in seen]
        if missing:
            print("NOT DELIVERED: " + ", ".join(missing))
            print(log)
            failed = True
        print(f"formats vs torchvision: {len(seen)} of {len(files)} files, max mean abs diff {worst:.3f} (limit {LIMIT})")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])))
