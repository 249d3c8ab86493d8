"""stoker.Loader: a DataLoader-shaped iterator over batches served by stokerd.

This module holds the Loader itself: its connection to the daemon (connect, reconnect,
the world check), its position (epoch and batch, state_dict, set_epoch) and iteration. What
it hands out and what it is built from live beside it: batch.py (one batch as tensors, the
DLPack plumbing), placement.py (rank, world and device from torch.distributed and the
launcher), torchvision_jobs.py (from_folder / from_dataset: jobs defined in torchvision's
terms), dataloader_views.py (loader.sampler and loader.dataset as DataLoader scripts read
them)."""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import numbers
import time
import warnings
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from . import _stoker, torchvision_jobs
from .batch import Batch
from .dataloader_views import DatasetView, SamplerView
from .optional_torch import torch
from .placement import distributed, env_int, resolve_device


class HoldError(_stoker.StokerError):
    """Raised when the caller holds every slot of its ring and asks for one more."""


# Job keys that say where the job's ranks are and how deep their rings, not which batches
# they get: a state taken with other values is still this job's (Loader._definition_hash).
_PLACEMENT_KEYS = frozenset({"consumers", "world_size", "ranks", "node_rank", "local_world_size", "readers",
                             "prefetch"})


def _state_int(key: str, value: Any, low: int = 0) -> int:
    """A loader state's integer at `key`: an int (numpy's too; not a bool, float or str), >= low."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"loader state key {key!r} must be an int, not {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"loader state key {key!r} must be >= {low}, not {value}")
    return int(value)


def _job_constructor(define: Callable[..., "torchvision_jobs.DefinedJob"]) -> classmethod:
    """Loader.from_folder / Loader.from_dataset: `define` (torchvision_jobs) turns the arguments
    into a DefinedJob, the Loader builds the lazy loader of it. Keywords that are neither
    `define`'s nor the Loader's are refused in the name the user called, as Python's own."""
    own = set(inspect.signature(define).parameters)

    def make(cls, *args: Any, **kwargs: Any) -> "Loader":
        loader_params = set(inspect.signature(cls.__init__).parameters) - {"self", "job", "lazy"}
        for k in kwargs:
            if k not in own and k not in loader_params:
                raise TypeError(f"{define.__name__}() got an unexpected keyword argument {k!r}")
        return cls._from_defined_job(define(*args, **kwargs))

    functools.update_wrapper(make, define)  # the name and docstring; the signature, with cls:
    sig = inspect.signature(define)
    make.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[inspect.Parameter("cls", inspect.Parameter.POSITIONAL_OR_KEYWORD), *sig.parameters.values()],
        return_annotation="Loader")
    return classmethod(make)


class Loader:
    """Batches of one job of a running stokerd, as a PyTorch trainer expects them.

        loader = stoker.Loader("imagenet-train")       # rank from torchrun's RANK
        for epoch in range(start, 90):
            loader.set_epoch(epoch)
            for images, labels in loader:              # len(loader) batches
                ...
        ckpt["loader"] = loader.state_dict()

    Tensors point into shared memory (no copy); a batch's slot returns to the daemon when
    the last tensor of it (images, labels and ids share it) is freed, or at once on
    `Batch.release()` (from `batches()`); using its tensors after that is a bug: the daemon
    refills the slot. `copy=True` yields owned tensors and hands the slot back at once.

    Treat the tensors as read-only. NumPy arrays are marked read-only; torch has no read-only
    tensors, so an in-place operation on one writes into this consumer's own slot (harmless to
    other consumers, lost when the slot is refilled) instead of crashing the process. A job
    with `readers: K > 1` shares every batch between the K readers of a rank, so their mapping
    is read-only: an in-place operation on such a tensor is a segmentation fault (make a new
    tensor, e.g. images.float() or images.cuda(), as training code does anyway).

    reader (fan-out jobs, `readers: K`): which of the rank's K readers this process is; they
    all get the same batches (a tensor-parallel group, or K trials of a hyper-parameter search
    decoding each batch once). Default: $STOKER_READER; else, when rank is not given and the
    job has K > 1 readers, the launcher's global rank g is split the way tensor-parallel
    groups are numbered (consecutive ranks form a group): rank g // K, reader g % K, and a
    world of W // K.

    device="cuda" (or "cuda:N", a torch.device): the daemon copies each batch to this GPU
    (CUDA IPC; optionally normalized there, see the job's device_normalize) and the loader
    yields torch.cuda tensors of that copy, ordered on the current stream by a GPU wait.
    Queue the work that reads a batch on the stream that was current when it was yielded:
    when its last tensor dies, the release fence is recorded on that stream, and the daemon
    overwrites the slot only after the work queued there before it. Default "cuda" device:
    torch's current device, else LOCAL_RANK. pin_memory=True (host batches): the mapped ring
    is page-locked for that GPU, so images.cuda(non_blocking=True) is an asynchronous copy.

    rank / world_size default to torch.distributed's when it is initialized, else torchrun's
    RANK / WORLD_SIZE (else 0 / unchecked); rank is global and world_size must equal the job's
    world (`consumers`, or `world_size` for a job spread over several nodes' daemons). timeout_s: longest wait for one batch
    (None: forever) before stoker.TimeoutError. hold_timeout_s: how long to wait when this
    process holds every slot of its ring before stoker.HoldError. reconnect_timeout_s: when
    the daemon goes away (a restart under systemd's Restart=, a package upgrade), wait up to
    this long for one on the same socket and continue at the same position with the same
    batches (default: raise stoker.DisconnectedError at once). wait_for_daemon: seconds to wait
    at construction for a daemon that has not started yet (default: fail at once).
    """

    def __init__(self, job: str, rank: Optional[int] = None, world_size: Optional[int] = None,
                 socket: Optional[str] = None, framework: Optional[str] = None, copy: bool = False,
                 timeout_s: Optional[float] = None, hold_timeout_s: float = 60.0,
                 device: Any = None, pin_memory: bool = False,
                 reconnect_timeout_s: Optional[float] = None, wait_for_daemon: float = 0.0,
                 reader: Optional[int] = None, lazy: bool = False):
        self.job = job
        if reconnect_timeout_s is not None and reconnect_timeout_s < 0:
            raise ValueError("reconnect_timeout_s must be >= 0")
        self.reconnect_timeout_s = reconnect_timeout_s or 0.0
        self.device, self._device_index = resolve_device(device)
        self.pin_memory = bool(pin_memory)
        if self.pin_memory and self.device:
            raise ValueError("pin_memory is for host batches; device batches are on the GPU already")
        dist_rank, dist_world = distributed()
        self.rank = rank if rank is not None else (dist_rank if dist_rank is not None else (env_int("RANK") or 0))
        self.world_size = world_size if world_size is not None else (
            dist_world if dist_world is not None else env_int("WORLD_SIZE"))
        self.socket = socket or ""
        if reader is None:
            reader = env_int("STOKER_READER")
        # A global rank splits into (rank, reader) only when nobody chose either; the daemon
        # knows the job's readers and says which rank and reader it served (first connect).
        self._split_rank = reader is None and rank is None
        self.reader = reader or 0
        if self.reader < 0:
            raise ValueError(f"reader must be >= 0, not {self.reader}")
        if framework is None:
            framework = "torch" if torch is not None else "numpy"
        if framework not in ("torch", "numpy"):
            raise ValueError(f"framework must be 'torch' or 'numpy', not {framework!r}")
        if framework == "torch" and torch is None:
            raise ImportError("framework='torch' but torch is not installed")
        self.framework = framework
        self.copy = copy
        self._status: Optional[Dict[str, Any]] = None  # the job's entry of the daemon's status
        self._dataset: Optional[DatasetView] = None
        self.timeout_s = timeout_s
        self.hold_timeout_s = hold_timeout_s
        self._epoch = 0          # where the next iteration starts
        self._batch = 0
        self._client: Optional[_stoker.Client] = None
        self._stream: Tuple[int, int] = (-1, -1)  # next position the open connection delivers
        # Elastic resume (load_state_dict of a global_position): epoch `_elastic[0]` is the rest
        # after the whole world consumed `_elastic[1]` samples; its batch numbers count that rest.
        self._elastic: Optional[Tuple[int, int]] = None
        self._stream_position = 0  # the start position the open connection was made with
        self._pending: Optional[Batch] = None
        if self.world_size is not None and self.world_size < 1:
            raise ValueError("world_size must be >= 1")
        if self.rank < 0:
            raise ValueError(f"rank must be >= 0, not {self.rank}")
        self._wait_for_daemon = max(0.0, float(wait_for_daemon))
        self._info: Optional[Dict[str, Any]] = None
        self._definition: Optional[str] = None  # from_folder: the job's YAML, sent on first use
        # from_dataset with a DistributedSampler: the script's sampler, whose epoch (set_epoch)
        # decides where each iteration starts, as with DataLoader.
        self._epoch_sampler: Any = None
        self._origins: Dict[int, str] = {}  # from_dataset: definition line -> the transform it came from
        # from_dataset: each iteration is a new pass, as a DataLoader's (DataLoader's draws per
        # iteration, see _begin_pass); None: an iteration continues where the last one stopped.
        self._passes: Optional[Any] = None
        self._resume_pending = False  # load_state_dict / set_epoch chose where the next pass starts
        self._pass_id = 0  # which pass the open iterator belongs to (an older one is superseded)
        # lazy: nothing is asked of the daemon until the loader is first used (iterated, len(),
        # batch_size, ...): a validation loader built at start-up holds no connection until then.
        if not lazy:
            self._open(0, 0)

    def _open(self, epoch: int, batch: int) -> None:
        """First use: defines the job (from_folder), connects at (epoch, batch), checks the world."""
        if self._info is not None:
            return
        if self._definition is not None:
            self._define()
        # A trainer started beside its daemon (a launch script, a SLURM step) may come up first:
        # wait_for_daemon seconds of "no daemon yet" are waited out before giving up.
        deadline = time.monotonic() + self._wait_for_daemon
        while True:
            try:
                self._connect(epoch, batch)
                break
            except _stoker.NoDaemonError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
        info = self._client.info()
        self._info = info
        job, framework = self.job, self.framework
        if self._split_rank:
            self._split_rank = False  # reconnects ask for what was served
            readers = int(info.get("readers", 1))
            if readers > 1:
                if self.world_size is not None:
                    if self.world_size % readers != 0:
                        self.close()
                        raise ValueError(
                            f"world size {self.world_size} is not a multiple of job '{job}''s readers: "
                            f"{readers} (each rank's readers are consecutive processes)")
                    self.world_size //= readers
                self.rank, self.reader = int(info["rank"]), int(info["reader"])
        self._device_backend = info.get("device_backend", "")
        if self.device and self._device_backend == "cuda" and framework != "torch":
            self.close()
            raise ValueError("device batches on a GPU need framework='torch'")
        self._check_world_size()

    @property
    def info(self) -> Dict[str, Any]:
        """What the daemon said when this loader connected (batch_size, batches_per_epoch,
        samples_per_rank of this rank, shape, dtype, readers, ...)."""
        self._open(self._epoch, self._batch)
        return self._info

    def _define(self) -> None:
        """Registers the from_folder job with the daemon (or finds the one every local rank
        with the same definition shares) and takes its name."""
        request = json.dumps({"op": "define_job", "config": self._definition})
        deadline = time.monotonic() + self._wait_for_daemon
        while True:
            try:
                reply = json.loads(_stoker.daemon_command(self.socket, request))
                break
            except _stoker.NoDaemonError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
        if not reply.get("ok"):
            why = torchvision_jobs.in_users_words(reply.get("error", reply), self._origins)
            raise _stoker.RefusedError(f"stokerd refused the job: {why}")
        self.job = reply["job"]
        self._status = None

    # --- jobs defined in torchvision's terms (torchvision_jobs.py) ------------------------
    @classmethod
    def _from_defined_job(cls, job: "torchvision_jobs.DefinedJob") -> "Loader":
        """A lazy loader of a job defined from Python: its YAML is sent to the daemon on first use."""
        loader = cls("", lazy=True, **job.loader_kwargs)
        loader._definition = job.definition
        loader._origins = dict(job.origins)
        loader._epoch_sampler = job.epoch_sampler
        loader._passes = job.passes
        return loader

    from_folder = _job_constructor(torchvision_jobs.from_folder)
    from_dataset = _job_constructor(torchvision_jobs.from_dataset)

    # --- what scripts written for torch.utils.data.DataLoader read -------------------------
    @property
    def batch_size(self) -> int:
        return int(self.info["batch_size"])

    @property
    def drop_last(self) -> bool:
        return bool(self._job_status().get("drop_last", False))

    @property
    def sampler(self) -> SamplerView:
        """DistributedSampler's interface: set_epoch(e), len() (samples of this rank per epoch),
        epoch (where the next iteration starts)."""
        return SamplerView(self.set_epoch, lambda: self._epoch, lambda: self.info["samples_per_rank"])

    @property
    def dataset(self) -> DatasetView:
        """ImageFolder's interface: classes, class_to_idx, samples ((path, class) in id order,
        the order the daemon numbers samples), targets, len()."""
        if self._dataset is None:
            self._dataset = DatasetView(self._job_status(), self.socket)
        return self._dataset

    def _job_status(self) -> Dict[str, Any]:
        self._open(self._epoch, self._batch)  # a lazy loader's first use (from_folder: defines the job)
        if self._status is None:
            status = json.loads(_stoker.daemon_status(self.socket))
            # A job restarted by a reload is listed twice for a while: the draining one and
            # its successor, which is the one new connections get.
            same = [j for j in status.get("jobs", []) if j.get("name") == self.job]
            self._status = next((j for j in same if j.get("state", "serving") == "serving"), same[0] if same else {})
        return self._status

    def _check_world_size(self) -> None:
        """world_size must match the job's world (its consumers, or world_size for a
        multi-node job), or every rank would get a shard of the wrong size. The handshake does not carry the count: the daemon's status does."""
        if self.world_size is None:
            return
        try:
            text = _stoker.daemon_status(self.socket)
        except _stoker.StokerError:
            return  # no status from this daemon: nothing to check against
        status = json.loads(text)  # a broken reply is an error, not a reason to skip the check
        for j in status.get("jobs", []):
            if j.get("name") != self.job:
                continue
            world = j.get("world_size")
            if not isinstance(world, int) and isinstance(j.get("consumers"), list):
                world = len(j["consumers"])  # a daemon from before multi-node jobs
            if world and world != self.world_size:
                self.close()
                if world == len(j.get("consumers", [])):
                    raise _stoker.RefusedError(
                        f"world size {self.world_size} but job '{self.job}' serves {world} "
                        f"consumer(s): set 'consumers: {self.world_size}' in the job's config "
                        f"or run {world} rank(s)")
                raise _stoker.RefusedError(
                    f"world size {self.world_size} but job '{self.job}' belongs to a world of "
                    f"{world} (world_size in the job's config)")

    # --- connection -----------------------------------------------------------------------
    def _connect(self, epoch: int, batch: int) -> None:
        # One connection per rank: moving the stream closes the old one, and the daemon then
        # refills the slots of batches still referenced from it.
        if self._client is not None:
            held = self._client.outstanding
            if held:
                warnings.warn(
                    f"stoker: moving job '{self.job}' to epoch {epoch} batch {batch} while {held} "
                    f"batch(es) of the previous position are still referenced: their tensors now "
                    f"view slots the daemon refills (copy what you keep, or use copy=True)",
                    RuntimeWarning, stacklevel=4)
            self.close()
        position = self._position_for(epoch)
        try:
            self._client = _stoker.Client(self.job, self.rank, self.socket, epoch, batch, True, self.device,
                                          self.reader, self._split_rank, position)
        except _stoker.RefusedError:
            if self._definition is None or self._info is None:
                raise
            # A from_folder job unused for the daemon's linger time was removed (or the
            # daemon restarted): define it again, the same definition gives the same job.
            self._define()
            self._client = _stoker.Client(self.job, self.rank, self.socket, epoch, batch, True, self.device,
                                          self.reader, self._split_rank, position)
        if self.pin_memory:
            index = resolve_device("cuda")[1]
            self._client.pin_memory(index)
        self._stream = (epoch, batch)
        self._stream_position = position

    def _position_for(self, epoch: int) -> int:
        """Samples the whole world had consumed of `epoch` when this loader's stream of it
        began (elastic resume); 0 for an ordinary epoch."""
        return self._elastic[1] if self._elastic is not None and self._elastic[0] == epoch else 0

    def _ensure_stream_at(self, epoch: int, batch: int) -> None:
        self._open(epoch, batch)
        if (self._client is None or self._stream != (epoch, batch)
                or self._stream_position != self._position_for(epoch)):
            self._connect(epoch, batch)

    def _next_native(self) -> "_stoker.Batch":
        """Next batch of the stream, waiting without the GIL; raises instead of hanging."""
        start = time.monotonic()
        while True:
            held = self._client.outstanding
            slots = self._info["slot_count"]  # set by _open, which a stream is opened through
            if held >= slots:
                limit = self.hold_timeout_s
            else:
                limit = self.timeout_s
            # Wait in slices so that Ctrl-C and the hold limit are noticed.
            slice_ms = 1000
            if limit is not None:
                left = limit - (time.monotonic() - start)
                if left <= 0:
                    if held >= slots:
                        hint = (" A loop keeps the previous batch until the next one arrives, so "
                                "zero-copy iteration needs prefetch >= 2." if slots == 1 else "")
                        raise HoldError(
                            f"this process still holds {held} batch(es) of job '{self.job}' and its "
                            f"ring has {slots} slot(s): no new batch can arrive until one is released "
                            f"(drop references to old batches' tensors, call batch.release(), or use "
                            f"copy=True).{hint}")
                    raise _stoker.TimeoutError(f"no batch from stokerd within {limit} s")
                slice_ms = max(1, min(slice_ms, int(left * 1000)))
            try:
                return self._client.next(slice_ms)
            except _stoker.TimeoutError:
                continue
            except _stoker.DisconnectedError as lost:
                self._client = None
                if not self.reconnect_timeout_s:
                    raise
                self._reconnect(lost)
                start = time.monotonic()

    def _reconnect(self, lost: Exception) -> None:
        """The daemon went away (restart, upgrade): wait up to reconnect_timeout_s for one on
        the same socket and attach where the stream stands, so iteration goes on with exactly
        the batches an uninterrupted run gives. Batches still held stay readable (each keeps
        its own mapping of the old daemon's segment)."""
        deadline = time.monotonic() + self.reconnect_timeout_s
        last: Exception = lost
        while time.monotonic() < deadline:
            time.sleep(0.05)
            try:
                self._connect(*self._stream)
                return
            except (_stoker.NoDaemonError, _stoker.DisconnectedError, _stoker.RefusedError) as e:
                last = e  # not back yet, or its predecessor's rank not yet free
        raise _stoker.DisconnectedError(
            f"{lost}; no stokerd came back on the socket within {self.reconnect_timeout_s} s ({last})")

    # --- DataLoader conventions -----------------------------------------------------------
    def __len__(self) -> int:
        return int(self.info["batches_per_epoch"])

    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at the beginning of `epoch` (as DistributedSampler).
        If the loader already stands inside `epoch` after load_state_dict (or, for a loader of
        a named job or from_folder, an iteration left early) it keeps that position, so
        `for e in range(ckpt_epoch, n): loader.set_epoch(e)` resumes mid-epoch exactly."""
        epoch = int(epoch)
        if self._passes is None:
            if epoch != self._epoch:
                self._epoch, self._batch = epoch, 0
        elif epoch != self._epoch or not self._resume_pending:
            self._epoch, self._batch, self._elastic = epoch, 0, None
        self._resume_pending = True
        if self._epoch_sampler is not None and self._epoch_sampler.epoch != epoch:
            self._epoch_sampler.set_epoch(epoch)  # the script's sampler agrees with the loader

    def _begin_pass(self) -> None:
        """A from_dataset loader's iteration is a new pass over the dataset, as a DataLoader's
        `iter()` (an iteration left early is not continued): it makes DataLoader's draws
        (dataloader_args.PassDraws) and starts at batch 0 of its DistributedSampler's epoch
        (the script's `sampler.set_epoch(e)` moves it, every epoch and at --resume), else of the
        epoch its draws name (a fresh order, as a RandomSampler draws one; seed= numbers the
        passes). After load_state_dict or set_epoch it starts where they put it instead."""
        self._pass_id += 1
        key = self._passes.draw()
        if self._epoch_sampler is not None:
            self.set_epoch(int(self._epoch_sampler.epoch))  # keeps a resumed position in that epoch
        elif not self._resume_pending:
            epoch = key if key is not None else self._epoch + (1 if self._batch else 0)
            self._epoch, self._batch, self._elastic = epoch, 0, None
        self._resume_pending = False

    def state_dict(self) -> Dict[str, Any]:
        """Position of the next batch (a batch counts as consumed once it was yielded):
        restoring it resumes exactly there, also after the daemon restarted.

        "global_position" is the same place for the whole world: the epoch, the samples every
        rank together consumed of its global order ("samples": batches x batch_size x world, as
        DistributedSampler splits it) and the world size it was taken at. load_state_dict() on
        a world of another size resumes from it: the new ranks split the rest of that epoch."""
        return {"epoch": self._epoch, "batch": self._batch, "rank": self.rank, "reader": self.reader,
                "job": self.job, "definition_hash": self._definition_hash(),
                "global_position": self._global_position()}

    def _definition_hash(self) -> Optional[str]:
        """sha256 of the job's definition as the daemon holds it (its status' "definition", the
        job's YAML), without the keys that only place the job in a world or size its ring
        (_PLACEMENT_KEYS: a checkpoint resumes on another world through global_position): a
        state of another definition of a same-named job is refused. None when the daemon's
        status does not say (a checkpoint never fails for it; the check is then skipped)."""
        try:
            definition = self._job_status().get("definition")
        except _stoker.StokerError:
            return None
        if not isinstance(definition, str):
            return None
        kept, skipping = [], False
        for line in definition.splitlines():
            if line and not line[0].isspace() and not line.startswith("- "):  # a key of the job
                skipping = line.split(":", 1)[0].strip() in _PLACEMENT_KEYS
            if not skipping:
                kept.append(line)
        return hashlib.sha256("\n".join(kept).encode()).hexdigest()

    def _global_position(self) -> Optional[Dict[str, Any]]:
        """None when the job's world cannot be told (no world_size and no status from the
        daemon): a checkpoint must never fail for it; load_state_dict then resumes per rank."""
        world = self._job_world()
        samples = self._position_for(self._epoch)
        if self._batch:
            # Every batch before the position was full on every rank (only an epoch's last
            # batch can be short, and after it the position is the next epoch's start).
            if world is None:
                return None
            samples += self._batch * self.batch_size * world
        return {"epoch": self._epoch, "samples": samples, "world_size": world}

    def _job_world(self) -> Optional[int]:
        """The world of ranks this loader's job is split among (its daemon's status says)."""
        if self.world_size is not None:
            return int(self.world_size)
        try:
            status = json.loads(_stoker.daemon_status(self.socket))
        except _stoker.StokerError:
            return None
        for j in status.get("jobs", []):
            if j.get("name") == self.job:
                world = j.get("world_size")
                if not isinstance(world, int) and isinstance(j.get("consumers"), list):
                    world = len(j["consumers"])
                return int(world) if world else None
        return None

    def _same_split(self, state: Dict[str, Any], gp: Dict[str, Any]) -> bool:
        """The checkpoint was taken on a world of this size, in an epoch split the ordinary way:
        its per-rank (epoch, batch) names the same batches, and keeps their numbering (scripts
        count steps from state_dict()["batch"])."""
        if "epoch" not in state or "batch" not in state or int(state["epoch"]) != int(gp["epoch"]):
            return False
        world = gp.get("world_size")
        if world is None or world != self._job_world():
            return False
        return int(gp["samples"]) == int(state["batch"]) * self.batch_size * int(world)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """The next iteration starts at state's position (reconnecting if needed). A state
        with "global_position" resumes from it, on this world whatever its size: the rest of
        that epoch is split among this world's ranks (each sample the earlier world had not
        consumed, once, padded or cut by the job's pad_shards / sampler_drop_last), and the
        epochs after it are the ordinary split.

        The state is checked first, naming the key: positions are ints (not floats, strings or
        bools: TypeError) and not negative (ValueError); "job" and "definition_hash", when the
        state has them, must be this loader's job and its definition (ValueError: a state of
        another job, or of the same name defined otherwise, would resume at a meaningless place)."""
        gp = self._checked_state(state)
        if gp is not None and self._same_split(state, gp):
            gp = None  # taken on this world in an ordinary epoch: the per-rank position is the same place
        if gp is not None:
            epoch, samples = int(gp["epoch"]), int(gp["samples"])
            self._epoch, self._batch = epoch, 0
            self._elastic = (epoch, samples) if samples else None
        else:
            epoch, batch = int(state["epoch"]), int(state["batch"])
            self._epoch, self._batch = epoch, batch
            self._elastic = None
        self._resume_pending = True
        if self._epoch_sampler is not None:
            self._epoch_sampler.set_epoch(epoch)

    def _checked_state(self, state: Any) -> Optional[Dict[str, Any]]:
        """load_state_dict's checks; returns the state's global_position (None when absent)."""
        if not isinstance(state, dict):
            raise TypeError(f"loader state must be a dict (from state_dict()), not {type(state).__name__}")
        gp = state.get("global_position")
        if gp is not None:
            if not isinstance(gp, dict):
                raise TypeError(f"loader state key 'global_position' must be a dict or None, not {gp!r}")
            for key in ("epoch", "samples"):
                if key not in gp:
                    raise ValueError(f"loader state key 'global_position' lacks {key!r}")
                _state_int(f"global_position.{key}", gp[key])
            if gp.get("world_size") is not None:
                _state_int("global_position.world_size", gp["world_size"], low=1)
        for key in ("epoch", "batch"):
            if key in state:
                _state_int(key, state[key])
            elif gp is None:
                raise ValueError(f"loader state lacks {key!r} (and has no 'global_position')")
        for key in ("rank", "reader"):
            if state.get(key) is not None:
                _state_int(key, state[key])
        for key in ("job", "definition_hash"):
            if state.get(key) is not None and not isinstance(state[key], str):
                raise TypeError(f"loader state key {key!r} must be a str, not {state[key]!r}")
        if state.get("job") is not None:
            self._job_status()  # a lazy loader's first use: defines its job, which names it
            if state["job"] != self.job:
                raise ValueError(f"loader state key 'job': the state is job {state['job']!r}'s, this loader's "
                                 f"job is {self.job!r}")
        theirs, ours = state.get("definition_hash"), None
        if theirs is not None:
            ours = self._definition_hash()
        if theirs is not None and ours is not None and theirs != ours:
            raise ValueError(f"loader state key 'definition_hash': job {self.job!r} is defined otherwise than when "
                             f"the state was taken (its definition's sha256 {ours[:12]}..., the state's "
                             f"{theirs[:12]}...): its positions name other batches")
        return gp

    def batches(self) -> Iterator[Batch]:
        """Batches of the current epoch from the current position, as Batch objects (from_dataset:
        of a new pass, as each `iter()` of a DataLoader; see _begin_pass). The generator keeps
        no reference to a batch it yielded: the slot goes back as soon as the caller drops the
        batch and its tensors."""
        return self._batches(with_ids=True)

    def _batches(self, with_ids: bool) -> Iterator[Batch]:
        if self._passes is not None:
            self._begin_pass()
        return self._pass_batches(self._pass_id, with_ids)

    def _pass_batches(self, pass_id: int, with_ids: bool) -> Iterator[Batch]:
        self._ensure_stream_at(self._epoch, self._batch)
        while True:
            if pass_id != self._pass_id:
                # One stream per rank: a newer iter() of this loader took it over.
                raise _stoker.StokerError(
                    "this iterator of the loader was superseded by a newer iter(loader): a loader "
                    "streams one pass at a time (keep using the newest iterator)")
            last = self._advance(with_ids)
            if self._pending is not None:
                yield self._take_pending()
            if last:
                return

    def _advance(self, with_ids: bool = True) -> bool:
        """Fetches the next batch of the stream into self._pending (None for an empty
        end-of-epoch marker) and moves the position past it; returns last_in_epoch. Without
        `with_ids` the Batch gets no `ids` view (iter() yields only images and labels, and a
        third DLPack tensor a batch was a sixth of what next() cost there)."""
        native = self._next_native()
        if (native.epoch, native.index) != (self._epoch, self._batch):
            native.release()
            self.close()  # the next iteration reconnects at the position this loader expects
            raise _stoker.StokerError(
                f"stokerd delivered epoch {native.epoch} batch {native.index}, "
                f"expected epoch {self._epoch} batch {self._batch}")
        last = bool(native.last)
        if last:
            self._epoch, self._batch = self._epoch + 1, 0
        else:
            self._batch += 1
        self._stream = (self._epoch, self._batch)
        if native.count == 0:  # an empty end-of-epoch marker (bad files were skipped)
            native.release()
        else:
            self._pending = Batch(native, self.framework, self.copy, self._device_index,
                                  self._device_backend, with_ids)
        return last

    def _take_pending(self) -> Batch:
        b, self._pending = self._pending, None
        return b

    def __iter__(self) -> Iterator[Tuple[Any, Any]]:
        # batches() starts a from_dataset loader's new pass now, at iter(), as DataLoader does.
        # map() holds no reference to the previous batch while the next one is awaited.
        return map(lambda b: (b.images, b.labels), self._batches(with_ids=False))

    def close(self) -> None:
        """Hang up now. Batches not yet released must not be used afterwards: the daemon takes
        their slots back. (A Loader that is merely garbage-collected keeps its connection
        until the last of its batches is released, so its tensors stay valid.)"""
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        # Only drop the reference: the native client hangs up when its last batch is released.
        self._client = None
