"""stokerd's pipeline rules that a translated torchvision Compose can break, checked when the
loader is built, so the error names the transform the user wrote instead of a line of a job
definition generated for them (and arrives at construction, not at first use).

This mirrors the rules of parse_pipeline() in daemon/config/pipeline_steps.cpp for the steps
jobdef.translate() emits; the daemon still validates the definition it receives (the source
of truth), and a refusal it gives is reported with the transform's name
(torchvision_jobs.in_users_words)."""
import json
from typing import List, Sequence

from .jobdef import TranslationError

_GEOMETRY = ("random_resized_crop", "resize")
# Steps the engine applies after the flip: a flip written after one of them cannot be honoured.
_AFTER_FLIP = ("random_rotation", "random_affine", "trivial_augment_wide", "rand_augment", "auto_augment",
               "random_erasing")
_WITH_P = ("horizontal_flip", "random_grayscale", "random_solarize", "random_posterize", "random_autocontrast",
           "random_equalize", "random_adjust_sharpness", "random_erasing")


def parse(step: str):
    name, _, body = step.partition(": ")
    return name, json.loads(body)


def check(steps: Sequence[str], origins: Sequence[str]) -> None:
    """Raises TranslationError naming the transform (origins[k] made steps[k])."""
    parsed = [parse(s) for s in steps]
    names: List[str] = [n for n, _ in parsed]
    geometry = [k for k, n in enumerate(names) if n in _GEOMETRY]
    if not geometry:
        raise TranslationError("no RandomResizedCrop or Resize: stokerd needs one (to a fixed size, so that "
                               "images can be batched)")
    if len(geometry) > 1:
        raise TranslationError(f"{origins[geometry[1]]}: stokerd's pipeline has one RandomResizedCrop or Resize "
                               f"(already {origins[geometry[0]]})")
    g = geometry[0]
    if g > 1:  # steps[0] is decode; steps[1] came from the first transform
        k = 1
        raise TranslationError(f"{origins[k]}: stokerd applies its transforms after the crop/resize "
                               f"({origins[g]}); move it after that one (the result would differ otherwise)")
    flip_seen_after = None
    for k, (name, body) in enumerate(parsed):
        where = origins[k]
        if name == "resize" and isinstance(body["size"], int):
            if k + 1 >= len(names) or names[k + 1] != "center_crop":
                raise TranslationError(f"{where}: Resize(int) keeps the aspect ratio, so images differ in shape and "
                                       f"cannot be batched; follow it directly with CenterCrop, or give Resize([h, w])")
        if name == "center_crop":
            before = parsed[k - 1]
            if before[0] != "resize" or not isinstance(before[1]["size"], int):
                raise TranslationError(f"{where}: stokerd's CenterCrop directly follows Resize(int)")
            if max(body["size"]) > before[1]["size"]:
                raise TranslationError(f"{where}: crop {body['size']} larger than the resized shorter side "
                                       f"{before[1]['size']}")
        if name in _WITH_P and not 0.0 <= float(body.get("p", 0.5)) <= 1.0:
            raise TranslationError(f"{where}: p={body['p']} must be within [0, 1]")
        if name in _AFTER_FLIP and flip_seen_after is None:
            flip_seen_after = where
        if name == "horizontal_flip":
            if names.count("horizontal_flip") > 1:
                raise TranslationError(f"{where}: stokerd flips once per pipeline")
            if flip_seen_after is not None:
                raise TranslationError(f"{where}: stokerd flips before {flip_seen_after}; move RandomHorizontalFlip "
                                       f"before it")
        if name == "random_posterize" and not 0 <= body["bits"] <= 8:
            raise TranslationError(f"{where}: bits={body['bits']} must be within [0, 8]")
        if name == "random_solarize" and not 0 <= body["threshold"] <= 256:
            raise TranslationError(f"{where}: threshold={body['threshold']} must be a pixel value within [0, 256]")
        if name in ("trivial_augment_wide", "rand_augment"):
            bins = body.get("num_magnitude_bins", 31)
            if not 2 <= bins <= 1024:
                raise TranslationError(f"{where}: num_magnitude_bins={bins} must be within [2, 1024]")
            if name == "rand_augment":
                if not 0 <= body.get("num_ops", 2) <= 16:
                    raise TranslationError(f"{where}: num_ops={body['num_ops']} must be within [0, 16]")
                if not 0 <= body.get("magnitude", 9) < bins:
                    raise TranslationError(f"{where}: magnitude={body['magnitude']} is a bin index: it must be "
                                           f"below num_magnitude_bins ({bins})")
