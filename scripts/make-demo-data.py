#!/usr/bin/python3
"""Regenerates tests/data/demo: a small ImageFolder of real photographs.

The photos are crops of Debian's mate-backgrounds package (nature/*.jpg, GPL-2+, see
tests/data/demo/LICENSE). Run once by a maintainer; the output is committed so that a
user's clone needs nothing else:  apt-get download mate-backgrounds && dpkg -x *.deb x &&
scripts/make-demo-data.py x/usr/share/backgrounds/mate/nature tests/data/demo
"""
import random
import sys
from pathlib import Path

from PIL import Image

CLASSES = {
    "flower": ["FreshFlower.jpg", "YellowFlower.jpg", "Garden.jpg"],
    "insect": ["LadyBird.jpg", "TwoWings.jpg"],
    "landscape": ["Dune.jpg", "GreenMeadow.jpg", "Storm.jpg"],
    "texture": ["Wood.jpg", "RainDrops.jpg", "Blinds.jpg", "Aqua.jpg"],
}
PER_CLASS = 16


def main(src: Path, dst: Path) -> None:
    rng = random.Random(20261122)
    for cls, files in CLASSES.items():
        out = dst / cls
        out.mkdir(parents=True, exist_ok=True)
        photos = [Image.open(src / f).convert("RGB") for f in files]
        for i in range(PER_CLASS):
            im = photos[i % len(photos)]
            # ImageNet-like: a random crop of 20..60% of the width, down to ~400 px wide.
            cw = int(im.width * rng.uniform(0.2, 0.6))
            ch = int(cw * rng.uniform(0.6, 1.1))
            ch = min(ch, im.height)
            x = rng.randrange(0, im.width - cw + 1)
            y = rng.randrange(0, im.height - ch + 1)
            crop = im.crop((x, y, x + cw, y + ch))
            w = rng.randrange(300, 480)
            crop = crop.resize((w, max(1, int(ch * w / cw))), Image.BICUBIC)
            crop.save(out / f"{cls}_{i:02d}.jpg", quality=rng.choice([75, 85, 92]))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
