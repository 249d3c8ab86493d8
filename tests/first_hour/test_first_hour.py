"""A new user's first hour (issue #37): what setup.sh, demo.sh, stokerd-launch.sh, stokerctl and
stokerd say to someone who has just cloned the repository, and that the README agrees with the
scripts. Each test is its own ctest entry (tests/first_hour.cmake); the ones that run programs
take them from $STOKER_BIN_DIR and skip without it."""
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(SRC, "tests", "data", "demo")
BIN = os.environ.get("STOKER_BIN_DIR", "")
DEMO_SAMPLES = 64


def need_bin():
    if not BIN or not os.path.exists(os.path.join(BIN, "stokerd")):
        pytest.skip("STOKER_BIN_DIR with stokerd and stokerctl is not set")


def write_fake(path, body):
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)


# ---- 1. setup.sh waits for apt's lock -------------------------------------------------------

def test_setup_waits_for_apt_lock(tmp_path):
    """Held the way apt holds it (fcntl on the lock file), the lock makes setup.sh wait with a line
    naming the holder; released, setup goes on to apt-get update and install (a fake one here:
    nothing is installed, no root is needed)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "apt-calls"
    write_fake(fake / "apt-get", f'echo "$*" >> "{calls}"\n')
    write_fake(fake / "dpkg-query", "exit 1\n")  # every package missing
    write_fake(fake / "sudo", 'exec "$@"\n')
    locks = [tmp_path / "lists-lock", tmp_path / "lock-frontend"]
    for p in locks:
        p.write_text("")
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}",
               STOKER_APT_LOCKS=" ".join(str(p) for p in locks), STOKER_APT_LOCK_TIMEOUT="30")
    held = open(locks[0], "r+")
    fcntl.lockf(held, fcntl.LOCK_EX)  # what apt-get update does to /var/lib/apt/lists/lock
    proc = subprocess.Popen([os.path.join(SRC, "scripts", "setup.sh")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(2.5)
        assert proc.poll() is None, "setup.sh did not wait: " + proc.stdout.read()
        assert not calls.exists(), "apt-get ran while its lock was held"
        fcntl.lockf(held, fcntl.LOCK_UN)
        held.close()
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert f"setup: waiting for apt's lock (held by PID {os.getpid()}" in out, out
    assert str(locks[0]) in out
    ran = calls.read_text().splitlines()
    assert len(ran) == 2, ran
    assert "update" in ran[0] and "install" in ran[1], ran
    assert all("DPkg::Lock::Timeout=30" in line for line in ran), ran


# ---- 6. the README and the scripts -------------------------------------------------------------

def readme():
    with open(os.path.join(SRC, "README.md")) as f:
        return f.read()


def paragraph(text, start):
    at = text.index(start)
    end = text.find("\n\n", at)
    return text[at:end if end >= 0 else len(text)]


def setup_list(*args):
    out = subprocess.run([os.path.join(SRC, "scripts", "setup.sh"), "--list", *args], capture_output=True,
                         text=True, check=True).stdout
    return out.split()


def test_readme_package_list_equals_setup():
    text = readme()
    build = set(re.findall(r"`([a-z0-9][a-z0-9.+-]+)`", paragraph(text, "The packages (Debian 12's own")))
    tests = set(re.findall(r"`([a-z0-9][a-z0-9.+-]+)`", paragraph(text, "With `--test` also")))
    tests.discard("--test")
    assert build == set(setup_list()), "README's build packages differ from scripts/setup.sh --list"
    assert tests == set(setup_list("--test")) - set(setup_list()), \
        "README's test packages differ from scripts/setup.sh --list --test"


def test_readme_cmake_options_and_jobs():
    text = readme()
    options = paragraph(text, "CMake options:")
    with open(os.path.join(SRC, "CMakeLists.txt")) as f:
        cmake = f.read()
    for name in re.findall(r"(?:option|set)\((STOKER_[A-Z_]+)", cmake):
        if name in ("STOKER_FUZZ", "STOKER_TSAN", "STOKER_THREAD_SAFETY"):  # the test tiers' own (scripts/test.sh)
            continue
        assert name in options, f"{name} (CMakeLists.txt) is missing from the README's CMake options"
    # Build commands name their jobs: a bare `-j` runs unbounded jobs on a small machine.
    for line in text.splitlines():
        for m in re.finditer(r"(?<!\S)-j(\S*)(\s+(\S+))?", line):
            jobs = m.group(1) or m.group(3) or ""
            assert re.fullmatch(r"\d+|\"?\$\(nproc\)\"?", jobs), f"unbounded -j in README: {line}"
    assert "STOKER_BUILD_BENCHMARKS" in options


def test_user_build_has_no_benchmarks(tmp_path):
    """-DSTOKER_BUILD_TESTS=OFF (a user's build, the demo's) configures no benchmark program;
    -DSTOKER_BUILD_BENCHMARKS=ON (the benchmark scripts') brings them back."""
    build = tmp_path / "b"
    base = ["cmake", "-S", SRC, "-B", str(build), "-G", "Ninja", "-DSTOKER_BUILD_TESTS=OFF", "-DSTOKER_PYTHON=OFF",
            "-DSTOKER_CUDA=OFF", "-DSTOKER_REMOTE=OFF"]

    def targets(*extra):
        subprocess.run(base + list(extra), check=True, capture_output=True, timeout=60)
        out = subprocess.run(["cmake", "--build", str(build), "--target", "help"], check=True, capture_output=True,
                             text=True, timeout=30).stdout
        return set(re.findall(r"^(\S+): ", out, re.M))

    off = targets()
    assert "stokerd" in off and "stokerctl" in off
    assert not [t for t in off if "bench" in t and "/" not in t], sorted(t for t in off if "bench" in t)
    on = targets("-DSTOKER_BUILD_BENCHMARKS=ON")
    assert "stoker_bench_decode" in on and "stoker_bench_mixture" in on


# ---- programs ----------------------------------------------------------------------------------

class Daemon:
    def __init__(self, tmp_path, config_text, name="d"):
        self.config = tmp_path / f"{name}.yaml"
        self.config.write_text(config_text)
        self.socket = str(tmp_path / f"{name}.sock")
        self.log = tmp_path / f"{name}.log"
        self.proc = subprocess.Popen([os.path.join(BIN, "stokerd"), "--config", str(self.config), "--socket",
                                      self.socket], stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while not os.path.exists(self.socket):
            assert self.proc.poll() is None, "stokerd exited: " + self.log.read_text()
            assert time.monotonic() < deadline, "stokerd did not come up: " + self.log.read_text()
            time.sleep(0.02)

    def ctl(self, *args, timeout=60):
        r = subprocess.run([os.path.join(BIN, "stokerctl"), *args, "--socket", self.socket], capture_output=True,
                           text=True, timeout=timeout)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    def status_job(self, name):
        return next(j for j in json.loads(self.ctl("status"))["jobs"] if j["name"] == name)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)
        return self.proc.returncode


def job_yaml(name="demo", batch=16, extra="", drop_last=False, workers=2):
    return (f"server: {{workers: {workers}}}\njobs:\n  {name}:\n    source: {{type: imagefolder, root: {DEMO}}}\n"
            f"    batch_size: {batch}\n    drop_last: {'true' if drop_last else 'false'}\n    prefetch: 4\n"
            f"    pipeline:\n      - decode: {{}}\n      - random_resized_crop: {{size: 64}}\n"
            f"    output: {{dtype: uint8, layout: NCHW}}\n{extra}")


@pytest.fixture
def daemons():
    started = []
    yield started
    for d in started:
        d.stop()


def summary_of(out):
    return json.loads(out.splitlines()[-1])


def test_demo_ends_with_a_human_line_naming_images_per_s():
    """scripts/demo.sh on programs already built: human lines, the last `demo: N images/s over S s,
    ... waited W% ...`, the rate over a span of seconds; the JSON only with --json."""
    need_bin()
    env = dict(os.environ, STOKER_DEMO_SECONDS="2")
    build = os.path.dirname(BIN.rstrip("/"))
    r = subprocess.run([os.path.join(SRC, "scripts", "demo.sh"), "--prebuilt", build], capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.rstrip("\n").splitlines()
    assert not any(line.startswith("{") for line in lines), "raw JSON without --json:\n" + r.stdout
    m = re.match(r"demo: (\d+) images/s over (\d+\.\d) s, .*waited (\d+)% of the time", lines[-1])
    assert m, lines[-1]
    assert int(m.group(1)) > 0
    assert float(m.group(2)) >= 1.0, "a rate over less than a second"
    assert int(m.group(3)) > 0, "status read no wait for a consumer that only waits"
    assert any(line.startswith("demo: next:") for line in lines)
    r = subprocess.run([os.path.join(SRC, "scripts", "demo.sh"), "--prebuilt", build, "--json"],
                       capture_output=True, text=True, timeout=60, env=dict(env, STOKER_DEMO_SECONDS="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.rstrip("\n").splitlines()
    assert any(line.startswith('{"summary":true') for line in lines)
    assert re.match(r"demo: \d+ images/s over", lines[-1]), lines[-1]


def test_status_rates_right_after_a_short_run(tmp_path, daemons):
    """A run shorter than the once-a-second sampling still shows in status: images_per_s and the
    consumer's wait_fraction are not 0.0 while wait_s says it waited."""
    need_bin()
    d = Daemon(tmp_path, job_yaml())
    daemons.append(d)
    d.ctl("consume", "--job", "demo", "--epochs", "2")
    job = d.status_job("demo")
    consumer = job["consumers"][0]
    assert job["samples_ok"] >= 2 * DEMO_SAMPLES
    assert consumer["wait_s"] > 0
    assert job["images_per_s"] > 0, job
    assert consumer["wait_fraction"] > 0, consumer


def test_consume_leads_with_the_steady_rate(tmp_path, daemons):
    """consume's images_per_s leaves out the prefetched batches; too short a run says so (null and
    a note) instead of a flattering figure."""
    need_bin()
    d = Daemon(tmp_path, job_yaml(batch=8))
    daemons.append(d)
    time.sleep(0.5)  # the ring fills
    short = summary_of(d.ctl("consume", "--job", "demo", "--batches", "3"))
    assert short["images_per_s"] is None, short
    assert "too short" in short["note"], short
    assert short["images_per_s_with_prefetched"] > 0
    long = summary_of(d.ctl("consume", "--job", "demo", "--start-epoch", "1", "--batches", "40"))
    assert long["images_per_s"] is not None and long["images_per_s"] > 0, long
    assert long["note"] is None
    assert long["steady_seconds"] <= long["seconds"]
    line = d.ctl("consume", "--job", "demo", "--start-epoch", "9", "--seconds", "0.5").splitlines()[-1]
    assert line.index('"images_per_s"') < line.index('"images_per_s_with_prefetched"')


def test_batch_larger_than_the_dataset_is_warned_at_start(tmp_path, daemons):
    need_bin()
    d = Daemon(tmp_path, job_yaml(name="big", batch=256, drop_last=True))
    daemons.append(d)
    assert d.stop() == 0
    log = d.log.read_text()
    warned = [line for line in log.splitlines() if "batch_size 256" in line]
    assert warned, log
    assert "job big" in warned[0] and f"{DEMO_SAMPLES} samples" in warned[0] and "warn" in warned[0], warned[0]
    assert "no batch" in warned[0]
    ok = Daemon(tmp_path, job_yaml(name="fits", batch=16), name="ok")
    daemons.append(ok)
    assert ok.stop() == 0
    assert "is larger than" not in ok.log.read_text()


def test_prepare_says_starting_and_what_was_already_stored(tmp_path, daemons):
    need_bin()
    store = tmp_path / "store"
    extra = f"    decoded_store: {{max_side: 64, path: \"{store}\", bytes: 64MiB}}\n"
    d = Daemon(tmp_path, job_yaml(extra=extra))
    daemons.append(d)
    first = d.ctl("prepare", "demo", "--threads", "2").splitlines()
    assert not any(" 0 samples/s" in line for line in first), first
    assert "samples/s" not in first[0] or first[0].startswith("prepare demo: done"), first
    # The job's own workers store what they decode for the ring meanwhile: those are "already stored".
    m = re.search(rf"done in .*: {DEMO_SAMPLES}/{DEMO_SAMPLES} samples; (\d+) stored now .*, (\d+) already stored, 0 not",
                  first[-1])
    assert m and int(m.group(1)) + int(m.group(2)) == DEMO_SAMPLES, first
    again = d.ctl("prepare", "demo").splitlines()
    assert re.search(rf"; 0 stored now .*, {DEMO_SAMPLES} already stored, 0 not stored", again[-1]), again


def test_launch_finds_what_the_demo_built(tmp_path):
    """Right after scripts/demo.sh (which builds into build-demo/), stokerd-launch.sh finds that
    stokerd; with none built it says how to build one."""
    need_bin()
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(os.path.join(SRC, "scripts", "stokerd-launch.sh"), tree / "scripts")
    env = {k: v for k, v in os.environ.items() if k not in ("STOKERD", "STOKER_SOCKET")}
    env["PATH"] = "/usr/bin:/bin"
    if shutil.which("stokerd", path=env["PATH"]):
        pytest.skip("an installed stokerd is on PATH")
    env["STOKER_LOG"] = str(tmp_path / "launch.log")
    r = subprocess.run([str(tree / "scripts" / "stokerd-launch.sh"), os.path.join(SRC, "configs", "demo.yaml"),
                        str(tmp_path / "a.sock")], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode != 0
    assert "build" in r.stderr and "scripts/demo.sh" in r.stderr, r.stderr
    (tree / "build-demo" / "bin").mkdir(parents=True)
    os.symlink(os.path.join(BIN, "stokerd"), tree / "build-demo" / "bin" / "stokerd")
    r = subprocess.run([str(tree / "scripts" / "stokerd-launch.sh"), os.path.join(SRC, "configs", "demo.yaml"),
                        str(tmp_path / "b.sock")], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"STOKERD_PID=(\d+)", r.stdout)
    assert m, r.stdout
    os.kill(int(m.group(1)), signal.SIGTERM)
    for _ in range(200):
        if not os.path.exists(tmp_path / "b.sock"):
            break
        time.sleep(0.05)
    assert not os.path.exists(tmp_path / "b.sock"), "the launched stokerd did not stop"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"] + sys.argv[1:]))
