#!/usr/bin/python3
"""Regenerates tests/data/large: real photographs with a short side of 1000 px or more, for the
fidelity of deterministic (eval) pipelines on large images, where a DCT-scaled decode would
differ from torchvision by several levels (tests/fidelity/val_fidelity.py).

Crops of Debian's mate-backgrounds package (nature/*.jpg, GPL-2+, see tests/data/large/LICENSE),
re-encoded (baseline and progressive, 4:2:0) at their own size: no resampling, so the pixels are
the photographer's. Run once by a maintainer; the output is committed:
  apt-get download mate-backgrounds && dpkg -x *.deb x &&
  scripts/make-large-photos.py x/usr/share/backgrounds/mate/nature tests/data/large
"""
import random
import sys
from pathlib import Path

from PIL import Image

# (class, source file); two photos per class.
PHOTOS = [
    ("flower", "FreshFlower.jpg"), ("flower", "YellowFlower.jpg"),
    ("insect", "LadyBird.jpg"), ("insect", "TwoWings.jpg"),
    ("landscape", "GreenMeadow.jpg"), ("landscape", "Storm.jpg"),
    ("texture", "Aqua.jpg"), ("texture", "Wood.jpg"),
]


def main(src: Path, dst: Path) -> None:
    rng = random.Random(20261126)
    for i, (cls, name) in enumerate(PHOTOS):
        out = dst / cls
        out.mkdir(parents=True, exist_ok=True)
        im = Image.open(src / name).convert("RGB")
        # Short side 1000..1100 px, aspect 3:4..4:3 either way (odd sizes included).
        short = rng.randrange(1000, min(1101, im.height + 1))
        long = min(int(short * rng.uniform(1.0, 1.34)), im.width)
        w, h = (long, short) if i % 3 else (short, min(long, im.height))
        x = rng.randrange(0, im.width - w + 1)
        y = rng.randrange(0, im.height - h + 1)
        im.crop((x, y, x + w, y + h)).save(out / f"{cls}_{i:02d}.jpg", quality=rng.choice([72, 80]),
                                           progressive=i % 4 == 1, optimize=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
