"""python tier: stoker.Loader against a real stokerd, for NumPy and (where installed) torch.
Batches are checked against what `stokerctl consume --dump` receives for the same positions."""
import gc
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import stoker
from conftest import FRAMEWORKS, segment_path, to_numpy

pytestmark = pytest.mark.parametrize("fw", FRAMEWORKS)


def imagefolder_labels(root):
    """Label of each sample id: classes and files sorted, as torchvision's ImageFolder."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    labels = []
    for k, c in enumerate(classes):
        labels += [k] * len([f for f in os.listdir(os.path.join(root, c)) if not f.startswith(".")])
    return np.array(labels)


def mapping_of(address):
    """(start, end, path) of this process's mapping holding `address`."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                return lo, hi, fields[5] if len(fields) > 5 else ""
    return None


def address(x):
    return x.__array_interface__["data"][0] if isinstance(x, np.ndarray) else x.data_ptr()


def test_batches_equal_what_stokerctl_delivers(fw, daemon, demo_root, tmp_path):
    ref = daemon.consume(tmp_path / "dump", 10)  # 8 batches per epoch: crosses into epoch 1
    loader = stoker.Loader("demo", socket=daemon.socket, framework=fw)
    assert len(loader) == 8
    label_of = imagefolder_labels(demo_root)
    got = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        for b in loader.batches():
            got.append((b.epoch, b.index, to_numpy(b.images).copy(), to_numpy(b.labels).copy(),
                        to_numpy(b.ids).copy()))
    for (e, i, images, labels, ids), (ge, gi, gimages, glabels, gids) in zip(ref, got):
        assert (ge, gi) == (e, i)
        assert gimages.dtype == np.uint8 and gimages.shape == (8, 3, 32, 32)
        assert glabels.dtype == np.int64 and gids.dtype == np.int64
        assert np.array_equal(gimages, images)
        assert np.array_equal(glabels, labels)
        assert np.array_equal(gids, ids)
        assert np.array_equal(glabels, label_of[gids])
    assert len(got) == 16 and len(ref) == 10


@pytest.mark.parametrize("dtype,layout,shape", [("float32", "NHWC", (8, 24, 24, 3)),
                                                ("float16", "NCHW", (8, 3, 24, 24))])
def test_float_and_nhwc_outputs(fw, daemon_factory, tmp_path, dtype, layout, shape):
    d = daemon_factory(dtype=dtype, layout=layout, size=24)
    (_, _, images, labels, ids), = d.consume(tmp_path / "dump", 1)
    b = next(stoker.Loader("demo", socket=d.socket, framework=fw).batches())
    got = to_numpy(b.images)
    assert got.shape == shape and got.dtype == np.dtype(dtype)
    assert np.array_equal(got, images)
    assert np.array_equal(to_numpy(b.ids), ids)
    if fw == "torch":
        import torch
        assert b.images.dtype == getattr(torch, dtype)


def test_views_point_into_the_shared_memory_segment(fw, daemon):
    loader = stoker.Loader("demo", socket=daemon.socket, framework=fw)
    b = next(loader.batches())
    seg = segment_path(daemon.socket, "demo")
    maps = [mapping_of(address(x)) for x in (b.images, b.labels, b.ids)]
    assert all(m is not None and m[2] == seg for m in maps), maps  # no copy: in the daemon's segment
    assert len({m[:2] for m in maps}) == 1                         # one slot's payload, one mapping
    if fw == "numpy":
        assert not b.images.flags.writeable and not b.labels.flags.writeable
    assert loader._client.outstanding == 1


def test_copy_true_owns_its_memory_and_frees_the_slot_at_once(fw, daemon_factory):
    d = daemon_factory(prefetch=2)
    loader = stoker.Loader("demo", socket=d.socket, framework=fw, copy=True, hold_timeout_s=5)
    kept = list(loader.batches())  # 8 batches held with 2 slots: fine, they are copies
    assert len(kept) == 8 and loader._client.outstanding == 0
    seg = segment_path(d.socket, "demo")
    assert all((mapping_of(address(b.images)) or (0, 0, ""))[2] != seg for b in kept)
    assert len({address(b.images) for b in kept}) == 8


def test_slot_goes_back_when_the_last_view_dies(fw, daemon):
    loader = stoker.Loader("demo", socket=daemon.socket, framework=fw)
    images, labels = next(iter(loader))
    gc.collect()
    assert loader._client.outstanding == 1  # the iterator itself holds nothing
    del images
    assert loader._client.outstanding == 1  # labels share the batch
    del labels
    assert loader._client.outstanding == 0


def test_release_is_explicit_and_idempotent(fw, daemon):
    loader = stoker.Loader("demo", socket=daemon.socket, framework=fw)
    b = next(loader.batches())
    assert not b._native.released
    native = b._native
    b.release()
    b.release()
    native.release()
    assert native.released and loader._client.outstanding == 0


def test_slots_come_back_while_iterating(fw, daemon_factory):
    d = daemon_factory(prefetch=2)
    loader = stoker.Loader("demo", socket=d.socket, framework=fw, hold_timeout_s=5, timeout_s=30)
    n = 0
    for epoch in range(3):  # 24 batches through a 2-slot ring, the loop holding one at a time
        loader.set_epoch(epoch)
        for images, labels in loader:
            n += 1
    assert n == 24 == 3 * len(loader)


def test_holding_every_slot_raises_hold_error_with_the_count(fw, daemon_factory):
    d = daemon_factory(prefetch=3)
    loader = stoker.Loader("demo", socket=d.socket, framework=fw, hold_timeout_s=1.0)
    it = loader.batches()
    held = [next(it) for _ in range(3)]
    t0 = time.monotonic()
    with pytest.raises(stoker.HoldError, match=r"still holds 3 batch\(es\).*3 slot"):
        next(it)
    # After hold_timeout_s, and well before the default 60 s that would mean it was ignored.
    assert 0.9 < time.monotonic() - t0 < 30
    held[0].release()  # a slot comes back: the stream goes on where it was
    b = next(loader.batches())
    assert (b.epoch, b.index) == (0, 3)


def test_waiting_releases_the_gil(fw, daemon_factory):
    d = daemon_factory(prefetch=2)
    loader = stoker.Loader("demo", socket=d.socket, framework=fw, hold_timeout_s=1.0)
    it = loader.batches()
    held = [next(it), next(it)]
    ticks, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    with pytest.raises(stoker.HoldError):
        next(it)  # waits ~1 s in the native layer
    stop.set()
    t.join()
    assert ticks[0] > 10000, ticks  # the other thread ran while we waited
    del held


def test_len_and_a_short_last_batch(fw, daemon_factory):
    d = daemon_factory(batch_size=10)  # 64 samples: 6 batches of 10 and one of 4
    loader = stoker.Loader("demo", socket=d.socket, framework=fw)
    assert len(loader) == 7
    sizes = [int(images.shape[0]) for images, _ in loader]
    assert sizes == [10] * 6 + [4]
    assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["batch"] == 0


def test_set_epoch_moves_the_stream(fw, daemon, tmp_path):
    ref = daemon.consume(tmp_path / "dump", 1, start_epoch=3)
    loader = stoker.Loader("demo", socket=daemon.socket, framework=fw)
    loader.set_epoch(3)
    b = next(loader.batches())
    assert (b.epoch, b.index) == (3, 0)
    assert np.array_equal(to_numpy(b.ids), ref[0][4])
    assert np.array_equal(to_numpy(b.images), ref[0][2])


def run_uninterrupted(socket, fw, epochs):
    loader = stoker.Loader("demo", socket=socket, framework=fw)
    ref = {}
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for b in loader.batches():
            ref[(b.epoch, b.index)] = (to_numpy(b.ids).copy(), to_numpy(b.images).copy())
    loader.close()
    return ref


def test_exact_resume_after_a_trainer_restart(fw, daemon):
    ref = run_uninterrupted(daemon.socket, fw, 2)
    trainer = stoker.Loader("demo", socket=daemon.socket, framework=fw)
    trainer.set_epoch(1)
    it = trainer.batches()
    for _ in range(3):
        next(it)
    state = trainer.state_dict()
    assert state["epoch"] == 1 and state["batch"] == 3
    trainer.close()
    del it, trainer

    resumed = stoker.Loader("demo", socket=daemon.socket, framework=fw)
    resumed.load_state_dict(state)
    got = []
    for epoch in range(state["epoch"], 2):  # the usual loop: set_epoch keeps the position
        resumed.set_epoch(epoch)
        got += [(b.epoch, b.index, to_numpy(b.ids).copy(), to_numpy(b.images).copy())
                for b in resumed.batches()]
    assert [(e, i) for e, i, _, _ in got] == [(1, i) for i in range(3, 8)]
    for e, i, ids, images in got:
        assert np.array_equal(ids, ref[(e, i)][0])
        assert np.array_equal(images, ref[(e, i)][1])


def test_exact_resume_after_a_daemon_restart(fw, daemon):
    ref = run_uninterrupted(daemon.socket, fw, 1)
    loader = stoker.Loader("demo", socket=daemon.socket, framework=fw)
    it = loader.batches()
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    loader.close()
    del it, loader
    daemon.stop()
    daemon.start()
    resumed = stoker.Loader("demo", socket=daemon.socket, framework=fw)
    resumed.load_state_dict(state)
    b = next(resumed.batches())
    assert (b.epoch, b.index) == (0, 5)
    assert np.array_equal(to_numpy(b.ids), ref[(0, 5)][0])
    assert np.array_equal(to_numpy(b.images), ref[(0, 5)][1])


def test_iteration_continues_exactly_after_the_daemon_restarts_under_it(fw, daemon_factory):
    # Batches of 4 (16 an epoch): after 4 taken, the at most 4 announced ones never reach the
    # epoch's end, so the call after them meets the stopped daemon. (With 8 an epoch the ring
    # could hold the epoch's rest, and the iterator then ended with it instead.)
    daemon = daemon_factory(batch_size=4)
    ref = run_uninterrupted(daemon.socket, fw, 1)
    loader = stoker.Loader("demo", socket=daemon.socket, framework=fw)
    it = loader.batches()
    for _ in range(4):
        next(it)
    daemon.stop()
    # Batches stokerd announced before it stopped (protocol 2.5: at most the ring's slots)
    # are whole and still this trainer's; the call after them is told.
    stood = 4
    with pytest.raises(stoker.DisconnectedError):
        for _ in range(loader.info["slot_count"] + 1):
            b = next(it)
            assert (b.epoch, b.index) == (0, stood)
            assert np.array_equal(to_numpy(b.ids), ref[(0, stood)][0])
            stood += 1
    daemon.start()
    b = next(loader.batches())  # same Loader: reconnects at the position it stood at
    assert (b.epoch, b.index) == (0, stood)
    assert np.array_equal(to_numpy(b.ids), ref[(0, stood)][0])


def test_with_reconnect_timeout_a_daemon_killed_and_restarted_is_only_a_pause(fw, daemon):
    ref = run_uninterrupted(daemon.socket, fw, 1)
    loader = stoker.Loader("demo", socket=daemon.socket, framework=fw, reconnect_timeout_s=20)
    got, held = [], None
    restarter = None
    for b in loader.batches():
        got.append((b.epoch, b.index, to_numpy(b.ids).copy()))
        if b.index == 2:
            held = b  # kept across the restart
            held_ids = to_numpy(b.ids).copy()
            daemon.stop(signal.SIGKILL)
            restarter = threading.Timer(0.5, daemon.start)
            restarter.start()
    restarter.join()
    assert [(e, i) for e, i, _ in got] == sorted(k for k in ref if k[0] == 0)
    for e, i, ids in got:
        assert np.array_equal(ids, ref[(e, i)][0])
    assert np.array_equal(to_numpy(held.ids), held_ids)  # still readable, unchanged


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_ten_thousand_batches_without_memory_growth(fw, daemon_factory):
    d = daemon_factory(batch_size=1, size=8, prefetch=8, flip=False)
    loader = stoker.Loader("demo", socket=d.socket, framework=fw)
    count, before, epoch = 0, None, 0
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
    print(f"{fw}: RSS growth over {count - 1000} batches: {growth} KiB")
    assert growth < 2048
    del images, labels
    assert loader._client.outstanding == 0


def test_without_torch_the_loader_yields_numpy(fw, daemon):
    if fw != "numpy":
        pytest.skip("one run is enough")
    code = """
import sys
sys.modules["torch"] = None  # as if torch were not installed
import numpy as np, stoker
loader = stoker.Loader("demo", socket=sys.argv[1])
images, labels = next(iter(loader))
assert loader.framework == "numpy" and isinstance(images, np.ndarray), type(images)
assert not images.flags.writeable and labels.dtype == np.int64
try:
    stoker.Loader("demo", socket=sys.argv[1], framework="torch")
except ImportError as e:
    print("ok:", e)
"""
    r = subprocess.run([sys.executable, "-c", code, daemon.socket], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "ok: framework='torch' but torch is not installed" in r.stdout


def test_a_batch_outlives_its_garbage_collected_loader(fw, daemon, tmp_path):
    (_, _, images, _, ids), = daemon.consume(tmp_path / "dump", 1)
    b = next(stoker.Loader("demo", socket=daemon.socket, framework=fw).batches())
    gc.collect()
    time.sleep(0.3)  # time enough for the daemon to refill the slot, if it were reclaimed
    assert np.array_equal(to_numpy(b.ids), ids)
    assert np.array_equal(to_numpy(b.images), images)


def test_moving_the_stream_while_holding_batches_warns(fw, daemon):
    loader = stoker.Loader("demo", socket=daemon.socket, framework=fw)
    kept = next(loader.batches())
    loader.set_epoch(2)
    with pytest.warns(RuntimeWarning, match=r"1 batch\(es\) of the previous position"):
        b = next(loader.batches())
    assert (b.epoch, b.index) == (2, 0)
    del kept


def test_an_empty_last_batch_ends_the_epoch_without_being_yielded(fw, daemon_factory, demo_root,
                                                                  tmp_path):
    # batch 1 of each epoch holds only a broken file: skipped, it arrives as an empty last batch
    root = tmp_path / "skip"
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
    src = os.path.join(demo_root, sorted(c for c in os.listdir(demo_root)
                                         if os.path.isdir(os.path.join(demo_root, c)))[0])
    good = open(os.path.join(src, sorted(os.listdir(src))[0]), "rb").read()
    for i in range(2):
        (root / "a" / f"{i}.jpg").write_bytes(good)
    (root / "b" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG" * 4)
    d = daemon_factory(root=str(root), on_error="skip", batch_size=2, shuffle=False)
    loader = stoker.Loader("demo", socket=d.socket, framework=fw, timeout_s=20)
    assert len(loader) == 2  # nominal
    for epoch in range(3):
        loader.set_epoch(epoch)
        got = [(b.epoch, b.index, len(b)) for b in loader.batches()]
        assert got == [(epoch, 0, 2)]
        assert loader.state_dict()["epoch"] == epoch + 1
    assert loader._client.outstanding == 0


def test_the_attributes_dataloader_scripts_read(fw, daemon_factory, demo_root):
    import torchvision.datasets
    d = daemon_factory(consumers=2, batch_size=4)
    loader = stoker.Loader("demo", rank=1, world_size=2, socket=d.socket, framework=fw)
    ref = torchvision.datasets.ImageFolder(demo_root)
    assert loader.batch_size == 4 and loader.drop_last is False
    assert loader.dataset.classes == ref.classes
    assert loader.dataset.class_to_idx == ref.class_to_idx
    assert len(loader.dataset) == len(ref)
    # samples[id] is the file the daemon numbers id (paths as the daemon resolved the root)
    assert loader.dataset.samples == [(os.path.normpath(p), c) for p, c in ref.samples]
    assert len(loader.sampler) == loader.info["samples_per_rank"]
    loader.sampler.set_epoch(1)
    assert loader.sampler.epoch == 1
    b = next(loader.batches())
    assert b.epoch == 1
    for i, label in zip(b.ids, b.labels):
        assert loader.dataset.samples[int(i)][1] == int(label)
    assert len(loader) == loader.info["batches_per_epoch"]
    loader.close()


def test_dataset_samples_of_a_file_list_job(fw, tmp_path, demo_root):
    import glob
    files = sorted(glob.glob(os.path.join(demo_root, "*", "*.jpg")))[::-1][:12]
    lst = tmp_path / "list.csv"
    lst.write_text("".join(f"{f},{i % 3}\n" for i, f in enumerate(files)))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"""server: {{workers: 2, log_level: warn}}
jobs:
  demo:
    source: {{type: filelist, file: "{lst}"}}
    batch_size: 4
    shuffle: false
    pipeline:
      - decode: {{}}
      - random_resized_crop: {{size: 16}}
""")
    from conftest import Daemon
    d = Daemon(str(cfg), str(tmp_path / "s.sock"), str(tmp_path / "d.log"), "demo")
    try:
        loader = stoker.Loader("demo", socket=d.socket, framework=fw)
        assert loader.dataset.classes == ["0", "1", "2"]
        assert loader.dataset.samples == [(os.path.normpath(f), i % 3) for i, f in enumerate(files)]
        b = next(loader.batches())
        assert [loader.dataset.samples[int(i)][1] for i in b.ids] == [int(x) for x in b.labels]
        loader.close()
    finally:
        d.stop()


def test_dataset_samples_of_a_tar_job_are_the_daemons(fw, tmp_path, demo_root):
    """Tar members have no file of their own: loader.dataset.samples is the daemon's list
    (protocol 2.2's samples command), SHARD:MEMBER paths with the .cls labels, by id."""
    import glob
    import tarfile
    files = sorted(glob.glob(os.path.join(demo_root, "*", "*.jpg")))[:10]
    for s in range(2):
        with tarfile.open(tmp_path / f"shard-{s}.tar", "w") as t:
            for i, f in enumerate(files[s * 5:(s + 1) * 5]):
                key = f"{s:02d}{i:02d}"
                t.add(f, arcname=f"{key}.jpg")
                cls = tmp_path / f"{key}.cls"
                cls.write_text(str((s * 5 + i) % 3))
                t.add(str(cls), arcname=f"{key}.cls")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"""server: {{workers: 2, log_level: warn}}
jobs:
  demo:
    source: {{type: tar, shards: "{tmp_path}/shard-{{0..1}}.tar"}}
    batch_size: 4
    shuffle: false
    pipeline:
      - decode: {{}}
      - random_resized_crop: {{size: 16}}
""")
    from conftest import Daemon
    d = Daemon(str(cfg), str(tmp_path / "s.sock"), str(tmp_path / "d.log"), "demo")
    try:
        loader = stoker.Loader("demo", socket=d.socket, framework=fw)
        samples = loader.dataset.samples
        assert len(samples) == len(loader.dataset) == 10
        assert [l for _, l in samples] == [i % 3 for i in range(10)]
        assert all(".tar" in p for p, _ in samples)
        assert loader.dataset.targets == [i % 3 for i in range(10)]
        b = next(loader.batches())
        assert [samples[int(i)][1] for i in b.ids] == [int(x) for x in b.labels]
        loader.close()
    finally:
        d.stop()
