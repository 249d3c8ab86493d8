"""The Kubernetes and Slurm examples for remote workers (examples/kubernetes, examples/slurm):
parsed and cross-checked for what would break a deployment without an error from kubectl (a
Service selector that matches no pod, an HPA aimed at another Deployment, a worker port the
GPU nodes do not dial, a token outside every mounted volume), and the GPU nodes' stoker.yaml
(the ConfigMap's, and the one the sbatch script writes) started by the built stokerd: stokerd
has no separate config check; it validates the whole config at start and refuses it with
FILE:LINE, before it creates its socket."""
import json
import os
import shlex
import shutil
import subprocess
import time

import pytest
import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.environ.get("STOKER_BIN_DIR", os.path.join(ROOT, "build", "bin"))
DATA = os.path.join(ROOT, "tests", "data")
KUBE = os.path.join(ROOT, "examples", "kubernetes")
SBATCH = os.path.join(ROOT, "examples", "slurm", "stoker-hetjob.sbatch")


def manifests():
    """{file name: [documents]} of every manifest in examples/kubernetes."""
    out = {}
    for name in sorted(os.listdir(KUBE)):
        if name.endswith((".yaml", ".yml")):
            with open(os.path.join(KUBE, name)) as f:
                out[name] = [d for d in yaml.safe_load_all(f) if d is not None]
    return out


def find(kind, name=None):
    """The one document of `kind` (named `name`) over all manifests, with its file."""
    hits = [(f, d) for f, docs in manifests().items() for d in docs
            if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(hits) == 1, f"expected one {kind} {name or ''} in {KUBE}, found {[f for f, _ in hits]}"
    return hits[0]


def workers():
    """(file, Deployment, Service, worker container) of the remote workers."""
    f, svc = find("Service")
    dep_file, dep = next((f2, d) for f2, docs in manifests().items() for d in docs
                         if d.get("kind") == "Deployment")
    containers = dep["spec"]["template"]["spec"]["containers"]
    worker = [c for c in containers if "--worker" in c.get("command", []) + c.get("args", [])]
    assert len(worker) == 1, f"{dep_file}: no container (or several) runs stokerd --worker"
    return dep_file, dep, svc, worker[0]


def argv(container):
    return list(container.get("command", [])) + [str(a) for a in container.get("args", [])]


def option(args, name):
    assert name in args, f"worker args lack {name}: {args}"
    i = args.index(name)
    assert i + 1 < len(args) and not args[i + 1].startswith("--"), f"{name} has no value: {args}"
    return args[i + 1]


def port_number(container, port):
    """A Service targetPort / probe port (number or the container port's name) as a number."""
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}
    assert port in named, f"port name {port!r} is not a port of container {container['name']}"
    return named[port]


def remote_config():
    """(ConfigMap file, parsed stoker.yaml, its text) of the ConfigMap whose job has `remote`."""
    for f, docs in manifests().items():
        for d in docs:
            if d.get("kind") != "ConfigMap" or "stoker.yaml" not in d.get("data", {}):
                continue
            text = d["data"]["stoker.yaml"]
            cfg = yaml.safe_load(text)
            if any("remote" in job for job in cfg.get("jobs", {}).values()):
                return f, cfg, text
    raise AssertionError(f"no ConfigMap in {KUBE} holds a stoker.yaml with a remote: job")


def test_every_document_is_a_named_kubernetes_object():
    found = manifests()
    assert found, f"no manifests in {KUBE}"
    for f, docs in found.items():
        assert docs, f"{f}: no documents"
        for d in docs:
            for key in ("apiVersion", "kind"):
                assert d.get(key), f"{f}: a document without {key}"
            assert d.get("metadata", {}).get("name"), f"{f}: {d['kind']} without metadata.name"


def test_service_is_headless_and_selects_the_worker_pods():
    f, dep, svc, worker = workers()
    # Not headless: one virtual IP, so the GPU node would open one stream for all workers.
    assert svc["spec"].get("clusterIP") == "None", "the workers' Service must be headless (clusterIP: None)"
    selector = svc["spec"]["selector"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert selector and all(labels.get(k) == v for k, v in selector.items()), \
        f"Service selector {selector} matches no label of the Deployment's pods {labels}"
    match = dep["spec"]["selector"]["matchLabels"]
    assert all(labels.get(k) == v for k, v in match.items()), \
        f"{f}: Deployment selector {match} does not match its pod labels {labels}"


def test_hpa_scales_the_worker_deployment():
    _, dep, _, _ = workers()
    f, hpa = find("HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2", f"{f}: apiVersion {hpa['apiVersion']}"
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == ("Deployment", dep["metadata"]["name"]), \
        f"{f}: scaleTargetRef {ref} is not the Deployment {dep['metadata']['name']}"
    assert ref["apiVersion"] == dep["apiVersion"]
    assert 1 <= hpa["spec"].get("minReplicas", 1) <= hpa["spec"]["maxReplicas"]
    metrics = hpa["spec"]["metrics"]
    assert len(metrics) == 1, f"{f}: one metric active (the alternative stays commented out)"
    m = metrics[0]
    if m["type"] == "External":
        # The GPU node's own metric of trainer wait; a name /metrics does not export never scales.
        assert m["external"]["metric"]["name"] == "stoker_consumer_wait_ratio"
        _, cfg, _ = remote_config()
        job = m["external"]["metric"].get("selector", {}).get("matchLabels", {}).get("job")
        assert job is None or job in cfg["jobs"], f"{f}: the metric selects job {job}, not in the config"
    else:
        assert m["type"] == "Resource" and m["resource"]["name"] == "cpu", f"{f}: metric {m}"


def test_worker_command_listens_on_the_service_port_with_a_mounted_token():
    f, dep, svc, worker = workers()
    args = argv(worker)
    assert args[0] == "stokerd" and "--worker" in args, f"{f}: {args}"
    host, _, port = option(args, "--listen").rpartition(":")
    assert host and int(port) > 0, f"{f}: --listen {option(args, '--listen')}"
    option(args, "--allow-root")
    ports = svc["spec"]["ports"]
    assert len(ports) == 1
    assert port_number(worker, ports[0].get("targetPort", ports[0]["port"])) == int(port), \
        f"Service targetPort {ports[0].get('targetPort')} is not the worker's --listen port {port}"
    probe = worker["readinessProbe"]["tcpSocket"]["port"]
    assert port_number(worker, probe) == int(port), f"{f}: readiness probes port {probe}, worker listens on {port}"
    # The token: a file inside a mounted Secret volume (never a literal on the command line).
    token = option(args, "--token-file")
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    mounts = [m for m in worker["volumeMounts"] if token.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mounts, f"{f}: --token-file {token} lies in no mounted volume"
    assert "secret" in volumes[mounts[0]["name"]], f"{f}: the token's volume is not a Secret"
    # The dataset: each --allow-root is a read-only mount (the worker must never write there).
    for i, a in enumerate(args):
        if a == "--allow-root":
            root = args[i + 1]
            m = [m for m in worker["volumeMounts"] if (root + "/").startswith(m["mountPath"].rstrip("/") + "/")]
            assert m and m[0].get("readOnly"), f"{f}: --allow-root {root} is not a read-only mount"
    res = worker["resources"]
    assert res["requests"]["cpu"] and res["limits"]["cpu"], f"{f}: the worker needs CPU requests and limits"
    # The results port: fixed (a NetworkPolicy names it), declared, and not the stream's port.
    results = int(option(args, "--results-port"))
    assert 0 < results != int(port), f"{f}: --results-port {results} (the worker listens on {port})"
    assert port_number(worker, "results") == results, f"{f}: container port 'results' is not --results-port {results}"


def worker_help_options():
    """Every --option `stokerd --worker --help` names."""
    path = os.path.join(BIN, "stokerd")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} not built")
    r = subprocess.run([path, "--worker", "--help"], capture_output=True, text=True)
    if r.returncode != 0 or "--listen" not in r.stdout:
        pytest.skip("stokerd built without remote workers")
    return {w.rstrip(",=") for w in r.stdout.split() if w.startswith("--")}


def test_worker_options_of_both_examples_exist_in_the_built_stokerd():
    """A misspelt option stops every worker at start: each --option of the Deployment's worker
    and of the sbatch script's worker step is one `stokerd --worker` knows."""
    known = worker_help_options()
    _, _, _, worker = workers()
    with open(SBATCH) as f:
        text = f.read()
    commands = [c.strip() for c in text.replace("\\\n", " ").splitlines()
                if "stokerd --worker" in c and not c.lstrip().startswith("#")]
    assert len(commands) == 1, f"{SBATCH}: expected one worker step, found {commands}"
    step = commands[0][commands[0].index("stokerd --worker"):].split("&")[0]
    for where, used in (("the Deployment", argv(worker)), (SBATCH, shlex.split(step))):
        unknown = [a for a in used if a.startswith("--") and a.split("=")[0] not in known]
        assert not unknown, f"{where}: stokerd --worker does not know {unknown}"
    assert "--results-port" in step, f"{SBATCH}: the worker step does not fix --results-port"


def test_gpu_node_config_names_the_service_and_its_port():
    _, dep, svc, worker = workers()
    f, cfg, _ = remote_config()
    listen_port = int(option(argv(worker), "--listen").rpartition(":")[2])
    name = svc["metadata"]["name"]
    namespaces = {d["metadata"].get("namespace") for docs in manifests().values() for d in docs} - {None}
    namespace = namespaces.pop() if len(namespaces) == 1 else "default"
    for job_name, job in cfg["jobs"].items():
        if "remote" not in job:
            continue
        addresses = job["remote"]["workers"]
        assert addresses, f"{f}: job {job_name}: remote.workers is empty"
        for a in addresses:
            host, _, port = a.rpartition(":")
            # The Service's DNS name: NAME, NAME.NAMESPACE, ... or the full cluster name.
            parts = host.split(".")
            assert parts[0] == name, f"{f}: remote.workers {a} does not name the Service {name}"
            assert len(parts) == 1 or parts[1] == namespace, f"{f}: {a}: namespace is not {namespace}"
            assert int(port) == svc["spec"]["ports"][0]["port"] == listen_port, \
                f"{f}: {a}: port {port}, Service port {svc['spec']['ports'][0]['port']}, worker listens on {listen_port}"
        # The token the GPU node presents must be mounted into the DaemonSet's container too.
        token = job["remote"].get("token_file")
        assert token, f"{f}: job {job_name}: the workers require a token (--token-file), the job names none"
        _, ds = find("DaemonSet", "stokerd-remote")
        mounts = ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        assert any(token.startswith(m["mountPath"].rstrip("/") + "/") for m in mounts), \
            f"DaemonSet stokerd-remote: remote.token_file {token} lies in no mounted volume"


def test_sbatch_is_a_hetjob_running_workers_on_its_cpu_component():
    r = subprocess.run(["bash", "-n", SBATCH], capture_output=True, text=True)
    assert r.returncode == 0, f"bash -n {SBATCH}: {r.stderr}"
    with open(SBATCH) as f:
        text = f.read()
    lines = text.splitlines()
    assert lines[0].startswith("#!") and "bash" in lines[0]
    assert "set -euo pipefail" in text
    assert "#SBATCH hetjob" in lines, f"{SBATCH}: no '#SBATCH hetjob' separator line"
    # #SBATCH lines are read only before the first command: a late one is silently ignored.
    first_command = next(i for i, l in enumerate(lines[1:], 1) if l.strip() and not l.startswith("#"))
    assert all(i < first_command for i, l in enumerate(lines) if l.startswith("#SBATCH")), \
        f"{SBATCH}: an #SBATCH line after the first command is ignored by sbatch"
    # Commands, continuation lines joined, comments dropped.
    commands = [c.strip() for c in text.replace("\\\n", " ").splitlines() if c.strip() and not c.lstrip().startswith("#")]
    worker_steps = [c for c in commands if "stokerd --worker" in c]
    assert worker_steps and all(c.startswith("srun ") and "--het-group=0" in c for c in worker_steps), \
        f"{SBATCH}: stokerd --worker does not run as an srun step of het group 0: {worker_steps}"
    daemon_steps = [c for c in commands if "stokerd --config" in c]
    assert daemon_steps and all(c.startswith("srun ") and "--het-group=1" in c for c in daemon_steps), \
        f"{SBATCH}: the GPU nodes' stokerd does not run as an srun step of het group 1: {daemon_steps}"
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_0"' in text
    assert "remote:" in text and "workers: [$workers]" in text


def test_sbatch_passes_shellcheck():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    r = subprocess.run(["shellcheck", SBATCH], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


@pytest.fixture
def stokerd():
    path = os.path.join(BIN, "stokerd")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} not built")
    # Set by ctest from cmake/remote.cmake: OFF in a build without gRPC (STOKER_REMOTE=AUTO on a
    # machine without it, or OFF), whose stokerd refuses `remote:` by design.
    if os.environ.get("STOKER_HAVE_REMOTE", "").upper() in ("OFF", "FALSE", "0"):
        pytest.skip("stokerd built without remote workers (STOKER_REMOTE)")
    return path


def started_status(stokerd, conf, tmp_path, env):
    """Starts stokerd on `conf` (as a node would: it validates the whole config at start), and
    returns its `stokerctl status` document; stops it."""
    sock = tmp_path / "s.sock"
    log = open(tmp_path / "stokerd.log", "w+")
    p = subprocess.Popen([stokerd, "--config", str(conf), "--socket", str(sock), "--workers", "1"],
                         stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **env))
    try:
        deadline = time.monotonic() + 60
        while not sock.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        log.seek(0)
        assert sock.exists(), f"stokerd refused {conf} (exit {p.poll()}):\n{log.read()}"
        status = subprocess.run([os.path.join(BIN, "stokerctl"), "status", "--socket", str(sock)],
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        return json.loads(status.stdout)
    finally:
        p.terminate()
        p.wait(timeout=60)
        log.close()


def check_serving(status, cfg):
    """Every job serving, and each remote job's worker addresses in its definition. The names
    do not resolve here, so such a job has no worker stream (its `remote` list is empty) and
    serves from its local pool, as on a node whose workers are not up yet."""
    jobs = {j["name"]: j for j in status["jobs"]}
    for name, job in cfg["jobs"].items():
        assert jobs[name]["state"] == "serving", f"job {name}: {jobs[name]['state']}"
        if "remote" in job:
            assert "remote" in jobs[name], f"job {name}: status has no `remote` list"
            for a in job["remote"]["workers"]:
                assert a in jobs[name]["definition"], f"job {name}: {a} not in its definition"


def test_gpu_node_config_starts_stokerd(stokerd, tmp_path):
    """The ConfigMap's stoker.yaml, with only the node's paths replaced by this machine's, is
    accepted by the built stokerd."""
    _, cfg, text = remote_config()
    token = tmp_path / "token"
    token.write_text("a-token-for-this-test\n")
    # Node paths (the hostPath socket, the dataset, the Secret's file) and the metrics address
    # (a fixed port on every interface) are the only changes; each must still be in the text.
    for old, new in [("/run/stoker/stoker.sock", str(tmp_path / "unused.sock")),
                     ("/data/imagenet/train", os.path.join(DATA, "demo")),
                     ("/etc/stoker-token/token", str(token)),
                     ('"0.0.0.0:9464"', '"127.0.0.1:0"')]:
        assert old in text, f"the ConfigMap's stoker.yaml no longer holds {old!r}: update this test"
        text = text.replace(old, new)
    conf = tmp_path / "stoker.yaml"
    conf.write_text(text)
    env = {"WORLD_SIZE": "16", "NODE_RANK": "0", "LOCAL_WORLD_SIZE": "8"}
    check_serving(started_status(stokerd, conf, tmp_path, env), cfg)


def test_sbatch_config_starts_stokerd(stokerd, tmp_path):
    """The stoker.yaml the sbatch script writes for its GPU nodes: its own lines (from
    `workers=""` to the here-document's end) run by bash with the allocation Slurm would give
    (two CPU nodes, two GPU nodes; `scontrol show hostnames` answers as Slurm does), then
    started by the built stokerd as GPU node 1."""
    with open(SBATCH) as f:
        lines = f.read().splitlines()
    assert 'workers=""' in lines and "YAML" in lines, f"{SBATCH}: the config block moved: update this test"
    block = "\n".join(lines[lines.index('workers=""'):lines.index("YAML") + 1])
    data = tmp_path / "data"
    data.mkdir()
    os.symlink(os.path.join(DATA, "demo"), data / "train")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "token").write_text("a-token-for-this-test\n")
    prologue = f"""set -euo pipefail
scontrol() {{ [[ "$*" == "show hostnames cpu[01-02]" ]] && printf 'cpu01\\ncpu02\\n'; }}
SLURM_JOB_NODELIST_HET_GROUP_0='cpu[01-02]' SLURM_JOB_NUM_NODES_HET_GROUP_1=2
DATA={shlex.quote(str(data))} RUN_DIR={shlex.quote(str(run_dir))} PORT=7070 GPUS_PER_NODE=8
"""
    r = subprocess.run(["bash", "-c", prologue + block], capture_output=True, text=True)
    assert r.returncode == 0, f"the sbatch's config block failed: {r.stderr}"
    conf = run_dir / "stoker.yaml"
    cfg = yaml.safe_load(conf.read_text())
    job = cfg["jobs"]["train"]
    assert job["remote"]["workers"] == ["cpu01:7070", "cpu02:7070"]
    assert job["world_size"] == 16 and job["local_world_size"] == 8
    check_serving(started_status(stokerd, conf, tmp_path, {"SLURM_NODEID": "1"}), cfg)
