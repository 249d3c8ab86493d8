"""Where this process sits in the training run: its rank and world from torch.distributed or
the launcher's environment (torchrun's RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
LOCAL_RANK), and which GPU a `device=` argument names.

The Loader and the jobs defined from Python (torchvision_jobs) read the same variables by the
same rules, so they live here, apart from both."""
import os
from typing import Any, Optional, Tuple

from .optional_torch import torch


def env_int(name: str) -> Optional[int]:
    """$name as an int; None when unset or empty."""
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else None


def distributed() -> Tuple[Optional[int], Optional[int]]:
    """(rank, world size) from torch.distributed when it is initialized, else (None, None)."""
    try:
        import torch.distributed as dist  # noqa: PLC0415
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    return None, None


def resolve_device(device: Any) -> Tuple[str, int]:
    """None -> host batches; "cuda" -> the current torch device (LOCAL_RANK, else 0, when
    torch has not chosen one); "cuda:N", N or torch.device("cuda", N) -> GPU N."""
    if device is None or device == "" or device == "cpu":
        return "", -1
    if torch is not None and isinstance(device, torch.device):
        device = "cuda" if device.index is None and device.type == "cuda" else str(device)
    if isinstance(device, int):
        device = f"cuda:{device}"
    if device == "cuda":
        index = None
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            index = torch.cuda.current_device()
        if index is None:
            index = env_int("LOCAL_RANK") or 0
        return f"cuda:{index}", index
    if isinstance(device, str) and device.startswith("cuda:") and device[5:].isdigit():
        return device, int(device[5:])
    raise ValueError(f"device must be None, 'cuda', 'cuda:N' or a torch.device, not {device!r}")
