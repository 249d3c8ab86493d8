"""python tier: Loader.from_dataset as a drop-in for the DataLoader call of a script (issue #24):
the script's sampler drives the epoch, torch's seeding decides the job's seed, wrappers of a
Compose are translated, DataLoader's own arguments are taken or refused by name, and every
refusal comes at construction in the words of the Python the user wrote."""
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from torchvision import datasets, transforms as T  # noqa: E402
from torch.utils.data import DistributedSampler, RandomSampler, default_collate  # noqa: E402

import stoker  # noqa: E402

NO_DAEMON = "/nonexistent/stoker.sock"  # construction must not need one (lazy)


def compose(crop=16):
    return T.Compose([T.RandomResizedCrop(crop), T.RandomHorizontalFlip(), T.PILToTensor()])


def seed_of(loader):
    return int(next(l for l in loader._definition.splitlines() if l.strip().startswith("seed:")).split(":")[1])


def augment_seed_of(loader):
    lines = [l for l in loader._definition.splitlines() if l.strip().startswith("augment_seed:")]
    return int(lines[0].split(":")[1]) if lines else None


def ids_of(loader):
    return [(b.epoch, b.ids.tolist()) for b in loader.batches()]


# --- A1: the script's sampler drives the epoch ----------------------------------------------
def test_set_epoch_on_the_scripts_distributed_sampler_moves_the_loader(daemon, demo_root):
    ds = datasets.ImageFolder(demo_root, transform=compose())
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=3)
    loader = stoker.Loader.from_dataset(ds, batch_size=16, sampler=sampler, socket=daemon.socket)
    # --resume: a fresh loader, the script calls set_epoch(start_epoch) on its own sampler.
    sampler.set_epoch(2)
    epoch2 = ids_of(loader)
    assert {e for e, _ in epoch2} == {2}
    # As DataLoader: without a new set_epoch the next iteration serves the same epoch again.
    assert ids_of(loader) == epoch2
    sampler.set_epoch(3)
    assert {e for e, _ in ids_of(loader)} == {3}
    loader.close()  # the same definition is the same job, whose rank 0 takes one consumer
    # A second loader built the same way agrees: epoch 2 is a function of (seed, epoch).
    other_sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=3)
    other = stoker.Loader.from_dataset(ds, batch_size=16, sampler=other_sampler, socket=daemon.socket)
    other.set_epoch(2)  # Loader.set_epoch sets the script's sampler too
    assert other_sampler.epoch == 2 and ids_of(other) == epoch2
    other.load_state_dict({"epoch": 3, "batch": 1})
    assert other_sampler.epoch == 3 and [e for e, _ in ids_of(other)] == [3] * (len(other) - 1)


# --- A2: the seed comes from torch as DataLoader's randomness does ----------------------------
def test_default_seed_follows_torch_manual_seed_and_generators(demo_root):
    ds = datasets.ImageFolder(demo_root, transform=compose())

    def build(**kw):
        return stoker.Loader.from_dataset(ds, batch_size=8, socket=NO_DAEMON, **kw)

    torch.manual_seed(1)
    a = seed_of(build(shuffle=True))
    state = torch.get_rng_state()
    a_again = seed_of(build(sampler=RandomSampler(ds)))
    assert torch.equal(state, torch.get_rng_state())  # peeked, not drawn: the script's numbers stay
    torch.manual_seed(2)
    b = seed_of(build(shuffle=True))
    assert a == a_again and a != b
    g = torch.Generator().manual_seed(5)
    assert seed_of(build(shuffle=True, generator=g)) == seed_of(build(generator=torch.Generator().manual_seed(5)))
    assert seed_of(build(sampler=RandomSampler(ds, generator=torch.Generator().manual_seed(5)))) == \
        seed_of(build(generator=torch.Generator().manual_seed(5)))
    assert seed_of(build(shuffle=True, seed=11)) == 11
    dist = DistributedSampler(ds, num_replicas=1, rank=0, seed=9)
    assert seed_of(build(sampler=dist)) == 9  # every rank shares the sampler's seed
    torch.manual_seed(3)
    assert seed_of(build(sampler=dist)) == 9
    # The augmentations follow torch's seeding with a DistributedSampler too, as DataLoader's
    # workers' base seed does; the order stays the sampler's.
    d3 = augment_seed_of(build(sampler=dist))
    torch.manual_seed(4)
    d4 = augment_seed_of(build(sampler=dist))
    torch.manual_seed(3)
    assert d3 is not None and d3 != d4 and augment_seed_of(build(sampler=dist)) == d3
    assert augment_seed_of(build(sampler=dist, seed=11)) is None  # seed= decides both
    assert augment_seed_of(build(sampler=dist, generator=torch.Generator().manual_seed(5))) == \
        augment_seed_of(build(sampler=dist, generator=torch.Generator().manual_seed(5)))


def test_torch_seed_moves_a_distributed_samplers_augmentations_not_its_order(daemon, demo_root):
    # DataLoader + DistributedSampler: torch.manual_seed changes the augmentations (workers'
    # base seed), never the order (the sampler's seed). The same must hold here.
    ds = datasets.ImageFolder(demo_root, transform=compose())
    out = []
    for s in (1, 2, 1):
        torch.manual_seed(s)
        sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=7)
        loader = stoker.Loader.from_dataset(ds, batch_size=16, sampler=sampler, socket=daemon.socket)
        b = next(loader.batches())
        out.append((b.ids.tolist(), b.images.clone()))
        del b
        loader.close()
    assert out[0][0] == out[1][0] == out[2][0]  # one order: the sampler's seed and epoch
    assert not torch.equal(out[0][1], out[1][1])  # other crops and flips
    assert torch.equal(out[0][1], out[2][1])  # the same torch seed, the very same pixels


def test_two_torch_seeds_are_two_jobs_with_different_batches(daemon, demo_root):
    ds = datasets.ImageFolder(demo_root, transform=compose())
    out = []
    for s in (1, 2, 1):
        torch.manual_seed(s)
        loader = stoker.Loader.from_dataset(ds, batch_size=16, shuffle=True, socket=daemon.socket)
        b = next(loader.batches())
        out.append((loader.job, b.ids.tolist(), b.images.clone()))
        del b
        loader.close()
    assert out[0][0] != out[1][0] and out[0][0] == out[2][0]
    assert out[0][1] != out[1][1] and out[0][1] == out[2][1] and torch.equal(out[0][2], out[2][2])


# --- A3: wrappers whose whole behaviour is a Compose ------------------------------------------
class PresetTrain:
    """As the references' ClassificationPresetTrain."""

    def __init__(self, crop):
        self.transforms = T.Compose([T.RandomResizedCrop(crop), T.RandomHorizontalFlip(0.5), T.PILToTensor(),
                                     T.ConvertImageDtype(torch.float), T.Normalize((0.5,) * 3, (0.25,) * 3)])

    def __call__(self, img):
        return self.transforms(img)


class DoesMore(PresetTrain):
    def __call__(self, img):
        return self.transforms(img).flip(-1)


class TakesMore(PresetTrain):
    def __call__(self, img, *extra):
        return self.transforms(img)


def test_a_preset_wrapper_translates_as_its_compose(daemon, demo_root):
    plain = datasets.ImageFolder(demo_root, transform=PresetTrain(16).transforms)
    wrapped = datasets.ImageFolder(demo_root, transform=PresetTrain(16))
    nested = datasets.ImageFolder(demo_root, transform=T.Compose([PresetTrain(16)]))
    one = stoker.Loader.from_dataset(plain, batch_size=8, shuffle=True, seed=4, socket=daemon.socket)
    two = stoker.Loader.from_dataset(wrapped, batch_size=8, shuffle=True, seed=4, socket=daemon.socket)
    three = stoker.Loader.from_dataset(nested, batch_size=8, shuffle=True, seed=4, socket=daemon.socket)
    assert one._definition == two._definition == three._definition
    images, labels = next(iter(two))
    assert images.dtype == torch.float32 and tuple(images.shape) == (8, 3, 16, 16)


@pytest.mark.parametrize("wrapper", [DoesMore, TakesMore])
def test_a_wrapper_that_does_more_is_refused_by_name(demo_root, wrapper):
    ds = datasets.ImageFolder(demo_root, transform=T.Compose([wrapper(16)]))
    with pytest.raises(stoker.TranslationError, match=rf"transform 0 \({wrapper.__name__}\) has no stokerd "
                                                      rf"equivalent.*not exactly `return self.transforms\(x\)`"):
        stoker.Loader.from_dataset(ds, batch_size=8, socket=NO_DAEMON)
    with pytest.raises(stoker.TranslationError, match=r"transform 1 \(Lambda\) of PresetTrain.transforms"):
        bad = PresetTrain(16)
        bad.transforms.transforms.insert(1, T.Lambda(lambda x: x))
        stoker.Loader.from_dataset(datasets.ImageFolder(demo_root, transform=bad), socket=NO_DAEMON)


# --- A4: DataLoader's own arguments -----------------------------------------------------------
def test_dataloader_arguments_are_taken_or_refused_by_name(daemon, demo_root):
    ds = datasets.ImageFolder(demo_root, transform=compose())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = stoker.Loader.from_dataset(ds, 8, None, RandomSampler(ds), None, 4, default_collate, True,
                                            True, 30, None, None, torch.Generator().manual_seed(1),
                                            prefetch_factor=4, persistent_workers=True, socket=daemon.socket)
        images, labels = next(iter(loader))
    assert loader.timeout_s == 30.0 and "drop_last: true" in loader._definition
    assert tuple(images.shape) == (8, 3, 16, 16)
    # pin_memory as the installed torch's DataLoader: unpinned without CUDA, and the same
    # pin_memory warnings (torch 1.13, Debian 12's: none at all) from building and iterating.
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        next(iter(torch.utils.data.DataLoader(ds, batch_size=8, pin_memory=True)))
    assert [str(w.message) for w in caught if "pin" in str(w.message)] == \
        [str(w.message) for w in theirs if "pin" in str(w.message)] or torch.cuda.is_available()
    if not torch.cuda.is_available():
        assert not loader.pin_memory
    for kw, words in [({"collate_fn": lambda b: b}, "collate_fn=.*mixup= / cutmix="),
                      ({"worker_init_fn": lambda i: None}, "worker_init_fn=.*seed="),
                      ({"batch_sampler": [[0, 1]]}, "batch_sampler=.*batch_size="),
                      ({"batch_size": None}, "batch_size=None")]:
        with pytest.raises(stoker.TranslationError, match=words):
            stoker.Loader.from_dataset(ds, socket=NO_DAEMON, **kw)
    with pytest.raises(TypeError, match=r"^from_dataset\(\) got an unexpected keyword argument 'shufle'$"):
        stoker.Loader.from_dataset(ds, batch_size=8, shufle=True, socket=NO_DAEMON)
    with pytest.raises(TypeError, match=r"^from_folder\(\) got an unexpected keyword argument 'lazy'$"):
        stoker.Loader.from_folder(demo_root, lazy=False, socket=NO_DAEMON)
    with pytest.raises(ValueError, match="num_workers"):
        stoker.Loader.from_dataset(ds, num_workers=-1, socket=NO_DAEMON)
    with pytest.raises(ValueError, match="mutually exclusive"):
        stoker.Loader.from_dataset(ds, shuffle=True, sampler=RandomSampler(ds), socket=NO_DAEMON)


# --- A5: refusals at construction, in the user's words ----------------------------------------
def test_mixup_zero_is_off_as_in_the_references(demo_root):
    ds = datasets.ImageFolder(demo_root, transform=compose())
    loader = stoker.Loader.from_dataset(ds, batch_size=8, mixup=0.0, cutmix=0, socket=NO_DAEMON)
    assert "mixup" not in loader._definition and "cutmix" not in loader._definition
    with pytest.raises(ValueError, match="mixup=-0.2"):
        stoker.Loader.from_dataset(ds, batch_size=8, mixup=-0.2, socket=NO_DAEMON)


@pytest.mark.parametrize("transform, words", [
    (T.Compose([T.RandomResizedCrop(16), T.AutoAugment(T.AutoAugmentPolicy.CIFAR10), T.PILToTensor()]),
     r"transform 1 \(AutoAugment\): policy cifar10"),
    (T.Compose([T.RandomResizedCrop(16), T.AutoAugment(T.AutoAugmentPolicy.SVHN), T.PILToTensor()]),
     r"transform 1 \(AutoAugment\): policy svhn"),
    (T.Compose([T.ColorJitter(0.4), T.RandomResizedCrop(16), T.PILToTensor()]),
     r"transform 0 \(ColorJitter\): stokerd applies its transforms after the crop/resize"),
    (T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(1.5), T.PILToTensor()]),
     r"transform 1 \(RandomHorizontalFlip\): p=1.5"),
    (T.Compose([T.Resize(20), T.PILToTensor()]), r"transform 0 \(Resize\): Resize\(int\)"),
    (T.Compose([T.Resize(20), T.CenterCrop(24), T.PILToTensor()]), r"transform 1 \(CenterCrop\): crop"),
    (T.Compose([T.RandomResizedCrop(16), T.RandAugment(magnitude=40), T.PILToTensor()]),
     r"transform 1 \(RandAugment\): magnitude=40"),
    (T.Compose([T.RandomResizedCrop(16), T.RandomRotation(10), T.RandomHorizontalFlip(), T.PILToTensor()]),
     r"transform 2 \(RandomHorizontalFlip\): stokerd flips before transform 1 \(RandomRotation\)"),
])
def test_refusals_come_at_construction_naming_the_transform(demo_root, transform, words):
    ds = datasets.ImageFolder(demo_root, transform=transform)
    with pytest.raises(stoker.TranslationError, match=words):
        stoker.Loader.from_dataset(ds, batch_size=8, socket=NO_DAEMON)


def test_what_the_daemon_refuses_later_names_the_transform(daemon, demo_root):
    """A rule not mirrored in Python: the daemon's refusal at first use is reported with the
    transform that made the refused step, not only a line of the generated definition."""
    ds = datasets.ImageFolder(demo_root, transform=T.Compose([
        T.RandomResizedCrop(16), T.GaussianBlur(kernel_size=(33, 33), sigma=(0.1, 2.0)), T.PILToTensor()]))
    loader = stoker.Loader.from_dataset(ds, batch_size=8, socket=daemon.socket)
    with pytest.raises(stoker.RefusedError, match=r"transform 1 \(GaussianBlur\)"):
        len(loader)



def test_random_erasing_value_before_normalize_is_in_the_tensors_units(daemon, demo_root):
    """torchvision's RandomErasing(value=1.0) on a float tensor in [0, 1] paints white; stokerd
    erases 8-bit pixels there, so the value is 255 (it was passed as pixel 1: near black)."""
    erase = T.RandomErasing(p=1.0, scale=(0.25, 0.25), ratio=(1.0, 1.0), value=1.0)
    ds = datasets.ImageFolder(demo_root, transform=T.Compose([
        T.RandomResizedCrop(32), T.PILToTensor(), T.ConvertImageDtype(torch.float), erase]))
    ref, _ = ds[0]
    assert (ref == 1.0).all(0).float().mean() >= 0.2  # torchvision: a white quarter
    loader = stoker.Loader.from_dataset(ds, batch_size=8, socket=daemon.socket)
    images, _ = next(iter(loader))
    white = (images == 1.0).all(1).float().mean((1, 2))
    assert (white >= 0.2).all(), white
