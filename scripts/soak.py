#!/usr/bin/env python3
"""Soak test (issue #13): EPOCHS epochs with 4 consumers on one job, rank 3 SIGKILLed and
restarted every few seconds, bad files in the tree. Samples the daemon's RSS and open
descriptors throughout, prints the series, and fails when

  - RSS or descriptors grow after the first epoch (bounds: +16 MiB, +16 descriptors), or
  - a consumer that stayed (ranks 0-2) got batches other than an undisturbed run of the same
    config gives, or that run does not deliver every good sample once per epoch.

  scripts/soak.py BUILD_DIR [EPOCHS]        (default build, 20)
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def read_ids(paths):
    """{(rank, epoch): ids in delivery order} from stokerctl consume --ids outputs (rank = index)."""
    out = {}
    for r, path in enumerate(paths):
        with open(path) as f:
            for line in f:
                try:
                    m = json.loads(line)
                except ValueError:
                    continue
                if "ids" in m:
                    out.setdefault((r, m["epoch"]), []).extend(m["ids"])
    return out


def start_daemon(bin_dir, cfg, socket, log):
    daemon = subprocess.Popen([os.path.join(bin_dir, "stokerd"), "--config", cfg, "--socket", socket],
                              stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while True:
        r = subprocess.run([os.path.join(bin_dir, "stokerctl"), "status", "--socket", socket],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return daemon
        if daemon.poll() is not None or time.monotonic() > deadline:
            sys.exit("stokerd did not start: " + open(log.name).read())
        time.sleep(0.05)


def consumer(bin_dir, socket, rank, epochs, out):
    """stokerctl consume --ids for `epochs` epochs of rank `rank`, JSON lines to `out`."""
    return subprocess.Popen([os.path.join(bin_dir, "stokerctl"), "consume", "--job", "soak", "--socket", socket,
                             "--rank", str(rank), "--epochs", str(epochs), "--ids", "--hold-ms", "150"],
                            stdout=out, stderr=subprocess.STDOUT)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    bin_dir = os.path.join(build, "bin")
    tmp = tempfile.mkdtemp(prefix="stoker-soak-")
    try:
        data = os.path.join(tmp, "data")
        shutil.copytree(os.path.join(ROOT, "tests", "data", "demo"), data,
                        ignore=shutil.ignore_patterns("LICENSE*"))
        photo = os.path.join(data, "flower", sorted(os.listdir(os.path.join(data, "flower")))[0])
        with open(photo, "rb") as f:
            jpeg = f.read()
        for i, (cls, content) in enumerate([("flower", jpeg[:500]), ("insect", b"not an image\n"),
                                            ("texture", jpeg[: len(jpeg) // 2]), ("landscape", b"")]):
            with open(os.path.join(data, cls, f"broken_{i}.jpg"), "wb") as f:
                f.write(content)
        cfg = os.path.join(tmp, "soak.yaml")
        with open(cfg, "w") as f:
            f.write(f"""server: {{workers: 2, log_level: warn}}
jobs:
  soak:
    source: {{root: "{data}"}}
    batch_size: 4
    consumers: 4
    prefetch: 2
    seed: 3
    pipeline:
      - decode: {{}}
      - random_resized_crop: {{size: 64}}
      - horizontal_flip: {{p: 0.5}}
""")
        socket = os.path.join(tmp, "s.sock")
        log = open(os.path.join(tmp, "stokerd.log"), "w")
        daemon = start_daemon(bin_dir, cfg, socket, log)
        outs = [open(os.path.join(tmp, f"rank{r}.jsonl"), "w") for r in range(3)]
        stayers = [consumer(bin_dir, socket, r, epochs, outs[r]) for r in range(3)]
        victim_log = open(os.path.join(tmp, "rank3.log"), "w")
        victim = consumer(bin_dir, socket, 3, 10 ** 6, victim_log)
        samples, kills, last_kill, t0 = [], 0, time.monotonic(), time.monotonic()
        while any(p.poll() is None for p in stayers):
            samples.append((time.monotonic() - t0, rss_kib(daemon.pid), fds(daemon.pid)))
            if time.monotonic() - last_kill > 1.5:
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills += 1
                victim = consumer(bin_dir, socket, 3, 10 ** 6, victim_log)
                last_kill = time.monotonic()
            time.sleep(0.1)
            if time.monotonic() - t0 > 1800:
                sys.exit("soak: the consumers did not finish within 30 minutes")
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        status = json.loads(subprocess.run([os.path.join(bin_dir, "stokerctl"), "status", "--socket", socket],
                                           capture_output=True, text=True).stdout)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        for p in stayers:
            if p.returncode != 0:
                sys.exit(f"soak: a consumer failed (exit {p.returncode}); see {tmp}")

        # Delivery: what the staying ranks got must be exactly what an undisturbed run of the
        # same config gives (the quarantine found in this run is in force for both), and an
        # undisturbed run delivers every good sample once per epoch over the 4 ranks.
        got = read_ids([o.name for o in outs])
        ref_outs = [os.path.join(tmp, f"ref{r}.jsonl") for r in range(4)]
        daemon = start_daemon(bin_dir, cfg, socket, log)
        refs = []
        for r in range(4):
            f = open(ref_outs[r], "w")
            refs.append(subprocess.Popen([os.path.join(bin_dir, "stokerctl"), "consume", "--job", "soak", "--socket",
                                          socket, "--rank", str(r), "--epochs", str(epochs), "--ids"],
                                         stdout=f, stderr=subprocess.STDOUT))
        for p in refs:
            p.wait(600)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        ref = read_ids(ref_outs)
        failures = []
        good = status["jobs"][0]["samples"] - status["jobs"][0]["quarantined"]
        for e in range(epochs):
            union = []
            for r in range(4):
                union += ref.get((r, e), [])
            if len(set(union)) != good:
                failures.append(f"epoch {e}: the undisturbed run delivered {len(set(union))} distinct good samples of {good}")
            for r in range(3):
                if got.get((r, e)) != ref.get((r, e)):
                    failures.append(f"rank {r} epoch {e}: batches differ from the undisturbed run's")
        print(f"soak: {epochs} epochs, rank 3 SIGKILLed {kills} times, {good} good samples, "
              f"{status['jobs'][0]['quarantined']} quarantined")

        # Memory and descriptors: flat after the first epoch (first fifth of the run).
        print("t_s\trss_kib\tfds")
        for t, rss, n in samples[:: max(1, len(samples) // 40)]:
            print(f"{t:.1f}\t{rss}\t{n}")
        warm = samples[max(1, len(samples) // epochs)]
        peak_rss = max(s[1] for s in samples[len(samples) // epochs:])
        peak_fds = max(s[2] for s in samples[len(samples) // epochs:])
        print(f"after epoch 1: rss {warm[1]} KiB, {warm[2]} fds; peak afterwards: rss {peak_rss} KiB, {peak_fds} fds")
        if peak_rss > warm[1] + 16 * 1024:
            failures.append(f"RSS grew by {peak_rss - warm[1]} KiB after the first epoch (bound 16 MiB)")
        if peak_fds > warm[2] + 16:
            failures.append(f"descriptors grew by {peak_fds - warm[2]} after the first epoch (bound 16)")
        if failures:
            print("soak: FAILED\n  " + "\n  ".join(failures))
            sys.exit(1)
        print("soak: PASSED")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
