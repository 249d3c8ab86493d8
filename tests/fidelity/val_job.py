"""What the fidelity scripts share: run a real stokerd with a deterministic val job (Resize 256
+ CenterCrop 224, uint8 NCHW, dataset order) over a folder, dump one epoch with
`stokerctl consume --dump`, and yield (image, sample id) pairs from the dump."""
import json
import os
import signal
import socket
import subprocess
import time
import sys

import numpy as np

# One socket probe for tests and benchmarks: scripts/benchlib.py.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from benchlib import accepts as listening  # noqa: E402


def dump_val_epoch(bin_dir, root, tmp, batch_size=16, decode="{}"):
    """Serves `root` as job `val` and returns ([(image CHW uint8, id)], stokerd's log).
    `decode`: the decode step's keys as YAML flow, e.g. "{dct_scale: always}"."""
    cfg = os.path.join(tmp, "val.yaml")
    with open(cfg, "w") as f:
        f.write(f"""server: {{workers: 2, log_level: warn}}
jobs:
  val:
    source: {{root: "{root}"}}
    batch_size: {batch_size}
    shuffle: false
    pipeline:
      - decode: {decode}
      - resize: {{size: 256}}
      - center_crop: {{size: 224}}
    output: {{dtype: uint8, layout: NCHW}}
""")
    sock = os.path.join(tmp, "s.sock")
    daemon = subprocess.Popen([os.path.join(bin_dir, "stokerd"), "--config", cfg, "--socket", sock],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(400):
            if listening(sock):
                break
            time.sleep(0.05)
        dump = os.path.join(tmp, "dump")
        out = subprocess.run([os.path.join(bin_dir, "stokerctl"), "consume", "--job", "val", "--socket", sock,
                              "--epochs", "1", "--dump", dump], check=True, capture_output=True, text=True).stdout
    finally:
        daemon.send_signal(signal.SIGINT)
        log = daemon.communicate(timeout=30)[0]
    samples = []
    for line in out.splitlines():
        b = json.loads(line)
        if b.get("summary"):
            continue
        stem = os.path.join(dump, f"e{b['epoch']}_b{b['index']}")
        samples += list(zip(np.load(stem + ".images.npy"), (int(i) for i in np.load(stem + ".ids.npy"))))
    return samples, log
