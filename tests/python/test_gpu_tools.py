"""The GPU machine's scripts, run here on the host simulation, so that they work on the rare
day a GPU is lent (the first run on one, 2026-11-30, found bench-gpu-loader.py stopping at an
epoch's end: its latency probes were never run off a GPU)."""
import os
import re
import subprocess
import sys

import pytest

from conftest import BIN

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_bench_gpu_loader_runs_every_path_on_the_simulation():
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    build = os.path.dirname(os.path.abspath(BIN))
    demo = os.path.join(ROOT, "tests", "data", "demo")
    # An epoch of 128 (the 64 demo photos, each named twice) is two batches of 64: the
    # throughput loop, the latency probes and --phases all cross epochs.
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench-gpu-loader.py"), build, demo,
                        "--simulate", "--batches", "6", "--probes", "2", "--min-epoch", "128", "--phases"],
                       capture_output=True, text=True, timeout=240,
                       env=dict(os.environ, STOKER_BIN_DIR=os.path.abspath(BIN)))
    out = p.stdout
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"images: 64 files in \S+, each named 2 times: an epoch of 128", out), out
    for state in ("busy", "asleep"):
        assert re.search(rf"ready -> usable torch.cuda tensor, the thread {state} while the daemon got ahead: "
                         r"median [0-9.]+ us, p99 [0-9.]+ us over 2 batches", out), out
    phase_lines = [ln for ln in out.splitlines() if ln.startswith("phases, ")]
    assert len(phase_lines) == 4, out  # device and host loaders, busy and asleep
    for ln in phase_lines:
        assert len(re.findall(r" [0-9]+\.[0-9]", ln.split(":", 1)[1])) == 7, ln  # every step timed
    rates = re.search(r"images/s as torch.cuda tensors: stoker ([0-9]+), torchvision DataLoader "
                      r"\([0-9]+ workers, pin_memory\) ([0-9]+), ratio", out)
    assert rates and int(rates.group(1)) > 0 and int(rates.group(2)) > 0, out
