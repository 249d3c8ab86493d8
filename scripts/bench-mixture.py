#!/usr/bin/env python3
"""What a mixture of sources (job key `sources:`, issue #25) costs: start-up (time from
launching stokerd to its socket accepting, and RSS then) for a mixture of an N-line file list
(default 1,281,167 lines, ImageNet-1k train's size) and the 64-photo demo folder, against the
same list as the job's only `source:`, alternated `--runs` times; then the per-epoch planning
cost (build/bin/stoker_bench_mixture: the mixture's order vs one permutation).

The list's files are never created: a file list is indexed without opening its files
(source/dataset.hpp), so start-up is the index and the mixture's combination of indexes.

usage: scripts/bench-mixture.py [BUILD_DIR] [--work DIR] [--samples N] [--runs R]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import accepts, machine  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def start(build: str, work: str, job_source: str, name: str) -> tuple[float, float]:
    socket = os.path.join(work, "s.sock")
    cfg = os.path.join(work, f"{name}.yaml")
    with open(cfg, "w") as f:
        f.write(f"""server:
  workers: 1
  log_level: warn
  state_dir: {os.path.join(work, 'state')}
jobs:
  train:
{job_source}
    batch_size: 1
    prefetch: 1
    pipeline:
      - decode: {{}}
      - resize: {{size: 8}}
      - center_crop: {{size: 8}}
""")
    with open(os.path.join(work, f"{name}.log"), "w") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen([os.path.join(build, "bin", "stokerd"), "--config", cfg, "--socket", socket],
                                stdout=log, stderr=subprocess.STDOUT)
        while not accepts(socket):
            if proc.poll() is not None or time.monotonic() - t0 > 600:
                raise RuntimeError(f"stokerd did not start: see {work}/{name}.log")
            time.sleep(0.002)
        ready = time.monotonic() - t0
        rss = rss_mb(proc.pid)
        proc.terminate()
        proc.wait(timeout=60)
    return ready, rss


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(REPO, "build"))
    ap.add_argument("--work", default="/tmp/stoker-bench-mixture")
    ap.add_argument("--samples", type=int, default=1281167)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    work = os.path.abspath(args.work)
    os.makedirs(os.path.join(work, "state"), exist_ok=True)
    os.makedirs(os.path.join(work, "tree"), exist_ok=True)  # the list's root (its files are not made)
    lst = os.path.join(work, f"list-{args.samples}.txt")
    if not os.path.exists(lst):
        per_class = (args.samples + 999) // 1000
        with open(lst, "w") as f:
            f.writelines(f"n{k // per_class:08d}/n{k // per_class:08d}_{k % per_class:05d}.JPEG,{k // per_class}\n"
                         for k in range(args.samples))
    demo = os.path.join(REPO, "tests", "data", "demo")
    one = f"    source: {{type: filelist, list: \"{lst}\", root: \"{work}/tree\"}}"
    mix = (f"    sources:\n      - {{type: filelist, list: \"{lst}\", root: \"{work}/tree\", weight: 1}}\n"
           f"      - {{type: imagefolder, root: \"{demo}\", weight: 1}}")
    print(f"machine: {machine()}; list of {args.samples} lines + demo folder (64), {args.runs} runs alternated")
    res: dict[str, list[tuple[float, float]]] = {"one source (list)": [], "mixture (list + folder)": []}
    for _ in range(args.runs):
        res["one source (list)"].append(start(args.build, work, one, "one"))
        res["mixture (list + folder)"].append(start(args.build, work, mix, "mix"))
    print(f"{'job':28} {'ready s (median)':>17} {'min':>6} {'max':>6} {'RSS MB (median)':>16}")
    for name, runs in res.items():
        ready = [r for r, _ in runs]
        print(f"{name:28} {statistics.median(ready):17.2f} {min(ready):6.2f} {max(ready):6.2f} "
              f"{statistics.median(r for _, r in runs):16.0f}")
    sys.stdout.flush()
    subprocess.run([os.path.join(args.build, "bin", "stoker_bench_mixture"), str(args.samples), "64"], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
