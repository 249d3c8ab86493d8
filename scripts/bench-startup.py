#!/usr/bin/env python3
"""Start-up at scale (issue #10): time from launching stokerd to its socket accepting (it is
ready and serving) and the daemon's RSS then, for one job of N samples (default 1,281,167, the
size of ImageNet-1k train) in each source type:
  - imagefolder: 1000 class folders of hard links to 4 small real photos (tests/data/demo,
                 copied into each folder),
  - filelist:    a N-line `class/file.JPEG,label` list of the same files,
  - tar:         1024 WebDataset shards (KEY.jpg = a real 4 KB photo, KEY.cls), the index
                 built cold (no cache) and then loaded from <state_dir>'s cache.
Each is started with the page cache dropped ("cold", when /proc/sys/vm/drop_caches is
writable) and again right after ("warm"). `base` is the same daemon on the 64 demo photos:
RSS above it is what the dataset's index costs.

usage: scripts/bench-startup.py [BUILD_DIR] [--work DIR] [--samples N] [--sources imagefolder,filelist,tar]
The data set (~7.5 GB for the shards, hard links for the tree) is made once under --work.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
from benchlib import accepts, machine  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHOTOS = ["texture/texture_15.jpg", "insect/insect_06.jpg", "insect/insect_09.jpg", "flower/flower_01.jpg"]
CLASSES = 1000
SHARDS = 1024


def tar_header(name: str, size: int) -> bytes:
    """A ustar header for a regular file (names here are < 100 bytes)."""
    h = bytearray(512)
    h[0:len(name)] = name.encode()
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"%011o\0" % 1700000000
    h[148:156] = b" " * 8
    h[156:157] = b"0"
    h[257:265] = b"ustar\x0000"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def make_data(work: str, n: int) -> None:
    marker = os.path.join(work, f"made-{n}")
    if os.path.exists(marker):
        return
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    photos = []
    for i, p in enumerate(PHOTOS):
        dst = os.path.join(work, f"photo{i}.jpg")
        shutil.copyfile(os.path.join(REPO, "tests/data/demo", p), dst)
        photos.append(dst)
    per_class = (n + CLASSES - 1) // CLASSES
    t0 = time.monotonic()
    lines = []
    k = 0
    for c in range(CLASSES):
        d = os.path.join(work, "tree", f"n{c:08d}")
        os.makedirs(d)
        for i in range(per_class):
            if k == n:
                break
            name = f"n{c:08d}_{i:05d}.JPEG"
            if i < len(photos):  # a copy per class: an inode takes at most 65000 links
                shutil.copyfile(photos[i], os.path.join(d, name))
            else:
                os.link(os.path.join(d, f"n{c:08d}_{i % len(photos):05d}.JPEG"), os.path.join(d, name))
            lines.append(f"n{c:08d}/{name},{c}\n")
            k += 1
    with open(os.path.join(work, "list.txt"), "w") as f:
        f.writelines(lines)
    print(f"  tree of {n} hard links and the list made in {time.monotonic() - t0:.0f} s", flush=True)

    t0 = time.monotonic()
    jpg = open(photos[0], "rb").read()
    jpg_block = padded(jpg)
    os.makedirs(os.path.join(work, "shards"))
    per_shard = (n + SHARDS - 1) // SHARDS
    k = 0
    for s in range(SHARDS):
        parts = []
        for _ in range(per_shard):
            if k == n:
                break
            c = k // per_class
            key = f"n{c:08d}/n{c:08d}_{k % per_class:05d}"
            cls = str(c).encode()
            parts += [tar_header(key + ".jpg", len(jpg)), jpg_block, tar_header(key + ".cls", len(cls)), padded(cls)]
            k += 1
        parts.append(b"\0" * 1024)
        with open(os.path.join(work, "shards", f"train-{s:06d}.tar"), "wb") as f:
            f.write(b"".join(parts))
    print(f"  {SHARDS} shards made in {time.monotonic() - t0:.0f} s", flush=True)
    open(marker, "w").close()




def rss_mb(pid: int) -> tuple[float, float]:
    rss = hwm = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return rss, hwm


def start(build: str, work: str, source: str, log_name: str) -> tuple[float, float, float, str]:
    """Seconds to ready, RSS and peak RSS (MB) at ready, and the log."""
    run = os.path.join(work, "run")
    os.makedirs(run, exist_ok=True)
    socket = os.path.join(run, "s.sock")
    cfg = os.path.join(run, "bench.yaml")
    with open(cfg, "w") as f:
        f.write(f"""server:
  workers: 1
  state_dir: {os.path.join(work, 'state')}
jobs:
  train:
    source: {source}
    batch_size: 1
    prefetch: 1
    pipeline:
      - decode: {{}}
      - resize: {{size: 8}}
      - center_crop: {{size: 8}}
""")
    log_path = os.path.join(run, f"{log_name}.log")
    with open(log_path, "w") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen([os.path.join(build, "bin", "stokerd"), "--config", cfg, "--socket", socket],
                                stdout=log, stderr=subprocess.STDOUT)
        while not accepts(socket):
            if proc.poll() is not None or time.monotonic() - t0 > 600:
                raise RuntimeError(f"stokerd did not start: see {log_path}")
            time.sleep(0.002)
        ready = time.monotonic() - t0
        rss, hwm = rss_mb(proc.pid)
        proc.terminate()
        proc.wait(timeout=60)
    return ready, rss, hwm, open(log_path).read()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(REPO, "build"))
    ap.add_argument("--work", default="/tmp/stoker-bench-startup")
    ap.add_argument("--samples", type=int, default=1281167)
    ap.add_argument("--sources", default="imagefolder,filelist,tar", help="comma-separated subset")
    args = ap.parse_args()
    work = os.path.abspath(args.work)
    print(f"machine: {machine()}; {args.samples} samples", flush=True)
    make_data(work, args.samples)
    os.makedirs(os.path.join(work, "state"), exist_ok=True)

    sources = {
        "base (64 demo photos)": f"{{type: imagefolder, root: \"{REPO}/tests/data/demo\"}}",
        "imagefolder": f"{{type: imagefolder, root: \"{work}/tree\"}}",
        "filelist": f"{{type: filelist, list: \"{work}/list.txt\", root: \"{work}/tree\"}}",
        "tar": f"{{type: tar, shards: \"{work}/shards/train-{{000000..{SHARDS - 1:06d}}}.tar\"}}",
    }
    dropped = benchlib.drop_caches()
    print(f"page cache drop: {'yes' if dropped else 'not permitted (cold figures are warm)'}")
    print(f"{'source':34} {'ready s':>8} {'RSS MB':>8} {'peak MB':>8} {'MB/1M samples':>14}")
    base_rss = 0.0
    wanted = set(args.sources.split(","))
    for name, src in sources.items():
        if not name.startswith("base") and name not in wanted:
            continue
        runs = []
        if name == "tar":
            for f in os.listdir(os.path.join(work, "state")):
                if f.endswith(".tarindex"):
                    os.remove(os.path.join(work, "state", f))
            benchlib.drop_caches()
            runs.append(("tar, cold cache, no index", src))
            runs.append(("tar, cold cache, cached index", src))
            runs.append(("tar, warm, cached index", src))
        else:
            runs = [(f"{name}, cold cache", src), (f"{name}, warm", src)]
        for label, s in runs:
            if "cold" in label and dropped:
                benchlib.drop_caches()
            ready, rss, hwm, log = start(args.build, work, s, label.split(",")[0].split()[0])
            if name.startswith("base"):
                base_rss = max(base_rss, rss)
                per_m = ""
            else:
                per_m = f"{(rss - base_rss) / (args.samples / 1e6):14.0f}"
            print(f"{label:34} {ready:8.2f} {rss:8.0f} {hwm:8.0f} {per_m}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
