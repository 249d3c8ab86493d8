"""python tier (issue #33, C2): Loader.load_state_dict checks the state before using it, naming
the key: positions are ints (not floats, which were truncated, nor strings, which were parsed)
and not negative; a state of another job, or of the same job name defined otherwise (its
definition's sha256, kept in the state), is refused."""
import numpy as np
import pytest

import stoker

NO_DAEMON = "/nonexistent/stoker.sock"


def lazy():
    return stoker.Loader("demo", socket=NO_DAEMON, lazy=True)


@pytest.mark.parametrize("state, error, key", [
    ({"epoch": 1.7, "batch": 0}, TypeError, "'epoch'"),
    ({"epoch": 1.0, "batch": 0}, TypeError, "'epoch'"),
    ({"epoch": 1, "batch": "12"}, TypeError, "'batch'"),
    ({"epoch": True, "batch": 0}, TypeError, "'epoch'"),
    ({"epoch": -1, "batch": 0}, ValueError, "'epoch'"),
    ({"epoch": 0, "batch": -3}, ValueError, "'batch'"),
    ({"epoch": 0}, ValueError, "'batch'"),
    ({"epoch": 0, "batch": 0, "rank": "0"}, TypeError, "'rank'"),
    ({"epoch": 0, "batch": 0, "job": 7}, TypeError, "'job'"),
    ({"epoch": 0, "batch": 0, "definition_hash": 5}, TypeError, "'definition_hash'"),
    ({"epoch": 0, "batch": 0, "global_position": [0, 0]}, TypeError, "'global_position'"),
    ({"epoch": 0, "batch": 0, "global_position": {"epoch": 0, "samples": 2.5, "world_size": 1}},
     TypeError, "'global_position.samples'"),
    ({"epoch": 0, "batch": 0, "global_position": {"epoch": 0, "samples": 4, "world_size": 0}},
     ValueError, "'global_position.world_size'"),
    ({"epoch": 0, "batch": 0, "global_position": {"samples": 4}}, ValueError, "'global_position' lacks 'epoch'"),
    ([("epoch", 0)], TypeError, "must be a dict"),
])
def test_bad_types_and_ranges_are_refused_naming_the_key(state, error, key):
    loader = lazy()
    with pytest.raises(error, match=key):
        loader.load_state_dict(state)
    assert (loader._epoch, loader._batch) == (0, 0)  # nothing was applied


def test_integers_of_any_kind_are_taken():
    loader = lazy()
    loader.load_state_dict({"epoch": np.int64(2), "batch": 3})
    assert (loader._epoch, loader._batch) == (2, 3) and type(loader._epoch) is int


def test_a_state_of_another_job_or_definition_is_refused(daemon_factory):
    one = daemon_factory(batch_size=8)
    loader = stoker.Loader("demo", socket=one.socket)
    next(iter(loader))
    state = loader.state_dict()
    assert state["job"] == "demo" and len(state["definition_hash"]) == 64
    loader.close()
    # The same daemon, the same job: taken.
    same = stoker.Loader("demo", socket=one.socket)
    same.load_state_dict(state)
    assert (same._epoch, same._batch) == (0, 1)
    same.close()
    # Another job: refused, naming the key.
    other = stoker.Loader("other", socket=daemon_factory(job="other").socket)
    with pytest.raises(ValueError, match="'job'.*'demo'.*'other'"):
        other.load_state_dict(state)
    other.close()
    # The job of the same name defined otherwise (the config changed between the runs).
    one.stop()
    changed = stoker.Loader("demo", socket=daemon_factory(batch_size=4).socket)
    with pytest.raises(ValueError, match="'definition_hash'"):
        changed.load_state_dict(state)
    assert (changed._epoch, changed._batch) == (0, 0)
    # A state without the hash (an older checkpoint) is still taken.
    changed.load_state_dict({k: v for k, v in state.items() if k != "definition_hash"})
    assert changed._resume_pending  # taken: the next pass starts at its position
    changed.close()
