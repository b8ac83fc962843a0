"""The ranks' collectives: through shared memory when they share a host (runs on workers).

gloo moves every all-reduce through TCP, even between two processes on one host: about
1 ms for a 33,000-float gradient and 0.5 ms for a single float on a 2-core machine,
paid at every step of ``sync="allreduce"`` (docs/benchmarks.md). When every rank of a
CPU job can map the same file in ``/dev/shm`` and see the others' processes, the
gradients go through that file instead: each rank copies its tensor into its own slot,
announces it by a counter, waits for the others' counters, and sums the slots in rank
order (so every rank computes the same bits; with two ranks, the bits gloo gives).

The counters are plain aligned 64-bit stores and loads, which needs a CPU that keeps
stores in order (x86-64): elsewhere, and on GPUs, the ranks use ``torch.distributed``.
A waiting rank spins briefly, then sleeps in 50 µs steps (1 ms steps after 0.1 s), and
every 20 ms checks that the ranks it waits for are alive (their ``/proc`` entries), have
not failed (a rank that raises marks its row), and that the job's ``timeout`` has not
passed: a lost peer ends the wait within a fraction of a second, as a closed gloo
connection does.

Dask's config ``dmlsearch.training.shared-memory: false`` (read on the driver) keeps
every job on ``torch.distributed``.
"""

from __future__ import annotations

import contextlib
import gc
import mmap
import os
import platform
import sys
import time
import uuid
from collections.abc import Iterable

import numpy as np
import torch
import torch.distributed as dist

from ..exceptions import GangError

__all__ = ["CONFIG_KEY", "Collectives", "SharedMemoryCollectives", "open_collectives"]

CONFIG_KEY = "dmlsearch.training.shared-memory"
SHM_DIR = "/dev/shm"
PREFIX = "dmlsearch-"  # then the creating process's pid
ROW = 64  # bytes per rank's header row: its own cache line
_COUNTER, _PID, _START, _FAILED, _MAGIC = range(5)  # int64 fields of a row
#: What a shared-memory all-reduce sums (a broadcast copies bytes: any dtype).
_DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64}
MEMORY_SHARE = 0.1  # of a worker's memory limit, at most, for the file
_SPINS = 2048  # waits this long (a few ms at most) spin before they sleep
_SLEEP = 50e-6  # then sleep this long between looks,
_LONG_WAIT, _LONG_SLEEP = 0.1, 1e-3  # and this long once they have waited that long
_CHECK_EVERY = 0.02


class Collectives:
    """Sum-all-reduce and broadcast over ``torch.distributed`` (any backend, any device)."""

    name = "torch.distributed"

    def all_reduce(self, t: torch.Tensor) -> None:
        """Replace ``t`` by the sum of every rank's ``t``."""
        dist.all_reduce(t)

    def broadcast(self, t: torch.Tensor, src: int) -> None:
        """Replace ``t`` by rank ``src``'s."""
        # As bytes: gloo broadcasts no int16 (a buffer of that dtype failed every job).
        dist.broadcast(t.view(torch.uint8) if t.is_contiguous() and t.dim() else t, src=src)

    def close(self, failed: bool) -> None:
        """After the rank's last collective; ``failed``: it ends by raising."""


def _process_start(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot), None when it has ended."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):  # a zombie has ended; its parent has not yet reaped it
        return None
    return int(fields[19])


def _host_supports() -> bool:
    return (
        sys.platform.startswith("linux")
        and platform.machine().lower() in ("x86_64", "amd64")
        and os.path.isdir(SHM_DIR)
        and _process_start(os.getpid()) is not None
    )


class SharedMemoryCollectives(Collectives):
    """The collectives of ranks that share a host, through one mapped file.

    Layout: one 64-byte row per rank (counter, pid, process start time, failed flag; row
    0 also a magic number), then one slot of ``capacity`` bytes per rank. Every op is
    called by every rank in the same order (collective semantics), so each rank's count
    of ops, ``gen``, agrees: before op ``gen`` a rank's counter reads ``2*gen`` (done with
    op ``gen - 1``), ``2*gen + 1`` once its slot holds its input, ``2*gen + 2`` once it
    has read what it needs. A tensor that does not fit (or is not a contiguous CPU tensor
    of a numeric dtype) goes through ``torch.distributed``, the same on every rank.
    """

    name = "shared-memory"

    def __init__(
        self, mm: mmap.mmap, rank: int, world_size: int, capacity: int, timeout: float
    ) -> None:
        self.rank, self.world_size = rank, world_size
        self.capacity, self.timeout = capacity, timeout
        self.gen = 0
        self._mm = mm
        self.rows = _rows(mm, world_size)
        self.counters = self.rows[:, _COUNTER]
        self.slots = torch.frombuffer(mm, dtype=torch.uint8, offset=world_size * ROW)
        self.pids = [int(p) for p in self.rows[:, _PID]]
        self.starts = [int(s) for s in self.rows[:, _START]]

    def _slot(self, rank: int, like: torch.Tensor) -> torch.Tensor:
        """Rank ``rank``'s slot as a flat tensor of ``like``'s dtype and size."""
        start = rank * self.capacity
        return self.slots[start : start + like.numel() * like.element_size()].view(like.dtype)

    def _fits(self, t: torch.Tensor, summed: bool) -> bool:
        return (
            t.device.type == "cpu"
            and (t.dtype in _DTYPES or not summed)
            and t.is_contiguous()
            and t.dim() > 0
            and t.numel() * t.element_size() <= self.capacity
        )

    def all_reduce(self, t: torch.Tensor) -> None:
        if not self._fits(t, summed=True):
            dist.all_reduce(t)
            return
        flat = t.view(-1)
        self._begin("all-reduce")
        self._slot(self.rank, flat).copy_(flat)
        self._arrive("all-reduce")
        torch.add(self._slot(0, flat), self._slot(1, flat), out=flat)
        for r in range(2, self.world_size):
            flat.add_(self._slot(r, flat))
        self._leave()

    def broadcast(self, t: torch.Tensor, src: int) -> None:
        if not self._fits(t, summed=False):
            super().broadcast(t, src)
            return
        flat = t.view(-1)
        self._begin("broadcast")
        if self.rank == src:
            self._slot(src, flat).copy_(flat)
        self._arrive("broadcast")
        if self.rank != src:
            flat.copy_(self._slot(src, flat))
        self._leave()

    def close(self, failed: bool) -> None:
        if failed:
            self.rows[self.rank, _FAILED] = 1
        # The views go first: a mapping with exported buffers cannot be closed.
        del self.rows, self.counters, self.slots
        try:
            self._mm.close()
        except BufferError:  # a view still held (a cycle): collected, then closed
            gc.collect()
            with contextlib.suppress(BufferError):
                self._mm.close()

    def _begin(self, op: str) -> None:
        if self.gen:  # every rank has read what the previous op left in the slots
            self._wait(2 * self.gen, op)

    def _arrive(self, op: str) -> None:
        self.counters[self.rank] = 2 * self.gen + 1
        self._wait(2 * self.gen + 1, op)
        # A peer that gave up on this rank (its timeout) arrived but never finished this
        # op: without this look, a late rank would finish it and train one more step. A
        # peer that finished the op and failed after (its next step) has not given up on
        # it: the op stands (rank 0 still publishes the checkpoint of the epoch it ends).
        # The flag is read first: a peer sets its counter before its flag.
        flagged = np.flatnonzero(self.rows[:, _FAILED])
        failed = [r for r in flagged if self.counters[r] < 2 * self.gen + 2]
        if failed:
            raise GangError(
                f"rank {failed[0]} failed while rank {self.rank} was late to a shared-memory {op}",
                rank=int(failed[0]),
            )

    def _leave(self) -> None:
        self.counters[self.rank] = 2 * self.gen + 2
        self.gen += 1

    def _wait(self, target: int, op: str) -> None:
        counters = self.counters
        if counters.min() >= target:
            return
        started = time.monotonic()
        check = started + _CHECK_EVERY
        spins = 0
        while counters.min() < target:
            spins += 1
            if spins < _SPINS:
                if spins % 16 == 0:
                    os.sched_yield()
                continue
            # A peer this late (a checkpoint, a straggler) is not worth 20,000 looks a second.
            time.sleep(_LONG_SLEEP if time.monotonic() - started > _LONG_WAIT else _SLEEP)
            now = time.monotonic()
            if now >= check:
                self._check_peers(target, op, now - started)
                check = now + _CHECK_EVERY

    def _check_peers(self, target: int, op: str, waited: float) -> None:
        late = [r for r in range(self.world_size) if self.counters[r] < target]
        for r in late:
            if self.rows[r, _FAILED]:
                raise GangError(
                    f"rank {r} failed while rank {self.rank} waited for it in a shared-memory {op}",
                    rank=r,
                )
            if _process_start(self.pids[r]) != self.starts[r]:
                raise GangError(
                    f"rank {r}'s process (pid {self.pids[r]}) ended while rank {self.rank} "
                    f"waited for it in a shared-memory {op}",
                    rank=r,
                )
        if late and waited > self.timeout:
            raise GangError(
                f"rank {self.rank} waited {waited:.0f} s for ranks {late} in a shared-memory "
                f"{op}, past the job's timeout={self.timeout:g} s",
                rank=late[0],
            )


def capacity_for(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes a slot needs for any flat buffer the syncs make of ``tensors``: all of them
    and one count per tensor, at the widest element size (``sync="average"`` concatenates
    them, and the concatenation takes the widest dtype), rounded up to whole rows."""
    tensors = list(tensors)
    widest = max((t.element_size() for t in tensors), default=8)
    total = (sum(t.numel() for t in tensors) + len(tensors)) * max(widest, 8)
    return -(-total // ROW) * ROW


def _remove_orphans() -> None:
    """Unlink the files of creators that ended before unlinking them (killed while their
    peers attached: the only window in which a file is left behind)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(SHM_DIR):
            pid = name.removeprefix(PREFIX).split("-")[0]
            if name.startswith(PREFIX) and pid.isdigit() and _process_start(int(pid)) is None:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(SHM_DIR, name))


def _create(path: str, size: int) -> mmap.mmap:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        # Reserved now: a tmpfs that is full refuses here rather than with SIGBUS later.
        os.posix_fallocate(fd, 0, size)
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def _attach(path: str, size: int, magic: int) -> mmap.mmap | None:
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None  # another host, or another /dev/shm
    try:
        if os.fstat(fd).st_size != size:
            return None
        mm = mmap.mmap(fd, size)
    finally:
        os.close(fd)
    if int(_rows(mm, 1)[0, _MAGIC]) != magic:
        mm.close()
        return None
    return mm


def _rows(mm: mmap.mmap, n: int) -> np.ndarray:
    """The first ``n`` rows of the file's header, one int64 field a column (a view)."""
    return np.frombuffer(mm, dtype=np.int64, count=n * ROW // 8).reshape(n, ROW // 8)


def _peers_visible(mm: mmap.mmap, world_size: int) -> bool:
    """Every rank's row names a process this one sees (the same pid namespace)."""
    rows = _rows(mm, world_size)
    ok = all(_process_start(int(rows[r, _PID])) == int(rows[r, _START]) for r in range(world_size))
    del rows
    return ok


def open_collectives(
    rank: int,
    world_size: int,
    capacity: int,
    timeout: float,
    enabled: bool,
    memory_limit: int | None = None,
) -> Collectives:
    """The rank's collectives: through shared memory when every rank agrees it can map
    the same file and see the others' processes, else ``torch.distributed``.

    Called by every rank (a few small gloo collectives decide it together) unless
    ``enabled`` is False, the same on every rank. A file above a tenth of
    ``memory_limit`` (the rank's worker's, in bytes) is not used: every rank reads every
    slot, so the whole file counts in each worker's memory, as Dask's nanny measures it.
    """
    if not enabled or world_size < 2:
        return Collectives()
    size = world_size * (ROW + capacity)
    fits = not memory_limit or size <= memory_limit * MEMORY_SHARE
    mm: mmap.mmap | None = None
    path = None
    offer: list[object] = [None, 0]
    try:
        if rank == 0 and fits and _host_supports():
            _remove_orphans()
            path = os.path.join(SHM_DIR, f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex}")
            magic = int.from_bytes(os.urandom(7), "little")
            with contextlib.suppress(OSError):
                mm = _create(path, size)
                _rows(mm, 1)[0, _MAGIC] = magic
                offer = [path, magic]
        dist.broadcast_object_list(offer, src=0)
        if rank != 0 and offer[0] is not None and fits and _host_supports():
            mm = _attach(str(offer[0]), size, int(offer[1]))  # type: ignore[call-overload]
        if mm is not None:
            rows = _rows(mm, rank + 1)
            rows[rank, _PID], rows[rank, _START] = os.getpid(), _process_start(os.getpid()) or -1
            del rows
        dist.barrier()
        ok = torch.tensor([int(mm is not None and _peers_visible(mm, world_size))])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    finally:
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)  # mapped where it is used; nothing left behind
    if mm is not None and int(ok):
        return SharedMemoryCollectives(mm, rank, world_size, capacity, timeout)
    if mm is not None:
        mm.close()
    return Collectives()
