#!/usr/bin/python3
"""Train a small torchvision model for a few steps, fed by Stoker or by torchvision's own
ImageFolder + DataLoader with the same transforms: change one flag to compare the two.

  cmake -S . -B build -DPython3_EXECUTABLE=/usr/bin/python3 && cmake --build build -j
  # Stoker: a daemon on the bundled data (configs/demo.yaml: 224px RandomResizedCrop + flip,
  # batch 16, uint8 NCHW), then train from it
  build/bin/stokerd --config configs/demo.yaml --socket /tmp/stoker.sock &
  PYTHONPATH=build/python /usr/bin/python3 examples/train_resnet.py --socket /tmp/stoker.sock
  # the same training, fed by torchvision's DataLoader from the same files
  /usr/bin/python3 examples/train_resnet.py --loader torchvision --root tests/data/demo

Use /usr/bin/python3 on Debian: python3-torch belongs to it. Both paths yield uint8 NCHW
batches; normalizing happens here, on the training device, as a real job would do it.
"""
import argparse
import time

import torch
import torch.nn as nn
import torchvision

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


def stoker_batches(args, state):
    import stoker
    loader = stoker.Loader(args.job, socket=args.socket)  # rank from torchrun's RANK, if set
    print(f"stoker: job '{args.job}', {len(loader)} batches per epoch, "
          f"{loader.info['num_classes']} classes, slots {loader.info['slot_count']}")
    if state is not None:
        loader.load_state_dict(state)
    epoch = loader.state_dict()["epoch"]
    while True:
        loader.set_epoch(epoch)
        for images, labels in loader:  # tensors viewing the daemon's shared memory
            yield images, labels, loader.info["num_classes"], loader.state_dict
        epoch += 1


def torchvision_batches(args, state):
    import torchvision.transforms as T
    tf = T.Compose([T.RandomResizedCrop(224, scale=(0.08, 1.0), ratio=(0.75, 1.3333)),
                    T.RandomHorizontalFlip(), T.PILToTensor()])
    ds = torchvision.datasets.ImageFolder(args.root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                                     num_workers=args.workers, drop_last=False)
    print(f"torchvision: {len(dl)} batches per epoch, {len(ds.classes)} classes, "
          f"{args.workers} workers")
    while True:
        for images, labels in dl:
            yield images, labels, len(ds.classes), lambda: None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loader", choices=["stoker", "torchvision"], default="stoker")
    ap.add_argument("--job", default="demo", help="stoker: the job to consume")
    ap.add_argument("--socket", default=None, help="stoker: the daemon's socket ($STOKER_SOCKET, ...)")
    ap.add_argument("--root", default="tests/data/demo", help="torchvision: the ImageFolder root")
    ap.add_argument("--batch-size", type=int, default=16, help="torchvision (stoker: the job's config)")
    ap.add_argument("--workers", type=int, default=2, help="torchvision: DataLoader workers")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--model", default="resnet18", help="a torchvision.models constructor")
    ap.add_argument("--checkpoint", default=None, help="stoker: save/resume the loader position here")
    args = ap.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    state = None
    if args.checkpoint and args.loader == "stoker":
        try:
            state = torch.load(args.checkpoint)["loader"]
            print(f"resuming at {state}")
        except FileNotFoundError:
            pass
    make = stoker_batches if args.loader == "stoker" else torchvision_batches
    batches = make(args, state)
    mean, std = MEAN.to(device), STD.to(device)
    model = opt = None
    seen, wait = 0, 0.0
    t0 = time.perf_counter()
    for step in range(args.steps):
        t = time.perf_counter()
        images, labels, classes, loader_state = next(batches)
        wait += time.perf_counter() - t
        if model is None:
            model = getattr(torchvision.models, args.model)(num_classes=classes).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = (images.to(device, non_blocking=True).float() - mean) / std
        y = labels.to(device, non_blocking=True)
        del images, labels  # a Stoker batch's slot goes back to the daemon once its tensors die
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += x.shape[0]
        print(f"step {step}: loss {loss.item():.3f}", flush=True)
    dt = time.perf_counter() - t0
    print(f"{args.loader}: {args.steps} steps, {seen / dt:.1f} images/s, "
          f"{100 * wait / dt:.0f}% of the time waiting for data")
    if args.checkpoint and args.loader == "stoker":
        torch.save({"loader": loader_state()}, args.checkpoint)
        print(f"saved loader position {loader_state()} to {args.checkpoint}")


if __name__ == "__main__":
    main()
