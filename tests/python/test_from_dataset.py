"""python tier: Loader.from_dataset builds the job from the torchvision objects a script
already has (ImageFolder + a Compose of transforms + a sampler + MixUp/CutMix) and refuses,
naming it, anything it cannot translate exactly (issue #17: no data flag silently ignored)."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
from torchvision import datasets, transforms as T  # noqa: E402
from torch.utils.data import DistributedSampler, RandomSampler  # noqa: E402

import stoker  # noqa: E402
from stoker import jobdef  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def eval_preset(crop=16, resize=18):
    """As the classification references' ClassificationPresetEval (bilinear, PIL path)."""
    return T.Compose([T.Resize(resize), T.CenterCrop(crop), T.PILToTensor(),
                      T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD)])


def train_preset(crop=16, auto_augment=None, random_erase=0.0):
    """As the references' ClassificationPresetTrain with hflip 0.5."""
    t = [T.RandomResizedCrop(crop), T.RandomHorizontalFlip(0.5)]
    if auto_augment == "ta_wide":
        t.append(T.TrivialAugmentWide())
    elif auto_augment == "ra":
        t.append(T.RandAugment())
    elif auto_augment == "imagenet":
        t.append(T.AutoAugment(T.AutoAugmentPolicy.IMAGENET))
    t += [T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD)]
    if random_erase > 0:
        t.append(T.RandomErasing(p=random_erase))
    return T.Compose(t)


def test_eval_preset_translates_exactly_and_matches_torchvision_pixels(daemon, demo_root):
    ds = datasets.ImageFolder(demo_root, transform=eval_preset(crop=112, resize=128))
    loader = stoker.Loader.from_dataset(ds, batch_size=8, socket=daemon.socket)
    text = loader._definition
    assert "resize: {\"size\": 128}" in text and "center_crop: {\"size\": [112, 112]}" in text
    assert "normalize:" in text and "dtype: float32" in text
    assert loader.dataset.classes == ds.classes and len(loader.dataset) == len(ds)
    b = next(loader.batches())
    assert b.images.dtype == torch.float32 and tuple(b.images.shape) == (8, 3, 112, 112)
    # The same samples through torchvision's own pipeline (PIL decode + the same Compose).
    for k, i in enumerate(b.ids.tolist()):
        ref, label = ds[i]
        assert int(b.labels[k]) == label
        diff = (b.images[k] - ref).abs().mean().item() * STD[0]  # back to [0, 1] units, about
        assert diff < 2 / 255, (i, diff)


@pytest.mark.parametrize("mode", [T.InterpolationMode.BICUBIC, T.InterpolationMode.NEAREST])
def test_bicubic_and_nearest_resize_translate_and_match_torchvision_per_pixel(daemon, demo_root, mode):
    # Eval with another InterpolationMode (timm's presets use bicubic): PIL's resize with that
    # filter, compared value by value (uint8, no normalize) with torchvision on PIL images.
    tf = T.Compose([T.Resize(72, interpolation=mode), T.CenterCrop((64, 56)), T.PILToTensor()])
    steps, _ = jobdef.translate(tf)
    assert steps[1] == 'resize: {"size": 72, "interpolation": "%s"}' % mode.value
    crop, _ = jobdef.translate(T.Compose([T.RandomResizedCrop(16, interpolation=mode), T.PILToTensor()]))
    assert crop[1].endswith('"interpolation": "%s"}' % mode.value)
    ds = datasets.ImageFolder(demo_root, transform=tf)
    loader = stoker.Loader.from_dataset(ds, batch_size=16, socket=daemon.socket)
    b = next(loader.batches())
    assert b.images.dtype == torch.uint8 and tuple(b.images.shape) == (16, 3, 64, 56)
    for k, i in enumerate(b.ids.tolist()):
        ref, _ = ds[i]
        diff = (b.images[k].to(torch.int16) - ref.to(torch.int16)).abs()
        # The limit tests/unit/image_reference_test.cpp's bilinear cases meet (kMaxPixelDiff).
        assert diff.max().item() <= 4 and diff.float().mean().item() < 0.5, (i, diff.max().item())


def test_ta_wide_preset_with_random_erasing_is_served(daemon, demo_root):
    ds = datasets.ImageFolder(demo_root, transform=train_preset(crop=32, auto_augment="ta_wide", random_erase=0.5))
    loader = stoker.Loader.from_dataset(ds, batch_size=8, shuffle=True, socket=daemon.socket)
    images, labels = next(iter(loader))
    assert images.dtype == torch.float32 and tuple(images.shape) == (8, 3, 32, 32)
    assert labels.dtype == torch.int64
    st = json.loads(stoker.daemon_status(daemon.socket))
    assert any(j["name"] == loader.job and j["defined_by_client"] for j in st["jobs"])


def test_train_presets_translate_with_their_parameters():
    steps, dtype = jobdef.translate(train_preset(crop=176, auto_augment="ta_wide", random_erase=0.1))
    assert dtype == "float32"
    assert steps[1] == 'random_resized_crop: {"size": [176, 176], "scale": [0.08, 1.0], "ratio": [0.75, 1.3333333333333333]}'
    assert steps[2] == 'horizontal_flip: {"p": 0.5}'
    assert steps[3] == 'trivial_augment_wide: {"num_magnitude_bins": 31, "interpolation": "nearest"}'
    assert steps[-1] == 'random_erasing: {"p": 0.1, "scale": [0.02, 0.33], "ratio": [0.3, 3.3], "value": 0.0}'
    steps, _ = jobdef.translate(train_preset(auto_augment="ra"))
    assert 'rand_augment: {"num_ops": 2, "magnitude": 9, "num_magnitude_bins": 31, "interpolation": "nearest"}' in steps
    steps, _ = jobdef.translate(train_preset(auto_augment="imagenet"))
    assert 'auto_augment: {"policy": "imagenet", "interpolation": "nearest"}' in steps
    steps, dtype = jobdef.translate(T.Compose([T.RandomResizedCrop(8), T.ColorJitter(0.4, 0.4, 0.4), T.PILToTensor()]))
    assert dtype == "uint8" and steps[2] == 'color_jitter: {"brightness": [0.6, 1.4], "contrast": [0.6, 1.4], "saturation": [0.6, 1.4]}'


@pytest.mark.parametrize("compose, words", [
    (T.Compose([T.RandomResizedCrop(16), T.Lambda(lambda x: x), T.PILToTensor()]), "transform 1 (Lambda)"),
    (T.Compose([T.RandomResizedCrop(16, interpolation=T.InterpolationMode.BOX), T.PILToTensor()]),
     "transform 0 (RandomResizedCrop): interpolation=box"),
    (T.Compose([T.Resize(16, interpolation=T.InterpolationMode.LANCZOS), T.CenterCrop(8), T.PILToTensor()]),
     "transform 0 (Resize): interpolation=lanczos"),
    (T.Compose([T.RandomResizedCrop(16), T.RandomApply([T.ColorJitter(0.4)], p=0.8), T.PILToTensor()]),
     "transform 1 (RandomApply)"),
    (T.Compose([T.RandomResizedCrop(16), T.PILToTensor(), T.RandomHorizontalFlip()]),
     "transform 2 (RandomHorizontalFlip): after the tensor conversion"),
    (T.Compose([T.RandomResizedCrop(16)]), "never converts to a tensor"),
    (T.Compose([T.RandomRotation(10, expand=True), T.PILToTensor()]), "transform 0 (RandomRotation): expand"),
    (T.Compose([T.RandomResizedCrop(16), T.TrivialAugmentWide(fill=[128, 128, 128]), T.PILToTensor()]),
     "transform 1 (TrivialAugmentWide): fill"),
])
def test_untranslatable_transforms_are_refused_by_name_and_position(compose, words):
    with pytest.raises(stoker.TranslationError, match=words.replace("(", r"\(").replace(")", r"\)")):
        jobdef.translate(compose)


def test_samplers_and_dataset_settings(daemon, demo_root):
    ds = datasets.ImageFolder(demo_root, transform=T.Compose([T.RandomResizedCrop(16), T.PILToTensor()]))
    d = stoker.Loader.from_dataset(ds, batch_size=4, socket=daemon.socket,
                                   sampler=DistributedSampler(ds, num_replicas=3, rank=2, shuffle=True, seed=9,
                                                              drop_last=True), local_world_size=3)
    text = d._definition
    assert "world_size: 3" in text and "ranks: 0-2" in text and "seed: 9" in text
    assert "sampler_drop_last: true" in text and "shuffle: true" in text
    assert d.rank == 2 and d.world_size == 3
    assert len(d.sampler) == 64 // 3  # cut to a multiple of the world
    r = stoker.Loader.from_dataset(ds, batch_size=4, sampler=RandomSampler(ds), socket=daemon.socket)
    assert "shuffle: true" in r._definition
    with pytest.raises(stoker.TranslationError, match="target_transform"):
        stoker.Loader.from_dataset(datasets.ImageFolder(demo_root, transform=T.PILToTensor(),
                                                        target_transform=lambda y: y + 1), socket=daemon.socket)
    with pytest.raises(stoker.TranslationError, match="RandomSampler with replacement"):
        stoker.Loader.from_dataset(ds, sampler=RandomSampler(ds, replacement=True), socket=daemon.socket)


def test_mixup_and_cutmix_give_soft_labels(daemon, demo_root):
    ds = datasets.ImageFolder(demo_root, transform=T.Compose([T.RandomResizedCrop(16), T.PILToTensor()]))

    class RandomMixup:  # the references' attributes
        p, alpha = 1.0, 0.2

    loader = stoker.Loader.from_dataset(ds, batch_size=8, shuffle=True, socket=daemon.socket,
                                        mixup=RandomMixup(), cutmix=1.0)
    assert "mixup: {alpha: 0.2}" in loader._definition and "cutmix: {alpha: 1.0}" in loader._definition
    images, labels = next(iter(loader))
    assert labels.dtype == torch.float32 and tuple(labels.shape) == (8, len(ds.classes))
    assert np.allclose(labels.sum(1).numpy(), 1.0, atol=1e-5)

    class Half:
        p, alpha = 0.5, 1.0

    with pytest.raises(stoker.TranslationError, match="p=0.5"):
        stoker.Loader.from_dataset(ds, batch_size=8, socket=daemon.socket, cutmix=Half())
