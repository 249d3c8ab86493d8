#!/usr/bin/python3
"""GPU delivery end to end (issue #8), for scripts/gpu-check.sh: the two figures that need a
trainer process and torch.

 1. ready -> usable torch tensor: for each batch, the time from asking the Loader for it to
    a CUDA tensor whose stream waits on the daemon's copy (the control hop: a message on the
    socket, the IPC event wait queued on the current stream). Median and p99 in microseconds,
    with the daemon always ahead (prefetch full). Target: median <= 50 us.
 2. images/s delivered as torch.cuda tensors, stoker.Loader(device="cuda", device_normalize)
    against torchvision's DataLoader (all cores, pin_memory=True, .cuda(non_blocking=True),
    RandomResizedCrop + flip + ToTensor + Normalize) on the same files, same run.

It needs a torch built with CUDA; with `--simulate` it runs the same code paths on the host
simulation (STOKER_DEVICE_BACKEND=hostsim, CPU tensors) so the script itself is checked on
machines without a GPU (the figures then mean nothing).

An epoch must hold many batches, or the DataLoader's workers cannot all work at once (one
64-image batch an epoch is one worker's job): with fewer than --min-epoch files, the script
reads an ImageFolder of links that names each file several times (the same real photographs,
read through the page cache by both sides alike) and says so.

usage: bench-gpu-loader.py BUILD_DIR IMAGES_DIR [--batches N] [--min-epoch N] [--probes N] [--phases]
                           [--simulate]
(tests/python/test_gpu_tools.py runs it with --simulate, so that it works when a GPU is lent.)
"""
import argparse
import os
import shutil
import signal
import socket as pysocket
import statistics
import subprocess
import sys
import tempfile
import time


def wait_listening(path, proc, log):
    for _ in range(400):
        s = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_SEQPACKET)
        try:
            s.connect(path)
            return
        except OSError:
            if proc.poll() is not None:
                sys.exit("stokerd exited: " + open(log).read())
            time.sleep(0.05)
        finally:
            s.close()
    sys.exit("stokerd did not start")


def endless(loader):
    """Batches across epochs, set_epoch at each start (an epoch may hold a single batch)."""
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def wait_ahead(busy, seconds=0.05):
    """Gives the daemon time to fill the ring: busy (the thread spins, its core stays awake, as
    a trainer's does while it launches a step) or asleep (the core idles: every step after it
    runs cold, several times slower on the H200 machine, docs/PERFORMANCE.md)."""
    if not busy:
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def phases(stoker, torch, sock, simulate, rounds=30):
    """Where ready -> tensor goes: each step of a Batch's making, timed apart (the ring full,
    as in the latency figure), for a device loader and a host loader on the same job, the
    thread busy or asleep while the ring fills."""
    from torch.utils import dlpack as td
    from stoker.batch import Batch, _current_stream_handle
    for name, device, busy in (("device", "cuda", True), ("device", "cuda", False), ("host", None, True),
                               ("host", None, False)):
        backend = ("hostsim" if simulate else "cuda") if device else ""
        loader = stoker.Loader("bench", socket=sock, device=device, framework="torch")
        loader.set_epoch(1000)  # an epoch the main loop never reached
        it = iter(loader)
        next(it)
        steps = {}
        for _ in range(rounds):
            if not simulate:
                torch.cuda.synchronize()
            wait_ahead(busy)
            t = [time.perf_counter()]
            native = loader._next_native()
            t.append(time.perf_counter())
            if device:
                stream = _current_stream_handle(0) if not simulate else 0  # as Batch gets it
                t.append(time.perf_counter())
                caps = [native.device_images_dlpack(stream), native.device_labels_dlpack(stream), native.ids_dlpack()]
            else:
                t.append(time.perf_counter())
                caps = [native.images_dlpack(), native.labels_dlpack(), native.ids_dlpack()]
            t.append(time.perf_counter())
            tensors = [td.from_dlpack(c) for c in caps]
            t.append(time.perf_counter())
            del tensors, caps
            native = None
            t.append(time.perf_counter())
            b = Batch(loader._next_native(), "torch", False, 0 if device else -1, backend)
            t.append(time.perf_counter())
            del b
            if not simulate:
                torch.cuda.synchronize()
            wait_ahead(busy)
            t.append(time.perf_counter())
            b = Batch(loader._next_native(), "torch", False, 0 if device else -1, backend)
            t.append(time.perf_counter())
            del b
            d = [(t[k + 1] - t[k]) * 1e6 for k in range(len(t) - 1)]
            del d[6]  # the second wait is not a step
            for label, us in zip(("next (C, socket)", "current_stream", "3 DLPack exports", "3 torch.from_dlpack",
                                  "drop (release)", "next + Batch(...) at once", "next + Batch(...) after the wait"), d):
                steps.setdefault(label, []).append(us)
        loader.close()
        print(f"phases, {name} loader, thread {'busy' if busy else 'asleep'} (median us over {rounds}): " +
              ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in steps.items()))


def repeated_tree(images, min_epoch, out):
    """IMAGES itself when it holds min_epoch files, else a tree of links naming each file
    ceil(min_epoch / files) times, in the same classes (hard links, else copies)."""
    files = [(c, f) for c in sorted(os.listdir(images)) if os.path.isdir(os.path.join(images, c))
             for f in sorted(os.listdir(os.path.join(images, c)))]
    if not files:
        sys.exit(f"bench-gpu-loader: no class folders with files in {images}")
    if len(files) >= min_epoch:
        return images
    k = -(-min_epoch // len(files))
    for c, f in files:
        os.makedirs(os.path.join(out, c), exist_ok=True)
        stem, ext = os.path.splitext(f)
        for j in range(k):
            src, dst = os.path.join(images, c, f), os.path.join(out, c, f"{stem}-{j}{ext}")
            try:
                os.link(src, dst)  # not a symlink: stokerd opens nothing outside the root
            except OSError:
                shutil.copyfile(src, dst)
    print(f"images: {len(files)} files in {images}, each named {k} times: an epoch of {k * len(files)}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("images")
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--min-epoch", type=int, default=4096)
    ap.add_argument("--probes", type=int, default=30, help="latency samples of each kind (and --phases rounds)")
    ap.add_argument("--simulate", action="store_true")
    ap.add_argument("--phases", action="store_true",
                    help="also time each step of ready -> tensor, device and host loaders side by side")
    a = ap.parse_args()
    if a.simulate:
        os.environ["STOKER_DEVICE_BACKEND"] = "hostsim"
    sys.path.insert(0, os.path.join(a.build, "python"))
    import torch
    import stoker
    if not a.simulate and not torch.cuda.is_available():
        print("SKIP: this interpreter's torch has no CUDA (Debian's python3-torch is CPU-only)")
        return 77
    tmp = tempfile.mkdtemp(prefix="stoker-gpu-bench-")
    a.images = repeated_tree(os.path.abspath(a.images), a.min_epoch, os.path.join(tmp, "images"))
    cfg = os.path.join(tmp, "bench.yaml")
    with open(cfg, "w") as f:
        f.write(f"""server: {{log_level: warn}}
jobs:
  bench:
    source: {{root: "{os.path.abspath(a.images)}"}}
    batch_size: 64
    prefetch: 8
    device_normalize: true
    pipeline:
      - decode: {{}}
      - random_resized_crop: {{size: 224}}
      - horizontal_flip: {{p: 0.5}}
      - normalize: {{mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}}
    output: {{dtype: float32, layout: NCHW}}
""")
    sock = os.path.join(tmp, "s.sock")
    log = os.path.join(tmp, "stokerd.log")
    daemon = subprocess.Popen([os.path.join(a.build, "bin", "stokerd"), "--config", cfg, "--socket", sock],
                              stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        wait_listening(sock, daemon, log)
        loader = stoker.Loader("bench", socket=sock, device="cuda", framework="torch")
        it = endless(loader)
        # Throughput first, with nothing between batches.
        n, t_start = 0, None
        while n < a.batches:
            images, labels = next(it)
            if t_start is None:
                t_start = time.perf_counter()  # after the first batch: prefetch excluded
            n += 1
            del images, labels
        if not a.simulate:
            torch.cuda.synchronize()
        stoker_rate = (n - 1) * 64 / (time.perf_counter() - t_start)
        # Latency with the ring full: let the daemon get ahead, then time one request, the
        # thread busy meanwhile (as a trainer's is, launching its step) or asleep.
        lat = {True: [], False: []}
        for k in range(2 * a.probes):  # on hostsim too: the same code paths, figures meaningless
            if not a.simulate:
                torch.cuda.current_stream().synchronize()
            wait_ahead(busy=k % 2 == 0)
            t0 = time.perf_counter()
            images, labels = next(it)
            lat[k % 2 == 0].append((time.perf_counter() - t0) * 1e6)
            del images, labels
        loader.close()
        if a.phases:
            phases(stoker, torch, sock, a.simulate, a.probes)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)

    import torchvision.datasets as D
    import torchvision.transforms as T
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    dl = torch.utils.data.DataLoader(D.ImageFolder(a.images, tf), batch_size=64, shuffle=True,
                                     num_workers=os.cpu_count(), pin_memory=not a.simulate,
                                     persistent_workers=True)
    n, t_start = 0, None
    while n < a.batches:
        for images, labels in dl:
            if not a.simulate:
                images, labels = images.cuda(non_blocking=True), labels.cuda(non_blocking=True)
            if t_start is None:
                t_start = time.perf_counter()
            n += 1
            if n >= a.batches:
                break
    if not a.simulate:
        torch.cuda.synchronize()
    tv_rate = (n - 1) * 64 / (time.perf_counter() - t_start)

    print(f"device: {'hostsim (figures meaningless)' if a.simulate else torch.cuda.get_device_name()}, "
          f"{os.cpu_count()} cores")
    for busy, v in lat.items():
        if v:
            v.sort()
            print(f"ready -> usable torch.cuda tensor, the thread {'busy' if busy else 'asleep'} while the "
                  f"daemon got ahead: median {statistics.median(v):.1f} us, p99 {v[int(len(v) * 0.99) - 1]:.1f} us "
                  f"over {len(v)} batches (target median <= 50 us)")
    print(f"images/s as torch.cuda tensors: stoker {stoker_rate:.0f}, torchvision DataLoader "
          f"({os.cpu_count()} workers, pin_memory) {tv_rate:.0f}, ratio {stoker_rate / tv_rate:.2f}")
    del dl  # its workers read the linked tree
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
