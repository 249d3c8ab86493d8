#!/usr/bin/env python3
"""What `next()` costs on a ready ring (issue #36): batches announced by stokerd (protocol 2.5)
against the round trip of the older Acquire path (STOKER_ACQUIRE=1) and against a Unix-socket
round trip from this Python process to an echo thread, measured side by side in one run.

The job's batches are tiny (one 8x8 image) and the loop spends `--step-ms` per batch (a
training step) so the ring stays ahead: what is timed is the hand-over, not the decode.

    scripts/bench-next.py [BUILD_DIR] [IMAGES_DIR] [--batches N] [--step-ms S]

Then the same from C: `stokerctl consume --hold-ms S` (its summary's next_us, median and p99
of each next()) against a Unix-socket round trip in C (build/bin/stoker_bench_socket_rtt), both
paths, printed as `stokerctl next median_us M p99_us P c_socket_rtt_us RTT ratio R`.

Before it, `stoker.Loader (FRAMEWORK, ...): next median_us M p99_us P ratio R`: a Loader
iterated as a training loop does (`for images, labels in loader`, torch where installed, else
numpy) on the same job: what the loop pays a batch, the tensors or arrays made from the native
batch included.

Prints, last, `next median_us M p99_us P socket_rtt_us RTT ratio R` (R = M / RTT; the goal is
R <= 0.5) for the announced path from Python (the native Client.next()).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

JOB = """server: {{workers: 2, log_level: warn}}
jobs:
  tiny:
    source: {{root: "{images}"}}
    batch_size: 1
    seed: 1
    prefetch: 16
    pipeline:
      - decode: {{}}
      - resize: {{size: [8, 8]}}
    output: {{dtype: uint8, layout: NCHW}}
"""


def percentile(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def time_next(native, sock: str, batches: int, step_s: float, acquire: bool):
    """Microseconds each next() took (the batch released right after, then one step)."""
    if acquire:
        os.environ["STOKER_ACQUIRE"] = "1"
    else:
        os.environ.pop("STOKER_ACQUIRE", None)
    c = native.Client("tiny", 0, sock)
    try:
        time.sleep(1.0)  # the ring fills
        out = []
        for _ in range(batches):
            t0 = time.perf_counter_ns()
            b = c.next(10000)
            out.append((time.perf_counter_ns() - t0) / 1000)
            b.release()
            time.sleep(step_s)
        return out
    finally:
        c.close()
        os.environ.pop("STOKER_ACQUIRE", None)


def time_loader(sock: str, batches: int, step_s: float, framework: str):
    """Microseconds each next() of `for images, labels in loader` took (a stoker.Loader's
    iter(), as a training loop uses it): the tensors (torch) or arrays (numpy) made from the
    native batch included. The previous batch's are dropped before the step, as a loop that
    rebinds its variables does."""
    import stoker  # noqa: E402 (build/python is on the path by now)
    loader = stoker.Loader("tiny", socket=sock, framework=framework)
    out, epoch = [], 0
    try:
        it = iter(loader)
        next(it)
        time.sleep(1.0)  # the ring fills
        while len(out) < batches:
            while len(out) < batches:
                t0 = time.perf_counter_ns()
                try:
                    images, labels = next(it)
                except StopIteration:
                    break
                out.append((time.perf_counter_ns() - t0) / 1000)
                del images, labels
                time.sleep(step_s)
            epoch += 1
            loader.set_epoch(epoch)
            it = iter(loader)
        return out
    finally:
        loader.close()


def socket_rtt(rounds: int, step_s: float):
    """Microseconds of a 48-byte SOCK_SEQPACKET round trip to an echo thread of this process."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

    def echo():
        while True:
            m = b.recv(64)
            if not m:
                return
            b.send(m)

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    msg = bytes(48)
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        a.send(msg)
        a.recv(64)
        out.append((time.perf_counter_ns() - t0) / 1000)
        time.sleep(step_s)
    a.close()
    t.join(timeout=5)
    return out


def consume_next(build: str, sock: str, batches: int, step_ms: float, acquire: bool):
    """stokerctl consume's own timing of next(): (median, p99) in microseconds."""
    env = dict(os.environ)
    env.pop("STOKER_ACQUIRE", None)
    if acquire:
        env["STOKER_ACQUIRE"] = "1"
    out = subprocess.run([os.path.join(build, "bin", "stokerctl"), "consume", "--socket", sock, "--job", "tiny",
                          "--batches", str(batches), "--hold-ms", str(max(1, int(round(step_ms))))],
                         env=env, capture_output=True, text=True, timeout=600, check=True).stdout
    summary = json.loads(out.strip().splitlines()[-1])
    return summary["next_us"]["median"], summary["next_us"]["p99"]


def c_socket_rtt(build: str, rounds: int, step_ms: float):
    """(median, p99) microseconds of a C round trip over a SOCK_SEQPACKET pair."""
    out = subprocess.run([os.path.join(build, "bin", "stoker_bench_socket_rtt"), str(rounds),
                          str(int(step_ms * 1000))], capture_output=True, text=True, timeout=600, check=True).stdout
    f = out.split()
    return float(f[2]), float(f[4])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("images", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "demo"))
    ap.add_argument("--batches", type=int, default=1500)
    ap.add_argument("--step-ms", type=float, default=2.0)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.abspath(a.build), "python"))
    from stoker import _stoker as native  # noqa: E402

    framework = ""  # the Loader line needs torch or numpy (Debian's python3-torch, python3-numpy)
    for name in ("torch", "numpy"):
        try:
            __import__(name)
            framework = name
            break
        except ImportError:
            pass
    step = a.step_ms / 1000
    d = benchlib.Daemon(a.build, JOB.format(images=os.path.abspath(a.images)))
    build = os.path.abspath(a.build)
    try:
        print(f"machine: {benchlib.machine()}; {a.batches} batches, a {a.step_ms} ms step after each")
        # Interleaved so that the machine's noise falls on all three alike.
        ann, acq, rtt, lod = [], [], [], []
        c_ann, c_acq, c_rtt = [], [], []
        for _ in range(3):
            acq += time_next(native, d.socket, a.batches // 3, step, acquire=True)
            ann += time_next(native, d.socket, a.batches // 3, step, acquire=False)
            rtt += socket_rtt(a.batches // 3, step)
            if framework:
                lod += time_loader(d.socket, a.batches // 3, step, framework)
            c_acq.append(consume_next(build, d.socket, a.batches // 3, a.step_ms, acquire=True))
            c_ann.append(consume_next(build, d.socket, a.batches // 3, a.step_ms, acquire=False))
            c_rtt.append(c_socket_rtt(build, a.batches // 3, a.step_ms))
    finally:
        d.close()
    # The C figures: each run's median and p99, then the median over the three runs.
    cm, cp = statistics.median(x[0] for x in c_ann), statistics.median(x[1] for x in c_ann)
    cam, cap = statistics.median(x[0] for x in c_acq), statistics.median(x[1] for x in c_acq)
    cr = statistics.median(x[0] for x in c_rtt)
    print(f"stokerctl acquire round trip (STOKER_ACQUIRE=1): next median_us {cam:.1f} p99_us {cap:.1f} ratio {cam / cr:.2f}")
    print(f"stokerctl next median_us {cm:.1f} p99_us {cp:.1f} c_socket_rtt_us {cr:.1f} ratio {cm / cr:.2f}")
    m_acq, p_acq = statistics.median(acq), percentile(acq, 0.99)
    m, p, r = statistics.median(ann), percentile(ann, 0.99), statistics.median(rtt)
    print(f"acquire round trip (protocol 2.4 path, STOKER_ACQUIRE=1): next median_us {m_acq:.1f} p99_us {p_acq:.1f} "
          f"ratio {m_acq / r:.2f}")
    if lod:
        ml, pl = statistics.median(lod), percentile(lod, 0.99)
        print(f"stoker.Loader ({framework}, `for images, labels in loader`): next median_us {ml:.1f} p99_us {pl:.1f} "
              f"ratio {ml / r:.2f}")
    else:
        print("stoker.Loader: skipped (this interpreter has neither torch nor numpy)")
    print(f"next median_us {m:.1f} p99_us {p:.1f} socket_rtt_us {r:.1f} ratio {m / r:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
