"""Helpers shared by the Python benchmarks: run a stokerd on a config, read its CPU time,
run stokerctl consumers. Figures are measured side by side in one run (machines are noisy)."""
from __future__ import annotations

import json
import os
import socket as socketlib
import subprocess
import tempfile
import time
from typing import Dict, List


def machine() -> str:
    model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} cores"


def accepts(path: str) -> bool:
    s = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_SEQPACKET)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its threads so far (ended threads included), to
    the nanosecond: the process's CPU-time clock (clock_getcpuclockid's id for another process:
    CPUCLOCK_SCHED of ~pid). /proc's utime and stime, the fallback, come in clock ticks (10 ms),
    a few per cent of the 0.3-0.5 s a remote benchmark's window takes from the node."""
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        return tick_cpu_seconds(pid)


def tick_cpu_seconds(pid: int) -> float:
    """The same from /proc/PID/stat's utime + stime: whole clock ticks (10 ms)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Daemon:
    """stokerd on `config_text` in a temporary folder; `cpu()` is its CPU time since it was
    ready (the scan of the dataset left out)."""

    def __init__(self, build: str, config_text: str, prefix: List[str] = ()):
        self.dir = tempfile.TemporaryDirectory(prefix="stoker-bench-")
        self.socket = os.path.join(self.dir.name, "s.sock")
        cfg = os.path.join(self.dir.name, "bench.yaml")
        with open(cfg, "w") as f:
            f.write(config_text)
        self.build = build
        self.log = open(os.path.join(self.dir.name, "stokerd.log"), "w")
        # prefix: e.g. ["taskset", "-c", "0"] to pin the daemon to some cores.
        self.proc = subprocess.Popen(list(prefix) + [os.path.join(build, "bin", "stokerd"), "--config", cfg, "--socket", self.socket],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not accepts(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"stokerd did not start: see {self.log.name}")
            time.sleep(0.01)
        self.cpu0 = cpu_seconds(self.proc.pid)

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid) - self.cpu0

    def status(self) -> Dict:
        out = subprocess.run([os.path.join(self.build, "bin", "stokerctl"), "status", "--socket", self.socket],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)

    def consume(self, args: List[str]) -> subprocess.Popen:
        return subprocess.Popen([os.path.join(self.build, "bin", "stokerctl"), "consume", "--socket", self.socket] + args,
                                stdout=subprocess.PIPE, text=True)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()
        self.dir.cleanup()


def summary(proc: subprocess.Popen) -> Dict:
    """The summary line `stokerctl consume` prints last."""
    out, _ = proc.communicate(timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"stokerctl consume failed ({proc.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def drop_caches() -> bool:
    """Empties the page cache (root only): for cold-storage figures. False when not allowed."""
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False
