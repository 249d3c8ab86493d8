"""Jobs defined from Python (Loader.from_folder, Loader.from_dataset): the YAML text of one
job, sent to the running stokerd, which validates it exactly as a config file.

translate() turns a torchvision `transforms.Compose` into the daemon's pipeline steps with
their exact parameters, and refuses (TranslationError, naming the transform and its position)
anything it cannot translate faithfully: a transform is never dropped or approximated."""
import json
import numbers
from typing import Any, List, Optional, Sequence, Tuple

from . import transform_tree


class TranslationError(ValueError):
    """A torchvision transform (or dataset/sampler setting) with no exact daemon equivalent."""


def _num(x: Any) -> Any:
    return float(x) if isinstance(x, numbers.Real) and not isinstance(x, bool) else x


def _pair(x: Any) -> List[float]:
    return [float(x[0]), float(x[1])]


def _flow(d: dict) -> str:
    """A YAML flow mapping (JSON is YAML) of the step's keys."""
    return json.dumps({k: v for k, v in d.items() if v is not None})


def _interp(t: Any, where: str, allowed: Sequence[str]) -> Optional[str]:
    mode = getattr(t, "interpolation", None)
    if mode is None:
        return None
    name = getattr(mode, "value", str(mode))
    if name not in allowed:
        raise TranslationError(f"{where}: interpolation={name} is not available in stokerd "
                               f"(it offers {', '.join(allowed)} here, in YAML too); use one of those")
    return name


def _resize_filter(t: Any, where: str) -> Optional[str]:
    """Resize/RandomResizedCrop's mode as the step's `interpolation` (PIL's resize with that
    filter, torchvision's path on PIL images); None for bilinear, the step's default, so the
    usual definitions keep their text (and so their shared job)."""
    name = _interp(t, where, ["bilinear", "bicubic", "nearest"])
    return None if name == "bilinear" else name


def _fill(t: Any, where: str) -> Any:
    fill = getattr(t, "fill", None)
    if fill is None:
        return None
    if isinstance(fill, numbers.Real):
        return _num(fill)
    if isinstance(fill, (list, tuple)) and len(fill) in (1, 3):
        return [_num(v) for v in fill]
    raise TranslationError(f"{where}: fill={fill!r} is not a number or three numbers")


def _erasing_pixels(value: Any, dtype: str, where: str) -> Any:
    """RandomErasing's value before any Normalize, as stokerd takes it there: 8-bit pixel
    values (it erases the uint8 image). torchvision's value is in the tensor's units: [0, 1]
    for a float tensor (so 1.0 is white, pixel 255), pixels for a uint8 one."""
    if value == "random":
        raise TranslationError(f"{where}: value='random' draws normal values, which mean something only after "
                               f"Normalize; put RandomErasing after Normalize")
    scale = 1.0 if dtype == "uint8" else 255.0
    pixels = [v * scale for v in (value if isinstance(value, list) else [value])]
    if not all(0 <= p <= 255 and abs(p - round(p)) < 1e-6 for p in pixels):
        raise TranslationError(f"{where}: value={value!r} is not an 8-bit pixel value ({pixels} of 255), which is "
                               f"what stokerd erases with before Normalize; use a multiple of 1/255, or put "
                               f"RandomErasing after Normalize")
    out = [float(round(p)) for p in pixels]
    return out if isinstance(value, list) else out[0]


def translate(transform: Any) -> Tuple[List[str], str]:
    """(steps as YAML flow lines, output dtype) for a Compose (or a single transform, or None)."""
    steps, dtype, _ = translate_with_origins(transform)
    return steps, dtype


def translate_with_origins(transform: Any) -> Tuple[List[str], str, List[str]]:
    """translate()'s steps and dtype, and for each step the transform it came from (how an
    error names it). A Compose nested in the Compose, or a wrapper whose whole behaviour is
    one (transform_tree.py), is translated as the transforms it applies."""
    import torch
    from torchvision import transforms as T

    if transform is None:
        raise TranslationError("the dataset has no transform: stokerd needs at least a crop or resize to a fixed size")
    items = transform_tree.flatten(transform)
    # ImageFolder's loader (PIL's open + convert("RGB")) ignores the EXIF orientation, so the
    # decode does too: the same pixels for photos a camera tagged as rotated (issue #34).
    steps = ["decode: " + _flow({"exif_orientation": False})]
    origins = ["the decode stokerd adds"]
    where = ""
    dtype = None          # set by the tensor conversion
    normalized = False
    for i, owner, t in items:
        origins += [where] * (len(steps) - len(origins))  # the steps the previous transform added
        name = type(t).__name__
        where = transform_tree.where(i, name, owner)
        if dtype is not None and not isinstance(t, (T.Normalize, T.RandomErasing, T.ConvertImageDtype)):
            raise TranslationError(f"{where}: after the tensor conversion stokerd runs only Normalize and "
                                   f"RandomErasing; move it before ToTensor/PILToTensor")
        if isinstance(t, T.RandomResizedCrop):
            steps.append("random_resized_crop: " + _flow({
                "size": list(t.size), "scale": _pair(t.scale), "ratio": _pair(t.ratio),
                "interpolation": _resize_filter(t, where)}))
        elif isinstance(t, T.Resize):
            interpolation = _resize_filter(t, where)
            if t.max_size is not None:
                raise TranslationError(f"{where}: max_size is not available in stokerd")
            size = t.size if isinstance(t.size, int) else list(t.size)
            if isinstance(size, list) and len(size) == 1:
                size = size[0]
            steps.append("resize: " + _flow({"size": size, "interpolation": interpolation}))
        elif isinstance(t, T.CenterCrop):
            steps.append("center_crop: " + _flow({"size": list(t.size)}))
        elif isinstance(t, T.RandomHorizontalFlip):
            steps.append("horizontal_flip: " + _flow({"p": _num(t.p)}))
        elif isinstance(t, T.ColorJitter):
            keys = {}
            for k in ("brightness", "contrast", "saturation", "hue"):
                v = getattr(t, k)
                if v is not None:
                    keys[k] = _pair(v)
            steps.append("color_jitter: " + _flow(keys))
        elif isinstance(t, T.RandomGrayscale):
            steps.append("random_grayscale: " + _flow({"p": _num(t.p)}))
        elif isinstance(t, T.RandomSolarize):
            steps.append("random_solarize: " + _flow({"threshold": _num(t.threshold), "p": _num(t.p)}))
        elif isinstance(t, T.RandomPosterize):
            steps.append("random_posterize: " + _flow({"bits": int(t.bits), "p": _num(t.p)}))
        elif isinstance(t, T.RandomAutocontrast):
            steps.append("random_autocontrast: " + _flow({"p": _num(t.p)}))
        elif isinstance(t, T.RandomEqualize):
            steps.append("random_equalize: " + _flow({"p": _num(t.p)}))
        elif isinstance(t, T.RandomAdjustSharpness):
            steps.append("random_adjust_sharpness: " + _flow({"sharpness_factor": _num(t.sharpness_factor),
                                                              "p": _num(t.p)}))
        elif isinstance(t, T.GaussianBlur):
            steps.append("gaussian_blur: " + _flow({"kernel_size": [int(k) for k in t.kernel_size],
                                                    "sigma": _pair(t.sigma)}))
        elif isinstance(t, T.RandomRotation):
            if t.expand or t.center is not None:
                raise TranslationError(f"{where}: expand=True or a center is not available in stokerd")
            steps.append("random_rotation: " + _flow({"degrees": _pair(t.degrees),
                                                      "interpolation": _interp(t, where, ["nearest", "bilinear"]),
                                                      "fill": _fill(t, where)}))
        elif isinstance(t, T.RandomAffine):
            if t.center is not None:
                raise TranslationError(f"{where}: a center is not available in stokerd")
            steps.append("random_affine: " + _flow({
                "degrees": _pair(t.degrees),
                "translate": _pair(t.translate) if t.translate is not None else None,
                "scale": _pair(t.scale) if t.scale is not None else None,
                "shear": [float(v) for v in t.shear] if t.shear is not None else None,
                "interpolation": _interp(t, where, ["nearest", "bilinear"]), "fill": _fill(t, where)}))
        elif isinstance(t, (T.TrivialAugmentWide, T.RandAugment, T.AutoAugment)) and t.fill is not None:
            raise TranslationError(f"{where}: fill={t.fill!r}: stokerd's automatic policies fill with black "
                                   f"(torchvision's default fill=None) only")
        elif isinstance(t, T.TrivialAugmentWide):
            steps.append("trivial_augment_wide: " + _flow({
                "num_magnitude_bins": int(t.num_magnitude_bins),
                "interpolation": _interp(t, where, ["nearest", "bilinear"])}))
        elif isinstance(t, T.RandAugment):
            steps.append("rand_augment: " + _flow({
                "num_ops": int(t.num_ops), "magnitude": int(t.magnitude),
                "num_magnitude_bins": int(t.num_magnitude_bins),
                "interpolation": _interp(t, where, ["nearest", "bilinear"])}))
        elif isinstance(t, T.AutoAugment):
            policy = getattr(t.policy, "value", str(t.policy))
            if policy != "imagenet":
                raise TranslationError(f"{where}: policy {policy} is not available in stokerd (it has the imagenet "
                                       f"policy); use AutoAugmentPolicy.IMAGENET, or TrivialAugmentWide / RandAugment")
            steps.append("auto_augment: " + _flow({
                "policy": policy, "interpolation": _interp(t, where, ["nearest", "bilinear"])}))
        elif isinstance(t, T.PILToTensor):
            dtype = "uint8"
        elif isinstance(t, T.ToTensor):
            dtype = "float32"
        elif isinstance(t, T.ConvertImageDtype):
            if dtype is None:
                raise TranslationError(f"{where}: comes before any ToTensor/PILToTensor")
            names = {torch.float32: "float32", torch.float16: "float16", torch.uint8: "uint8"}
            if t.dtype not in names:
                raise TranslationError(f"{where}: dtype {t.dtype} is not one stokerd outputs (float32, float16, uint8)")
            if dtype == "float32" and t.dtype == torch.uint8:
                raise TranslationError(f"{where}: float back to uint8 is not available in stokerd")
            dtype = names[t.dtype]
        elif isinstance(t, T.Normalize):
            if dtype in (None, "uint8"):
                raise TranslationError(f"{where}: Normalize needs a float tensor before it")
            if t.inplace:
                pass  # same values
            steps.append("normalize: " + _flow({"mean": [float(v) for v in t.mean], "std": [float(v) for v in t.std]}))
            normalized = True
        elif isinstance(t, T.RandomErasing):
            if dtype is None:
                raise TranslationError(f"{where}: RandomErasing works on tensors; it comes after ToTensor")
            value = t.value
            if isinstance(value, str):
                if value != "random":
                    raise TranslationError(f"{where}: value={value!r} (stokerd takes a number, three numbers or 'random')")
            elif isinstance(value, (list, tuple)):
                value = [float(v) for v in value]
            else:
                value = float(value)
            if not normalized:
                value = _erasing_pixels(value, dtype, where)
            steps.append("random_erasing: " + _flow({"p": _num(t.p), "scale": _pair(t.scale),
                                                     "ratio": _pair(t.ratio), "value": value}))
        else:
            raise TranslationError(f"{where} has no stokerd equivalent; it would be dropped, so the job is "
                                   f"refused (supported: the torchvision transforms listed in configs/README.md's "
                                   f"pipeline steps, plus PILToTensor/ToTensor/ConvertImageDtype/Normalize)"
                                   f"{transform_tree.why_not_walked(t)}")
    if dtype is None:
        raise TranslationError("the transform never converts to a tensor (no ToTensor or PILToTensor): "
                               "the model would get PIL images")
    del normalized
    origins += [where] * (len(steps) - len(origins))
    return steps, dtype, origins


def job_yaml(*, name: str, root: str, batch_size: int, shuffle: bool, seed: int, drop_last: bool,
             augment_seed: Optional[int] = None,
             sampler_drop_last: Optional[bool] = None, pad_shards: bool = True,
             world: int, first: int, local: int, prefetch: int, on_error: str,
             steps: Sequence[str], dtype: str, layout: str = "NCHW",
             mixup: Optional[float] = None, cutmix: Optional[float] = None,
             mix_switch_prob: Optional[float] = None,
             sources: Optional[Sequence[Tuple[str, float]]] = None, labels: Optional[str] = None) -> str:
    """`sources`: a weighted mixture of ImageFolder roots [(root, weight), ...] in place of
    `root` (the job key `sources:`), with `labels: per_source|shared`."""
    if sources:
        src = ["    sources:"] + [f"      - {{type: imagefolder, root: {json.dumps(r)}, weight: {float(w)!r}}}"
                                   for r, w in sources]
        if labels is not None:
            src.append(f"    labels: {labels}")
    else:
        src = [f"    source: {{type: imagefolder, root: {json.dumps(root)}}}"]
    lines = ["jobs:", f"  {name}:"] + src + [
             f"    batch_size: {int(batch_size)}",
             f"    shuffle: {'true' if shuffle else 'false'}",
             f"    seed: {int(seed)}",
             f"    drop_last: {'true' if drop_last else 'false'}"]
    if augment_seed is not None:
        lines.append(f"    augment_seed: {int(augment_seed)}")
    if sampler_drop_last is not None:
        lines.append(f"    sampler_drop_last: {'true' if sampler_drop_last else 'false'}")
    if not pad_shards:
        lines.append("    pad_shards: false")
    lines += [f"    world_size: {int(world)}", f"    ranks: {int(first)}-{int(first + local - 1)}",
              f"    prefetch: {int(prefetch)}", f"    on_error: {on_error}"]
    if mixup is not None:
        lines.append(f"    mixup: {{alpha: {float(mixup)}}}")
    if cutmix is not None:
        lines.append(f"    cutmix: {{alpha: {float(cutmix)}}}")
    if mix_switch_prob is not None:
        lines.append(f"    mix_switch_prob: {float(mix_switch_prob)}")
    lines += ["    pipeline:"] + [f"      - {s}" for s in steps]
    lines.append(f"    output: {{dtype: {dtype}, layout: {layout}}}")
    return "\n".join(lines) + "\n"
