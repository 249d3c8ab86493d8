"""Jobs defined in torchvision's terms: Loader.from_folder (an ImageFolder tree with
torchvision's standard train/val recipe) and Loader.from_dataset (the ImageFolder, transform,
sampler and DataLoader arguments a script already builds).

Each turns its arguments into one job's YAML (jobdef.job_yaml; the transforms through
jobdef.translate_with_origins and step_rules) and a lazy Loader that sends it to stokerd on
first use. They are Loader's class methods (the Loader binds them with classmethod), kept here
so that the Loader holds the connection and this module the translation: each returns a
DefinedJob (the job's YAML and what the Loader needs besides), and the Loader's class methods
build the lazy Loader from it. This module knows nothing of the Loader (loader.py imports it,
never the other way). in_users_words() turns a daemon refusal of such a definition back into
the transform the user wrote."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import dataloader_args, jobdef, step_rules
from .placement import distributed, env_int


@dataclass
class DefinedJob:
    """A job defined from Python, as the Loader takes it (package-internal): `definition` (the
    job's YAML, sent to the daemon on first use), `loader_kwargs` (Loader's own arguments),
    `origins` (definition line -> the transform that made it; refusals name those),
    `epoch_sampler` (the script's DistributedSampler, whose epoch decides where each iteration
    starts) and `passes` (from_dataset: DataLoader's draws per iteration; None: a Loader that
    continues where its last iteration stopped)."""
    definition: str
    loader_kwargs: Dict[str, Any]
    origins: Dict[int, str] = field(default_factory=dict)
    epoch_sampler: Any = None
    passes: Optional[dataloader_args.PassDraws] = None


def in_users_words(error: Any, origins: Dict[int, str]) -> Any:
    """A daemon refusal of a from_dataset definition ("<origin>:LINE:COL: key: why") led
    by the transform that made that line (origins: definition line -> transform), so the
    user reads what they wrote."""
    m = re.match(r"<job defined by client[^>]*>:(\d+):\d+: (.*)", str(error), re.S)
    origin = origins.get(int(m.group(1))) if m else None
    return f"{origin}: {m.group(2)} ({error})" if origin else error


def from_folder(root: Any, batch_size: int = 256, train: bool = True, *,
                crop_size: int = 224, resize_size: int = 256,
                mean: Sequence[float] = (0.485, 0.456, 0.406),
                std: Sequence[float] = (0.229, 0.224, 0.225),
                dtype: str = "float32", layout: str = "NCHW",
                shuffle: Optional[bool] = None, drop_last: Optional[bool] = None,
                seed: int = 0, prefetch: int = 4, on_error: str = "skip",
                world_size: Optional[int] = None, local_world_size: Optional[int] = None,
                node_rank: Optional[int] = None, **kwargs: Any) -> DefinedJob:
    """A loader over an ImageFolder tree with torchvision's standard recipe, no YAML:

        train = stoker.Loader.from_folder("/data/imagenet/train", batch_size=256)
        val = stoker.Loader.from_folder("/data/imagenet/val", batch_size=256, train=False)

    train=True: RandomResizedCrop(crop_size) + RandomHorizontalFlip, shuffled, short last
    batch dropped (drop_last=True, as the references' train loaders). train=False:
    Resize(resize_size) + CenterCrop(crop_size), dataset order, and every sample exactly
    once across the ranks (no padding: ranks differ by at most one sample), which is the
    validation a metric needs. Both ToTensor + Normalize(mean, std) into `dtype`
    (float32/float16; "uint8" leaves normalizing to the trainer, e.g. on the GPU).

    The job is registered with the running stokerd on first use (lazy: iteration, len(),
    batch_size), validated as a config file is (errors name the key), shared by every
    local rank that sends the same definition, and removed once its last consumer left
    (server.client_job_linger_s later). The world comes from torch.distributed or
    torchrun's WORLD_SIZE / LOCAL_WORLD_SIZE / GROUP_RANK (or the arguments): this node's
    daemon serves ranks node_rank * local_world_size .. + local_world_size - 1 of it.
    Other arguments (rank, socket, device, copy, timeout_s, ...) are Loader's.
    A list of (root, weight) pairs is a weighted mixture of those trees (the job key
    `sources:`, README "Mixtures of datasets"): an epoch is as many samples as they hold
    together, drawn by weight; each source walks its own permutation, so an up-weighted
    small one repeats; labels per source (`dataset.classes` lists "NAME/CLASS", NAME the
    root's folder name).
    For anything else (other sources, augmentations, long-lived jobs) write the job in the
    daemon's YAML config and use Loader(name)."""
    mixture = mixture_roots(root)
    root_path = mixture[0][0] if mixture else os.path.abspath(os.fspath(root))
    if dtype not in ("float32", "float16", "uint8"):
        raise ValueError(f"dtype must be float32, float16 or uint8, not {dtype!r}")
    dist_rank, dist_world = distributed()
    world = world_size if world_size is not None else (
        dist_world if dist_world is not None else (env_int("WORLD_SIZE") or 1))
    local = local_world_size if local_world_size is not None else (env_int("LOCAL_WORLD_SIZE") or world)
    if world < 1 or local < 1 or world % local != 0:
        raise ValueError(f"world_size {world} must be a positive multiple of local_world_size {local}")
    if node_rank is None:
        node_rank = env_int("GROUP_RANK")
        if node_rank is None:
            rank = kwargs.get("rank")
            if rank is None:
                rank = dist_rank if dist_rank is not None else (env_int("RANK") or 0)
            node_rank = int(rank) // local
    first = node_rank * local
    if shuffle is None:
        shuffle = train
    if drop_last is None:
        drop_last = train
    steps = ["decode: {}"]
    if train:
        steps += [f"random_resized_crop: {{size: {int(crop_size)}}}", "horizontal_flip: {p: 0.5}"]
    else:
        steps += [f"resize: {{size: {int(resize_size)}}}", f"center_crop: {{size: {int(crop_size)}}}"]
    if dtype != "uint8":
        steps.append(f"normalize: {{mean: {json.dumps([float(m) for m in mean])}, "
                     f"std: {json.dumps([float(s) for s in std])}}}")
    definition = jobdef.job_yaml(name="from_folder", root=root_path, batch_size=batch_size, shuffle=shuffle,
                                 seed=seed, drop_last=drop_last, pad_shards=train, world=world, first=first,
                                 local=local, prefetch=prefetch, on_error=on_error, steps=steps, dtype=dtype,
                                 layout=layout, sources=mixture)
    kwargs.setdefault("world_size", world)
    return DefinedJob(definition, kwargs)


def mixture_roots(root: Any) -> Optional[List[Tuple[str, float]]]:
    """from_folder's `root` as a mixture: a list of (root, weight) pairs, roots made absolute;
    None for one root (a str or path)."""
    if isinstance(root, (str, bytes, os.PathLike)):
        return None
    try:
        pairs = list(root)
    except TypeError:
        raise TypeError(f"root must be a folder or a list of (folder, weight), not {type(root).__name__}") from None
    if not pairs:
        raise ValueError("root: an empty list of (folder, weight)")
    out = []
    for i, p in enumerate(pairs):
        if not isinstance(p, (tuple, list)) or len(p) != 2 or not isinstance(p[0], (str, os.PathLike)):
            raise TypeError(f"root[{i}] must be a (folder, weight) pair, not {p!r}")
        w = float(p[1])
        if not w > 0:
            raise ValueError(f"root[{i}]: weight {p[1]!r} must be > 0")
        out.append((os.path.abspath(os.fspath(p[0])), w))
    return out


def concat_sources(dataset: Any) -> Tuple[Any, List[Tuple[str, float]]]:
    """A torch ConcatDataset of ImageFolders as a mixture: (the first part, for its transform
    and class list; [(root, weight = its size)]). Torch labels each part by its own classes,
    so the parts must have the same classes (then `labels: shared` gives torch's labels) and
    the same transform (one pipeline per job); anything else is refused, naming the part."""
    from torchvision import datasets
    parts = list(dataset.datasets)
    for i, d in enumerate(parts):
        if not isinstance(d, datasets.ImageFolder):
            raise jobdef.TranslationError(
                f"ConcatDataset part {i} is a {type(d).__name__}, not a torchvision ImageFolder")
        if d.classes != parts[0].classes:
            raise jobdef.TranslationError(
                f"ConcatDataset part {i} ({d.root}) has other classes than part 0 ({parts[0].root}): torch "
                f"would give the same label to different classes; use Loader.from_folder([(root, weight), ...]) "
                f"for per-source labels")
        if d.transform is not parts[0].transform and repr(d.transform) != repr(parts[0].transform):
            raise jobdef.TranslationError(
                f"ConcatDataset part {i} has another transform than part 0: a job has one pipeline")
    return parts[0], [(os.path.abspath(d.root), float(len(d))) for d in parts]


def from_dataset(dataset: Any, batch_size: Optional[int] = 1, shuffle: Optional[bool] = None,
                 sampler: Any = None, batch_sampler: Any = None, num_workers: int = 0, collate_fn: Any = None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Any = None, multiprocessing_context: Any = None, generator: Any = None, *,
                 prefetch_factor: Optional[int] = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", mixup: Any = None, cutmix: Any = None,
                 seed: Optional[int] = None, prefetch: int = 4, on_error: str = "skip", layout: str = "NCHW",
                 local_world_size: Optional[int] = None, **kwargs: Any) -> DefinedJob:
    """The DataLoader a script already builds, served by stokerd: same arguments, in
    DataLoader's order, so porting a script changes only the constructor's name:

        train = stoker.Loader.from_dataset(ImageFolder(root, transform=preset), batch_size=256,
                                           sampler=DistributedSampler(ds), num_workers=16,
                                           pin_memory=True, drop_last=True, mixup=0.2, cutmix=1.0)

    `dataset` is a torchvision ImageFolder; its transform (a Compose of torchvision
    transforms, nested Composes, or a wrapper whose whole behaviour is a Compose in its
    `.transforms`, as the references' ClassificationPresetTrain/Eval: see
    transform_tree.py) becomes the daemon's pipeline with the same parameters, and any
    transform without an exact equivalent is refused at construction with its name and
    position (TranslationError): nothing is dropped. `sampler`: None/SequentialSampler
    (dataset order), RandomSampler (shuffled), or DistributedSampler (its num_replicas,
    rank, shuffle, seed and drop_last); the permutation is stokerd's (same sharding, not
    torch's random numbers). Each `iter()` is a new pass, as DataLoader's (one left early
    is not continued): with a DistributedSampler it serves the epoch of the sampler's last
    `set_epoch()` (DataLoader's behaviour, so `--resume` at epoch k serves epoch k;
    Loader.set_epoch() / load_state_dict() set the sampler too); otherwise it makes the
    draws a DataLoader iteration makes from torch's generators (advancing them as
    DataLoader does) and serves a fresh order, that of the epoch its draw names (seed=:
    the passes are epochs 0, 1, 2, ...). load_state_dict() is the exact resume: the next
    pass starts at the state's position.

    The seeds: `seed=` decides order and augmentations; else a DistributedSampler's seed
    decides the order and a draw from `generator=` or torch's default generator the
    augmentations; else that draw decides both (torch.manual_seed decides it, as for
    DataLoader); see dataloader_args.job_seeds. DataLoader's worker arguments (num_workers,
    prefetch_factor, persistent_workers, multiprocessing_context) are accepted and have
    no effect: stokerd decodes. pin_memory=True page-locks the host batches for the GPU
    (without CUDA: no pinning and no warning, as torch 1.13's DataLoader); timeout=T is
    timeout_s. The decode leaves the EXIF orientation unapplied (`exif_orientation: false`),
    as ImageFolder's PIL loader does.
    batch_sampler, worker_init_fn and a collate_fn other than default_collate are
    refused, naming what to use. `mixup` / `cutmix`: an alpha (0: off), or the
    classification references' RandomMixup / RandomCutmix (p must be 1; both given: one
    of the two per batch, as their RandomChoice); labels are then float soft targets
    [B, num_classes]. The job is defined on first use as from_folder's."""
    from torchvision import datasets
    from torch.utils import data as tud
    mixture = None
    if isinstance(dataset, tud.ConcatDataset):
        # Weights by size and epoch_size their sum: each part's quota is its size, so an epoch
        # holds every sample once, as ConcatDataset's; labels: shared is torch's labelling.
        dataset, mixture = concat_sources(dataset)
    if not isinstance(dataset, datasets.ImageFolder):
        raise jobdef.TranslationError(
            f"from_dataset takes a torchvision ImageFolder, not {type(dataset).__name__} (stokerd reads "
            f"the folder itself; other sources are defined in the daemon's YAML)")
    if dataset.target_transform is not None:
        raise jobdef.TranslationError("the ImageFolder has a target_transform, which stokerd cannot apply")
    if dataset.loader is not datasets.folder.default_loader and dataset.loader is not datasets.folder.pil_loader:
        raise jobdef.TranslationError("the ImageFolder has a custom loader, which stokerd cannot apply")
    if batch_size is None:
        raise jobdef.TranslationError("batch_size=None (unbatched samples): stokerd serves batches; give a size")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size should be a positive integer, not {batch_size!r}")
    if sampler is not None and shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle")  # DataLoader's rule
    kwargs.update(dataloader_args.loader_kwargs(dict(
        batch_sampler=batch_sampler, num_workers=num_workers, collate_fn=collate_fn, pin_memory=pin_memory,
        timeout=timeout, worker_init_fn=worker_init_fn), kwargs))
    del prefetch_factor, persistent_workers, multiprocessing_context, pin_memory_device  # see dataloader_args
    steps, dtype, origins = jobdef.translate_with_origins(dataset.transform)
    step_rules.check(steps, origins)
    dist_rank, dist_world = distributed()
    sampler_drop_last = None
    shuffle = bool(shuffle)
    if sampler is None or isinstance(sampler, tud.SequentialSampler) or isinstance(sampler, tud.RandomSampler):
        if isinstance(sampler, tud.RandomSampler):
            if sampler.replacement or sampler._num_samples is not None:
                raise jobdef.TranslationError("RandomSampler with replacement or num_samples has no stokerd equivalent")
            shuffle = True
        elif isinstance(sampler, tud.SequentialSampler):
            shuffle = False
        world = dist_world if dist_world is not None else (env_int("WORLD_SIZE") or 1)
        if world != 1:
            raise jobdef.TranslationError(
                f"no DistributedSampler in a world of {world}: every rank would read the whole dataset; "
                f"pass sampler=DistributedSampler(dataset)")
        rank = 0
    elif isinstance(sampler, tud.DistributedSampler):
        world, rank = int(sampler.num_replicas), int(sampler.rank)
        shuffle, sampler_drop_last = bool(sampler.shuffle), bool(sampler.drop_last)
    elif isinstance(sampler, tud.WeightedRandomSampler):
        raise jobdef.TranslationError(
            "sampler WeightedRandomSampler (weights per sample, drawn with replacement) has no stokerd "
            "equivalent; to weight whole datasets use a mixture: Loader.from_folder([(root, weight), ...]) "
            "or `sources:` in the daemon's YAML")
    else:
        raise jobdef.TranslationError(f"sampler {type(sampler).__name__} has no stokerd equivalent")
    explicit_seed = seed is not None
    seed, augment_seed = dataloader_args.job_seeds(seed, generator, sampler)
    local = local_world_size if local_world_size is not None else (env_int("LOCAL_WORLD_SIZE") or world)
    if world % local != 0:
        raise ValueError(f"world size {world} is not a multiple of local_world_size {local}")
    first = (rank // local) * local
    definition = jobdef.job_yaml(
        name="from_dataset", root=os.path.abspath(dataset.root), sources=mixture,
        labels="shared" if mixture else None, batch_size=batch_size, shuffle=shuffle,
        seed=seed, augment_seed=augment_seed, drop_last=drop_last, sampler_drop_last=sampler_drop_last,
        world=world, first=first, local=local, prefetch=prefetch, on_error=on_error, steps=steps, dtype=dtype,
        layout=layout,
        mixup=dataloader_args.mix_alpha(mixup, "mixup"), cutmix=dataloader_args.mix_alpha(cutmix, "cutmix"))
    kwargs.setdefault("world_size", world)
    kwargs.setdefault("rank", rank)
    # The steps are the definition's last lines but its output line (job_yaml): 1-based line numbers.
    last_step = len(definition.splitlines()) - 1
    sampler_generator = sampler.generator if isinstance(sampler, tud.RandomSampler) else generator
    passes = dataloader_args.PassDraws(generator, shuffle and not isinstance(sampler, tud.DistributedSampler),
                                       sampler_generator, len(dataset) if mixture is None else
                                       int(sum(w for _, w in mixture)), numbered=explicit_seed)
    return DefinedJob(definition, kwargs,
                      origins={last_step - len(steps) + 1 + k: o for k, o in enumerate(origins)},
                      epoch_sampler=sampler if isinstance(sampler, tud.DistributedSampler) else None,
                      passes=passes)
