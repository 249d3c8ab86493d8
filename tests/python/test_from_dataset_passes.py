"""python tier, differential (issue #34, E2/E3): Loader.from_dataset iterates as the DataLoader
it replaces. Each `iter()` is a new pass over the dataset (one left early is not continued);
without a DistributedSampler each pass draws a fresh order from torch's generators exactly
where a DataLoader draws its own (so torch's random numbers after the passes are the same),
hence passes differ, a restart whose generators stand elsewhere draws a fresh order, and one
whose generators stand where the first run's stood replays it, for both. load_state_dict()
remains the exact resume. The permutation is stokerd's, so orders are compared by these
relations, not element by element; unshuffled, the very samples are compared."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from PIL import Image  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torchvision import datasets, transforms as T  # noqa: E402

import stoker  # noqa: E402

N, BATCH = 50, 2  # 25 batches a pass


@pytest.fixture(scope="module")
def coded_set(tmp_path_factory):
    """N tiny solid images whose red value is 5 * (their ImageFolder index)."""
    root = tmp_path_factory.mktemp("coded")
    for i in range(N):
        d = root / f"class{i // 10}"
        d.mkdir(exist_ok=True)
        Image.new("RGB", (8, 8), (5 * i, 7, 9)).save(d / f"img{i % 10:02d}.png")
    return datasets.ImageFolder(str(root), transform=T.Compose([T.Resize([8, 8]), T.PILToTensor()]))


def ids(images):
    return (images[:, 0, 0, 0].long() // 5).tolist()


def close(loader):
    if isinstance(loader, stoker.Loader):
        loader.close()  # the same definition is the same job: its rank 0 is one consumer at a time


def make(kind, ds, socket, **kw):
    if kind == "torch":
        return DataLoader(ds, batch_size=BATCH, **kw)
    return stoker.Loader.from_dataset(ds, batch_size=BATCH, socket=socket, **kw)


@pytest.mark.parametrize("shuffle", [False, True], ids=["sequential", "random_sampler"])
def test_each_iter_is_a_new_pass_as_with_dataloader(daemon, coded_set, shuffle):
    got = {}
    for kind in ("torch", "stoker"):
        torch.manual_seed(3)
        loader = make(kind, coded_set, daemon.socket, shuffle=shuffle)
        firsts = [ids(next(iter(loader))[0]) for _ in range(2)]  # two iterations left at once
        full = [ids(images) for images, _ in loader]
        it = iter(loader)
        left = [ids(next(it)[0]) for _ in range(3)]  # an epoch left early ...
        again = [ids(images) for images, _ in loader]  # ... is not continued by the next `for`
        got[kind] = firsts, full, left, again
        close(loader)
    for kind, (firsts, full, left, again) in got.items():
        assert len(full) == len(again) == N // BATCH, kind  # DataLoader: 25, not 23 or 22
        assert sorted(sum(full, [])) == sorted(sum(again, [])) == list(range(N)), kind
    if not shuffle:  # the very samples, batch by batch
        assert got["stoker"] == got["torch"]
    else:
        for kind, (firsts, full, left, again) in got.items():
            assert firsts[0] != firsts[1] and full != again and full[:3] != left, kind


def passes(kind, ds, socket, count, seed=1, between=0, **kw):
    """torch.manual_seed(seed), the loader, `between` numbers drawn (start-up work that differs
    between runs), `count` passes; returns (their orders, torch's next random number)."""
    torch.manual_seed(seed)
    loader = make(kind, ds, socket, **kw)
    torch.rand(between)
    out = [sum((ids(images) for images, _ in loader), []) for _ in range(count)]
    close(loader)
    return out, torch.rand(1).item()


@pytest.mark.parametrize("kw", [{"shuffle": True}, {"shuffle": True, "generator": "g"}],
                         ids=["default_generator", "generator"])
def test_passes_and_restarts_draw_orders_where_dataloader_does(daemon, coded_set, kw):
    relations, after = {}, {}
    for kind in ("torch", "stoker"):
        def run(count, seed=1, between=0):
            args = dict(kw)
            if args.get("generator") == "g":
                args["generator"] = torch.Generator().manual_seed(seed + 100)
            return passes(kind, coded_set, daemon.socket, count, seed=seed, between=between, **args)
        first, after[kind] = run(3)  # one run: three epochs
        moved, _ = run(1, between=3)  # a restart whose generator stands elsewhere at its first pass
        replay, _ = run(1)  # a restart that stands exactly where the first run stood
        for o in first + moved + replay:
            assert sorted(o) == list(range(N)), kind
        relations[kind] = {"epochs differ": first[0] != first[1] != first[2] != first[0],
                           "a moved restart draws afresh": moved[0] not in first,
                           "an identical restart replays": replay[0] == first[0]}
    assert relations["stoker"] == relations["torch"], relations
    if "generator" not in kw:
        assert relations["torch"]["a moved restart draws afresh"]
    # The script's own random numbers after the passes are DataLoader's: the same draws were made.
    assert after["stoker"] == after["torch"]


def test_state_dict_is_still_the_exact_resume(daemon, coded_set):
    torch.manual_seed(1)
    loader = make("stoker", coded_set, daemon.socket, shuffle=True)
    it = iter(loader)
    head = [ids(next(it)[0]) for _ in range(4)]
    state = loader.state_dict()
    rest = [ids(images) for images, _ in it]
    assert len(head) + len(rest) == N // BATCH and state["batch"] == 4
    loader.close()
    torch.manual_seed(1)  # --resume: the same job, a new loader after the restart
    resumed = make("stoker", coded_set, daemon.socket, shuffle=True)
    resumed.load_state_dict(state)
    assert [ids(images) for images, _ in resumed] == rest  # exactly the batches not yet trained on
    after = [ids(images) for images, _ in resumed]  # and then a new pass, a fresh order
    assert len(after) == N // BATCH and after != head + rest
    resumed.close()


def test_a_superseded_iterator_says_so(daemon, coded_set):
    loader = make("stoker", coded_set, daemon.socket)
    old = iter(loader)
    next(old)
    new = iter(loader)
    assert ids(next(new)[0]) == [0, 1]
    with pytest.raises(stoker.StokerError, match="superseded"):
        next(old)
    loader.close()
