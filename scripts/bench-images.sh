#!/usr/bin/env bash
# Cuts ImageNet-like JPEGs (500 px wide, 375..500 px high, 4:2:0) from real photographs in
# Debian packages (mate-backgrounds' nature photos and the photographs among
# plasma-workspace-wallpapers) into an ImageFolder tree of 10 classes, for benchmarks.
# Never benchmark decode speed on synthetic images: they compress unlike photos.
# Deterministic: the same arguments give the same files.
#   scripts/bench-images.sh [OUT_DIR] [COUNT] [QUALITY]   (default /tmp/stoker-bench-images 2000 95)
# These wallpapers are smoother than ImageNet's photos: at quality 95 they come out near
# 2 bits/pixel (ImageNet averages ~110 KB, 4-5 bits/pixel). The script prints the figure;
# quote it beside any decode rate measured on the set.
set -euo pipefail
out=${1:-/tmp/stoker-bench-images}
count=${2:-2000}
quality=${3:-95}
mate=/usr/share/backgrounds/mate/nature
kde=/usr/share/wallpapers
if [[ ! -d $mate || ! -d $kde/EveningGlow ]]; then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    mate-backgrounds plasma-workspace-wallpapers python3-pil >/dev/null
fi
/usr/bin/python3 - "$mate" "$kde" "$out" "$count" "$quality" <<'PY'
import glob, os, random, sys
from PIL import Image
mate, kde, out, count, quality = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
# The KDE wallpapers that are photographs (the others are drawings or renders).
KDE_PHOTOS = ["BytheWater", "ColdRipple", "ColorfulCups", "DarkestHour", "EveningGlow",
              "FallenLeaf", "Honeywave", "OneStandsOut", "Path", "summer_1am"]
photos = sorted(glob.glob(os.path.join(mate, "*.jpg")))
for name in KDE_PHOTOS:
    files = sorted(glob.glob(os.path.join(kde, name, "contents", "images", "*.jpg")))
    if files:  # the largest rendition of each
        photos.append(max(files, key=lambda f: Image.open(f).size[0]))
rng = random.Random(1234)
ims = [Image.open(p).convert("RGB") for p in photos]
classes = 10
for i in range(count):
    im = ims[i % len(ims)]
    # A crop of 25..70% of the photo's width with aspect 0.75..1.0 (height/width), scaled to
    # 500 px wide: the shape of a typical ImageNet picture.
    cw = int(im.width * rng.uniform(0.25, 0.7))
    ch = min(im.height, int(cw * rng.uniform(0.75, 1.0)))
    x, y = rng.randrange(0, im.width - cw + 1), rng.randrange(0, im.height - ch + 1)
    crop = im.crop((x, y, x + cw, y + ch)).resize((500, max(1, round(ch * 500 / cw))), Image.BICUBIC)
    d = os.path.join(out, f"class{i % classes:02d}")
    os.makedirs(d, exist_ok=True)
    crop.save(os.path.join(d, f"img{i:05d}.jpg"), quality=quality)
files = [os.path.join(dp, f) for dp, _, fs in os.walk(out) for f in fs]
size = sum(os.path.getsize(f) for f in files)
pixels = sum(Image.open(f).size[0] * Image.open(f).size[1] for f in files)
print(f"bench-images: {len(files)} JPEGs in {out}, quality {quality}, mean {size / len(files) / 1024:.0f} KiB, "
      f"{8 * size / pixels:.2f} bits/pixel, from {len(photos)} photographs")
PY
