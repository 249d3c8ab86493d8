"""python tier, differential: reference_train_port.py (torchvision's classification train.py in
shape) run with torch's DataLoader and with its two constructor calls swapped for
stoker.Loader.from_dataset (issue #24).

What must match: every epoch serves every sample once with its label, in as many batches of
the same sizes; the validation loader (unshuffled) serves exactly DataLoader's order.
What must change as with DataLoader: the order and the augmentations from one epoch to the
next; the order (RandomSampler) with torch.manual_seed; nothing between two runs with the same
seed; and a run resumed at epoch k through set_epoch(k) serves epoch k's order (Stoker: epoch
k's very batches). The permutation itself is stokerd's, not torch's, so shuffled orders are
compared by these properties, not element by element."""
import gc
import json
import os
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from PIL import Image  # noqa: E402

from conftest import Daemon  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CLASSES, PER_CLASS = 4, 8


@pytest.fixture(scope="module")
def coded_root(tmp_path_factory):
    """32 lossless images whose red channel is 8*i+4 (i: the sample's ImageFolder index) and
    whose green/blue channels are the column/row, so crops and flips show in the pixels."""
    root = tmp_path_factory.mktemp("coded")
    i = 0
    for c in range(CLASSES):
        d = root / f"class{c}"
        d.mkdir()
        for k in range(PER_CLASS):
            w, h = 24 + 2 * k, 20 + k
            img = Image.new("RGB", (w, h))
            img.putdata([(8 * i + 4, 9 * x, 11 * y) for y in range(h) for x in range(w)])
            img.save(d / f"img{k}.png")
            i += 1
    return str(root)


@pytest.fixture(scope="module")
def stokerd(tmp_path_factory, coded_root):
    tmp = tmp_path_factory.mktemp("port")
    cfg = tmp / "stokerd.yaml"
    # Only an unrelated job in the config: the script's loaders define theirs.
    cfg.write_text(f"""server: {{workers: 2, log_level: warn, client_job_linger_s: 1}}
jobs:
  other:
    source: {{root: "{coded_root}"}}
    batch_size: 4
    pipeline: [{{decode: {{}}}}, {{random_resized_crop: {{size: 8}}}}]
""")
    d = Daemon(str(cfg), str(tmp / "s.sock"), str(tmp / "stokerd.log"), "other")
    yield d
    d.stop()


@pytest.fixture(scope="module")
def run(tmp_path_factory, coded_root, stokerd):
    """run(loader, seed=, distributed=, start_epoch=, take=) -> what the script recorded.
    The script runs in this process (main() of reference_train_port.py; torch is imported
    once); runs are kept for the module, `take` telling repeated runs apart."""
    sys.path.insert(0, HERE)
    import reference_train_port as script
    tmp = tmp_path_factory.mktemp("runs")
    done = {}

    def go(loader, *, seed=0, distributed=False, start_epoch=0, take=0, epochs=3):
        key = (loader, seed, distributed, start_epoch, take, epochs)
        if key in done:
            return done[key]
        tag = "-".join(map(str, key))
        argv = ["--data-path", coded_root, "--loader", loader, "--seed", str(seed), "--start-epoch",
                str(start_epoch), "--epochs", str(epochs), "--out", str(tmp / f"{tag}.json")]
        if distributed:
            argv += ["--distributed", "--dist-file", str(tmp / f"{tag}.pg")]
        saved = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                                "LOCAL_RANK", "STOKER_SOCKET") if k in os.environ}
        os.environ["STOKER_SOCKET"] = stokerd.socket
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pin_memory without CUDA: both loaders warn
                script.main(script.parse(argv))
        finally:
            del os.environ["STOKER_SOCKET"]
            os.environ.update(saved)
            gc.collect()  # the script's loaders hang up: the next run may take the same job's rank
        rec = json.load(open(tmp / f"{tag}.json"))
        rec["epochs"] = {int(e): v for e, v in rec["epochs"].items()}
        rec["batches"] = {int(e): v for e, v in rec["batches"].items()}
        done[key] = rec
        return rec

    yield go
    sys.path.remove(HERE)


def order(rec, epoch):
    return [s[0] for s in rec["epochs"][epoch]]


def augment(rec, epoch):
    """sample index -> digest of its pixels in that epoch."""
    return {s[0]: s[2] for s in rec["epochs"][epoch]}


def check_served_like_dataloader(rec, ref):
    n = CLASSES * PER_CLASS
    for epoch, samples in rec["epochs"].items():
        assert sorted(order(rec, epoch)) == list(range(n)), (epoch, order(rec, epoch))
        assert all(label == index // PER_CLASS for index, label, _ in samples)  # ImageFolder's labels
        assert rec["batches"][epoch] == ref["batches"][epoch]
    assert rec["len"] == ref["len"]
    # Validation: the unshuffled loader serves DataLoader's order exactly, with its labels.
    assert [s[:2] for s in rec["test"]] == [s[:2] for s in ref["test"]] == [[i, i // PER_CLASS] for i in range(n)]


def check_epochs_differ(rec):
    epochs = sorted(rec["epochs"])
    for a, b in zip(epochs, epochs[1:]):
        assert order(rec, a) != order(rec, b), (a, b)
        same = sum(augment(rec, a)[i] == augment(rec, b)[i] for i in augment(rec, a))
        assert same < CLASSES * PER_CLASS // 4, (a, b, same)  # fresh crops and flips each epoch


@pytest.mark.parametrize("distributed", [False, True], ids=["random_sampler", "distributed_sampler"])
def test_reference_port_serves_what_dataloader_serves(run, distributed):
    ref = run("torch", seed=1, distributed=distributed)
    got = run("stoker", seed=1, distributed=distributed)
    check_served_like_dataloader(ref, ref)
    check_served_like_dataloader(got, ref)
    check_epochs_differ(ref)
    check_epochs_differ(got)
    # The same seed again: the very same batches (DataLoader too, with torch.manual_seed).
    again = run("stoker", seed=1, distributed=distributed, take=1)
    assert again["epochs"] == got["epochs"]
    ref_again = run("torch", seed=1, distributed=distributed, take=1)
    assert ref_again["epochs"] == ref["epochs"]


def test_torch_manual_seed_decides_the_order_as_with_dataloader(run):
    """RandomSampler (the reference without --distributed): the order comes from torch's
    generator, so another torch.manual_seed gives another order and other augmentations."""
    for loader in ("torch", "stoker"):
        one = run(loader, seed=1)
        two = run(loader, seed=2)
        for epoch in (0, 1):
            assert order(one, epoch) != order(two, epoch), (loader, epoch)
            same = sum(augment(one, epoch)[i] == augment(two, epoch)[i] for i in augment(one, epoch))
            assert same < CLASSES * PER_CLASS // 4, (loader, epoch, same)


def test_distributed_sampler_order_follows_its_seed_and_epoch_and_resumes(run):
    """DistributedSampler: the order is a function of the sampler's seed and set_epoch's epoch
    only (torch.manual_seed does not change it, with DataLoader neither), and `--resume` at
    epoch 2, which calls set_epoch(2) in a fresh process, serves epoch 2's order."""
    for loader in ("torch", "stoker"):
        full = run(loader, seed=1, distributed=True)
        other_torch_seed = run(loader, seed=7, distributed=True)
        resumed = run(loader, seed=1, distributed=True, start_epoch=2)
        for epoch in (0, 1, 2):
            assert order(other_torch_seed, epoch) == order(full, epoch), (loader, epoch)
        assert list(resumed["epochs"]) == [2]
        assert order(resumed, 2) == order(full, 2), loader
        assert order(resumed, 2) != order(full, 0), loader
        if loader == "stoker":  # Stoker's augmentations are a function of (seed, epoch, sample) too
            assert resumed["epochs"][2] == full["epochs"][2]
