"""python tier: `import stoker` against a real stokerd."""
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import stoker
from conftest import BIN

torch = pytest.importorskip("torch")


def consume_dump(daemon, tmp_path, batches, start_epoch=0, start_batch=0):
    dump = tmp_path / f"dump-{start_epoch}-{start_batch}"
    out = subprocess.run([os.path.join(BIN, "stokerctl"), "consume", "--job", "demo", "--socket",
                          daemon.socket, "--batches", str(batches), "--dump", str(dump),
                          "--start-epoch", str(start_epoch), "--start-batch", str(start_batch)],
                         check=True, capture_output=True, text=True).stdout
    lines = [json.loads(x) for x in out.splitlines() if not x.startswith('{"summary"')]
    return [(l["epoch"], l["index"], np.load(dump / f"e{l['epoch']}_b{l['index']}.images.npy"),
             np.load(dump / f"e{l['epoch']}_b{l['index']}.labels.npy"),
             np.load(dump / f"e{l['epoch']}_b{l['index']}.ids.npy")) for l in lines]


def test_tensors_equal_what_stokerctl_delivers(daemon, tmp_path):
    ref = consume_dump(daemon, tmp_path, 8)
    loader = stoker.Loader("demo", socket=daemon.socket)
    assert len(loader) == 8
    n = 0
    for (e, i, images, labels, ids), b in zip(ref, loader.batches()):
        n += 1
        assert (b.epoch, b.index) == (e, i)
        assert b.images.dtype == torch.uint8 and tuple(b.images.shape) == (8, 3, 32, 32)
        assert b.labels.dtype == torch.int64
        assert np.array_equal(b.images.numpy(), images)
        assert np.array_equal(b.labels.numpy(), labels)
        assert np.array_equal(b.ids.numpy(), ids)
        assert np.array_equal(labels, ids // 16)  # ImageFolder labels of the demo data
    assert n == 8


def test_zero_copy_and_copy_true(daemon):
    loader = stoker.Loader("demo", socket=daemon.socket)
    b = next(loader.batches())
    arr = b._native.images_numpy()
    assert b.images.data_ptr() == arr.__array_interface__["data"][0]  # same shared memory
    assert not arr.flags.writeable
    assert b.labels.data_ptr() == b._native.labels_numpy().__array_interface__["data"][0]
    b.images.add_(0)  # in-place on a batch view is allowed (affects only this batch)


def test_copy_true_owns_its_memory(daemon_factory):
    d = daemon_factory(prefetch=2)
    loader = stoker.Loader("demo", socket=d.socket, copy=True)
    kept = [b for b in loader.batches()]  # holding 8 batches with 2 slots works: they are copies
    assert len(kept) == 8
    assert len({b.images.data_ptr() for b in kept}) == 8


def test_exact_resume_after_trainer_restart(daemon):
    ref = {}
    loader = stoker.Loader("demo", socket=daemon.socket)
    for epoch in range(2):
        loader.set_epoch(epoch)
        for b in loader.batches():
            ref[(b.epoch, b.index)] = (b.ids.clone(), b.images.clone())
    loader.close()

    trainer = stoker.Loader("demo", socket=daemon.socket)
    trainer.set_epoch(1)
    it = trainer.batches()
    for _ in range(3):
        next(it)
    state = trainer.state_dict()
    assert state["epoch"] == 1 and state["batch"] == 3
    trainer.close()
    del it, trainer

    resumed = stoker.Loader("demo", socket=daemon.socket)
    resumed.load_state_dict(state)
    b = next(resumed.batches())
    assert (b.epoch, b.index) == (1, 3)
    assert torch.equal(b.ids, ref[(1, 3)][0])
    assert torch.equal(b.images, ref[(1, 3)][1])


def test_exact_resume_after_daemon_restart(daemon):
    loader = stoker.Loader("demo", socket=daemon.socket)
    loader.set_epoch(0)
    ref = [(b.ids.clone(), b.images.clone()) for b in loader.batches()]
    loader.close()
    daemon.stop()
    daemon.start()
    resumed = stoker.Loader("demo", socket=daemon.socket)
    resumed.load_state_dict({"epoch": 0, "batch": 5})
    b = next(resumed.batches())
    assert b.index == 5
    assert torch.equal(b.ids, ref[5][0])
    assert torch.equal(b.images, ref[5][1])


def test_slots_come_back_when_tensors_die(daemon_factory):
    d = daemon_factory(prefetch=2)
    loader = stoker.Loader("demo", socket=d.socket, timeout_s=20)
    n = 0
    for epoch in range(3):  # 24 batches through a 2-slot ring
        loader.set_epoch(epoch)
        for images, labels in loader:
            n += 1
    assert n == 24


def test_holding_every_slot_raises_with_the_count(daemon_factory):
    d = daemon_factory(prefetch=3)
    loader = stoker.Loader("demo", socket=d.socket, hold_timeout_s=1.0)
    it = loader.batches()
    held = [next(it) for _ in range(3)]
    t0 = time.monotonic()
    with pytest.raises(stoker.HoldError, match=r"still holds 3 batch\(es\).*3 slot"):
        next(it)
    assert time.monotonic() - t0 < 10
    held[0].release()  # an explicit release frees a slot at once
    del held


def test_numpy_framework(daemon):
    loader = stoker.Loader("demo", socket=daemon.socket, framework="numpy")
    images, labels = next(iter(loader))
    assert isinstance(images, np.ndarray) and images.dtype == np.uint8
    assert images.shape == (8, 3, 32, 32)
    assert not images.flags.writeable
    assert labels.dtype == np.int64


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_ten_thousand_batches_without_memory_growth(daemon_factory):
    d = daemon_factory(batch_size=1, size=8, prefetch=8)
    loader = stoker.Loader("demo", socket=d.socket)
    count, before = 0, None
    epoch = 0
    while count < 10000:
        loader.set_epoch(epoch)
        for images, labels in loader:
            count += 1
            if count == 1000:
                gc.collect()
                before = rss_kib()
        epoch += 1
    gc.collect()
    growth = rss_kib() - before
    print(f"RSS growth over 9000 batches: {growth} KiB")
    assert growth < 4096


def test_errors_have_useful_messages(daemon_factory, tmp_path):
    with pytest.raises(stoker.NoDaemonError, match="no stokerd at"):
        stoker.Loader("demo", socket=str(tmp_path / "absent.sock"))
    d = daemon_factory(consumers=2)
    with pytest.raises(stoker.RefusedError, match="no job 'nope'.*jobs: demo"):
        stoker.Loader("nope", socket=d.socket)
    with pytest.raises(stoker.RefusedError, match="rank 5 is outside"):
        stoker.Loader("demo", rank=5, socket=d.socket)


def test_rank_from_torchrun_environment(daemon_factory, monkeypatch):
    d = daemon_factory(consumers=2)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = stoker.Loader("demo", socket=d.socket)
    assert loader.rank == 1
    assert len(loader) == 4  # 64 samples / 2 ranks / batch 8


def test_daemon_death_mid_epoch_raises_not_hangs(daemon_factory):
    d = daemon_factory(prefetch=2)
    loader = stoker.Loader("demo", socket=d.socket)
    it = loader.batches()
    held = [next(it), next(it)]  # ring full: the next call must wait for the daemon
    threading.Timer(0.3, lambda: d.stop(signal.SIGKILL)).start()
    t0 = time.monotonic()
    with pytest.raises(stoker.DisconnectedError, match="closed the connection"):
        next(it)
    assert time.monotonic() - t0 < 10
    assert held[0].images.shape[0] == 8  # held batches stay readable


def test_offline_pip_install_of_the_package_folder(tmp_path, daemon):
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(stoker.__file__)))  # build/python
    if not os.path.exists(os.path.join(pkg_root, "pyproject.toml")):
        pytest.skip("stoker imported from an installed copy, not the build folder")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-index",
                    "--target", str(target), pkg_root], check=True, capture_output=True, cwd=tmp_path)
    code = ("import stoker, sys; l = stoker.Loader('demo', socket=sys.argv[1], framework='numpy');"
            "print(next(iter(l))[0].shape)")
    out = subprocess.run([sys.executable, "-c", code, daemon.socket], check=True, capture_output=True,
                         text=True, cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": os.environ["PATH"]})
    assert out.stdout.strip() == "(8, 3, 32, 32)"


def test_a_daemon_of_another_protocol_version_raises_version_error(tmp_path):
    """A fake daemon answers the hello with protocol 9.0: the client must refuse it by name."""
    import socket
    import struct

    path = str(tmp_path / "fake.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(path)
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        conn.recv(4096)  # the hello
        # MessageHeader: magic "STOK", proto 9.0, type 2 (welcome), size 192; body zeros.
        conn.send(struct.pack("<IHHHHI", 0x4B4F5453, 9, 0, 2, 0, 192) + bytes(176))
        conn.recv(16)  # until the client hangs up
        conn.close()

    t = threading.Thread(target=serve)
    t.start()
    with pytest.raises(stoker.VersionError, match=r"stokerd speaks protocol 9\.0, this libstoker speaks 1\.0"):
        stoker.Loader("demo", socket=path)
    t.join(10)
    srv.close()
