"""Fan-out from Python (issue #12): `stoker.Loader(job, reader=i)` for a job with `readers: K`,
and a launcher's global rank split into (rank, reader) as tensor-parallel groups are numbered."""
import threading

import pytest

import stoker


def ids_of_epoch(loader):
    out = []
    for b in loader.batches():
        out.append(b.ids.tolist())
        b.release()
    return out


def test_readers_of_a_rank_get_the_same_batches(daemon_factory):
    d = daemon_factory(extra="    readers: 3\n")
    loaders = [stoker.Loader("demo", socket=d.socket, framework="numpy", reader=k) for k in range(3)]
    for k, loader in enumerate(loaders):
        assert loader.info["readers"] == 3
        assert loader.info["reader"] == k
        assert loader.info["writable"] is False  # shared bytes: mapped read-only
    got = [None] * 3

    def run(k):
        got[k] = [ids_of_epoch(loaders[k]) for _ in range(2)]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got[0] and got[0][0]
    assert got[1] == got[0] and got[2] == got[0]
    assert loaders[1].state_dict()["reader"] == 1
    for loader in loaders:
        loader.close()


def test_a_global_rank_splits_into_rank_and_reader(daemon_factory, monkeypatch):
    # A world of 4 processes in tensor-parallel pairs: processes 2 and 3 read rank 1.
    d = daemon_factory(consumers=2, extra="    readers: 2\n")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    loader = stoker.Loader("demo", socket=d.socket, framework="numpy")
    assert (loader.rank, loader.reader, loader.world_size) == (1, 1, 2)
    monkeypatch.setenv("RANK", "2")
    partner = stoker.Loader("demo", socket=d.socket, framework="numpy")
    assert (partner.rank, partner.reader) == (1, 0)
    first, second = next(iter(loader.batches())), next(iter(partner.batches()))
    assert first.ids.tolist() == second.ids.tolist()
    first.release()
    second.release()
    loader.close()
    partner.close()

    monkeypatch.setenv("STOKER_READER", "1")  # an explicit reader: RANK is the rank itself
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    explicit = stoker.Loader("demo", socket=d.socket, framework="numpy")
    assert (explicit.rank, explicit.reader, explicit.world_size) == (1, 1, 2)
    explicit.close()


def test_world_not_a_multiple_of_readers_is_refused(daemon_factory, monkeypatch):
    d = daemon_factory(consumers=2, extra="    readers: 2\n")
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ValueError, match="world size 3 is not a multiple of job 'demo''s readers: 2"):
        stoker.Loader("demo", socket=d.socket, framework="numpy")


def test_reader_outside_the_job_is_refused(daemon_factory):
    d = daemon_factory(extra="    readers: 2\n")
    with pytest.raises(stoker.RefusedError, match=r"reader 2 is outside job 'demo' \(readers: 2, so 0..1\)"):
        stoker.Loader("demo", socket=d.socket, framework="numpy", reader=2)
