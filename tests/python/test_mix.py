"""python tier: a job with mixup/cutmix gives float soft labels [B, num_classes] through the
Loader (zero-copy, like the images) and `stokerctl consume --dump`, and its pixels are
lam * x + (1 - lam) * x.roll(1) of the same job without mixing (same seed)."""
import numpy as np
import pytest

import stoker
from conftest import FRAMEWORKS, to_numpy

pytestmark = pytest.mark.parametrize("fw", FRAMEWORKS)

CLASSES = 4  # tests/data/demo: 4 classes x 16 photos, label = id // 16


def onehot(labels):
    return np.eye(CLASSES, dtype=np.float64)[labels]


def lam_of(soft, ids, atol=1e-6):
    """The batch's lambda from its soft rows (None when every neighbour shares a class); also
    checks that every row is lam * onehot(own) + (1 - lam) * onehot(previous)."""
    own = ids // 16
    prev = np.roll(own, 1)
    differ = np.nonzero(own != prev)[0]
    if len(differ) == 0:
        return None
    lam = float(soft[differ[0], own[differ[0]]])
    want = lam * onehot(own) + (1 - lam) * onehot(prev)
    np.testing.assert_allclose(soft.astype(np.float64), want, atol=atol)
    return lam


def address(x):
    return x.__array_interface__["data"][0] if isinstance(x, np.ndarray) else x.data_ptr()


def test_mixup_loader_gives_float_soft_labels_matching_the_pixels(fw, daemon_factory, tmp_path):
    plain = daemon_factory(seed=11)
    mixed = daemon_factory(seed=11, extra="    mixup: {alpha: 0.4}\n")
    lp = stoker.Loader("demo", socket=plain.socket, framework=fw)
    lm = stoker.Loader("demo", socket=mixed.socket, framework=fw)
    lams = set()
    for (x, y) in zip(lp.batches(), lm.batches()):
        labels = y.labels
        if fw == "torch":
            import torch
            assert labels.dtype == torch.float32
        soft = to_numpy(labels)
        assert soft.dtype == np.float32 and soft.shape == (len(y), CLASSES)
        # Zero-copy: the labels live in the batch's shared-memory slot, right after its images.
        assert 0 < address(labels) - address(y.images) < 2 * 1024 * 1024
        ids = to_numpy(y.ids)
        assert np.array_equal(ids, to_numpy(x.ids))
        lam = lam_of(soft, ids)
        if lam is None:
            continue
        lams.add(lam)
        xs = to_numpy(x.images).astype(np.float64)
        want = lam * xs + (1 - lam) * np.roll(xs, 1, axis=0)
        assert np.abs(to_numpy(y.images) - want).max() <= 0.51  # uint8 rounds to nearest
    assert len(lams) >= 5


def test_cutmix_float16_labels_and_dump(fw, daemon_factory, tmp_path):
    d = daemon_factory(seed=3, dtype="float16", size=24, extra="    cutmix: {alpha: 1.0}\n")
    ref = d.consume(tmp_path / "dump", 3)
    loader = stoker.Loader("demo", socket=d.socket, framework=fw)
    got = list(zip(range(3), loader.batches()))
    for (e, i, images, labels, ids), (_, b) in zip(ref, got):
        assert (b.epoch, b.index) == (e, i)
        soft = to_numpy(b.labels)
        assert labels.dtype == np.float16 and labels.shape == (8, CLASSES)  # --dump: float [B, classes]
        assert soft.dtype == np.float16 and soft.shape == (8, CLASSES)
        assert np.array_equal(soft, labels)
        assert np.array_equal(to_numpy(b.images), images)
        lam = lam_of(soft.astype(np.float32), ids, atol=1e-3)  # float16: 11 bits
        if lam is not None:
            assert 0.0 <= lam <= 1.0


def test_plain_job_keeps_int64_labels(fw, daemon_factory):
    d = daemon_factory()
    b = next(stoker.Loader("demo", socket=d.socket, framework=fw).batches())
    assert to_numpy(b.labels).dtype == np.int64 and to_numpy(b.labels).shape == (8,)
