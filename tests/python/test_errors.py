"""python tier: every failure is a Python exception of its own class with the daemon's (or
libstoker's) message, raised promptly: never a hang. Runs without torch."""
import json
import os
import signal
import socket as pysocket
import struct
import threading
import time

import pytest

import stoker


def test_exception_classes():
    for cls in (stoker.NoDaemonError, stoker.RefusedError, stoker.VersionError,
                stoker.DisconnectedError, stoker.TimeoutError, stoker.JobFailedError, stoker.HoldError):
        assert issubclass(cls, stoker.StokerError)
    assert issubclass(stoker.TimeoutError, TimeoutError)  # the builtin: `except TimeoutError` works
    assert issubclass(stoker.NoDaemonError, ConnectionError)
    assert issubclass(stoker.DisconnectedError, ConnectionError)


def test_no_daemon(tmp_path):
    path = str(tmp_path / "absent.sock")
    with pytest.raises(stoker.NoDaemonError, match=f"no stokerd at {path}"):
        stoker.Loader("demo", socket=path, framework="numpy")


def test_unknown_job_lists_the_jobs(daemon):
    with pytest.raises(stoker.RefusedError, match=r"no job 'nope'.*jobs: demo"):
        stoker.Loader("nope", socket=daemon.socket, framework="numpy")


def test_rank_outside_the_job(daemon_factory):
    d = daemon_factory(consumers=2)
    with pytest.raises(stoker.RefusedError, match=r"rank 5 is outside job 'demo' \(this stokerd serves ranks 0\.\.1 of a world of 2; consumers: 2"):
        stoker.Loader("demo", rank=5, socket=d.socket, framework="numpy")
    with pytest.raises(ValueError, match="rank must be >= 0"):
        stoker.Loader("demo", rank=-1, socket=d.socket, framework="numpy")


def test_rank_already_served(daemon):
    first = stoker.Loader("demo", socket=daemon.socket, framework="numpy")
    with pytest.raises(stoker.RefusedError, match="already has a consumer connected"):
        stoker.Loader("demo", socket=daemon.socket, framework="numpy")
    first.close()
    stoker.Loader("demo", socket=daemon.socket, framework="numpy")  # free again


def test_a_node_of_a_multi_node_job_checks_the_global_world(daemon_factory):
    # This daemon is node 1 of 2: global ranks 2-3 of a world of 4.
    d = daemon_factory(consumers=2, extra="    world_size: 4\n    ranks: 2-3\n")
    with pytest.raises(stoker.RefusedError, match="belongs to a world of 4"):
        stoker.Loader("demo", rank=2, world_size=2, socket=d.socket, framework="numpy")
    with pytest.raises(stoker.RefusedError, match=r"serves ranks 2\.\.3 of a world of 4"):
        stoker.Loader("demo", rank=0, world_size=4, socket=d.socket, framework="numpy")
    loader = stoker.Loader("demo", rank=3, world_size=4, socket=d.socket, framework="numpy")
    status = json.loads(stoker._stoker.daemon_status(d.socket))
    job = status["jobs"][0]
    assert (job["world_size"], job["ranks"]) == (4, [2, 3])
    ids = [i for b in loader.batches() for i in b.ids]
    assert len(ids) == loader.info["samples_per_rank"]
    loader.close()


def test_world_size_must_match_the_consumers(daemon_factory):
    d = daemon_factory(consumers=2)
    with pytest.raises(stoker.RefusedError, match=r"world size 4 but job 'demo' serves 2 consumer"):
        stoker.Loader("demo", rank=1, world_size=4, socket=d.socket, framework="numpy")
    # the refused loader hung up: the rank is free for a correct one
    assert len(stoker.Loader("demo", rank=1, world_size=2, socket=d.socket, framework="numpy")) == 4


def test_rank_and_world_size_from_torchrun_environment(daemon_factory, monkeypatch):
    d = daemon_factory(consumers=2)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = stoker.Loader("demo", socket=d.socket, framework="numpy")
    assert (loader.rank, loader.world_size) == (1, 2)
    assert len(loader) == 4  # 64 samples / 2 ranks / batch 8
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(stoker.RefusedError, match="world size 3"):
        stoker.Loader("demo", rank=0, socket=d.socket, framework="numpy")


def test_daemon_killed_mid_epoch_raises_disconnected(daemon_factory):
    d = daemon_factory(prefetch=2)
    loader = stoker.Loader("demo", socket=d.socket, framework="numpy")
    it = loader.batches()
    held = [next(it), next(it)]  # ring full: the next call waits on the daemon
    threading.Timer(0.3, lambda: d.stop(signal.SIGKILL)).start()
    # No limit on the wait: returning with DisconnectedError is the proof (a hang is the
    # test's timeout); no wall-clock figure, the machine may be loaded.
    with pytest.raises(stoker.DisconnectedError, match="closed the connection"):
        next(it)
    assert held[0].images.shape == (8, 3, 32, 32)  # what is held stays mapped and readable
    int(held[1].images.sum())


def test_daemon_killed_while_iterating_freely(daemon_factory):
    d = daemon_factory()
    loader = stoker.Loader("demo", socket=d.socket, framework="numpy")
    with pytest.raises(stoker.DisconnectedError):  # a hang is the test's timeout
        epoch = 0
        while True:
            loader.set_epoch(epoch)
            for i, _ in enumerate(loader):
                if epoch == 1 and i == 2:
                    d.stop(signal.SIGKILL)
            epoch += 1


def test_no_batch_within_timeout(daemon):
    loader = stoker.Loader("demo", socket=daemon.socket, framework="numpy", timeout_s=0.5)
    next(iter(loader))
    os.kill(daemon.proc.pid, signal.SIGSTOP)  # a daemon that is alive but delivers nothing
    try:
        # the 4 prefetched slots drain, then the wait times out (the message names the limit)
        with pytest.raises(stoker.TimeoutError, match=r"no batch from stokerd within 0\.5 s"):
            for _ in range(10):
                images, labels = next(iter(loader))
                del images, labels
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    images, labels = next(iter(loader))  # the stream goes on where it was
    assert images.shape[0] == 8


def test_job_failed_names_the_file(daemon_factory, demo_root, tmp_path):
    root = tmp_path / "bad"
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
    src = os.path.join(demo_root, sorted(c for c in os.listdir(demo_root)
                                         if os.path.isdir(os.path.join(demo_root, c)))[0])
    good = os.path.join(src, sorted(os.listdir(src))[0])
    for i in range(3):
        (root / "a" / f"{i}.jpg").write_bytes(open(good, "rb").read())
    (root / "b" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG" * 4)
    d = daemon_factory(root=str(root), on_error="fail", batch_size=2, shuffle=False)
    with pytest.raises(stoker.JobFailedError, match="broken.jpg"):
        loader = stoker.Loader("demo", socket=d.socket, framework="numpy", timeout_s=20)
        for _ in loader:
            pass


def test_daemon_of_another_protocol_version(tmp_path):
    """A fake daemon answers the hello with protocol 9.0: the client must refuse it by name."""
    path = str(tmp_path / "fake.sock")
    srv = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_SEQPACKET)
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
    with pytest.raises(stoker.VersionError, match=r"stokerd speaks protocol 9\.0, this libstoker speaks 2\.\d+"):
        stoker.Loader("demo", socket=path, framework="numpy")
    t.join(10)
    srv.close()


def test_bad_arguments():
    with pytest.raises(ValueError, match="framework"):
        stoker.Loader("demo", framework="jax")
    with pytest.raises(ValueError, match="world_size"):
        stoker.Loader("demo", world_size=0, framework="numpy")


def test_ctrl_c_interrupts_a_wait(daemon_factory):
    d = daemon_factory(prefetch=2)
    loader = stoker.Loader("demo", socket=d.socket, framework="numpy", hold_timeout_s=60)
    it = loader.batches()
    held = [next(it), next(it)]  # nothing more can come: the next call waits up to 60 s
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert time.monotonic() - t0 < 30  # well inside the 60 s it would otherwise wait
    del held


def test_version():
    assert stoker.__version__.count(".") == 2


def test_a_segment_scribbled_or_truncated_by_another_process_crashes_no_one(daemon_factory):
    import mmap
    d = daemon_factory(prefetch=2, shuffle=False)
    loader = stoker.Loader("demo", socket=d.socket, framework="numpy", copy=True)
    it = loader.batches()
    first = next(it)
    fd_dir = f"/proc/{d.proc.pid}/fd"
    def target(path):
        try:
            return os.readlink(path)
        except FileNotFoundError:  # a descriptor stokerd closed between the listing and the look
            return ""
    seg = [os.path.join(fd_dir, n) for n in os.listdir(fd_dir)
           if target(os.path.join(fd_dir, n)).startswith("/memfd:stoker-")]
    assert len(seg) == 1
    fd = os.open(seg[0], os.O_RDWR)
    try:
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 4096)  # sealed: the SIGBUS a shrunk segment would cause cannot happen
        m = mmap.mmap(fd, 256)
        m[48:80] = b"\xff" * 32  # slot_stride, payload_offset, labels_offset, ids_offset
        m.close()
    finally:
        os.close(fd)
    rest = [b for b in it]  # the attached consumer reads on with the geometry it checked
    ids = list(first.ids) + [i for b in rest for i in b.ids]
    assert sorted(ids) == list(range(len(ids)))
    loader.close()
    # A new consumer works too: the daemon restored the header before its attach.
    again = stoker.Loader("demo", socket=d.socket, framework="numpy")
    assert len(next(again.batches()).ids) > 0
    again.close()
    assert "header had been overwritten by another process; restored" in open(d.log).read()


def test_wait_for_daemon_waits_for_one_that_starts_late(tmp_path, demo_root):
    from conftest import Daemon, write_config
    sock = str(tmp_path / "late.sock")
    cfg = write_config(str(tmp_path / "late.yaml"), demo_root)
    started = []
    timer = threading.Timer(0.7, lambda: started.append(Daemon(cfg, sock, str(tmp_path / "late.log"), "demo")))
    timer.start()
    t0 = time.monotonic()
    try:
        loader = stoker.Loader("demo", socket=sock, framework="numpy", wait_for_daemon=20)
        assert time.monotonic() - t0 >= 0.6
        assert len(next(loader.batches()).ids) > 0
        loader.close()
    finally:
        timer.join()
        for d in started:
            d.stop()
    with pytest.raises(stoker.NoDaemonError):
        stoker.Loader("demo", socket=str(tmp_path / "never.sock"), framework="numpy", wait_for_daemon=0.3)


def leased(socket):
    return json.loads(stoker._stoker.daemon_status(socket))["jobs"][0]["consumers"][0]["slots"]["leased"]


def test_next_takes_the_announced_batches_while_stokerd_is_stopped_then_times_out(daemon_factory):
    """The native next(): batches already announced are handed over (holding the GIL, with no
    system call) though stokerd cannot answer; once they are gone it waits without the GIL and
    times out; the stream then goes on where it was."""
    d = daemon_factory(prefetch=4)
    c = stoker._stoker.Client("demo", 0, d.socket)
    try:
        c.next(10000).release()  # batch 0; the other 4 slots' batches are announced
        deadline = time.monotonic() + 10
        while leased(d.socket) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)
        os.kill(d.proc.pid, signal.SIGSTOP)
        try:
            got, t0 = [], time.monotonic()
            for _ in range(4):
                b = c.next(300)
                got.append(b.index)
                b.release()
            quick = time.monotonic() - t0
            with pytest.raises(stoker.TimeoutError):
                c.next(300)
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        assert got == [1, 2, 3, 4]
        assert quick < 0.25  # none of the four waited for the stopped daemon
        assert c.next(10000).index == 5
    finally:
        c.close()


def test_the_native_client_checks_its_arguments_and_its_state(daemon):
    native = stoker._stoker
    with pytest.raises(OverflowError):
        native.Client("demo", -1, daemon.socket)  # not rank 4294967295
    with pytest.raises(TypeError):
        native.Client()
    with pytest.raises(TypeError):
        native.Batch()  # only next() makes batches
    c = native.Client("demo", socket=daemon.socket)
    b = c.next(timeout_ms=10000)
    assert (b.epoch, b.index, b.count, b.last, b.released) == (0, 0, 8, False, False)
    assert c.outstanding == 1
    with pytest.raises(TypeError):
        c.next(1, 2)
    with pytest.raises(TypeError):
        c.next("soon")
    with pytest.raises(TypeError):
        c.next(timeout=5)
    assert c.outstanding == 1  # a refused call took no batch
    b.release()
    b.release()  # idempotent
    assert b.released and c.outstanding == 0
    c.close()
    with pytest.raises(stoker.DisconnectedError, match="closed"):
        c.next(0)
    c.close()
    with pytest.raises(RuntimeError, match="already open"):
        c.__init__("demo", socket=daemon.socket)  # a second __init__ opens no second connection
    c2 = native.Client.__new__(native.Client)
    with pytest.raises(stoker.DisconnectedError, match="not open"):
        c2.next(0)


def test_close_from_another_thread_while_next_runs_ends_it_cleanly(daemon_factory):
    """close() races a thread taking batches as fast as they come (most from the buffer,
    holding the GIL; the rest waiting without it): the taker ends with DisconnectedError,
    never a crash or a hang, and a batch it still holds stays mapped after the close (readable;
    its pixels are no longer its own: stokerd took the slot back with the connection)."""
    d = daemon_factory(prefetch=4)
    for delay in (0.0, 0.001, 0.005, 0.02, 0.05):
        c = stoker._stoker.Client("demo", 0, d.socket)
        ended, kept = [], []

        def take():
            try:
                while True:
                    b = c.next(2000)
                    if not kept:
                        kept.append((b, b.images_numpy().shape))
                    else:
                        b.release()
            except stoker.DisconnectedError as e:
                ended.append(str(e))

        t = threading.Thread(target=take)
        t.start()
        time.sleep(delay)
        c.close()
        t.join(10)
        assert not t.is_alive()
        assert ended and "closed" in ended[0], ended
        if kept:  # the mapping stays until this batch is released
            b, shape = kept[0]
            assert b.images_numpy().shape == shape and int(b.images_numpy().sum()) >= 0
            b.release()
            assert b.released
