"""The client's copy of stokerd's step table, checked against the daemon's: the augmentation
steps and their parameters are declared once, in daemon/augment/'s schemas (op_schema.hpp),
and `stokerd --list-ops` prints them. jobdef.translate() must emit only steps and keys those
schemas accept, must translate every op the daemon has, and step_rules.py's per-step lists must
match the schemas' placement flags. An op added on one side only fails here, not at a user's
first define_job."""
import os
import subprocess

import pytest

from conftest import BIN
from stoker import jobdef, step_rules

# Steps that are not augmentation ops (pipeline_steps.cpp reads them itself).
_NOT_OPS = {"decode", "random_resized_crop", "resize", "center_crop", "horizontal_flip", "normalize"}


def daemon_ops():
    """{name: (parameters, flags)} from `stokerd --list-ops` ("NAME P1,P2 FLAG1,FLAG2", "-" for none)."""
    out = subprocess.run([os.path.join(BIN, "stokerd"), "--list-ops"], check=True, capture_output=True,
                         text=True).stdout
    ops = {}
    for line in out.splitlines():
        name, params, flags = line.split(" ")
        ops[name] = (set() if params == "-" else set(params.split(",")),
                     set() if flags == "-" else set(flags.split(",")))
    return ops


def test_step_rules_lists_match_the_daemon_schemas():
    ops = daemon_ops()
    assert "color_jitter" in ops and "random_erasing" in ops, ops
    # The engine flips before these: a flip written after one is refused on both sides.
    assert set(step_rules._AFTER_FLIP) == {n for n, (_, flags) in ops.items() if "flip_first" in flags}
    # The p range check applies to every op with a p (and to horizontal_flip, not an op).
    assert set(step_rules._WITH_P) - {"horizontal_flip"} == {n for n, (params, _) in ops.items() if "p" in params}


def test_translate_emits_every_daemon_op_with_only_keys_its_schema_accepts():
    torch = pytest.importorskip("torch")
    T = pytest.importorskip("torchvision.transforms")
    compose = T.Compose([
        T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomGrayscale(),
        T.RandomSolarize(128), T.RandomPosterize(4), T.RandomAutocontrast(), T.RandomEqualize(),
        T.RandomAdjustSharpness(2), T.GaussianBlur(3, (0.1, 2.0)), T.RandomRotation(10, fill=3),
        T.RandomAffine(10, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=(1, 2, 3, 4), fill=[1, 2, 3]),
        T.TrivialAugmentWide(), T.RandAugment(), T.AutoAugment(), T.PILToTensor(),
        T.ConvertImageDtype(torch.float32), T.Normalize([0.5, 0.5, 0.5], [0.2, 0.2, 0.2]), T.RandomErasing(),
    ])
    steps, _ = jobdef.translate(compose)
    ops = daemon_ops()
    emitted = set()
    for step in steps:
        name, body = step_rules.parse(step)
        if name in _NOT_OPS:
            continue
        assert name in ops, f"the client emits {name!r}, which stokerd --list-ops does not know"
        assert set(body) <= ops[name][0], f"{name}: keys {set(body) - ops[name][0]} not in the daemon's schema"
        emitted.add(name)
    assert emitted == set(ops), f"ops the client does not translate: {set(ops) - emitted}"
