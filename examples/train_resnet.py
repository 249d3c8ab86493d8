#!/usr/bin/python3
"""Train a small torchvision model for a few steps, fed by Stoker or by torchvision's own
DataLoader: change one flag to compare the two.

  # Stoker: start a daemon on the bundled data, then train from it
  build/bin/stokerd --config configs/demo.yaml --socket /tmp/stoker.sock &
  PYTHONPATH=build/python /usr/bin/python3 client/python/examples/train_example.py --socket /tmp/stoker.sock
  # torchvision's DataLoader with the same transforms on the same files
  /usr/bin/python3 client/python/examples/train_example.py --loader torchvision --root tests/data/demo
"""
import argparse
import time

import torch
import torch.nn as nn
import torchvision

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


def stoker_batches(args):
    import stoker
    loader = stoker.Loader(args.job, socket=args.socket)
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for images, labels in loader:
            yield images, labels, loader.info["num_classes"]
        epoch += 1


def torchvision_batches(args):
    import torchvision.transforms as T
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])
    ds = torchvision.datasets.ImageFolder(args.root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                                     num_workers=args.workers, drop_last=False)
    while True:
        for images, labels in dl:
            yield images, labels, len(ds.classes)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loader", choices=["stoker", "torchvision"], default="stoker")
    ap.add_argument("--job", default="demo")
    ap.add_argument("--socket", default=None)
    ap.add_argument("--root", default="tests/data/demo")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()

    batches = stoker_batches(args) if args.loader == "stoker" else torchvision_batches(args)
    model, opt = None, None
    t0 = time.perf_counter()
    seen = 0
    for step in range(args.steps):
        images, labels, classes = next(batches)
        if model is None:
            model = torchvision.models.resnet18(num_classes=classes)
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        # uint8 batches are normalized here (on the GPU in a real job), not in the loader.
        x = (images.float() - MEAN) / STD
        loss = nn.functional.cross_entropy(model(x), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += images.shape[0]
        print(f"step {step}: loss {loss.item():.3f}", flush=True)
    print(f"{args.loader}: {args.steps} steps, {seen / (time.perf_counter() - t0):.1f} images/s")


if __name__ == "__main__":
    main()
