"""How the ranks of a data-parallel job keep their models in step (runs on workers).

* ``allreduce`` (bulk-synchronous): after each backward pass the gradients, copied into
  one flat buffer per dtype and device, are averaged by one all-reduce before the
  optimizer sees them (what ``DistributedDataParallel`` did, without its reducer).
* ``average`` (local SGD): each rank steps on its own gradients; the parameters (and
  floating buffers) are averaged every ``average_every`` steps and at the end of an epoch.

Both time the collectives they run (``sync_seconds``, on a GPU until the device has done
them) and count them (``rounds``). They reduce tensors where the model is (CPU or GPU),
through the rank's :class:`~._shm.Collectives` (shared memory for ranks on one host).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch
import torch.distributed as dist

from ..exceptions import NotSupportedError
from ._shm import Collectives

__all__ = ["Averaging", "GradientAllReduce", "broadcast_from_rank0", "make_sync", "settle"]


class _Sync:
    """Shared bookkeeping: seconds spent in collectives and how many rounds ran."""

    def __init__(self, model: torch.nn.Module, comm: Collectives) -> None:
        self.model = model
        self.comm = comm
        self.sync_seconds = 0.0
        self.rounds = 0

    def after_backward(self) -> None:
        """After a step's backward pass, before the optimizer steps."""

    def after_step(self, step: int) -> None:
        """After the optimizer's step ``step`` (0-based within the epoch)."""

    def end_epoch(self, steps: int) -> None:
        """After the last step of an epoch of ``steps`` steps."""


def settle(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (a GPU runs asynchronously; a collective may
    only be queued when ``all_reduce`` returns), so that a timer read next measures it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _groups(tensors: Iterable[torch.Tensor]) -> list[list[torch.Tensor]]:
    """``tensors`` by (dtype, device), each group in their order: a flat buffer holds one."""
    groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault((t.dtype, t.device), []).append(t)
    return list(groups.values())


def broadcast_from_rank0(tensors: Iterable[torch.Tensor], comm: Collectives) -> None:
    """Overwrite ``tensors`` (in place) with rank 0's: one broadcast per dtype and device."""
    with torch.no_grad():
        for group in _groups(tensors):
            flat = torch.cat([t.reshape(-1) for t in group])
            comm.broadcast(flat, src=0)
            if dist.get_rank() != 0:
                for t, part in zip(group, flat.split([t.numel() for t in group]), strict=True):
                    t.copy_(part.view_as(t))


class _GradBuffer:
    """The gradients of parameters of one dtype and device in one preallocated tensor.

    Laid out as every parameter's gradient, then one "used" count per parameter (1 where
    this rank's backward pass gave it a gradient), so that one all-reduce also tells every
    rank which parameters some rank used.
    """

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        sizes = [p.numel() for p in params]
        self.flat = torch.zeros(
            sum(sizes) + len(params), dtype=params[0].dtype, device=params[0].device
        )
        self.grads = [
            part.view_as(p)
            for p, part in zip(params, self.flat[: sum(sizes)].split(sizes), strict=True)
        ]
        self.used = self.flat[sum(sizes) :]

    def average(self, world_size: int, comm: Collectives) -> None:
        """Replace each parameter's gradient by the mean of the ranks' (``None`` as zeros)."""
        used = []
        for p, part in zip(self.params, self.grads, strict=True):
            if p.grad is None:
                part.zero_()
            elif p.grad.is_sparse:
                raise NotSupportedError(
                    "sync='allreduce' averages dense gradients only, and a parameter of "
                    f"shape {tuple(p.shape)} has a sparse one (an Embedding with "
                    "sparse=True?); use dense gradients or sync='average'"
                )
            else:
                # Divided before the sum, as DDP's all-reduce did: the same rounding.
                torch.div(p.grad, world_size, out=part)
            used.append(0.0 if p.grad is None else 1.0)
        self.used.copy_(torch.tensor(used, dtype=self.flat.dtype))
        comm.all_reduce(self.flat)
        for p, part, count in zip(self.params, self.grads, self.used.tolist(), strict=True):
            if not count:
                continue  # no rank used it: its gradient stays None, as under DDP
            if p.grad is not None and p.grad.stride() != part.stride():
                p.grad.copy_(part)  # keep the layout autograd chose (channels_last, say)
            else:
                # The buffer's slice becomes the gradient (no copy back): the next
                # zero_grad() drops it, or zeroes it in place for the next backward.
                p.grad = part


class GradientAllReduce(_Sync):
    """Bulk-synchronous: gradients averaged across ranks at every step.

    Replaces ``DistributedDataParallel`` with the same semantics for this loop: parameters
    and buffers broadcast from rank 0 at the start; gradients pre-divided by the world
    size and summed; a parameter no rank used keeps no gradient, one that only some ranks
    used gets the mean with zeros for the others; buffers (BatchNorm's running
    statistics) are rank 0's at every forward pass.
    """

    def __init__(self, model: torch.nn.Module, comm: Collectives) -> None:
        super().__init__(model, comm)
        self.world_size = dist.get_world_size()
        params = [p for p in model.parameters() if p.requires_grad]
        self.buffers = [_GradBuffer(group) for group in _groups(params)]
        self.device = params[0].device if params else torch.device("cpu")
        broadcast_from_rank0([p.detach() for p in model.parameters()] + list(model.buffers()), comm)

    def after_backward(self) -> None:
        started = time.perf_counter()
        for buffer in self.buffers:
            buffer.average(self.world_size, self.comm)
        # DDP broadcast rank 0's buffers before each forward pass; doing it after the
        # step's all-reduce gives the next forward pass the same ones.
        buffers = list(self.model.buffers())
        if buffers:
            broadcast_from_rank0(buffers, self.comm)
        settle(self.device)
        self.sync_seconds += time.perf_counter() - started
        self.rounds += 1


class Averaging(_Sync):
    """Local SGD: parameters averaged every ``every`` steps and at the end of each epoch."""

    def __init__(self, model: torch.nn.Module, comm: Collectives, every: int) -> None:
        super().__init__(model, comm)
        self.every = every
        self.tensors = [p.data for p in model.parameters()] + [
            b for b in model.buffers() if b.is_floating_point()
        ]
        self._last_averaged = -1

    def average(self) -> None:
        started = time.perf_counter()
        flat = torch.cat([t.reshape(-1) for t in self.tensors])
        self.comm.all_reduce(flat)
        flat.div_(dist.get_world_size())
        offset = 0
        for t in self.tensors:
            n = t.numel()
            t.copy_(flat[offset : offset + n].view_as(t))
            offset += n
        settle(flat.device)
        self.sync_seconds += time.perf_counter() - started
        self.rounds += 1

    def after_step(self, step: int) -> None:
        if (step + 1) % self.every == 0:
            self.average()
            self._last_averaged = step

    def end_epoch(self, steps: int) -> None:
        if self._last_averaged != steps - 1:
            self.average()
        self._last_averaged = -1


def make_sync(sync: str, model: torch.nn.Module, average_every: int, comm: Collectives) -> _Sync:
    """The synchronisation of ``sync`` (validated on the driver) around ``model``."""
    if sync == "allreduce":
        return GradientAllReduce(model, comm)
    if sync == "average":
        return Averaging(model, comm, average_every)
    raise ValueError(f"unknown sync {sync!r}")
