#!/usr/bin/python3
"""Issue #35's latency figures: the same tar shards of real photos read by stokerd from local
files and from an object server behind a link with a round-trip time and a rate, side by side
in one run. The server: build/bin/stoker_bench_range_server (GET with Range and HEAD, next to
no CPU per request: what is measured is stokerd), or with `--server s3rver` the S3 server the
tests use (`scripts/setup.sh --test`; on 2 cores its milliseconds of CPU per request are the
limit, not the link).

The link: a network namespace of the benchmark's own (root is needed) joined to the host's by
a veth pair whose namespace end has a `tbf` rate limit (the server-to-stokerd direction), and
in the namespace the server behind a TCP proxy of this script that holds every chunk half the
round trip in each direction (order kept; this kernel has no netem). stokerd and its
consumers run outside; only the bucket job's requests cross the link.

For each round trip (--rtt-ms) and rate (--rates): stokerd serves two jobs with the same
pipeline (RandomResizedCrop 224 + flip, uint8, batches of 64), one on the local shards and one
on the bucket's; `stokerctl consume` takes --batches of each in turn, three times, and the
script prints images/s of each, their ratio, and what the link allows (rate / mean sample
bytes). The goal: the bucket job at >= 90% of the local one while the link's rate exceeds what
the job needs, and >= 90% of the link's rate when it does not.

    sudo scripts/bench-objstore.py [BUILD_DIR] [IMAGES_DIR] [--rtt-ms 0,20,80]
                                   [--rates 10gbit,200mbit] [--workers 2] [--batches 40]
                                   [--pin]   (stokerd on core 0, the store on core 1)
"""
from __future__ import annotations

import argparse
import glob
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
S3RVER = os.environ.get("STOKER_S3RVER", os.path.join(SOURCE, ".deps", "node", "node_modules", ".bin", "s3rver"))
KEY = "S3RVER"  # s3rver's fixed credentials

CONFIG = """server: {{workers: {workers}, log_level: warn}}
jobs:
{jobs}
"""
JOB = """  {name}:
    source: {source}
    batch_size: 64
    seed: 3
    prefetch: 4
    pipeline:
      - decode: {{}}
      - random_resized_crop: {{size: 224}}
      - horizontal_flip
    output: {{dtype: uint8, layout: NCHW}}
"""


def make_shards(images: str, out: str, shards: int) -> float:
    """ImageFolder `images` as `shards` tar shards (class/name.jpg + .cls); mean image bytes."""
    classes = sorted(d for d in os.listdir(images) if os.path.isdir(os.path.join(images, d)))
    files = [(c, f) for c, cls in enumerate(classes)
             for f in sorted(glob.glob(os.path.join(images, cls, "*.jpg")))]
    per = (len(files) + shards - 1) // shards
    for s in range(shards):
        with tarfile.open(os.path.join(out, f"train-{s:02d}.tar"), "w", format=tarfile.USTAR_FORMAT) as t:
            for c, f in files[s * per:(s + 1) * per]:
                key = f"{classes[c]}/{os.path.splitext(os.path.basename(f))[0]}"
                t.add(f, arcname=key + ".jpg")
                info = tarfile.TarInfo(key + ".cls")
                body = str(c).encode()
                info.size = len(body)
                t.addfile(info, io.BytesIO(body))
    return statistics.mean(os.path.getsize(f) for _, f in files)


def start_s3rver(data: str, log_path: str):
    log = open(log_path, "w")
    proc = subprocess.Popen([S3RVER, "-d", data, "-a", "127.0.0.1", "-p", "0", "--configure-bucket", "bench"],
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(400):
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", open(log_path).read())
        if m:
            return proc, f"http://127.0.0.1:{m.group(1)}"
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"s3rver did not start: {log_path}")


def upload(endpoint: str, path: str, key: str) -> None:
    subprocess.run(["curl", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{KEY}:{KEY}",
                    "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T", path, f"{endpoint}/bench/{key}"],
                   check=True)


def delay_proxy(target_port: int, delay_s: float, listen_ip: str) -> int:
    """A TCP proxy on listen_ip (its port returned) to 127.0.0.1:target_port that forwards each chunk
    `delay_s` after it arrived, in each direction, in order: a link with that one-way delay."""
    import asyncio
    import threading
    ready = threading.Event()
    port = []

    async def pipe(reader, writer):
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        async def sender():
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if data is None:
                    writer.close()
                    return
                writer.write(data)
                await writer.drain()
        task = asyncio.create_task(sender())
        try:
            while True:
                data = await reader.read(1 << 16)
                await queue.put((loop.time() + delay_s, data or None))
                if not data:
                    break
            await task
        except (ConnectionError, asyncio.CancelledError):
            task.cancel()
            writer.close()

    async def handle(cr, cw):
        try:
            sr, sw = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, sw), pipe(sr, cw), return_exceptions=True)

    async def serve():
        server = await asyncio.start_server(handle, listen_ip, 0)
        port.append(server.sockets[0].getsockname()[1])
        ready.set()
        async with server:
            await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(serve()), daemon=True).start()
    ready.wait(10)
    return port[0]


NS, HOST_IF, NS_IF = "stoker-objbench", "skbench0", "skbench1"
HOST_IP, NS_IP = "10.213.0.1", "10.213.0.2"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True)


def make_link() -> None:
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)  # a run killed before
    subprocess.run(["ip", "link", "del", HOST_IF], capture_output=True)
    ip("netns", "add", NS)
    ip("link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
    ip("link", "set", NS_IF, "netns", NS)
    ip("addr", "add", HOST_IP + "/30", "dev", HOST_IF)
    ip("link", "set", HOST_IF, "up")
    ip("netns", "exec", NS, "ip", "addr", "add", NS_IP + "/30", "dev", NS_IF)
    ip("netns", "exec", NS, "ip", "link", "set", NS_IF, "up")
    ip("netns", "exec", NS, "ip", "link", "set", "lo", "up")


def set_rate(rate: str) -> None:
    ip("netns", "exec", NS, "tc", "qdisc", "replace", "dev", NS_IF, "root", "tbf", "rate", rate, "burst", "256kb",
       "latency", "400ms")


def drop_link() -> None:
    subprocess.run(["ip", "link", "del", HOST_IF], capture_output=True)
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)


def serve(a) -> int:
    """Inside the namespace: the object server on its loopback and the delaying proxy on the
    veth address; prints the proxy's port, then serves until killed."""
    work = tempfile.mkdtemp(prefix="stoker-objbench-")
    if a.server == "s3rver":
        srv, direct = start_s3rver(os.path.join(work, "s3"), os.path.join(work, "s3rver.log"))
        for p in sorted(glob.glob(os.path.join(a.shards, "*.tar"))):
            upload(direct, p, os.path.basename(p))
    else:
        extra = ["--synthetic", *a.synthetic.split(",")] if a.synthetic else []
        srv = subprocess.Popen([os.path.join(a.build, "bin", "stoker_bench_range_server"), a.shards, *extra],
                               stdout=subprocess.PIPE, text=True)
        direct = "http://" + srv.stdout.readline().split()[-1]
    port = delay_proxy(int(direct.rsplit(":", 1)[1]), a.rtt / 2000, NS_IP)
    print(port, flush=True)
    try:
        srv.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def tree_cpu(pid: int) -> float:
    """CPU seconds of `pid` and its descendants (the server and the proxy)."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            total += benchlib.cpu_seconds(p)
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return total


def measure_listing(a, rtt: float, classes: int, per_class: int, jpeg: str):
    """An ImageFolder of classes x per_class keys listed from the (synthetic) bucket: seconds to
    stokerd ready, its peak memory, its progress lines, and seconds to the first batch."""
    srv = subprocess.Popen(["ip", "netns", "exec", NS, sys.executable, os.path.abspath(__file__), a.build, "--serve",
                            "--shards", a.shards, "--rtt", str(rtt), "--server", "range",
                            "--synthetic", f"{classes},{per_class},{jpeg}"],
                           stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        endpoint = f"http://{NS_IP}:{int(srv.stdout.readline())}"
        jobs = JOB.format(name="listed", source=f'{{type: imagefolder, root: "s3://bench/train/", endpoint: "{endpoint}"}}')
        os.environ.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=KEY, AWS_REGION="us-east-1")
        t0 = time.monotonic()
        d = benchlib.Daemon(a.build, CONFIG.format(workers=a.workers, jobs=jobs).replace("log_level: warn",
                                                                                       "log_level: info"))
        ready = time.monotonic() - t0
        try:
            with open(f"/proc/{d.proc.pid}/status") as f:
                peak = next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 1024
            c = d.consume(["--job", "listed", "--batches", "1"])
            benchlib.summary(c)
            first = time.monotonic() - t0
            with open(d.log.name) as f:
                progress = [l.strip() for l in f if "listing s3://" in l]
            samples = next(j for j in d.status()["jobs"] if j["name"] == "listed")["samples"]
            return ready, first, peak, progress, samples
        finally:
            d.close()
    finally:
        os.killpg(srv.pid, 15)
        srv.wait(timeout=10)


def measure_index(a, rtt: float, sidecars: bool):
    """A bucket job of the tar shards started with no index cache: seconds until stokerd is
    ready (every shard indexed), and the bytes fetched by then; with `sidecars`, each shard's
    .idx (stokerd --write-tar-index) lies beside it and is read instead of the shard."""
    for p in glob.glob(os.path.join(a.shards, "*.idx")):
        os.remove(p)
    n = len(glob.glob(os.path.join(a.shards, "*.tar")))
    if sidecars:
        subprocess.run([os.path.join(a.build, "bin", "stokerd"), "--write-tar-index",
                        f"{a.shards}/train-{{00..{n - 1:02d}}}.tar"], check=True, stdout=subprocess.DEVNULL)
    srv = subprocess.Popen(["ip", "netns", "exec", NS, sys.executable, os.path.abspath(__file__), a.build, "--serve",
                            "--shards", a.shards, "--rtt", str(rtt), "--server", "range"],
                           stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        endpoint = f"http://{NS_IP}:{int(srv.stdout.readline())}"
        jobs = JOB.format(name="bucket", source=f'{{type: tar, shards: "s3://bench/train-{{00..{n - 1:02d}}}.tar", '
                                                 f'endpoint: "{endpoint}"}}')
        os.environ.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=KEY, AWS_REGION="us-east-1")
        t0 = time.monotonic()
        d = benchlib.Daemon(a.build, CONFIG.format(workers=a.workers, jobs=jobs))
        ready = time.monotonic() - t0
        try:
            src = next(j for j in d.status()["jobs"] if j["name"] == "bucket")["sources"][0]
            return ready, src["bytes"]
        finally:
            d.close()
    finally:
        os.killpg(srv.pid, 15)
        srv.wait(timeout=10)


def measure(a, rtt: float):
    """One round trip: the server in the namespace, stokerd here; both jobs' images/s."""
    srv = subprocess.Popen(["ip", "netns", "exec", NS, sys.executable, os.path.abspath(__file__), a.build, "--serve",
                            "--shards", a.shards, "--rtt", str(rtt), "--server", a.server],
                           stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        endpoint = f"http://{NS_IP}:{int(srv.stdout.readline())}"
        n = len(glob.glob(os.path.join(a.shards, "*.tar")))
        jobs = JOB.format(name="local", source=f'{{type: tar, shards: "{a.shards}/train-{{00..{n - 1:02d}}}.tar"}}')
        jobs += JOB.format(name="bucket", source=f'{{type: tar, shards: "s3://bench/train-{{00..{n - 1:02d}}}.tar", '
                                                 f'endpoint: "{endpoint}"}}')
        os.environ.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=KEY, AWS_REGION="us-east-1")
        prefix = ["taskset", "-c", "0"] if a.pin else []
        d = benchlib.Daemon(a.build, CONFIG.format(workers=a.workers, jobs=jobs), prefix)
        try:
            rates = {"local": [], "bucket": []}
            cpu = {"local": 0.0, "bucket": 0.0, "link": 0.0}  # seconds over all runs of each job
            images = {"local": 0, "bucket": 0}
            for _ in range(3):
                for job in ("local", "bucket"):
                    c0, l0 = d.cpu(), tree_cpu(srv.pid)
                    s = benchlib.summary(d.consume(["--job", job, "--batches", str(a.batches)]))
                    cpu[job] += d.cpu() - c0
                    if job == "bucket":
                        cpu["link"] += tree_cpu(srv.pid) - l0
                    images[job] += s["samples"]
                    rates[job].append(s["images_per_s"] or s["images_per_s_with_prefetched"])
            job = next(j for j in d.status()["jobs"] if j["name"] == "bucket")
            per_image = {k: 1000 * cpu[k] / images["bucket" if k == "link" else k] for k in cpu}
            return rates, job["sources"][0], job.get("read_ahead") or {}, per_image
        finally:
            d.close()
    finally:
        os.killpg(srv.pid, 15)
        srv.wait(timeout=10)


def share(ra: dict, kind: str) -> float:
    """The bucket job's samples whose bytes a worker waited for (`waited`: its read was in flight)
    or read itself (`withdrawn`: not started yet), as a share of those read ahead."""
    total = sum(ra.get(k, 0) for k in ("ready", "waited", "withdrawn"))
    return ra.get(kind, 0) / total if total else 0.0


def rate_bytes(rate: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate)
    if not m:
        raise ValueError(f"--rates: expected e.g. 200mbit, got {rate}")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("images", nargs="?", default="/tmp/stoker-bench-images")
    ap.add_argument("--rtt-ms", default="0,20,80")
    ap.add_argument("--rates", default="10gbit,200mbit")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--server", choices=["range", "s3rver"], default="range")
    ap.add_argument("--pin", action="store_true",
                    help="stokerd on core 0; the server, the delaying proxy and the consumers on core 1, as a store "
                         "on other machines would be (use with --workers 1)")
    ap.add_argument("--listing", metavar="CLASSES,PER_CLASS",
                    help="instead: list a synthetic ImageFolder bucket of CLASSES x PER_CLASS keys (1000,1281 is "
                         "ImageNet's size) at each --rtt-ms: time to ready and to the first batch, peak memory")
    ap.add_argument("--index", action="store_true",
                    help="instead: seconds to ready for a bucket job of the shards with no index cache, the shards "
                         "read (headers walked as they stream) against sidecar .idx files, at each --rtt-ms and rate")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--synthetic", default="", help=argparse.SUPPRESS)
    ap.add_argument("--shards", help=argparse.SUPPRESS)
    ap.add_argument("--rtt", type=float, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    if a.serve:
        return serve(a)
    if a.server == "s3rver" and not os.access(S3RVER, os.X_OK):
        print(f"s3rver is not installed ({S3RVER}): run scripts/setup.sh --test", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("needs root: the link is a network namespace with netem on its loopback", file=sys.stderr)
        return 2
    if a.pin:
        os.sched_setaffinity(0, {1})  # inherited by the server, the proxy and stokerctl; stokerd: taskset -c 0
    shards = tempfile.mkdtemp(prefix="stoker-objbench-shards-")
    a.shards = shards
    try:
        mean = make_shards(os.path.abspath(a.images), shards, 8)
        make_link()
        if a.listing:
            classes, per_class = (int(x) for x in a.listing.split(","))
            jpeg = sorted(glob.glob(os.path.join(os.path.abspath(a.images), "*", "*.jpg")))[0]
            print(f"machine: {benchlib.machine()}; listing {classes} x {per_class} = {classes * per_class} keys "
                  f"(ListObjectsV2, 1000 a page) from a synthetic bucket; each object {jpeg}")
            for rtt in (float(x) for x in a.rtt_ms.split(",")):
                ready, first, peak, progress, samples = measure_listing(a, rtt, classes, per_class, jpeg)
                print(f"rtt_ms {rtt:.0f}: {samples} samples; stokerd ready {ready:.1f} s, first batch {first:.1f} s, "
                      f"peak memory {peak:.0f} MiB, {len(progress)} progress line(s)", flush=True)
                for line in progress[:3]:
                    print("  " + line)
            return 0
        if a.index:
            total = sum(os.path.getsize(p) for p in glob.glob(os.path.join(shards, "*.tar")))
            print(f"machine: {benchlib.machine()}; 8 shards, {total / 2**20:.0f} MiB in all; time to ready with no "
                  f"index cache, and MiB fetched by then")
            print(f"{'rtt_ms':>6} {'rate':>8} {'read shards s':>13} {'MiB':>6} {'sidecars s':>10} {'MiB':>6}")
            for rate in a.rates.split(","):
                set_rate(rate)
                for rtt in (float(x) for x in a.rtt_ms.split(",")):
                    walk_s, walk_b = measure_index(a, rtt, False)
                    side_s, side_b = measure_index(a, rtt, True)
                    print(f"{rtt:6.0f} {rate:>8} {walk_s:13.2f} {walk_b / 2**20:6.1f} {side_s:10.2f} "
                          f"{side_b / 2**20:6.2f}", flush=True)
            return 0
        print(f"machine: {benchlib.machine()}; {a.images}: mean image {mean / 1024:.1f} KiB; "
              f"{a.workers} worker(s), {a.batches} batches of 64 per run, 3 runs per job; server: {a.server}")
        print("waited / withdrawn: the bucket job's reads a worker waited for / read itself (share of all); "
              "cpu_ms: stokerd's CPU per image, local / bucket job, and the link's (server + delaying proxy, " +
              ("pinned: stokerd on core 0, the link and consumers on core 1" if a.pin else "on the same cores") +
              ") per bucket image")
        print(f"{'rtt_ms':>6} {'rate':>8} {'local img/s':>12} {'bucket img/s':>13} {'bucket/local':>12} "
              f"{'link img/s':>10} {'bucket/link':>11} {'p50_ms':>6} {'inflight':>8} {'cpu_ms':>16} "
              f"{'waited':>7} {'withdrawn':>9}")
        for rate in a.rates.split(","):
            set_rate(rate)
            for rtt in (float(x) for x in a.rtt_ms.split(",")):
                r, src, ra, cpu = measure(a, rtt)
                loc, buc = statistics.median(r["local"]), statistics.median(r["bucket"])
                link = rate_bytes(rate) / mean
                print(f"{rtt:6.0f} {rate:>8} {loc:12.1f} {buc:13.1f} {buc / loc:12.2f} {link:10.0f} "
                      f"{min(buc / link, 9.99):11.2f} {src['latency_ms']['p50']:6.1f} "
                      f"{ra.get('in_flight_limit', 0):8} "
                      f"{cpu['local']:4.2f}/{cpu['bucket']:4.2f}/{cpu['link']:4.2f} "
                      f"{share(ra, 'waited'):7.3f} {share(ra, 'withdrawn'):9.3f}", flush=True)
    finally:
        drop_link()
        shutil.rmtree(shards, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
