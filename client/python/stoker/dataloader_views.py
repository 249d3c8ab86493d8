"""What scripts written for torch.utils.data.DataLoader read off it, answered by a Loader:
`loader.sampler` (a DistributedSampler's interface) and `loader.dataset` (a torchvision
ImageFolder's: classes, class_to_idx, samples, targets).

dataloader_args.py takes what such a script passes in; this module serves what it reads
back. Both are views of the Loader's job: they hold no state of their own but the lists
they fetch once. They take what they read as plain values and callables (the Loader passes
its own), so this module knows nothing of the Loader: loader.py imports it, never the other way."""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict

from . import _stoker


class SamplerView:
    """loader.sampler: what training scripts call on a DistributedSampler. `set_epoch` is the
    loader's; `epoch()` says where its next iteration starts; `samples()` is the rank's
    samples per epoch."""

    def __init__(self, set_epoch: Callable[[int], None], epoch: Callable[[], int], samples: Callable[[], int]):
        self._set_epoch, self._epoch, self._samples = set_epoch, epoch, samples

    def set_epoch(self, epoch: int) -> None:
        self._set_epoch(epoch)

    def __len__(self) -> int:
        return int(self._samples())

    @property
    def epoch(self) -> int:
        return self._epoch()


_IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class DatasetView:
    """loader.dataset: torchvision ImageFolder's attributes for the job's source. Class names
    come from the daemon; `samples` is the daemon's own list on first use ((path, label) by
    sample id, for every source type; tar members as SHARD:MEMBER), listed by ImageFolder's
    rules only from a daemon older than protocol 2.2: samples[id] is the file of sample id."""

    def __init__(self, job: Dict[str, Any], socket: str = ""):
        self._job, self._socket = job.get("name"), socket
        self.root = job.get("root", "")
        self.classes = list(job.get("class_names", []))
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self._len = int(job.get("samples", 0))
        self._samples = None
        self._file = job.get("file") if job.get("source") == "filelist" else None

    def _read_list(self):
        """A file-list source's samples, by the daemon's rules (see configs/README.md)."""
        rows = []
        with open(self._file) as f:
            for line in f:
                t = line.strip()
                if not t or t.startswith("#"):
                    continue
                sep = min((i for i in (t.find(","), t.find("\t")) if i >= 0), default=-1)
                path, label = (t, None) if sep < 0 else (t[:sep].strip(), t[sep + 1:].strip())
                rows.append((os.path.normpath(os.path.join(self.root, path)), label))
        if rows and rows[0][1] is not None and all(l.isdigit() for _, l in rows):
            return [(p, int(l)) for p, l in rows]
        names = [l if l is not None else os.path.basename(os.path.dirname(p)) for p, l in rows]
        return [(p, self.class_to_idx[n]) for (p, _), n in zip(rows, names)]

    def __len__(self) -> int:
        return self._len

    def _from_daemon(self):
        """The daemon's own list, by id (protocol 2.2); None from an older daemon."""
        if self._job is None:
            return None
        out = []
        while True:
            request = json.dumps({"op": "samples", "job": self._job, "offset": len(out), "count": 100000})
            try:
                reply = json.loads(_stoker.daemon_command(self._socket, request))
            except _stoker.StokerError:
                return None
            if not reply.get("ok"):
                return None
            out += [(p, int(l)) for p, l in reply["samples"]]
            if not reply["samples"] or len(out) >= reply["total"]:
                return out

    @property
    def samples(self):
        if self._samples is None:
            self._samples = self._from_daemon()
        if self._samples is None and self._file:
            self._samples = self._read_list()
        if self._samples is None:
            out = []
            for c in self.classes:
                for dirpath, dirnames, names in sorted(os.walk(os.path.join(self.root, c), followlinks=True)):
                    dirnames.sort()
                    for n in sorted(names):
                        if n.lower().endswith(_IMG_EXTENSIONS) and not n.startswith("."):
                            out.append((os.path.join(dirpath, n), self.class_to_idx[c]))
            self._samples = out
        return self._samples

    @property
    def targets(self):
        return [t for _, t in self.samples]

    imgs = samples
