"""benchlib.cpu_seconds, which every benchmark's daemon CPU figure (and bench-remote's R) comes
from: another process's CPU time, its ended threads included, to better than /proc's 10 ms ticks."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import benchlib  # noqa: E402

# A child that burns ~0.3 s of CPU in two threads that then end, and sleeps: what it used is
# fixed from then on, and none of it is this process's.
BURN = """
import threading, time, sys
def spin():
    end = time.thread_time() + 0.15
    while time.thread_time() < end:
        pass
ts = [threading.Thread(target=spin) for _ in range(2)]
[t.start() for t in ts]
[t.join() for t in ts]
print("done", flush=True)
time.sleep(30)
"""


def test_cpu_seconds_is_the_other_processs_time_its_ended_threads_included():
    child = subprocess.Popen([sys.executable, "-c", BURN], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "done"
        a = benchlib.cpu_seconds(child.pid)
        time.sleep(0.2)
        b = benchlib.cpu_seconds(child.pid)
        ticks = benchlib.tick_cpu_seconds(child.pid)
        # The threads' 0.3 s (they have ended) plus the interpreter's start.
        assert a >= 0.29, a
        # Sleeping, the child used (almost) nothing more.
        assert 0 <= b - a < 0.005, (a, b)
        # The same time as /proc's ticks, within one tick and their rounding (this process's
        # own clock, pytest's start, is not).
        assert abs(b - ticks) <= 2.0 / os.sysconf("SC_CLK_TCK"), (b, ticks)
        # Finer than a tick: not a whole number of them (a 1-in-10-million chance by accident).
        tick_ns = 10**9 // os.sysconf("SC_CLK_TCK")
        assert round(b * 1e9) % tick_ns != 0, b
    finally:
        child.kill()
        child.wait()
