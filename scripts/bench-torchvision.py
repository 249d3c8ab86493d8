#!/usr/bin/python3
"""torchvision's DataLoader on the same files, for scripts/bench.sh's side-by-side ratios.

Prints one line per pipeline: "<name> <images/s>", measured over whole epochs after one
warm-up batch, with N worker processes (one core each) and batch size 64:
  train_uint8    RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor
  train_float32  RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize
  val_uint8      Resize(256) + CenterCrop(224) + PILToTensor
usage: bench-torchvision.py IMAGES_DIR [--workers N] [--epochs E]
"""
import argparse
import time

import torch
import torchvision.datasets as D
import torchvision.transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
PIPELINES = {
    "train_uint8": T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()]),
    "train_float32": T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                                T.Normalize(MEAN, STD)]),
    "val_uint8": T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()]),
}


def worker_init(_):
    torch.set_num_threads(1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("images")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name, tf in PIPELINES.items():
        ds = D.ImageFolder(args.images, transform=tf)
        dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=args.workers,
                                         worker_init_fn=worker_init, persistent_workers=args.workers > 0)
        n, t0 = 0, None
        for _ in range(args.epochs):
            for images, _labels in dl:
                if t0 is None:  # the first batch pays for starting the workers
                    t0 = time.perf_counter()
                    continue
                n += images.shape[0]
        print(f"{name} {n / (time.perf_counter() - t0):.1f}", flush=True)


if __name__ == "__main__":
    main()
