"""Stoker client for Python: batches from stokerd as torch tensors (or NumPy arrays),
zero-copy from shared memory.

    import stoker
    loader = stoker.Loader("imagenet-train")
    for images, labels in loader:
        ...
"""
from ._stoker import (  # noqa: F401  (re-exported)
    DisconnectedError,
    JobFailedError,
    NoDaemonError,
    RefusedError,
    StokerError,
    TimeoutError,
    VersionError,
    __version__,
    daemon_status,
)
from ._stoker import Client as _NativeClient  # noqa: F401
from .jobdef import TranslationError  # noqa: F401
from .loader import Batch, HoldError, Loader  # noqa: F401

__all__ = [
    "Loader", "Batch", "StokerError", "NoDaemonError", "RefusedError", "VersionError",
    "DisconnectedError", "TimeoutError", "JobFailedError", "HoldError", "daemon_status",
]
