"""A training script in the shape of torchvision's references/classification/train.py (v0.14.1):
its presets (wrapper classes holding a Compose in `.transforms`), its load_data() samplers
(DistributedSampler when distributed, else RandomSampler / SequentialSampler), its two
DataLoader constructor calls, torch.manual_seed, and its epoch loop with
`train_sampler.set_epoch(epoch)` when distributed and `--resume` as a start epoch. Written for
the tests (not copied); it trains nothing and records what every epoch served.

--loader torch runs it with torch.utils.data.DataLoader; --loader stoker with the two
constructor calls swapped for stoker.Loader.from_dataset, same arguments (the daemon's socket
comes from $STOKER_SOCKET). Those two calls are the only lines that differ. The test calls
main(parse(argv)) in its own process (a Python start with torch costs seconds per run).

The test images encode their sample index in the red channel (constant over the image: 8*i+4)
and the pixel position in green and blue, so each served image says which sample it is
(whatever the crop or flip) and its pixels say which augmentation it got."""
import argparse
import hashlib
import json
import sys

import torch
import torch.utils.data
import torchvision
from torchvision import transforms as T

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class ClassificationPresetTrain:
    def __init__(self, *, crop_size, mean=MEAN, std=STD, hflip_prob=0.5):
        trans = [T.RandomResizedCrop(crop_size)]
        if hflip_prob > 0:
            trans.append(T.RandomHorizontalFlip(hflip_prob))
        trans.extend([T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(mean=mean, std=std)])
        self.transforms = T.Compose(trans)

    def __call__(self, img):
        return self.transforms(img)


class ClassificationPresetEval:
    def __init__(self, *, crop_size, resize_size, mean=MEAN, std=STD):
        self.transforms = T.Compose([T.Resize(resize_size), T.CenterCrop(crop_size), T.PILToTensor(),
                                     T.ConvertImageDtype(torch.float), T.Normalize(mean=mean, std=std)])

    def __call__(self, img):
        return self.transforms(img)


def load_data(traindir, valdir, args):
    dataset = torchvision.datasets.ImageFolder(traindir, ClassificationPresetTrain(crop_size=args.train_crop_size))
    dataset_test = torchvision.datasets.ImageFolder(
        valdir, ClassificationPresetEval(crop_size=args.val_crop_size, resize_size=args.val_resize_size))
    if args.distributed:
        train_sampler = torch.utils.data.distributed.DistributedSampler(dataset)
        test_sampler = torch.utils.data.distributed.DistributedSampler(dataset_test, shuffle=False)
    else:
        train_sampler = torch.utils.data.RandomSampler(dataset)
        test_sampler = torch.utils.data.SequentialSampler(dataset_test)
    return dataset, dataset_test, train_sampler, test_sampler


def describe(image, target):
    """[sample index, label, digest of the 8-bit pixels] for each image of a batch."""
    pixels = ((image * torch.tensor(STD).view(1, 3, 1, 1) + torch.tensor(MEAN).view(1, 3, 1, 1)) * 255).round()
    out = []
    for k in range(image.shape[0]):
        index = int(round((pixels[k, 0].mean().item() - 4) / 8))
        digest = hashlib.sha1(pixels[k].clamp(0, 255).to(torch.uint8).numpy().tobytes()).hexdigest()[:16]
        out.append([index, int(target[k]), digest])
    return out


def main(args):
    if args.distributed:  # one process of a gloo world of 1, as utils.init_distributed_mode would
        torch.distributed.init_process_group("gloo", init_method="file://" + args.dist_file, rank=0, world_size=1)
    torch.manual_seed(args.seed)
    dataset, dataset_test, train_sampler, test_sampler = load_data(args.data_path, args.data_path, args)
    collate_fn = None

    if args.loader == "torch":
        data_loader = torch.utils.data.DataLoader(
            dataset, batch_size=args.batch_size, sampler=train_sampler, num_workers=args.workers,
            pin_memory=True, collate_fn=collate_fn)
        data_loader_test = torch.utils.data.DataLoader(
            dataset_test, batch_size=args.batch_size, sampler=test_sampler, num_workers=args.workers,
            pin_memory=True)
    else:
        import stoker
        data_loader = stoker.Loader.from_dataset(
            dataset, batch_size=args.batch_size, sampler=train_sampler, num_workers=args.workers,
            pin_memory=True, collate_fn=collate_fn)
        data_loader_test = stoker.Loader.from_dataset(
            dataset_test, batch_size=args.batch_size, sampler=test_sampler, num_workers=args.workers,
            pin_memory=True)

    record = {"epochs": {}, "batches": {}, "test": []}
    for epoch in range(args.start_epoch, args.epochs):
        if args.distributed:
            train_sampler.set_epoch(epoch)
        served, sizes = [], []
        for image, target in data_loader:
            served += describe(image, target)
            sizes.append(int(image.shape[0]))
        record["epochs"][epoch], record["batches"][epoch] = served, sizes
    for image, target in data_loader_test:
        record["test"] += describe(image, target)
    record["len"] = [len(data_loader), len(data_loader_test)]
    with open(args.out, "w") as f:
        json.dump(record, f)
    if args.distributed:
        torch.distributed.destroy_process_group()  # so that a test may call main() again in its process


def parse(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-path", required=True)
    parser.add_argument("--loader", choices=["torch", "stoker"], required=True)
    parser.add_argument("--distributed", action="store_true")
    parser.add_argument("--dist-file", default="")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--start-epoch", type=int, default=0)  # what --resume sets
    parser.add_argument("-b", "--batch-size", type=int, default=8)
    parser.add_argument("-j", "--workers", type=int, default=2)
    parser.add_argument("--train-crop-size", type=int, default=16)
    parser.add_argument("--val-crop-size", type=int, default=16)
    parser.add_argument("--val-resize-size", type=int, default=18)
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse(sys.argv[1:]))
