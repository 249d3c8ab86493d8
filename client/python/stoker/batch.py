"""One batch as the trainer sees it, and the DLPack plumbing that gets it there.

Batch wraps a native batch (a slot of the job's ring in shared memory, or the daemon's copy on
the GPU) as torch tensors or NumPy arrays through DLPack, without copying; the slot goes back
when the last tensor dies or on release(). It knows nothing of connections or positions: the
Loader makes one per delivered batch. _Capsule lets numpy.from_dlpack take a capsule that is
already made (hostsim device batches)."""
from __future__ import annotations

import warnings

from . import _stoker
from .optional_torch import torch, torch_dlpack

# The hostsim warning is given once per process (tests reset it to see it again).
_warned_hostsim = False
_stream_of = None  # index -> handle, chosen at the first device batch (_current_stream_handle)


def _current_stream_handle(index: int) -> int:
    """The cudaStream_t of the trainer's current stream on GPU `index`, as
    torch.cuda.current_stream(index).cuda_stream gives it. That public call builds a
    torch.cuda.Stream object each time: on the H200 machine, 50-70 us of a batch's 120-170 when
    the trainer's code was cold (docs/PERFORMANCE.md). From the second call on, the raw getter
    (torch >= 2.0) returns the handle alone; the first goes through the public call, which
    initialises CUDA. A torch without the getter keeps the public call."""
    global _stream_of
    if _stream_of is None:
        handle = torch.cuda.current_stream(index).cuda_stream
        _stream_of = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
            lambda i: torch.cuda.current_stream(i).cuda_stream)
        return handle
    return _stream_of(index)


class Batch:
    """One batch: `images`, `labels`, `ids` (tensors or arrays viewing shared memory, or the
    daemon's copy on the GPU for a device loader), `epoch`, `index`. Iterating a Loader yields
    `(images, labels)`; use `Loader.batches()` to get these objects instead. `labels` are int64
    class indices `[B]`, or for a job with `mixup`/`cutmix` float soft targets
    `[B, num_classes]` (the images' dtype, float32 for uint8 images), zero-copy as well."""

    def __init__(self, native: "_stoker.Batch", framework: str, copy: bool,
                 device_index: int = -1, device_backend: str = "", with_ids: bool = True):
        # with_ids False (the Loader's iter(), which yields images and labels only): `ids` is
        # None, one DLPack tensor fewer a batch. A device batch always gets its ids.
        self.epoch = native.epoch
        self.index = native.index
        self.last = native.last
        self._native = native
        self.ids = None
        if device_index >= 0 and native.on_device:
            self._from_device(native, framework, copy, device_index, device_backend)
        elif framework == "torch":
            self.images = torch_dlpack.from_dlpack(native.images_dlpack())
            self.labels = torch_dlpack.from_dlpack(native.labels_dlpack())
            if with_ids:
                self.ids = torch_dlpack.from_dlpack(native.ids_dlpack())
            if copy:
                self.images, self.labels = self.images.clone(), self.labels.clone()
                if self.ids is not None:
                    self.ids = self.ids.clone()
        else:
            self.images = native.images_numpy()
            self.labels = native.labels_numpy()
            if with_ids:
                self.ids = native.ids_numpy()
            if copy:
                self.images, self.labels = self.images.copy(), self.labels.copy()
                if self.ids is not None:
                    self.ids = self.ids.copy()
        if copy:
            self.release()

    def _from_device(self, native, framework: str, copy: bool, index: int, backend: str) -> None:
        # The batch is ordered on the trainer's current stream by a GPU wait (no host wait),
        # and its release fence is recorded on that same stream when the last tensor dies.
        stream = 0
        if backend == "cuda":
            stream = _current_stream_handle(index)
        else:
            global _warned_hostsim
            if not _warned_hostsim:
                _warned_hostsim = True
                warnings.warn("stoker: STOKER_DEVICE_BACKEND=hostsim: device batches are simulated "
                              "in host memory; the loader yields CPU tensors read from the "
                              "simulated device copy", RuntimeWarning, stacklevel=4)
        images = native.device_images_dlpack(stream)
        labels = native.device_labels_dlpack(stream)
        if framework == "torch":
            self.images = torch_dlpack.from_dlpack(images)
            self.labels = torch_dlpack.from_dlpack(labels)
            self.ids = torch_dlpack.from_dlpack(native.ids_dlpack())
            if copy:
                self.images, self.labels, self.ids = self.images.clone(), self.labels.clone(), self.ids.clone()
        else:
            import numpy as np  # hostsim only (checked by the Loader): host-addressable memory
            self.images = np.from_dlpack(_Capsule(images)) if hasattr(np, "from_dlpack") else None
            self.labels = np.from_dlpack(_Capsule(labels)) if hasattr(np, "from_dlpack") else None
            self.ids = native.ids_numpy()
            if self.images is None:
                raise RuntimeError("framework='numpy' with device batches needs NumPy >= 1.22")
            if copy:
                self.images, self.labels, self.ids = self.images.copy(), self.labels.copy(), self.ids.copy()
        if copy:
            self.release()

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def release(self) -> None:
        """Give the slot back now. Views of this batch must not be used afterwards."""
        if self._native is not None:
            self._native.release()
            self._native = None


class _Capsule:
    """Hands a ready DLPack capsule to numpy.from_dlpack (which asks an object for it)."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, stream=None):
        return self._capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU: only host-addressable (hostsim) memory gets here
