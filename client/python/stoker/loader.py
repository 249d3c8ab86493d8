"""stoker.Loader: a DataLoader-shaped iterator over batches served by stokerd.

This module holds the Loader itself: its connection to the daemon (connect, reconnect,
the world check), its position (epoch and batch, state_dict, set_epoch) and iteration. What
it hands out and what it is built from live beside it: batch.py (one batch as tensors, the
DLPack plumbing), placement.py (rank, world and device from torch.distributed and the
launcher), torchvision_jobs.py (from_folder / from_dataset: jobs defined in torchvision's
terms), dataloader_views.py (loader.sampler and loader.dataset as DataLoader scripts read
them)."""
from __future__ import annotations

import json
import time
import warnings
from typing import Any, Dict, Iterator, Optional, Tuple

from . import _stoker, torchvision_jobs
from .batch import Batch
from .dataloader_views import _Dataset, _Sampler
from .optional_torch import torch
from .placement import distributed, env_int, resolve_device


class HoldError(_stoker.StokerError):
    """Raised when the caller holds every slot of its ring and asks for one more."""


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
        self._dataset: Optional["_Dataset"] = None
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
    from_folder = classmethod(torchvision_jobs.from_folder)
    from_dataset = classmethod(torchvision_jobs.from_dataset)

    def _define_on_first_use(self, definition: str, origins: Optional[Dict[int, str]] = None,
                             epoch_sampler: Any = None) -> None:
        """Makes this lazy loader one of a job defined from Python: `definition` (the job's
        YAML) is sent to the daemon on first use; `origins` maps its lines to the transforms
        that made them (refusals name those); `epoch_sampler` is the script's
        DistributedSampler, whose epoch decides where each iteration starts."""
        self._definition = definition
        self._origins = dict(origins or {})
        self._epoch_sampler = epoch_sampler

    # --- what scripts written for torch.utils.data.DataLoader read -------------------------
    @property
    def batch_size(self) -> int:
        return int(self.info["batch_size"])

    @property
    def drop_last(self) -> bool:
        return bool(self._job_status().get("drop_last", False))

    @property
    def sampler(self) -> "_Sampler":
        """DistributedSampler's interface: set_epoch(e), len() (samples of this rank per epoch)."""
        return _Sampler(self)

    @property
    def dataset(self) -> "_Dataset":
        """ImageFolder's interface: classes, class_to_idx, samples ((path, class) in id order,
        the order the daemon numbers samples), targets, len()."""
        if self._dataset is None:
            self._dataset = _Dataset(self._job_status(), self.socket)
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
            slots = self.info["slot_count"]
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
        If the loader already stands inside `epoch` (after load_state_dict, or an iteration
        left early) it keeps that position, so `for e in range(ckpt_epoch, n):
        loader.set_epoch(e)` resumes mid-epoch exactly."""
        if epoch != self._epoch:
            self._epoch, self._batch = int(epoch), 0
        if self._epoch_sampler is not None and self._epoch_sampler.epoch != epoch:
            self._epoch_sampler.set_epoch(int(epoch))  # the script's sampler agrees with the loader

    def _follow_sampler(self) -> None:
        """A from_dataset loader's iteration starts at its DistributedSampler's epoch, as a
        DataLoader's does: the script's `sampler.set_epoch(e)` (every epoch, and at --resume)
        moves it. Inside that epoch (after load_state_dict, or an iteration left early) the
        position is kept, as Loader.set_epoch does."""
        if self._epoch_sampler is not None:
            self.set_epoch(int(self._epoch_sampler.epoch))

    def state_dict(self) -> Dict[str, Any]:
        """Position of the next batch (a batch counts as consumed once it was yielded):
        restoring it resumes exactly there, also after the daemon restarted.

        "global_position" is the same place for the whole world: the epoch, the samples every
        rank together consumed of its global order ("samples": batches x batch_size x world, as
        DistributedSampler splits it) and the world size it was taken at. load_state_dict() on
        a world of another size resumes from it: the new ranks split the rest of that epoch."""
        return {"epoch": self._epoch, "batch": self._batch, "rank": self.rank, "reader": self.reader,
                "job": self.job, "global_position": self._global_position()}

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
        epochs after it are the ordinary split."""
        gp = state.get("global_position")
        if gp is not None and self._same_split(state, gp):
            gp = None  # taken on this world in an ordinary epoch: the per-rank position is the same place
        if gp is not None:
            epoch, samples = int(gp["epoch"]), int(gp["samples"])
            if epoch < 0 or samples < 0:
                raise ValueError(f"invalid loader state {state!r}")
            self._epoch, self._batch = epoch, 0
            self._elastic = (epoch, samples) if samples else None
        else:
            epoch, batch = int(state["epoch"]), int(state["batch"])
            if epoch < 0 or batch < 0:
                raise ValueError(f"invalid loader state {state!r}")
            self._epoch, self._batch = epoch, batch
            self._elastic = None
        if self._epoch_sampler is not None:
            self._epoch_sampler.set_epoch(epoch)

    def batches(self) -> Iterator[Batch]:
        """Batches of the current epoch from the current position, as Batch objects.
        The generator keeps no reference to a batch it yielded: the slot goes back as soon
        as the caller drops the batch and its tensors."""
        self._follow_sampler()
        self._ensure_stream_at(self._epoch, self._batch)
        while True:
            last = self._advance()
            if self._pending is not None:
                yield self._take_pending()
            if last:
                return

    def _advance(self) -> bool:
        """Fetches the next batch of the stream into self._pending (None for an empty
        end-of-epoch marker) and moves the position past it; returns last_in_epoch."""
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
                                  self._device_backend)
        return last

    def _take_pending(self) -> Batch:
        b, self._pending = self._pending, None
        return b

    def __iter__(self) -> Iterator[Tuple[Any, Any]]:
        # map() holds no reference to the previous batch while the next one is awaited.
        return map(lambda b: (b.images, b.labels), self.batches())

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
