#!/usr/bin/env python3
"""Per-thread CPU of a running process, until it exits (or Ctrl-C): user and system seconds
and voluntary / involuntary context switches of each thread, from /proc/PID/task/*/{stat,status}
sampled every half second, busiest first (a thread that ends keeps its last sample: up to
half a second of its work is missed; stokerd's threads live as long as it does). How docs/PERFORMANCE.md found the object-store
fetcher's thread taking 20% of the decoding core.

    scripts/thread-cpu.py PID
    scripts/thread-cpu.py --wait-for stokerd      (the next stokerd started after this, e.g.
                                                   the one a benchmark script starts)
"""
import argparse
import glob
import os
import sys
import time


def newest(comm: str, since: float, timeout: float = 60.0) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for p in glob.glob("/proc/[0-9]*"):
            try:
                if open(p + "/comm").read().strip() == comm and os.stat(p).st_mtime >= since - 1:
                    return p.rsplit("/", 1)[1]
            except OSError:
                pass
        time.sleep(0.2)
    sys.exit(f"thread-cpu: no {comm} started within {timeout:.0f} s")


def read_thread(task: str, tick: int):
    fields = open(task + "/stat").read().rsplit(")", 1)[1].split()
    status = open(task + "/status").read()
    switches = {k: int(status.split(k + ":")[1].split()[0])
                for k in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")}
    return (int(fields[11]) / tick, int(fields[12]) / tick,
            switches["voluntary_ctxt_switches"], switches["nonvoluntary_ctxt_switches"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pid", nargs="?")
    ap.add_argument("--wait-for", metavar="COMM")
    ap.add_argument("--top", type=int, default=6)
    a = ap.parse_args()
    if not a.pid and not a.wait_for:
        ap.error("give a PID or --wait-for COMM")
    pid = a.pid or newest(a.wait_for, time.time())
    tick = os.sysconf("SC_CLK_TCK")
    last = {}
    try:
        while os.path.exists(f"/proc/{pid}"):
            for task in glob.glob(f"/proc/{pid}/task/*"):
                try:
                    last[task.rsplit("/", 1)[1]] = read_thread(task, tick)
                except OSError:
                    pass  # the thread ended between the listing and the read
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    print(f"process {pid}: {len(last)} thread(s) seen; the busiest:")
    print(f"{'tid':>8} {'user_s':>8} {'sys_s':>8} {'voluntary':>10} {'involuntary':>12}")
    for tid, (u, s, v, n) in sorted(last.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:a.top]:
        print(f"{tid:>8} {u:8.2f} {s:8.2f} {v:10d} {n:12d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
