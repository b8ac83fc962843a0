"""How the ranks of a data-parallel job keep their models in step (runs on workers).

* ``allreduce`` (bulk-synchronous): :class:`~torch.nn.parallel.DistributedDataParallel`
  averages the gradients of every step before the optimizer sees them.
* ``average`` (local SGD): each rank steps on its own gradients; the parameters (and
  floating buffers) are averaged every ``average_every`` steps and at the end of an epoch.

Both time the collectives they run (``sync_seconds``, on a GPU until the device has done
them) and count them (``rounds``). They reduce tensors where the model is (CPU or GPU).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

__all__ = ["Averaging", "GradientAllReduce", "make_sync", "settle"]


class _Counters:
    """Seconds spent in collectives and how many rounds ran.

    Apart from the sync object so that DDP's comm hook can hold it: the reducer keeps its
    hook's state from C++, where the cycle collector cannot see it, so a state that
    referred back to the DDP module would keep the module, its process group, the store
    (listening on every interface) and gloo's sockets alive in the worker for good.
    """

    def __init__(self) -> None:
        self.sync_seconds = 0.0
        self.rounds = 0


class _Sync:
    """Shared bookkeeping: seconds spent in collectives and how many rounds ran."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.counters = _Counters()

    @property
    def sync_seconds(self) -> float:
        return self.counters.sync_seconds

    @property
    def rounds(self) -> int:
        return self.counters.rounds

    @property
    def module(self) -> torch.nn.Module:
        """The module to call forward on."""
        return self.model

    def after_step(self, step: int) -> None:
        """After the optimizer's step ``step`` (0-based within the epoch)."""

    def end_epoch(self, steps: int) -> None:
        """After the last step of an epoch of ``steps`` steps."""


def settle(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (a GPU runs asynchronously; a collective may
    only be queued when ``all_reduce`` returns), so that a timer read next measures it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed_allreduce(sync: _Counters, bucket: dist.GradBucket) -> torch.futures.Future[Any]:
    # Synchronous on purpose: the time is exactly the collective's, and gloo on CPU
    # shares its cores with the backward pass anyway.
    started = time.perf_counter()
    buffer = bucket.buffer()
    buffer.div_(dist.get_world_size())
    dist.all_reduce(buffer)
    settle(buffer.device)
    sync.sync_seconds += time.perf_counter() - started
    if bucket.is_last():
        sync.rounds += 1
    future: torch.futures.Future[Any] = torch.futures.Future()
    future.set_result(buffer)
    return future


# DDP checks the hook's annotations as objects; postponed (string) ones fail its check.
_timed_allreduce.__annotations__.update(
    bucket=dist.GradBucket, sync=Any, **{"return": torch.futures.Future[torch.Tensor]}
)


class GradientAllReduce(_Sync):
    """Bulk-synchronous: gradients averaged across ranks at every step (DDP)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__(model)
        self.ddp = DistributedDataParallel(model)
        self.ddp.register_comm_hook(self.counters, _timed_allreduce)

    @property
    def module(self) -> torch.nn.Module:
        return self.ddp


class Averaging(_Sync):
    """Local SGD: parameters averaged every ``every`` steps and at the end of each epoch."""

    def __init__(self, model: torch.nn.Module, every: int) -> None:
        super().__init__(model)
        self.every = every
        self.tensors = [p.data for p in model.parameters()] + [
            b for b in model.buffers() if b.is_floating_point()
        ]
        self._last_averaged = -1

    def average(self) -> None:
        started = time.perf_counter()
        flat = torch.cat([t.reshape(-1) for t in self.tensors])
        dist.all_reduce(flat)
        flat.div_(dist.get_world_size())
        offset = 0
        for t in self.tensors:
            n = t.numel()
            t.copy_(flat[offset : offset + n].view_as(t))
            offset += n
        settle(flat.device)
        self.counters.sync_seconds += time.perf_counter() - started
        self.counters.rounds += 1

    def after_step(self, step: int) -> None:
        if (step + 1) % self.every == 0:
            self.average()
            self._last_averaged = step

    def end_epoch(self, steps: int) -> None:
        if self._last_averaged != steps - 1:
            self.average()
        self._last_averaged = -1


def make_sync(sync: str, model: torch.nn.Module, average_every: int) -> _Sync:
    """The synchronisation of ``sync`` (validated on the driver) around ``model``."""
    if sync == "allreduce":
        return GradientAllReduce(model)
    if sync == "average":
        return Averaging(model, average_every)
    raise ValueError(f"unknown sync {sync!r}")
