"""python tier: a distributed training loop in main.py's style across two simulated nodes.

Two stokerd processes are nodes 0 and 1 of one world of 4 (ranks 0-1 and 2-3, same config and
seed; the world size reaches the YAML through ${WORLD_SIZE}, as a launcher would set it). Four
trainer processes join a gloo process group; each builds `stoker.Loader(job, socket=its node's)`
with no rank or world size (they come from torch.distributed), calls loader.sampler.set_epoch,
runs a tiny model for two epochs, and all-gathers the sample ids it trained on: every sample of
the dataset is seen once per epoch across the world (plus DistributedSampler's padding)."""
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from conftest import Daemon, write_config  # noqa: E402

TRAINER = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    import stoker
    rank, world = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("gloo", init_method="file://" + sys.argv[3], rank=rank, world_size=world)
    loader = stoker.Loader("demo", socket=sys.argv[4 + rank // 2], framework="torch")
    assert (loader.rank, loader.world_size) == (rank, world)
    model = torch.nn.Linear(3 * 16 * 16, len(loader.dataset.classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        ids = []
        for b in loader.batches():
            x = b.images.float().flatten(1) / 255
            loss = torch.nn.functional.cross_entropy(model(x), b.labels)
            opt.zero_grad(); loss.backward(); opt.step()
            ids += b.ids.tolist()
        gathered = [None] * world
        dist.all_gather_object(gathered, ids)
        seen.append(gathered)
    if rank == 0:
        for epoch, per_rank in enumerate(seen):
            union = [i for r in per_rank for i in r]
            assert set(union) == set(range(len(loader.dataset))), (epoch, sorted(set(union)))
            assert len(union) == len(per_rank[0]) * world  # equal shards (padding included)
        print("OK", len(seen[0][0]), "samples per rank per epoch")
    dist.destroy_process_group()
""")


def test_four_gloo_ranks_on_two_daemon_nodes_see_every_sample_each_epoch(tmp_path, demo_root):
    sockets, daemons = [], []
    os.environ["WORLD_SIZE"] = "4"
    try:
        for node in (0, 1):
            cfg = write_config(str(tmp_path / f"node{node}.yaml"), demo_root, consumers=2, size=16,
                               extra=f"    world_size: ${{WORLD_SIZE}}\n    ranks: {2 * node}-{2 * node + 1}\n")
            d = Daemon(cfg, str(tmp_path / f"node{node}.sock"), str(tmp_path / f"node{node}.log"), "demo")
            daemons.append(d)
            sockets.append(d.socket)
    finally:
        del os.environ["WORLD_SIZE"]
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    procs = [subprocess.Popen([sys.executable, str(script), str(r), "4", str(tmp_path / "pg"), *sockets],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for r in range(4)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for d in daemons:
        d.stop()
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r}:\n{out}"
    assert "OK" in outs[0]
