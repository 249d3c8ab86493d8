#!/usr/bin/python3
"""Issue #17's speed figures, side by side in one run on real photos:

1. loader throughput: RandomResizedCrop(224) + RandomHorizontalFlip + TrivialAugmentWide,
   uint8 out, batch 64, the same number of workers each: stokerd feeding `stokerctl consume`
   vs torchvision's DataLoader (ImageFolder, PIL, one thread per worker process), images/s
   over whole epochs (the DataLoader's first batch, which pays for starting its workers, left
   out; stokerd is timed from the consumer's start, so it pays its own start-up), and images
   per CPU-second (stokerd + the consumer; the DataLoader's worker processes + the main
   process), which a machine shared with other work disturbs much less than wall time;
2. microseconds of CPU time per 224x224 sample of every augment op on one core: Stoker's ops
   (build/bin/stoker_bench_augment) beside torchvision.transforms.functional on the same
   crops as uint8 tensors (one torch thread); the policies as whole steps (their random op
   mix) and each TrivialAugmentWide op at its middle bin (bilinear).

    scripts/bench-augment.py [BUILD_DIR] [IMAGES_DIR] [--workers W] [--epochs E]
                             [--interpolation nearest|bilinear] [--skip-ops] [--skip-loader]
                             [--recipe ta|full] [--repeats R]

--recipe full (issue #36) measures the whole TrivialAugment training recipe of torchvision's
classification references (--auto-augment ta_wide --random-erase 0.1 --mixup-alpha 0.2
--cutmix-alpha 1.0): RandomResizedCrop(224) + flip + TrivialAugmentWide(bilinear) +
ToTensor-as-float + Normalize + RandomErasing(p 0.1), float32 NCHW, batch 64, then MixUp or
CutMix (one of the two, chosen per batch with probability 1/2) on the collated batch inside
the loader's workers, as the references' collate_fn does. stokerd runs the same steps
(normalize, random_erasing after it, `mixup`/`cutmix`/`mix_switch_prob`); both sides hand the
trainer float32 images and soft labels. --repeats runs the loader pair R times, alternating.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

CONFIG = """server: {{workers: {workers}, log_level: warn}}
jobs:
  train:
    source: {{root: "{images}"}}
    batch_size: 64
    prefetch: 4
    pipeline:
      - decode: {{}}
      - random_resized_crop: {{size: 224}}
      - horizontal_flip
{steps}
    output: {{dtype: {dtype}, layout: NCHW}}
{job_extra}"""

# The references' ImageNet mean and std, and their recipe's mixing (issue #36's "full" recipe).
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
FULL_STEPS = """      - trivial_augment_wide: {{interpolation: {interpolation}}}
      - normalize: {{mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}}
      - random_erasing: {{p: 0.1}}"""
FULL_MIX = """    mixup: {alpha: 0.2}
    cutmix: {alpha: 1.0}
    mix_switch_prob: 0.5
"""


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def stoker_rate(build: str, images: str, workers: int, epochs: int, steps: str, dtype: str = "uint8",
                job_extra: str = ""):
    """(images/s, images per CPU-second of stokerd + its consumer)."""
    d = benchlib.Daemon(build, CONFIG.format(workers=workers, images=images, steps=steps, dtype=dtype,
                                             job_extra=job_extra))
    try:
        t0, cpu0, child0 = time.monotonic(), d.cpu(), children_cpu()
        s = benchlib.summary(d.consume(["--job", "train", "--epochs", str(epochs)]))  # reaps the consumer
        wall, cpu = time.monotonic() - t0, d.cpu() - cpu0 + children_cpu() - child0
        return s["samples"] / wall, s["samples"] / cpu
    finally:
        d.close()


class BatchMix:
    """MixUp(alpha 0.2) or CutMix(alpha 1.0), one of them per batch with probability 1/2, on a
    collated float batch with one-hot targets: what the classification references' collate_fn
    does (torchvision 0.14 has no transforms.v2.MixUp/CutMix; its references define their own
    RandomMixup/RandomCutmix). Written here from their definition (roll the batch by one, blend
    in place with lambda ~ Beta(alpha, alpha); CutMix pastes a box of area (1 - lambda) and
    corrects lambda to the box's clipped area), with the same in-place tensor operations, so
    the work per batch is theirs."""

    def __init__(self, num_classes: int, mixup_alpha: float = 0.2, cutmix_alpha: float = 1.0):
        self.num_classes, self.mixup_alpha, self.cutmix_alpha = num_classes, mixup_alpha, cutmix_alpha

    def __call__(self, samples):
        import torch
        from torch.utils.data.dataloader import default_collate
        images, labels = default_collate(samples)
        target = torch.nn.functional.one_hot(labels, num_classes=self.num_classes).to(dtype=images.dtype)
        rolled_images, rolled_target = images.roll(1, 0), target.roll(1, 0)
        if torch.rand(1).item() < 0.5:
            lam = float(torch._sample_dirichlet(torch.tensor([self.mixup_alpha, self.mixup_alpha]))[0])
            images.mul_(lam).add_(rolled_images.mul_(1.0 - lam))
        else:
            lam = float(torch._sample_dirichlet(torch.tensor([self.cutmix_alpha, self.cutmix_alpha]))[0])
            h, w = images.shape[-2:]
            cx, cy = int(torch.randint(w, (1,))), int(torch.randint(h, (1,)))
            r = 0.5 * (1.0 - lam) ** 0.5
            rw, rh = int(r * w), int(r * h)
            x1, y1, x2, y2 = max(cx - rw, 0), max(cy - rh, 0), min(cx + rw, w), min(cy + rh, h)
            images[:, :, y1:y2, x1:x2] = rolled_images[:, :, y1:y2, x1:x2]
            lam = 1.0 - float((x2 - x1) * (y2 - y1)) / (w * h)
        target.mul_(lam).add_(rolled_target.mul_(1.0 - lam))
        return images, target


def torchvision_rate(images: str, workers: int, epochs: int, augment, full: bool = False):
    """(images/s, images per CPU-second of the worker processes + this process). `full`: the
    references' float steps after `augment` (ConvertImageDtype, Normalize, RandomErasing 0.1)
    and BatchMix as the collate_fn, run in the workers."""
    import torch
    import torchvision.datasets as D
    import torchvision.transforms as T
    tail = [T.PILToTensor()]
    if full:
        tail += [T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD), T.RandomErasing(p=0.1)]
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()] + ([augment] if augment else []) + tail)
    ds = D.ImageFolder(images, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers,
                                     worker_init_fn=lambda _: torch.set_num_threads(1),
                                     persistent_workers=workers > 0,
                                     collate_fn=BatchMix(len(ds.classes)) if full else None)

    def cpu() -> float:
        pids = [w.pid for w in getattr(dl._iterator, "_workers", [])] if dl._iterator is not None else []
        return time.process_time() + sum(benchlib.cpu_seconds(p) for p in pids)

    n, t0, cpu0 = 0, None, 0.0
    for _ in range(epochs):
        for batch, _labels in dl:
            if t0 is None:
                t0, cpu0 = time.perf_counter(), cpu()
                continue
            n += batch.shape[0]
    wall, used = time.perf_counter() - t0, cpu() - cpu0
    return n / wall, n / used


def torchvision_op_us(iterations: int, images: str):
    """{op: us per 224x224 sample} for torchvision.transforms.functional on uint8 tensors."""
    import numpy as np
    import torch
    import torchvision.transforms.functional as F
    from PIL import Image
    from torchvision.transforms import InterpolationMode as IM
    from torchvision.transforms.autoaugment import AutoAugment, RandAugment, TrivialAugmentWide, _apply_op
    torch.set_num_threads(1)
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(images) for f in fs if f.endswith(".jpg"))[:32]
    crops = [torch.from_numpy(np.asarray(F.center_crop(F.resize(Image.open(p).convert("RGB"), 256), 224))
                              .copy()).permute(2, 0, 1).contiguous() for p in files]
    ops = {
        "brightness": lambda t: F.adjust_brightness(t, 1.3), "contrast": lambda t: F.adjust_contrast(t, 1.3),
        "saturation": lambda t: F.adjust_saturation(t, 1.3), "hue": lambda t: F.adjust_hue(t, 0.1),
        "grayscale": lambda t: F.rgb_to_grayscale(t, 3), "solarize": lambda t: F.solarize(t, 128),
        "posterize": lambda t: F.posterize(t, 4), "autocontrast": F.autocontrast, "equalize": F.equalize,
        "sharpness": lambda t: F.adjust_sharpness(t, 2.0), "invert": F.invert,
        "gaussian_blur_k5": lambda t: F.gaussian_blur(t, [5, 5], [1.0, 1.0]),
        "gaussian_blur_k23": lambda t: F.gaussian_blur(t, [23, 23], [1.5, 1.5]),
        "rotate_nearest": lambda t: F.rotate(t, 17.0, IM.NEAREST, fill=[0.0] * 3),
        "rotate_bilinear": lambda t: F.rotate(t, 17.0, IM.BILINEAR, fill=[0.0] * 3),
        "affine_nearest": lambda t: F.affine(t, 10.0, [5, -7], 1.1, [8.0, -3.0], IM.NEAREST, fill=[0.0] * 3),
        "affine_bilinear": lambda t: F.affine(t, 10.0, [5, -7], 1.1, [8.0, -3.0], IM.BILINEAR, fill=[0.0] * 3),
        "trivial_augment_wide_nearest": TrivialAugmentWide(),
        "trivial_augment_wide_bilinear": TrivialAugmentWide(interpolation=IM.BILINEAR),
        "rand_augment_nearest": RandAugment(), "rand_augment_bilinear": RandAugment(interpolation=IM.BILINEAR),
        "auto_augment_nearest": AutoAugment(), "auto_augment_bilinear": AutoAugment(interpolation=IM.BILINEAR),
    }
    space = TrivialAugmentWide()._augmentation_space(31)
    for name, (mags, _signed) in space.items():
        m = float(mags[15].item()) if mags.ndim > 0 else 0.0
        ops["ta_" + name] = (lambda n, mm: lambda t: _apply_op(t, n, mm, IM.BILINEAR, None))(name, m)
    out = {}
    for name, op in ops.items():
        rounds = []
        for _ in range(3):
            t0 = time.thread_time()  # CPU time, as stoker_bench_augment measures
            for i in range(iterations):
                op(crops[i % len(crops)])
            rounds.append((time.thread_time() - t0) / iterations * 1e6)
        out[name] = sorted(rounds)[1]
    # The recipe's float steps (issue #36): RandomErasing on a normalized float crop (p 1), and
    # BatchMix's collate + MixUp or CutMix of 64 float crops, per sample.
    import torchvision.transforms as T
    floats = [F.normalize(c.float() / 255.0, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]) for c in crops]
    erase = T.RandomErasing(p=1.0)
    batch = [(floats[i % len(floats)].clone(), i % 10) for i in range(64)]
    mix = BatchMix(10)
    # (RandomErasing copies the image first, inplace=False, as the references run it.)
    mix_ops = {"random_erasing_f32": (lambda i: erase(floats[i % len(floats)]), 1),
               "mixup_f32_per_sample": (lambda i: (torch.manual_seed(0), mix(batch)), 64),
               "cutmix_f32_per_sample": (lambda i: (torch.manual_seed(1), mix(batch)), 64)}
    for name, (op, per_call) in mix_ops.items():
        rounds = []
        for _ in range(3):
            t0 = time.thread_time()
            calls = max(1, iterations // per_call)
            for i in range(calls):
                op(i)
            rounds.append((time.thread_time() - t0) / (calls * per_call) * 1e6)
        out[name] = sorted(rounds)[1]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("images", nargs="?", default="/tmp/stoker-bench-images")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--interpolation", default="bilinear", choices=["nearest", "bilinear"],
                    help="TrivialAugmentWide's (the classification references pass bilinear)")
    ap.add_argument("--iterations", type=int, default=100, help="per op and round, for the op figures")
    ap.add_argument("--skip-ops", action="store_true")
    ap.add_argument("--skip-loader", action="store_true")
    ap.add_argument("--recipe", default="ta", choices=["ta", "full"],
                    help="ta: RRC + flip + TrivialAugmentWide, uint8 (issue #17); full: + normalize, "
                         "RandomErasing 0.1, MixUp/CutMix, float32 (issue #36)")
    ap.add_argument("--repeats", type=int, default=1, help="loader runs, each side by side")
    a = ap.parse_args()
    if not os.path.isdir(a.images):
        subprocess.run([os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench-images.sh"), a.images], check=True)
    files = sum(len(f) for _, _, f in os.walk(a.images))
    print(f"bench-augment: {files} files in {a.images}; {benchlib.machine()}; {a.workers} workers each; "
          f"{a.epochs} epoch(s); TrivialAugmentWide interpolation {a.interpolation}", flush=True)
    if not a.skip_loader:
        from torchvision.transforms import InterpolationMode, TrivialAugmentWide
        ta_steps = f"      - trivial_augment_wide: {{interpolation: {a.interpolation}}}"
        ta = TrivialAugmentWide(interpolation=InterpolationMode(a.interpolation))
        print(f"load average before: {os.getloadavg()[0]:.1f}")
        print(f"{'pipeline':<34} {'stoker img/s':>12} {'torchvision img/s':>18} {'ratio':>7} | "
              f"{'stoker img/CPU-s':>16} {'torchvision img/CPU-s':>22} {'ratio':>7}")
        if a.recipe == "full":
            full_steps = FULL_STEPS.format(interpolation=a.interpolation)
            cases = [("TA + erasing + MixUp/CutMix f32", dict(steps=full_steps, dtype="float32", job_extra=FULL_MIX),
                      dict(augment=ta, full=True))]
        else:
            cases = [("RRC + flip + TrivialAugmentWide", dict(steps=ta_steps), dict(augment=ta)),
                     ("RRC + flip", dict(steps=""), dict(augment=None))]
        for r in range(a.repeats):
            for label, ours, theirs in cases:
                # Alternate which side goes first, so neither always meets the same load.
                if r % 2 == 0:
                    s, sc = stoker_rate(a.build, a.images, a.workers, a.epochs, **ours)
                    t, tc = torchvision_rate(a.images, a.workers, a.epochs, **theirs)
                else:
                    t, tc = torchvision_rate(a.images, a.workers, a.epochs, **theirs)
                    s, sc = stoker_rate(a.build, a.images, a.workers, a.epochs, **ours)
                print(f"{label:<34} {s:>12.0f} {t:>18.0f} {s / t:>6.2f}x | {sc:>16.0f} {tc:>22.0f} {sc / tc:>6.2f}x",
                      flush=True)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    if not a.skip_ops:
        ours = {}
        out = subprocess.run([os.path.join(a.build, "bin", "stoker_bench_augment"), a.images, str(a.iterations)],
                             check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            name, us = line.split()
            ours[name] = float(us)
        theirs = torchvision_op_us(a.iterations, a.images)
        print(f"{'op (224x224, one core)':<34} {'stoker us':>10} {'torchvision us':>15} {'ratio':>7}")
        for name, us in ours.items():
            t = theirs.get(name)
            ratio = f"{t / us:>6.1f}x" if t and us > 0 else "     -"
            print(f"{name:<34} {us:>10.1f} {t if t else float('nan'):>15.1f} {ratio}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
