#!/usr/bin/python3
"""Issue #35's latency figures: the same tar shards of real photos read by stokerd from local
files and from an object server behind a link with a round-trip time and a rate, side by side
in one run. The server: build/bin/stoker_bench_range_server (GET with Range and HEAD, next to
no CPU per request: what is measured is stokerd), or with `--server s3rver` the S3 server the
tests use (`scripts/setup.sh --test`; on 2 cores its milliseconds of CPU per request are the
limit, not the link).

The link: a network namespace of the benchmark's own (`unshare -n`, so root is needed) whose
loopback has a `tbf` rate limit, and a TCP proxy of this script between stokerd and s3rver
that holds every chunk half the round trip in each direction (order kept; the kernel here has
no netem). s3rver, stokerd and the consumer all run inside the namespace; only the bucket
job's requests cross the link (Unix sockets do not).

For each round trip (--rtt-ms) and rate (--rates): stokerd serves two jobs with the same
pipeline (RandomResizedCrop 224 + flip, uint8, batches of 64), one on the local shards and one
on the bucket's; `stokerctl consume` takes --batches of each in turn, three times, and the
script prints images/s of each, their ratio, and what the link allows (rate / mean sample
bytes). The goal: the bucket job at >= 90% of the local one while the link's rate exceeds what
the job needs, and >= 90% of the link's rate when it does not.

    sudo scripts/bench-objstore.py [BUILD_DIR] [IMAGES_DIR] [--rtt-ms 0,20,80]
                                   [--rates 10gbit,200mbit] [--workers 2] [--batches 40]
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


def delay_proxy(target_port: int, delay_s: float) -> int:
    """A TCP proxy on 127.0.0.1 (its port returned) to target_port that forwards each chunk
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
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port.append(server.sockets[0].getsockname()[1])
        ready.set()
        async with server:
            await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(serve()), daemon=True).start()
    ready.wait(10)
    return port[0]


def inner(a) -> int:
    """Inside the namespace: the link, the server, stokerd, and the consumers."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    if a.rate:
        # Both directions leave through lo: the requests' few bytes share the rate.
        subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", a.rate, "burst", "256kb",
                        "latency", "200ms"], check=True)
    work = tempfile.mkdtemp(prefix="stoker-objbench-")
    if a.server == "s3rver":
        s3, direct = start_s3rver(os.path.join(work, "s3"), os.path.join(work, "s3rver.log"))
    else:
        s3 = subprocess.Popen([os.path.join(a.build, "bin", "stoker_bench_range_server"), a.shards],
                              stdout=subprocess.PIPE, text=True)
        direct = "http://" + s3.stdout.readline().split()[-1]
    endpoint = f"http://127.0.0.1:{delay_proxy(int(direct.rsplit(':', 1)[1]), a.rtt / 2000)}"
    try:
        shards = sorted(glob.glob(os.path.join(a.shards, "*.tar")))
        if a.server == "s3rver":
            for p in shards:
                upload(direct, p, os.path.basename(p))
        n = len(shards)
        jobs = JOB.format(name="local", source=f'{{type: tar, shards: "{a.shards}/train-{{00..{n - 1:02d}}}.tar"}}')
        jobs += JOB.format(name="bucket", source=f'{{type: tar, shards: "s3://bench/train-{{00..{n - 1:02d}}}.tar", '
                                                 f'endpoint: "{endpoint}"}}')
        os.environ.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=KEY, AWS_REGION="us-east-1")
        d = benchlib.Daemon(a.build, CONFIG.format(workers=a.workers, jobs=jobs))
        try:
            rates = {"local": [], "bucket": []}
            for _ in range(3):
                for job in ("local", "bucket"):
                    s = benchlib.summary(d.consume(["--job", job, "--batches", str(a.batches)]))
                    rates[job].append(s["images_per_s"] or s["images_per_s_with_prefetched"])
            st = d.status()
            src = next(j for j in st["jobs"] if j["name"] == "bucket")["sources"][0]
            print(json.dumps({"local": rates["local"], "bucket": rates["bucket"],
                              "latency_ms": src.get("latency_ms"), "requests": src.get("requests"),
                              "retries": src.get("retries")}))
        finally:
            d.close()
    finally:
        s3.terminate()
        s3.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    return 0


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
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shards", help=argparse.SUPPRESS)
    ap.add_argument("--rtt", type=float, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--rate", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    if a.inner:
        return inner(a)
    if a.server == "s3rver" and not os.access(S3RVER, os.X_OK):
        print(f"s3rver is not installed ({S3RVER}): run scripts/setup.sh --test", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("needs root: the link is a network namespace with netem on its loopback", file=sys.stderr)
        return 2
    shards = tempfile.mkdtemp(prefix="stoker-objbench-shards-")
    try:
        mean = make_shards(os.path.abspath(a.images), shards, 8)
        print(f"machine: {benchlib.machine()}; {a.images}: mean image {mean / 1024:.1f} KiB; "
              f"{a.workers} worker(s), {a.batches} batches of 64 per run, 3 runs per job; server: {a.server}")
        print(f"{'rtt_ms':>6} {'rate':>8} {'local img/s':>12} {'bucket img/s':>13} {'bucket/local':>12} "
              f"{'link img/s':>10} {'bucket/link':>11} {'p50_ms':>6}")
        for rate in a.rates.split(","):
            for rtt in (float(x) for x in a.rtt_ms.split(",")):
                out = subprocess.run(["unshare", "-n", sys.executable, os.path.abspath(__file__), a.build,
                                      "--inner", "--shards", shards, "--rtt", str(rtt), "--rate", rate,
                                      "--workers", str(a.workers), "--batches", str(a.batches),
                                      "--server", a.server],
                                     capture_output=True, text=True, timeout=3600)
                if out.returncode != 0:
                    print(out.stdout, out.stderr, file=sys.stderr)
                    return 1
                r = json.loads(out.stdout.strip().splitlines()[-1])
                loc, buc = statistics.median(r["local"]), statistics.median(r["bucket"])
                link = rate_bytes(rate) / mean
                print(f"{rtt:6.0f} {rate:>8} {loc:12.1f} {buc:13.1f} {buc / loc:12.2f} {link:10.0f} "
                      f"{min(buc / link, 9.99):11.2f} {r['latency_ms']['p50']:6.1f}", flush=True)
    finally:
        shutil.rmtree(shards, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
