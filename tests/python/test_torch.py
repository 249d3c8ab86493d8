"""python tier, torch only: DLPack export from the native layer, zero copy, shared ownership."""
import gc
import threading

import numpy as np
import pytest

import stoker

torch = pytest.importorskip("torch")
from torch.utils import dlpack  # noqa: E402


def test_dlpack_tensors_view_the_batch_without_copying(daemon):
    loader = stoker.Loader("demo", socket=daemon.socket)
    b = next(loader.batches())
    assert isinstance(b.images, torch.Tensor) and b.images.device.type == "cpu"
    view = b._native.images_numpy()
    assert b.images.data_ptr() == view.__array_interface__["data"][0]
    assert b.labels.data_ptr() == b._native.labels_numpy().__array_interface__["data"][0]
    again = dlpack.from_dlpack(b._native.images_dlpack())  # a second export: same memory
    assert again.data_ptr() == b.images.data_ptr() and torch.equal(again, b.images)
    assert b.images.is_contiguous() and b.images.stride() == (3 * 32 * 32, 32 * 32, 32, 1)


def test_a_capsule_is_consumed_once(daemon):
    loader = stoker.Loader("demo", socket=daemon.socket)
    b = next(loader.batches())
    cap = b._native.labels_dlpack()
    t = dlpack.from_dlpack(cap)
    with pytest.raises(Exception):
        dlpack.from_dlpack(cap)
    assert t.dtype == torch.int64


def test_an_unused_capsule_frees_its_reference(daemon):
    loader = stoker.Loader("demo", socket=daemon.socket)
    b = next(loader.batches())
    native = b._native
    del b
    caps = [native.images_dlpack(), native.ids_dlpack()]
    del native
    gc.collect()
    assert loader._client.outstanding == 1  # the capsules still hold the batch
    del caps
    assert loader._client.outstanding == 0


def test_tensors_freed_on_another_thread_release_the_slot(daemon):
    loader = stoker.Loader("demo", socket=daemon.socket)
    images, labels = next(iter(loader))
    box = [images, labels]
    del images, labels
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    assert loader._client.outstanding == 0


def test_in_place_operations_do_not_crash(daemon):
    # torch has no read-only tensors: the mapping is writable so that an in-place op on a view
    # changes only this consumer's slot instead of faulting.
    loader = stoker.Loader("demo", socket=daemon.socket)
    images, labels = next(iter(loader))
    images.zero_()
    assert int(images.sum()) == 0


def test_training_step_on_a_view(daemon):
    loader = stoker.Loader("demo", socket=daemon.socket)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for images, labels in loader:
        loss = torch.nn.functional.cross_entropy(model(images.float() / 255), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert np.isfinite(loss.item())
