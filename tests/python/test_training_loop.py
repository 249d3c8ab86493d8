"""python tier: a training script in pytorch/examples imagenet/main.py's style, with only its
DataLoaders replaced by stoker.Loader.from_folder, on two simulated nodes (two stokerd
processes, one rank each, of a gloo world of 2).

What main.py does and this checks: DistributedDataParallel training with
train_loader.sampler.set_epoch(epoch), len(loader) for its progress meter, loader.dataset
for the class count, validation after every epoch whose metric all-reduces over the ranks
(every validation sample evaluated exactly once: no padding, ranks uneven by one), and a
checkpoint that resumes. A run stopped after a checkpoint in the middle of epoch 1 and
resumed in fresh processes trains on exactly the batches, and ends with exactly the weights,
of a run that was never stopped. Jobs are defined by the loaders (no YAML for them): lazily,
on first use, shared by definition, removed by the daemon once unused."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch")

from conftest import Daemon  # noqa: E402

TRAINER = textwrap.dedent("""
    import hashlib, json, os, sys, torch, torch.distributed as dist
    import stoker
    rank, world = int(sys.argv[1]), 2
    pg, sockets, train_root, val_root, ckpt, stop_at, log = sys.argv[2], sys.argv[3:5], *sys.argv[5:10]
    stop_epoch, stop_step = map(int, stop_at.split(":"))   # -1:-1: run to the end
    dist.init_process_group("gloo", init_method="file://" + pg, rank=rank, world_size=world)
    socket = sockets[rank]  # node `rank`'s daemon serves global rank `rank`

    # --- the loader lines (main.py: datasets.ImageFolder + DistributedSampler + DataLoader) ---
    train_loader = stoker.Loader.from_folder(train_root, batch_size=8, crop_size=16, seed=3,
                                             socket=socket, framework="torch")
    val_loader = stoker.Loader.from_folder(val_root, batch_size=5, train=False, crop_size=16,
                                           resize_size=18, socket=socket, framework="torch")
    # lazy: nothing was asked of the daemon yet
    assert val_loader._info is None and train_loader._info is None
    # ------------------------------------------------------------------------------------------

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, len(train_loader.dataset.classes)))
    model = torch.nn.parallel.DistributedDataParallel(model)
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start_epoch, trained = 0, []
    path = ckpt + f".rank{rank}"
    if os.path.exists(path):  # --resume
        ck = torch.load(path)
        model.load_state_dict(ck["state_dict"]); optimizer.load_state_dict(ck["optimizer"])
        train_loader.load_state_dict(ck["loader"]); start_epoch = ck["epoch"]

    def validate():
        model.eval()
        correct = torch.zeros(2)
        with torch.no_grad():
            for i, (images, target) in enumerate(val_loader):
                correct += torch.tensor([(model(images).argmax(1) == target).sum().item(), len(target)])
        dist.all_reduce(correct)
        model.train()
        return correct

    for epoch in range(start_epoch, 3):
        train_loader.sampler.set_epoch(epoch)
        for i, (images, target) in enumerate(train_loader, start=train_loader.state_dict()["batch"]):
            loss = criterion(model(images), target)
            optimizer.zero_grad(); loss.backward(); optimizer.step()
            trained.append([epoch, i, hashlib.sha1(images.numpy().tobytes()).hexdigest(), target.tolist()])
            if (epoch, i) == (stop_epoch, stop_step):  # checkpoint, then "crash"
                torch.save({"state_dict": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "loader": train_loader.state_dict(), "epoch": epoch}, path)
                json.dump({"trained": trained}, open(log, "w"))
                dist.barrier(); sys.exit(0)
        assert i + 1 == len(train_loader), (i, len(train_loader))
        correct = validate()
        # every validation sample exactly once across the ranks
        assert int(correct[1]) == len(val_loader.dataset), (correct, len(val_loader.dataset))
    per_rank = val_loader.info["samples_per_rank"]
    weights = [p.detach().flatten().tolist() for p in model.parameters()]
    json.dump({"trained": trained, "val_per_rank": per_rank, "weights": weights,
               "job": train_loader.job, "val_job": val_loader.job}, open(log, "w"))
    dist.destroy_process_group()
""")


def _run(tmp_path, tag, sockets, train_root, val_root, stop_at):
    script = tmp_path / "main_style.py"
    script.write_text(TRAINER)
    env = dict(os.environ)
    for v in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "LOCAL_RANK"):
        env.pop(v, None)
    env["LOCAL_WORLD_SIZE"] = "1"  # one rank per simulated node
    pg = tmp_path / f"pg-{tag}"
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(pg), *sockets, train_root, val_root,
                               str(tmp_path / "ckpt"), stop_at, str(tmp_path / f"{tag}.rank{r}.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for r in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"{tag} rank {r}:\n{out}"
    return [json.load(open(tmp_path / f"{tag}.rank{r}.json")) for r in range(2)]


def _nodes(tmp_path, demo_root):
    """Two daemons with only an unrelated YAML job: the trainers define theirs."""
    daemons = []
    for node in (0, 1):
        cfg = tmp_path / f"node{node}.yaml"
        cfg.write_text(f"""server: {{workers: 2, log_level: info, client_job_linger_s: 1}}
jobs:
  other:
    source: {{root: "{demo_root}"}}
    batch_size: 4
    pipeline: [{{decode: {{}}}}, {{random_resized_crop: {{size: 8}}}}]
""")
        daemons.append(Daemon(str(cfg), str(tmp_path / f"node{node}.sock"), str(tmp_path / f"node{node}.log"),
                              "other"))
    return daemons


def test_main_style_training_on_two_nodes_resumes_exactly_and_validates_every_sample_once(tmp_path, demo_root):
    # Validation set of 63 images: two ranks get 32 and 31, none padded.
    val_root = tmp_path / "val"
    shutil.copytree(demo_root, val_root)
    first_class = sorted(p for p in val_root.iterdir() if p.is_dir())[0]
    victim = sorted(first_class.iterdir())[0]
    victim.unlink()
    daemons = _nodes(tmp_path, demo_root)
    sockets = [d.socket for d in daemons]
    try:
        full = _run(tmp_path, "full", sockets, demo_root, str(val_root), "-1:-1")
        first = _run(tmp_path, "first", sockets, demo_root, str(val_root), "1:2")
        resumed = _run(tmp_path, "resumed", sockets, demo_root, str(val_root), "-1:-1")
        # The trainers are gone: their jobs are removed once unused for the linger time (1 s).
        import stoker
        deadline = time.monotonic() + 20
        left = None
        while time.monotonic() < deadline:
            left = [j["name"] for s in sockets for j in json.loads(stoker.daemon_status(s))["jobs"]
                    if j["name"].startswith("py-")]
            if not left:
                break
            time.sleep(0.1)
        assert not left, left
    finally:
        logs = [open(d.log).read() for d in daemons]
        for d in daemons:
            d.stop()
    for r in range(2):
        # 64 samples, world 2, batch 8, drop_last: 4 batches per epoch, 3 epochs
        assert len(full[r]["trained"]) == 12
        assert first[r]["trained"] + resumed[r]["trained"] == full[r]["trained"]
        assert resumed[r]["weights"] == full[r]["weights"]  # same batches, same order: same model
    assert sorted([full[0]["val_per_rank"], full[1]["val_per_rank"]]) == [31, 32]
    # The two ranks trained on different samples each step (their shards), same labels count.
    assert full[0]["trained"][0][2] != full[1]["trained"][0][2]
    # Jobs defined by clients: named by definition, so the resumed run found the same names.
    assert full[0]["job"] == resumed[0]["job"] and full[0]["job"].startswith("py-")
    for log in logs:
        assert "defined by client" in log
        assert "client-defined job unused for 1 s" in log


def test_lazy_from_folder_defines_nothing_until_first_use(tmp_path, demo_root):
    daemons = _nodes(tmp_path, demo_root)
    d = daemons[1]
    daemons[0].stop()
    try:
        import stoker
        val = stoker.Loader.from_folder(demo_root, batch_size=16, train=False, socket=d.socket,
                                        crop_size=16, resize_size=16, world_size=2, rank=0)
        st = json.loads(stoker.daemon_status(d.socket))
        assert [j["name"] for j in st["jobs"]] == ["other"]  # not defined yet
        assert len(val) == 2  # first use: defined, connected (32 of the 64 samples are rank 0's)
        st = json.loads(stoker.daemon_status(d.socket))
        job = next(j for j in st["jobs"] if j["name"] == val.job)
        assert job["defined_by_client"] and job["pad_shards"] is False and job["shuffle"] is False
        # The other local rank's loader, same definition: the same job.
        val2 = stoker.Loader.from_folder(demo_root, batch_size=16, train=False, socket=d.socket,
                                         crop_size=16, resize_size=16, world_size=2, rank=1)
        assert val2.batch_size == 16 and val2.job == val.job
        # A bad definition is refused with the key that is wrong.
        bad = stoker.Loader.from_folder(str(tmp_path / "missing"), batch_size=16, socket=d.socket, world_size=1)
        with pytest.raises(stoker.RefusedError, match="jobs.from_folder.source.root"):
            len(bad)
    finally:
        d.stop()
