"""torch, or None where it is not installed: the one place that decides.

torch is optional. Without it the Loader yields NumPy arrays, and every module that would use
torch (the batch's DLPack import, device resolution, the Loader's default framework) asks
this module instead of trying the import itself, so they cannot disagree."""
try:
    import torch
    from torch.utils import dlpack as torch_dlpack
except ImportError:  # pragma: no cover - depends on the machine
    torch = None
    torch_dlpack = None
