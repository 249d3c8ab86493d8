"""What a script passes to torch.utils.data.DataLoader, as Loader.from_dataset takes it.

Each DataLoader argument either keeps its meaning, has none with a daemon and is accepted and
ignored (the reason is in ARGUMENTS), or is refused naming the argument and what to use
instead. Nothing a DataLoader argument asks for is dropped silently where it would change
the batches."""
import math
import numbers
from typing import Any, Dict, Optional, Tuple

from .jobdef import TranslationError

# DataLoader arguments accepted but without effect: each belongs to DataLoader's worker
# processes, which do not exist here (stokerd's own threads decode; `server.workers` sizes them).
IGNORED = {
    "num_workers": "decoding runs in stokerd's worker threads (server.workers), not in trainer processes",
    "prefetch_factor": "read-ahead is the job's ring: from_dataset's prefetch= (batches per rank)",
    "persistent_workers": "stokerd is persistent: nothing is restarted between epochs",
    "multiprocessing_context": "no trainer-side worker processes are started",
}

# DataLoader arguments refused unless left at their default: (default test, what to use).
REFUSED = {
    "batch_sampler": "stokerd forms the batches: pass batch_size=, sampler= and drop_last= instead",
    "worker_init_fn": "there are no DataLoader worker processes for it to run in (stokerd decodes); seed the "
                      "job with seed= or generator=, and do per-process set-up in the training process",
}


def _is_default_collate(fn: Any) -> bool:
    from torch.utils import data as tud
    return fn is None or fn is getattr(tud, "default_collate", None) or \
        fn is getattr(tud.dataloader, "default_collate", None)


def loader_kwargs(args: Dict[str, Any], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """Checks DataLoader's own arguments (`args`, by name) and returns what they mean for
    Loader(**kwargs): pin_memory and timeout. Raises TranslationError for the refused ones."""
    for name, default_ok in (("batch_sampler", args["batch_sampler"] is None),
                             ("worker_init_fn", args["worker_init_fn"] is None)):
        if not default_ok:
            raise TranslationError(f"{name}={args[name]!r}: {REFUSED[name]}")
    if not _is_default_collate(args["collate_fn"]):
        fn = args["collate_fn"]
        raise TranslationError(
            f"collate_fn={getattr(fn, '__qualname__', fn)!r}: stokerd collates the batches itself, so a collate "
            f"function would never run. The classification references' MixUp/CutMix collate is mixup= / cutmix= "
            f"(an alpha, or their RandomMixup / RandomCutmix); other collate functions have no stokerd "
            f"equivalent (apply them to each batch in the training loop)")
    workers = args["num_workers"]
    if not isinstance(workers, numbers.Integral) or workers < 0:
        raise ValueError(f"num_workers option should be non-negative, not {workers!r}")  # DataLoader's rule
    out: Dict[str, Any] = {}
    timeout = args["timeout"]
    if not isinstance(timeout, numbers.Real) or timeout < 0 or math.isnan(timeout):
        raise ValueError(f"timeout option should be non-negative, not {timeout!r}")  # DataLoader's rule
    if timeout > 0 and "timeout_s" not in kwargs:
        out["timeout_s"] = float(timeout)  # DataLoader's 0 is "wait forever", Loader's None
    if args["pin_memory"] and kwargs.get("device") in (None, "", "cpu") and _can_pin():
        out["pin_memory"] = True
    # Without CUDA the batches are left unpinned and nothing is said: torch 1.13's DataLoader
    # (Debian 12's) pins only `pin_memory and torch.cuda.is_available()`, silently.
    # With device= the batches are already on the GPU: pinning host memory has nothing to do.
    return out


def _can_pin() -> bool:
    import os
    if os.environ.get("STOKER_DEVICE_BACKEND") == "hostsim":
        return True  # the simulated device of the test tiers page-locks nothing real
    try:
        import torch
        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def _peek(generator: Any) -> int:
    """A seed drawn from `generator` (torch's default one for None) the way DataLoader draws
    its base seed, without advancing it: the script's own random numbers stay the same."""
    import torch
    g = generator if generator is not None else torch.default_generator
    state = g.get_state()
    value = int(torch.empty((), dtype=torch.int64).random_(generator=g).item())
    g.set_state(state)
    return value


class PassDraws:
    """The random numbers a DataLoader draws for each iteration (each `iter(loader)`), drawn the
    same way, so a script's own random numbers after N passes are what they are with DataLoader:
    its iterator's base seed from `generator` (torch's default generator when None), and, when
    it shuffles, its RandomSampler's seed from torch's default generator, or a permutation from
    the sampler's own generator. draw() makes one iteration's draws, advancing the generators,
    and returns the pass's key (31 bits): the RandomSampler's draw when shuffling, else the base
    seed. A from_dataset loader starts a pass without DistributedSampler at that epoch, so each
    pass has its own order and augmentations, decided by torch's generators as DataLoader's are
    (a restart draws a fresh order unless its generators stand where the first run's stood), or
    None with `numbered` (seed= fixes the job's randomness: passes are epochs 0, 1, 2, ...)."""

    def __init__(self, generator: Any, shuffle: bool, sampler_generator: Any, size: int, numbered: bool):
        self.generator, self.shuffle, self.sampler_generator = generator, shuffle, sampler_generator
        self.size, self.numbered = int(size), numbered

    def draw(self) -> Optional[int]:
        import torch
        key = int(torch.empty((), dtype=torch.int64).random_(generator=self.generator).item())
        if self.shuffle:
            if self.sampler_generator is None:
                key = int(torch.empty((), dtype=torch.int64).random_().item())
            else:
                key = _peek(self.sampler_generator)
                torch.randperm(self.size, generator=self.sampler_generator)
        return None if self.numbered else key % 2 ** 31


def job_seeds(seed: Optional[int], generator: Any, sampler: Any) -> Tuple[int, Optional[int]]:
    """(seed, augment_seed) of the job; stokerd's randomness is a function of (seed, epoch,
    sample), the order's of `seed`, the augmentations' and mixes' of `augment_seed` (None: `seed`):
      seed=               that value for both;
      DistributedSampler  the order from its `seed` (every rank shares it, so every rank and node
                          computes the same permutation, and torch.manual_seed does not move it,
                          as with DataLoader), the augmentations from a draw from generator=, else
                          torch's default generator (DataLoader draws its workers' base seed so);
      otherwise           both from a draw from generator=, else the RandomSampler's own
                          generator, else torch's default generator: torch.manual_seed(s) before
                          from_dataset decides it, as it decides DataLoader's shuffle and
                          augmentations.
    Draws peek: the generator is not advanced. A different seed is a different job definition,
    so a different job of the daemon (ranks whose torch generators differ get a job each)."""
    from torch.utils import data as tud
    if seed is not None:
        if not isinstance(seed, numbers.Integral) or not 0 <= seed < 2 ** 64:
            raise ValueError(f"seed must be an integer in [0, 2**64), not {seed!r}")
        return int(seed), None
    if isinstance(sampler, tud.DistributedSampler):
        return int(sampler.seed) % 2 ** 64, _peek(generator) % 2 ** 64
    if generator is None and isinstance(sampler, tud.RandomSampler):
        generator = sampler.generator
    return _peek(generator) % 2 ** 64, None


def mix_alpha(m: Any, what: str) -> Optional[float]:
    """mixup= / cutmix=: None or 0 (torchvision's `--mixup-alpha 0.0`: off), a positive alpha,
    or the references' RandomMixup / RandomCutmix (p must be 1: stokerd mixes every batch)."""
    if m is None:
        return None
    if isinstance(m, numbers.Real) and not isinstance(m, bool):
        a = float(m)
        if a == 0.0:
            return None
        if not math.isfinite(a) or a < 0:
            raise ValueError(f"{what}={m!r}: the alpha must be > 0 (or 0 for off)")
        return a
    if hasattr(m, "alpha"):
        if float(getattr(m, "p", 1.0)) != 1.0:
            raise TranslationError(f"{what}={type(m).__name__}(p={m.p}): stokerd mixes every batch (p=1)")
        return mix_alpha(float(m.alpha), what)
    raise TranslationError(f"{what}={m!r}: an alpha, or the references' Random{what.capitalize()}")
