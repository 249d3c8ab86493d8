"""Fixtures for the python tier: a real stokerd per test on its own socket."""
import os
import signal
import subprocess
import time

import pytest

BIN = os.environ.get("STOKER_BIN_DIR", os.path.join(os.path.dirname(__file__), "../../build/bin"))
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")


def write_config(path, *, batch_size=8, prefetch=4, size=32, shuffle=True, consumers=1, seed=5,
                 root=None):
    root = root or os.path.join(DATA, "demo")
    with open(path, "w") as f:
        f.write(f"""server: {{workers: 2, log_level: warn}}
jobs:
  demo:
    source: {{root: "{root}"}}
    batch_size: {batch_size}
    shuffle: {str(shuffle).lower()}
    seed: {seed}
    consumers: {consumers}
    prefetch: {prefetch}
    pipeline:
      - decode: {{}}
      - random_resized_crop: {{size: {size}}}
      - horizontal_flip: {{p: 0.5}}
    output: {{dtype: uint8, layout: NCHW}}
""")
    return path


class Daemon:
    def __init__(self, config, socket):
        self.config, self.socket, self.proc = config, socket, None
        self.start()

    def start(self):
        self.proc = subprocess.Popen([os.path.join(BIN, "stokerd"), "--config", self.config,
                                      "--socket", self.socket],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while not os.path.exists(self.socket):
            assert self.proc.poll() is None, "stokerd exited during start"
            assert time.time() < deadline, "stokerd did not start"
            time.sleep(0.01)

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)
        self.proc = None


@pytest.fixture
def daemon_factory(tmp_path):
    started = []

    def make(**kw):
        cfg = write_config(str(tmp_path / f"cfg{len(started)}.yaml"), **kw)
        d = Daemon(cfg, str(tmp_path / f"s{len(started)}.sock"))
        started.append(d)
        return d

    yield make
    for d in started:
        d.stop()


@pytest.fixture
def daemon(daemon_factory):
    return daemon_factory()
