"""Fixtures for the python tier: a real stokerd per test, each on its own socket (so its own
shared-memory names), stopped with SIGTERM after the test and its segments removed even when
a test killed it."""
import json
import os
import socket
import shutil
import signal
import subprocess
import time
import sys

import numpy as np

# One socket probe for tests and benchmarks: scripts/benchlib.py.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from benchlib import accepts  # noqa: E402
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("STOKER_BIN_DIR", os.path.join(HERE, "..", "..", "build", "bin"))
DATA = os.path.join(HERE, "..", "data")
CORPUS = "/work/shared/corpus/exif-orientation"  # fallback photos when tests/data/demo is absent

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

# Tests parametrized over frameworks run the torch case only where torch is installed.
FRAMEWORKS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(not HAVE_TORCH,
                                                                      reason="torch not installed"))]


def to_numpy(x):
    """A batch field (torch tensor or ndarray) as an ndarray, without copying."""
    return x if isinstance(x, np.ndarray) else x.numpy()


def fnv1a64(s):
    h = 0xcbf29ce484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def segment_path(socket, job):
    """proto::segment_name(): where the daemon's segment for `job` lives."""
    # A sealed memfd: "/memfd:NAME (deleted)" in /proc/PID/maps, absent from /dev/shm.
    return f"/memfd:stoker-{fnv1a64(socket):016x}-{job}"


@pytest.fixture(scope="session")
def demo_root(tmp_path_factory):
    """An ImageFolder of real photos: tests/data/demo (4 classes x 16), else the corpus."""
    root = os.path.join(DATA, "demo")
    if os.path.isdir(root):
        return root
    root = tmp_path_factory.mktemp("demo")
    jpegs = sorted(f for f in os.listdir(CORPUS) if f.lower().endswith(".jpg"))
    for i, f in enumerate(jpegs):
        d = root / f"class{i % 2}"
        d.mkdir(exist_ok=True)
        shutil.copy(os.path.join(CORPUS, f), d / f)
    return str(root)


def write_config(path, root, *, job="demo", batch_size=8, prefetch=4, size=32, shuffle=True,
                 consumers=1, seed=5, dtype="uint8", layout="NCHW", on_error="skip", flip=True,
                 extra=""):
    steps = [f"decode: {{}}", f"random_resized_crop: {{size: {size}}}"]
    if flip:
        steps.append("horizontal_flip: {p: 0.5}")
    pipeline = "\n".join(f"      - {s}" for s in steps)
    with open(path, "w") as f:
        f.write(f"""server: {{workers: 2, log_level: warn}}
jobs:
  {job}:
    source: {{root: "{root}"}}
    batch_size: {batch_size}
    shuffle: {str(shuffle).lower()}
    seed: {seed}
    consumers: {consumers}
    prefetch: {prefetch}
    on_error: {on_error}
    pipeline:
{pipeline}
    output: {{dtype: {dtype}, layout: {layout}}}
{extra}""")
    return path


class Daemon:
    """`stokerd --config C --socket S`; start() waits for the socket, stop() sends SIGTERM."""

    def __init__(self, config, socket, log, job):
        self.config, self.socket, self.log, self.job, self.proc = config, socket, log, job, None
        self.start()

    def start(self):
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([os.path.join(BIN, "stokerd"), "--config", self.config,
                                          "--socket", self.socket],
                                         stdout=log, stderr=subprocess.STDOUT)
        # Ready when it accepts a connection: the socket file appears at bind(), a moment
        # before listen(), and a killed predecessor may have left its file behind.
        deadline = time.monotonic() + 20
        while not accepts(self.socket):
            if self.proc.poll() is not None:
                pytest.fail(f"stokerd exited during start:\n{open(self.log).read()}")
            if time.monotonic() > deadline:
                pytest.fail(f"stokerd did not start within 20 s:\n{open(self.log).read()}")
            time.sleep(0.01)

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)
        self.proc = None

    def consume(self, out_dir, batches, start_epoch=0, start_batch=0, rank=0):
        """What `stokerctl consume --dump` delivers: [(epoch, index, images, labels, ids)]."""
        r = subprocess.run([os.path.join(BIN, "stokerctl"), "consume", "--job", self.job,
                            "--socket", self.socket, "--batches", str(batches),
                            "--dump", str(out_dir), "--rank", str(rank),
                            "--start-epoch", str(start_epoch), "--start-batch", str(start_batch)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"stokerctl consume failed: {r.stderr}"
        out = []
        for line in r.stdout.splitlines():
            rec = json.loads(line)
            if "summary" in rec:
                continue
            stem = os.path.join(str(out_dir), f"e{rec['epoch']}_b{rec['index']}")
            out.append((rec["epoch"], rec["index"], np.load(stem + ".images.npy"),
                        np.load(stem + ".labels.npy"), np.load(stem + ".ids.npy")))
        return out


@pytest.fixture
def daemon_factory(tmp_path, demo_root):
    """make(**config) -> a running Daemon with its own config, socket and log under tmp_path."""
    started = []

    def make(root=None, **kw):
        n = len(started)
        job = kw.get("job", "demo")
        cfg = write_config(str(tmp_path / f"cfg{n}.yaml"), root or demo_root, **kw)
        d = Daemon(cfg, str(tmp_path / f"s{n}.sock"), str(tmp_path / f"stokerd{n}.log"), job)
        started.append(d)
        return d

    yield make
    for d in started:
        d.stop()  # a killed daemon's segments went with it (memfds)


@pytest.fixture
def daemon(daemon_factory):
    return daemon_factory()
