#!/usr/bin/python3
"""Images/s per image format: Stoker's decoders (build/bin/stoker_bench_formats, one core)
beside PIL's decode + convert("RGB") and torchvision's RandomResizedCrop on the same files,
measured in one run with rounds interleaved (Stoker round, PIL round, ...), medians reported.
Rates are images per second of CPU time on each side (one thread each): on a shared machine
wall-clock rates follow the neighbours' load (they moved 2.5x here), CPU time much less.

The files are the real bench photos (scripts/bench-images.sh, ImageNet-like 500 px JPEGs)
re-saved by PIL as PNG, WebP lossy (quality 90) and lossless, TIFF (LZW), BMP and PPM, plus the
JPEGs themselves, so every format holds the same pictures. Never synthetic images. Two more
sets, jpeg_1600 and webp_lossy_1600, are the source photographs of mate-backgrounds at 1600 px
wide (JPEG quality 95, WebP quality 90): there RandomResizedCrop windows are large enough for
the reduced decodes (JPEG DCT scale, WebP rescaler) to apply.

usage: scripts/bench-formats.py [--images DIR] [--count N] [--out DIR] [--build DIR]
                                [--seconds S] [--rounds R]
"""
import argparse
import io
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import machine  # noqa: E402

from PIL import Image  # noqa: E402

FORMATS = {  # folder: (PIL save arguments, extension); None: the JPEG's own bytes
    "jpeg": (None, ".jpg"),
    "png": (dict(format="PNG"), ".png"),
    "webp_lossy": (dict(format="WEBP", quality=90), ".webp"),
    "webp_lossless": (dict(format="WEBP", lossless=True), ".webp"),
    "tiff_lzw": (dict(format="TIFF", compression="tiff_lzw"), ".tif"),
    "bmp": (dict(format="BMP"), ".bmp"),
    "ppm": (dict(format="PPM"), ".ppm"),
}


LARGE = {"jpeg_1600": dict(format="JPEG", quality=95), "webp_lossy_1600": dict(format="WEBP", quality=90)}
LARGE_SOURCE = "/usr/share/backgrounds/mate/nature"  # installed by scripts/bench-images.sh


def make_sets(images, count, out):
    """out/<format>/ from `count` photos spread over the bench set; kept when already made."""
    stamp = os.path.join(out, f".made-from-{count}-v2")
    if os.path.exists(stamp):
        return
    shutil.rmtree(out, ignore_errors=True)
    photos = sorted(os.path.join(d, f) for d, _, fs in os.walk(images) for f in fs
                    if f.lower().endswith((".jpg", ".jpeg")))
    if not photos:
        sys.exit(f"no JPEGs under {images}")
    step = max(1, len(photos) // count)
    photos = photos[::step][:count]
    for name, (kw, ext) in FORMATS.items():
        os.makedirs(os.path.join(out, name))
        for i, p in enumerate(photos):
            dst = os.path.join(out, name, f"{i:05d}{ext}")
            if kw is None:
                shutil.copyfile(p, dst)
            else:
                Image.open(p).convert("RGB").save(dst, **kw)
    large = sorted(os.path.join(LARGE_SOURCE, f) for f in os.listdir(LARGE_SOURCE) if f.endswith(".jpg"))
    for name, kw in LARGE.items():
        os.makedirs(os.path.join(out, name))
        for i, p in enumerate(large):
            im = Image.open(p).convert("RGB")
            im = im.resize((1600, im.height * 1600 // im.width), Image.LANCZOS)
            im.save(os.path.join(out, name, f"{i:05d}.{kw['format'].lower()}"), **kw)
    open(stamp, "w").close()


def load(folder):
    return [open(os.path.join(folder, f), "rb").read() for f in sorted(os.listdir(folder))]


def timed(files, seconds, one):
    """Images per CPU-second of this process (PIL and torch kept to one thread)."""
    n, t0 = 0, time.process_time()
    while True:
        one(files[n % len(files)])
        n += 1
        el = time.process_time() - t0
        if el >= seconds and n >= len(files):
            return n / el


def median(v):
    return sorted(v)[len(v) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", default="/tmp/stoker-bench-images")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--out", default="/tmp/stoker-bench-formats")
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=float, default=1.0, help="per measurement per round")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(a.images):
        subprocess.run([os.path.join(root, "scripts", "bench-images.sh"), a.images, "2000"], check=True)
    make_sets(a.images, a.count, a.out)
    bench = os.path.join(a.build, "bin", "stoker_bench_formats")
    if not os.access(bench, os.X_OK):
        sys.exit(f"missing {bench} (cmake -B {a.build} -DSTOKER_BUILD_BENCHMARKS=ON && "
                 f"cmake --build {a.build} --target stoker_bench_formats)")

    import torch
    import torchvision.transforms as T
    torch.set_num_threads(1)  # one core, as the Stoker side
    train = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])

    def pil_decode(b):
        Image.open(io.BytesIO(b)).convert("RGB")

    def tv_train(b):
        train(Image.open(io.BytesIO(b)).convert("RGB"))

    sets = {name: load(os.path.join(a.out, name)) for name in list(FORMATS) + list(LARGE)}
    stoker, pil = {}, {}
    for r in range(a.rounds):
        # One Stoker round over every format and measurement, then one PIL round.
        out = subprocess.run([bench, a.out, str(a.seconds), "1"], check=True, capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 3 and f[1] != "files":
                stoker.setdefault((f[0], f[1]), []).append(float(f[2]))
                if len(f) > 3:
                    print(f"warning: {line}", file=sys.stderr)
        for name, files in sets.items():
            pil.setdefault((name, "decode"), []).append(timed(files, a.seconds, pil_decode))
            pil.setdefault((name, "train_uint8"), []).append(timed(files, a.seconds, tv_train))

    print(f"machine: {machine()}; {a.count} photos per format from {a.images}; one thread each side, "
          f"images per CPU-second, median of {a.rounds} interleaved rounds")
    hdr = ("format", "mean KiB", "Stoker decode/s", "PIL decode/s", "x", "Stoker RRC/s", "torchvision RRC/s", "x",
           "Stoker RRC/s, WebP whole")
    print(" | ".join(hdr))
    for name, files in sets.items():
        kib = sum(len(b) for b in files) / len(files) / 1024
        sd, pd = median(stoker[(name, "decode")]), median(pil[(name, "decode")])
        st, pt = median(stoker[(name, "train_uint8")]), median(pil[(name, "train_uint8")])
        whole = stoker.get((name, "train_uint8_whole"))
        print(f"{name} | {kib:.1f} | {sd:.0f} | {pd:.0f} | {sd / pd:.2f} | {st:.0f} | {pt:.0f} | {st / pt:.2f} | "
              + (f"{median(whole):.0f}" if whole else "-"))


if __name__ == "__main__":
    main()
