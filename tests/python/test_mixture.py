"""python tier: weighted mixtures of datasets (issue #25). Loader.from_folder takes a list of
(root, weight); Loader.from_dataset translates a torch ConcatDataset of ImageFolders (weights
by size, labels shared) and refuses a WeightedRandomSampler by name. Differential: an epoch of
a ConcatDataset through Stoker holds the same (sample, label) pairs as through torch."""
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from torchvision import datasets, transforms as T  # noqa: E402
from torch.utils.data import ConcatDataset, DataLoader, WeightedRandomSampler  # noqa: E402

import stoker  # noqa: E402
from stoker import jobdef  # noqa: E402


@pytest.fixture
def extra_root(tmp_path, demo_root):
    """A second small ImageFolder with the demo's classes, three photos each."""
    root = tmp_path / "extra"
    for cls in sorted(os.listdir(demo_root)):
        src = os.path.join(demo_root, cls)
        if not os.path.isdir(src):
            continue
        (root / cls).mkdir(parents=True)
        for f in sorted(os.listdir(src))[:3]:
            shutil.copy(os.path.join(src, f), root / cls / ("x_" + f))
    return str(root)


def epoch_pairs(loader, epoch):
    loader.sampler.set_epoch(epoch)
    out = []
    for b in loader.batches():
        out += list(zip(b.ids.tolist(), b.labels.tolist()))
    return out


def test_from_folder_with_weights_serves_a_mixture(daemon, demo_root, extra_root):
    loader = stoker.Loader.from_folder([(demo_root, 1.0), (extra_root, 3.0)], batch_size=8, crop_size=16,
                                       dtype="uint8", socket=daemon.socket, drop_last=False)
    assert "sources:" in loader._definition and "weight: 3.0" in loader._definition
    demo_classes = datasets.ImageFolder(demo_root).classes
    n_demo, n_extra = 64, 3 * len(demo_classes)
    # per_source labels: each source's classes offset, named after its folder.
    assert loader.dataset.classes == [f"demo/{c}" for c in demo_classes] + [f"extra/{c}" for c in demo_classes]
    pairs = epoch_pairs(loader, 0)
    assert len(pairs) == n_demo + n_extra  # epoch_size: the sources' sum
    from_extra = [i for i, _ in pairs if i >= n_demo]
    # weight 3 of 4: three quarters of the epoch, so the small source repeats (its own epochs).
    assert len(from_extra) == round(0.75 * (n_demo + n_extra))
    assert len(set(from_extra)) == n_extra
    for i, label in pairs:
        assert label == (i // 16 if i < n_demo else len(demo_classes) + (i - n_demo) // 3)
    assert epoch_pairs(loader, 0) == pairs  # deterministic
    loader.close()


def test_from_dataset_concat_dataset_matches_torch_samples_and_labels(daemon, demo_root, extra_root):
    tf = T.Compose([T.Resize(18), T.CenterCrop(16), T.PILToTensor()])
    a, b = datasets.ImageFolder(demo_root, transform=tf), datasets.ImageFolder(extra_root, transform=tf)
    concat = ConcatDataset([a, b])
    loader = stoker.Loader.from_dataset(concat, batch_size=8, socket=daemon.socket)
    assert "labels: shared" in loader._definition
    assert loader.dataset.classes == a.classes
    # Through torch: every (path, label) once per epoch.
    torch_pairs = sorted((os.path.realpath(p), c) for part in (a, b) for p, c in part.samples)
    stoker_pairs = sorted((os.path.realpath(loader.dataset.samples[i][0]), label) for i, label in epoch_pairs(loader, 0))
    assert stoker_pairs == torch_pairs
    # And the label the torch DataLoader yields for a sample is the one Stoker yields.
    first = next(iter(DataLoader(concat, batch_size=len(concat))))[1].tolist()
    assert sorted(first) == sorted(label for _, label in torch_pairs)
    loader.close()


def test_from_dataset_refuses_weighted_random_sampler_by_name(demo_root):
    ds = datasets.ImageFolder(demo_root, transform=T.Compose([T.Resize(18), T.CenterCrop(16), T.PILToTensor()]))
    sampler = WeightedRandomSampler([1.0] * len(ds), num_samples=len(ds))
    with pytest.raises(jobdef.TranslationError, match="WeightedRandomSampler.*mixture"):
        stoker.Loader.from_dataset(ds, batch_size=8, sampler=sampler)


def test_from_dataset_refuses_concat_of_different_classes(demo_root, tmp_path):
    other = tmp_path / "other" / "only"
    other.mkdir(parents=True)
    shutil.copy(os.path.join(demo_root, "flower", sorted(os.listdir(os.path.join(demo_root, "flower")))[0]), other)
    tf = T.Compose([T.Resize(18), T.CenterCrop(16), T.PILToTensor()])
    concat = ConcatDataset([datasets.ImageFolder(demo_root, transform=tf),
                            datasets.ImageFolder(str(tmp_path / "other"), transform=tf)])
    with pytest.raises(jobdef.TranslationError, match="part 1.*other classes"):
        stoker.Loader.from_dataset(concat, batch_size=8)


def test_from_folder_refuses_bad_weights(demo_root):
    with pytest.raises(ValueError, match="weight"):
        stoker.Loader.from_folder([(demo_root, 0)], batch_size=8)
    with pytest.raises(TypeError, match=r"root\[0\]"):
        stoker.Loader.from_folder([demo_root], batch_size=8)
