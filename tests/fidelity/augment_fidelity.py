#!/usr/bin/python3
"""Colour augmentations against torchvision (issue #17): each operation of
daemon/augment/color_ops.hpp, given the same parameter, on real photos (tests/data/demo, resized
to 96x64), compared with torchvision.transforms.functional on the same uint8 tensor.
Exact for every operation but contrast and sharpness, where torch accumulates float32 sums
(the gray mean, the 3x3 filter) in an order of its choosing: there at most 1 (of 255) and on
under 1% of values. Hue (daemon/augment/hue.cpp) and Gaussian blur (daemon/augment/blur.cpp)
are held to a mean absolute difference of at most 2/255 (issue #17), as is rotation
(daemon/augment/geometric.cpp, F.rotate with a fill as RandomRotation passes); the figures printed show
how far inside that they are.

Issue #17's affine and automatic policies, also within 2/255: functional.affine with fixed
parameters (random_affine's warp, daemon/augment/geometric.cpp), each op of the policies as
torchvision's autoaugment._apply_op runs it (fill=None), at magnitudes from the policies' own
tables with both signs, and the magnitude tables themselves (daemon/augment/policies.cpp)
against _augmentation_space for several bin counts and image sizes: equal within two float32
ulps (torch's vectorised linspace fuses multiply-adds chunk by chunk and rounds ~12% of entries
the other way; which ones depends on the CPU
kernel torch dispatches to).

usage: augment_fidelity.py BIN_DIR DATA_DIR
"""
import os
import subprocess
import sys

import numpy as np

try:
    import torch
    import torchvision.transforms.functional as F
    from torchvision.transforms.autoaugment import _apply_op
    from PIL import Image
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

CASES = [("brightness", [0.0, 0.4, 0.87, 1.0, 1.3, 2.2]), ("contrast", [0.0, 0.5, 1.0, 1.6]),
         ("saturation", [0.0, 0.3, 1.0, 1.9]), ("grayscale", [0]), ("solarize", [0, 100, 128, 255]),
         ("posterize", [1, 3, 5, 8]), ("autocontrast", [0]), ("equalize", [0]),
         ("sharpness", [0.0, 0.5, 2.0]),
         ("hue", [-0.5, -0.31, -0.1, 0.0, 0.05, 0.25, 0.5]),
         # blur: (sigma, kernel x, kernel y), torchvision's kernel_size order
         ("blur", [(0.1, 3, 3), (0.5, 3, 3), (1.0, 5, 5), (2.0, 9, 9), (1.5, 3, 7), (0.8, 11, 5)]),
         # rotate: (degrees, 0 nearest / 1 bilinear, fill), as RandomRotation calls F.rotate
         ("rotate", [(0.0, 0, 0), (10.0, 0, 0), (-33.3, 1, 0), (90.0, 1, 0), (45.0, 0, 128), (-170.0, 1, 255),
                     (7.5, 1, 31)])]
MEAN_ABS_LIMIT = {"hue": 2.0, "blur": 2.0, "rotate": 2.0, "affine": 2.0, "policy": 2.0}  # in 1/255 units

# affine: (angle, tx, ty, scale, shear x, shear y, centre x, centre y relative to the image
# centre, 0 nearest / 1 bilinear, fill or None)
AFFINE_CASES = [(0.0, 0, 0, 1.0, 0.0, 0.0, 0, 0, 0, 0), (15.0, 5, -3, 1.1, 0.0, 0.0, 0, 0, 1, 0),
                (-30.0, 0, 0, 0.8, 10.0, 0.0, 0, 0, 0, 128), (0.0, -7, 4, 1.0, -20.0, 12.0, 0, 0, 1, 255),
                (45.0, 2, 2, 1.3, 5.0, -5.0, 0, 0, 1, None), (0.0, 0, 0, 1.0, 35.0, 0.0, -48, -32, 0, None),
                (0.0, 0, 0, 1.0, 0.0, -21.0, -48, -32, 1, None), (0.0, 11, 0, 1.0, 0.0, 0.0, 0, 0, 1, None),
                (170.0, 0, 0, 0.5, 0.0, 0.0, 0, 0, 1, 31)]

# policy ops: every op with a magnitude at the TrivialAugmentWide bins below (both signs for
# signed ops), plus the ops without one; both interpolations.
POLICY_BINS = (1, 9, 17, 30)


def ta_space():
    from torchvision.transforms.autoaugment import TrivialAugmentWide
    return TrivialAugmentWide()._augmentation_space(31)


def policy_cases():
    cases = []
    for name, (mags, signed) in ta_space().items():
        if mags.ndim == 0:
            cases.append((name, 0.0, 0))
            continue
        for b in POLICY_BINS:
            m = float(mags[b].item())
            for sign in ((1, -1) if signed else (1,)):
                for interp in ((0, 1) if name in ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate") else (0,)):
                    cases.append((name, sign * m, interp))
    cases.append(("Invert", 0.0, 0))  # AutoAugment's extra op
    return cases


def check_tables(probe):
    """The magnitude tables against _augmentation_space: within two float32 ulps."""
    from torchvision.transforms import autoaugment as A
    spaces = {"ta_wide": lambda b, h, w: A.TrivialAugmentWide()._augmentation_space(b),
              "rand": lambda b, h, w: A.RandAugment()._augmentation_space(b, (h, w)),
              "auto": lambda b, h, w: A.AutoAugment()._augmentation_space(b, (h, w))}
    entries, exact, worst_ulps = 0, 0, 0.0
    for kind, space in spaces.items():
        for bins in (31, 10, 13, 2, 100):
            for w, h in ((224, 224), (96, 64), (177, 131)):
                out = subprocess.run([probe, "tables", kind, str(bins), str(w), str(h)], capture_output=True, text=True,
                                     check=True).stdout
                ours = {ln.split()[0]: [float(x) for x in ln.split()[1:]] for ln in out.splitlines()}
                for name, (mags, _signed) in space(bins, h, w).items():
                    if mags.ndim == 0:
                        continue
                    ref = np.array([float(x) for x in mags.tolist()], np.float32)
                    got = np.array(ours[name], np.float32)
                    ulps = np.abs(got - ref) / np.spacing(np.maximum(np.abs(ref), np.float32(1e-30)))
                    worst_ulps = max(worst_ulps, float(ulps.max()))
                    entries += ref.size
                    exact += int((got == ref).sum())
    ok = worst_ulps <= 2.0
    print(f"magnitude tables: {exact} of {entries} entries bit-equal, worst {worst_ulps:.0f} ulp"
          f"{'' if ok else '   FAIL'}")
    return ok


def torchvision_op(op, p, t):
    return {"brightness": lambda: F.adjust_brightness(t, p), "contrast": lambda: F.adjust_contrast(t, p),
            "saturation": lambda: F.adjust_saturation(t, p),
            "grayscale": lambda: F.rgb_to_grayscale(t, num_output_channels=3),
            "solarize": lambda: F.solarize(t, p), "posterize": lambda: F.posterize(t, int(p)),
            "autocontrast": lambda: F.autocontrast(t), "equalize": lambda: F.equalize(t),
            "sharpness": lambda: F.adjust_sharpness(t, p), "hue": lambda: F.adjust_hue(t, p),
            "blur": lambda: F.gaussian_blur(t, [p[1], p[2]], [p[0], p[0]]),
            "affine": lambda: F.affine(t, p[0], [p[1], p[2]], p[3], [p[4], p[5]],
                                       interpolation=[F.InterpolationMode.NEAREST, F.InterpolationMode.BILINEAR][p[8]],
                                       fill=None if p[9] is None else [float(p[9])] * 3,
                                       center=None if (p[6], p[7]) == (0, 0) else [p[6] + 48, p[7] + 32]),
            "policy": lambda: _apply_op(t, p[0], p[1], [F.InterpolationMode.NEAREST, F.InterpolationMode.BILINEAR][p[2]], None),
            "rotate": lambda: F.rotate(t, p[0], interpolation=[F.InterpolationMode.NEAREST, F.InterpolationMode.BILINEAR][p[1]],
                                       fill=[float(p[2])] * 3)}[op]()


def probe_args(op, p):
    if op == "affine":  # W H ANGLE TX TY SCALE SHX SHY CX CY INTERP FILL
        return ["96", "64"] + [str(x) for x in p[:9]] + ["none" if p[9] is None else str(p[9])]
    if op == "policy":  # OPNAME MAGNITUDE W H INTERP
        return [p[0], repr(p[1]), "96", "64", str(p[2])]
    if op in ("blur", "rotate"):
        return [str(p[0]), "96", "64", str(p[1]), str(p[2])]
    return [str(p), "96", "64"]


def main(bin_dir, data_dir):
    probe = os.path.join(bin_dir, "stoker_augment_probe")
    photos = [os.path.join(data_dir, "demo", c, f"{c}_0{i}.jpg") for c in ("flower", "landscape", "texture") for i in (0, 5)]
    failed = not check_tables(probe)
    for op, params in CASES + [("affine", AFFINE_CASES), ("policy", policy_cases())]:
        worst, off = 0, 0
        total, abs_sum = 0, 0
        for photo in photos:
            img = np.asarray(Image.open(photo).convert("RGB").resize((96, 64), Image.BILINEAR))
            for p in params:
                out = subprocess.run([probe, op] + probe_args(op, p), input=img.tobytes(), capture_output=True, check=True).stdout
                ours = np.frombuffer(out, np.uint8).reshape(64, 96, 3).astype(np.int16)
                ref = torchvision_op(op, p, torch.from_numpy(img.copy()).permute(2, 0, 1)).permute(1, 2, 0).numpy().astype(np.int16)
                d = np.abs(ours - ref)
                worst = max(worst, int(d.max()))
                off += int((d > 0).sum())
                abs_sum += int(d.sum())
                total += d.size
        # contrast: torch sums the gray mean in its own order; sharpness: torch's conv2d
        # accumulates the 3x3 filter in its own order. Both may round a value differently.
        mean_abs = abs_sum / total
        if op in MEAN_ABS_LIMIT:
            ok = mean_abs <= MEAN_ABS_LIMIT[op]
        else:
            loose = op in ("contrast", "sharpness")
            limit = 1 if loose else 0
            ok = worst <= limit and (not loose or off <= total // 100)
        failed |= not ok
        print(f"{op}: max abs diff {worst}, mean abs diff {mean_abs:.4f}/255, {off} of {total} values differ"
              f"{'' if ok else '   FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])))
