"""python tier, device mode: stoker.Loader(job, device="cuda") against a daemon on the same
device backend (STOKER_DEVICE_BACKEND, hostsim in CI: the loader then yields CPU tensors read
from the simulated device copy and says so once; on a GPU, torch.cuda tensors)."""
import gc
import os
import warnings

import numpy as np
import pytest

import stoker
from conftest import to_numpy

# hostsim in CI; scripts/gpu-check.sh sets STOKER_TEST_DEVICE_BACKEND=cuda on a GPU machine.
BACKEND = os.environ.get("STOKER_TEST_DEVICE_BACKEND", "hostsim")


@pytest.fixture(autouse=True)
def device_backend(monkeypatch):
    """The daemons these tests start and this process's client use the same backend (the
    client makes its backend once per process, at the first device request: only here)."""
    monkeypatch.setenv("STOKER_DEVICE_BACKEND", BACKEND)


def sim_objects(pid):
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"stoker-sim-{pid}-")]


def batches(loader, n):
    out = []
    it = loader.batches()
    for _ in range(n):
        try:
            b = next(it)
        except StopIteration:
            it = loader.batches()
            b = next(it)
        out.append((b.epoch, b.index, to_numpy(b.images.cpu()).copy(),
                    to_numpy(b.labels.cpu()).copy(), to_numpy(b.ids).copy()))
        del b
    return out


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_device_batches_equal_host_batches(daemon_factory, dtype):
    host = daemon_factory(dtype=dtype, prefetch=3)
    dev = daemon_factory(dtype=dtype, prefetch=3)  # same config and seed: same batches
    stoker.batch._warned_hostsim = False  # it warns once per process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dl = stoker.Loader("demo", socket=dev.socket, device="cuda")
        got = batches(dl, 12)
    hl = stoker.Loader("demo", socket=host.socket)
    want = batches(hl, 12)
    for (ge, gi, gx, gy, gid), (he, hi, hx, hy, hid) in zip(got, want):
        assert (ge, gi) == (he, hi)
        np.testing.assert_array_equal(gid, hid)
        np.testing.assert_array_equal(gy, hy)
        np.testing.assert_array_equal(gx, hx)
    assert dl.info["device_ordinal"] == 0 and dl.info["device_backend"] == BACKEND
    if BACKEND == "hostsim":
        assert any("hostsim" in str(w.message) for w in caught)
    assert "hostsim:" not in open(dev.log).read()


def test_device_slots_come_back_as_tensors_die(daemon_factory):
    d = daemon_factory(prefetch=2)
    loader = stoker.Loader("demo", socket=d.socket, device="cuda")
    seen = 0
    for epoch in range(3):  # 24 batches through 2 slots
        loader.set_epoch(epoch)
        for images, labels in loader:
            seen += int(labels.shape[0])
    assert seen == 3 * 64
    assert "hostsim:" not in open(d.log).read()


def test_copy_true_gives_owned_tensors_and_returns_the_slot(daemon_factory):
    d = daemon_factory(prefetch=2)
    loader = stoker.Loader("demo", socket=d.socket, device="cuda", copy=True)
    kept = [b for b in loader.batches()]  # all 8 batches kept: only possible with copies
    assert len(kept) == 8
    assert sum(int(b.labels.shape[0]) for b in kept) == 64


@pytest.mark.skipif(BACKEND != "hostsim", reason="counts the simulation's objects")
def test_a_reconnect_under_live_tensors_frees_the_old_ring_when_they_die(daemon_factory):
    d = daemon_factory(prefetch=3)
    pid = d.proc.pid
    loader = stoker.Loader("demo", socket=d.socket, device="cuda")
    held = next(loader.batches())
    per_ring = len(sim_objects(pid))
    assert per_ring == 1 + 2 * 3
    with pytest.warns(RuntimeWarning, match="still referenced"):
        loader.load_state_dict({"epoch": 1, "batch": 0})
        next(loader.batches())  # reconnects: a second ring, the first still mapped by `held`
    assert len(sim_objects(pid)) == 2 * per_ring
    images = held.images
    assert images.shape[0] == 8  # still readable: the old mapping lives with the batch
    del held, images
    gc.collect()
    import time
    deadline = time.monotonic() + 10
    while len(sim_objects(pid)) > per_ring and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(sim_objects(pid)) == per_ring


def test_pin_memory_host_batches(daemon_factory):
    d = daemon_factory()
    pinned = stoker.Loader("demo", socket=d.socket, pin_memory=True)
    b = next(pinned.batches())
    assert b.images.device.type == "cpu" and int(b.labels.shape[0]) == 8
    with pytest.raises(ValueError, match="pin_memory is for host batches"):
        stoker.Loader("demo", socket=d.socket, pin_memory=True, device="cuda")


def test_bad_device_names_are_refused(daemon):
    with pytest.raises(ValueError, match="device must be"):
        stoker.Loader("demo", socket=daemon.socket, device="gpu0")


def test_stokerctl_dump_of_device_batches_is_read_back_from_the_device(daemon_factory, tmp_path):
    import subprocess
    import json
    from conftest import BIN
    host = daemon_factory(prefetch=3)
    dev = daemon_factory(prefetch=3)
    want = host.consume(tmp_path / "host", 6)
    r = subprocess.run([os.path.join(BIN, "stokerctl"), "consume", "--job", "demo", "--socket", dev.socket,
                        "--batches", "6", "--device", "cuda", "--dump", str(tmp_path / "dev"), "--ids"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(l) for l in r.stdout.splitlines() if '"summary"' not in l]
    assert len(lines) == 6 and all(l["device"] for l in lines)
    for (epoch, index, images, labels, ids), line in zip(want, lines):
        stem = tmp_path / "dev" / f"e{epoch}_b{index}"
        np.testing.assert_array_equal(np.load(f"{stem}.images.npy"), images)
        np.testing.assert_array_equal(np.load(f"{stem}.labels.npy"), labels)
        np.testing.assert_array_equal(np.load(f"{stem}.ids.npy"), ids)
        assert line["labels"] == labels.tolist()


@pytest.mark.skipif(BACKEND != "cuda", reason="needs a GPU and a torch with CUDA (scripts/gpu-check.sh)")
def test_a_device_batch_is_ordered_on_the_trainers_current_stream():
    """Batch takes the stream handle through the raw getter where torch has it (not a
    torch.cuda.Stream object per batch); it must be the handle the public API gives, also
    inside `with torch.cuda.stream(s)`."""
    import torch
    from stoker.batch import _current_stream_handle
    for _ in range(2):  # the first call initialises CUDA through the public API, later ones not
        assert _current_stream_handle(0) == torch.cuda.current_stream(0).cuda_stream
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert _current_stream_handle(0) == s.cuda_stream != torch.cuda.default_stream(0).cuda_stream
    assert _current_stream_handle(0) == torch.cuda.current_stream(0).cuda_stream


@pytest.mark.parametrize("has_raw_getter", [True, False])
def test_the_stream_handle_is_taken_each_batch_the_public_way_first(monkeypatch, has_raw_getter):
    """_current_stream_handle against a stand-in torch (runs without a GPU): the first call goes
    through torch.cuda.current_stream (it initialises CUDA), later ones through the raw getter
    where torch has one, else the public call again; each call sees the current stream as it is
    then (a trainer may enter `with torch.cuda.stream(s)` between batches)."""
    import types
    import stoker.batch as sb
    current = {0: 111, 1: 222}
    public = []

    def current_stream(i):
        public.append(i)
        return types.SimpleNamespace(cuda_stream=current[i])

    raw = {"_cuda_getCurrentRawStream": lambda i: current[i]} if has_raw_getter else {}
    monkeypatch.setattr(sb, "torch", types.SimpleNamespace(cuda=types.SimpleNamespace(current_stream=current_stream),
                                                           _C=types.SimpleNamespace(**raw)))
    monkeypatch.setattr(sb, "_stream_of", None)
    assert sb._current_stream_handle(0) == 111
    assert public == [0]
    current[0] = 333  # another stream made current
    assert sb._current_stream_handle(0) == 333
    assert sb._current_stream_handle(1) == 222
    assert public == ([0] if has_raw_getter else [0, 0, 1])
