#!/usr/bin/env bash
# Cuts ImageNet-like JPEGs (about 500x375..500x500, quality 95) from real photographs
# in Debian's mate-backgrounds package into an ImageFolder tree, for benchmarks. Never
# benchmark decode speed on synthetic images: they compress unlike photos.
#   scripts/bench-images.sh [OUT_DIR] [COUNT]      (default /tmp/stoker-bench-images 2000)
set -euo pipefail
out=${1:-/tmp/stoker-bench-images}
count=${2:-2000}
cd "$(dirname "$0")/.."
src=/usr/share/backgrounds/mate/nature
if [[ ! -d $src ]]; then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends mate-backgrounds python3-pil >/dev/null
fi
/usr/bin/python3 - "$src" "$out" "$count" <<'PY'
import os, random, sys
from PIL import Image
src, out, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
photos = sorted(f for f in os.listdir(src) if f.lower().endswith(".jpg"))
rng = random.Random(1234)
ims = [Image.open(os.path.join(src, f)).convert("RGB") for f in photos]
classes = 10
for i in range(count):
    im = ims[i % len(ims)]
    # A crop of 25..70% of the photo's width, aspect 0.75..1.0, scaled to 500 px wide.
    cw = int(im.width * rng.uniform(0.25, 0.7))
    ch = min(im.height, int(cw * rng.uniform(0.75, 1.0)))
    x, y = rng.randrange(0, im.width - cw + 1), rng.randrange(0, im.height - ch + 1)
    crop = im.crop((x, y, x + cw, y + ch)).resize((500, max(1, round(ch * 500 / cw))), Image.BICUBIC)
    d = os.path.join(out, f"class{i % classes:02d}")
    os.makedirs(d, exist_ok=True)
    crop.save(os.path.join(d, f"img{i:05d}.jpg"), quality=95)
sizes = [os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(out) for f in fs]
print(f"bench-images: {len(sizes)} JPEGs in {out}, mean {sum(sizes) / len(sizes) / 1024:.0f} KiB, "
      f"from {len(photos)} photographs in {src}")
PY
