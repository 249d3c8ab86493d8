"""python tier: elastic resume (issue 25). loader.state_dict()["global_position"] records the
epoch and the samples the whole world consumed; load_state_dict() on a world of another size
resumes from it exactly: the union of what the new ranks get for the rest of the epoch is the
set the old world had not consumed, each sample once (pad_shards: false), and the next epoch is
a fresh run's. Also as a main.py-style DDP script (gloo, CPU) checkpointed on 4 processes and
resumed on 3."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import BIN

SAMPLES = 64  # tests/data/demo
BATCH = 3     # 16 per rank of 4: 5 full batches and a short one
EXACT = "    pad_shards: false\n"


def loaders(stoker, daemon, world):
    return [stoker.Loader(daemon.job, rank=r, world_size=world, socket=daemon.socket, framework="numpy")
            for r in range(world)]


def ids_of(loader, limit=None):
    out = []
    for n, b in enumerate(loader.batches()):
        out += b.ids.tolist()
        if limit is not None and n + 1 == limit:
            break
    return out


@pytest.mark.parametrize("world", [3, 6])
def test_global_position_resumes_on_another_world_size(daemon_factory, world):
    import stoker
    d4 = daemon_factory(consumers=4, batch_size=BATCH, extra=EXACT)
    dn = daemon_factory(consumers=world, batch_size=BATCH, extra=EXACT)
    before, states = [], []
    for loader in loaders(stoker, d4, 4):
        before += ids_of(loader, limit=2)
        states.append(loader.state_dict())
        loader.close()
    # Every rank's checkpoint names the same place for the whole world.
    assert {repr(s["global_position"]) for s in states} == {repr({"epoch": 0, "samples": 24, "world_size": 4})}
    assert len(set(before)) == 24

    after, next_epoch = [], []
    resumed = loaders(stoker, dn, world)
    for r, loader in enumerate(resumed):
        loader.load_state_dict(states[r % 4])  # any rank's checkpoint: they agree
        after += ids_of(loader)
        # Saved again inside the resumed epoch: the position counts both runs.
        assert loader.state_dict()["global_position"] == {"epoch": 1, "samples": 0, "world_size": world}
    assert sorted(before + after) == list(range(SAMPLES))
    for loader in resumed:
        next_epoch.append(ids_of(loader))
        loader.close()
    fresh = loaders(stoker, dn, world)
    for r, loader in enumerate(fresh):
        loader.load_state_dict({"epoch": 1, "batch": 0})
        assert ids_of(loader) == next_epoch[r], f"rank {r}: epoch 1 differs from a fresh {world}-rank run"
        loader.close()


def test_a_second_resume_within_the_epoch_composes(daemon_factory):
    import stoker
    d4 = daemon_factory(consumers=4, batch_size=BATCH, extra=EXACT)
    d3 = daemon_factory(consumers=3, batch_size=BATCH, extra=EXACT)
    d6 = daemon_factory(consumers=6, batch_size=BATCH, extra=EXACT)
    seen = []
    for loader in loaders(stoker, d4, 4):
        seen += ids_of(loader, limit=1)
        state = loader.state_dict()
        loader.close()
    assert state["global_position"]["samples"] == 12
    for loader in loaders(stoker, d3, 3):
        loader.load_state_dict(state)
        seen += ids_of(loader, limit=2)
        state3 = loader.state_dict()
        loader.close()
    assert state3["global_position"] == {"epoch": 0, "samples": 12 + 2 * BATCH * 3, "world_size": 3}
    for loader in loaders(stoker, d6, 6):
        loader.load_state_dict(state3)
        seen += ids_of(loader)
        loader.close()
    assert sorted(seen) == list(range(SAMPLES))


def test_ranks_of_different_checkpoints_are_refused(daemon_factory):
    import stoker
    d3 = daemon_factory(consumers=3, batch_size=BATCH, extra=EXACT)
    a, b = loaders(stoker, d3, 3)[:2]
    a.load_state_dict({"global_position": {"epoch": 0, "samples": 24, "world_size": 4}})
    b.load_state_dict({"global_position": {"epoch": 0, "samples": 36, "world_size": 4}})
    next(iter(a))
    with pytest.raises(stoker.StokerError, match=r"global position 36 of epoch 0.*global position 24 of epoch 0"):
        next(iter(b))


TRAINER = textwrap.dedent("""
    # main.py's shape: a DistributedSampler-style loader, a model, a checkpoint with the loader's
    # state; `stop` steps into epoch 0 the run saves and exits (a node lost), else it resumes
    # from the checkpoint and trains to the end of the epoch.
    import json, os, sys, torch, torch.distributed as dist
    import stoker
    rank, world, init, socket, ckpt, stop = sys.argv[1:7]
    rank, world, stop = int(rank), int(world), int(stop)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world)
    loader = stoker.Loader("demo", socket=socket, framework="torch")
    model = torch.nn.Linear(3 * 16 * 16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if stop == 0:
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        loader.load_state_dict(state["loader"])
    ids = []
    loader.sampler.set_epoch(0)
    for step, b in enumerate(loader.batches()):
        x = b.images.float().flatten(1) / 255
        loss = torch.nn.functional.cross_entropy(model(x), b.labels)
        opt.zero_grad(); loss.backward(); opt.step()
        ids += b.ids.tolist()
        if stop and step + 1 == stop:
            break
    gathered = [None] * world
    dist.all_gather_object(gathered, ids)
    if stop and rank == 0:
        torch.save({"model": model.state_dict(), "loader": loader.state_dict()}, ckpt)
    if rank == 0:
        print("IDS " + json.dumps([i for r in gathered for i in r]))
    dist.destroy_process_group()
""")


def run_world(tmp_path, name, world, socket, ckpt, stop):
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    init = tmp_path / f"{name}.init"
    env = dict(os.environ, WORLD_SIZE=str(world))
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(world), str(init), socket, str(ckpt), str(stop)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(world)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    line = [ln for ln in outs[0][0].splitlines() if ln.startswith("IDS ")][0]
    import json
    return json.loads(line[4:])


def test_ddp_script_checkpointed_on_4_resumes_on_3_with_exactly_the_rest(tmp_path, daemon_factory):
    pytest.importorskip("torch")
    d4 = daemon_factory(consumers=4, batch_size=BATCH, size=16, extra=EXACT)
    d3 = daemon_factory(consumers=3, batch_size=BATCH, size=16, extra=EXACT)
    ckpt = tmp_path / "ckpt.pt"
    first = run_world(tmp_path, "w4", 4, d4.socket, ckpt, stop=2)
    assert len(first) == 2 * BATCH * 4
    rest = run_world(tmp_path, "w3", 3, d3.socket, ckpt, stop=0)
    assert sorted(first + rest) == list(range(SAMPLES))


def test_same_world_resume_keeps_the_per_rank_position(daemon_factory):
    """On the world it was taken at, a state with a global position resumes per rank: the same
    batches with the same numbers (scripts count steps from state_dict()["batch"])."""
    import stoker
    d4 = daemon_factory(consumers=4, batch_size=BATCH)
    first = loaders(stoker, d4, 4)
    whole = [ids_of(loader) for loader in first]
    states = []
    for loader in first:
        loader.load_state_dict({"epoch": 0, "batch": 0})
        ids_of(loader, limit=2)
        states.append(loader.state_dict())
        loader.close()
    for r, loader in enumerate(loaders(stoker, d4, 4)):
        loader.load_state_dict(states[r])
        assert loader.state_dict()["batch"] == 2
        assert ids_of(loader) == whole[r][2 * BATCH:]
        loader.close()
