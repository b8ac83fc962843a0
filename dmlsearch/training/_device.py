"""Where a training job's ranks compute, and over which ``torch.distributed`` backend.

The driver asks every worker of the gang what its process sees (:func:`probe_workers`:
the UUIDs of its GPUs in its own index order, and whether its torch has NCCL), then
:func:`plan_devices` (pure) decides once for all ranks, before any rank starts:

* ``device="cpu"``: every rank on CPU, gloo (no probe).
* ``device="cuda"``: every rank on a GPU; a worker that sees none is an error.
* ``device="auto"``: CUDA only if every rank's worker sees a GPU, else CPU everywhere
  (the ranks of one job must agree).

On CUDA each rank takes, among the GPUs its process sees, the first one no earlier rank
has taken (by UUID), else the one the fewest earlier ranks share. When all workers of a
host see the same GPUs this is "position among the gang's workers on that host, modulo
the device count"; it also gives each worker its own GPU where each sees its own first
(as ``CUDA_VISIBLE_DEVICES`` rotated per worker does). On one host with one GPU, all
ranks share ``cuda:0``.

Backend ``"auto"``: NCCL when every rank has a GPU no other rank has (NCCL refuses two
ranks on one device) and every worker's torch has NCCL; gloo otherwise (gloo all-reduces
CUDA tensors too, through host memory).
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..exceptions import InvalidParameterError

__all__ = [
    "BACKENDS",
    "DEVICES",
    "DevicePlan",
    "WorkerDevices",
    "check_device_params",
    "plan_devices",
    "probe",
    "probe_workers",
]

#: What ``device`` accepts.
DEVICES = ("auto", "cpu", "cuda")
#: What ``backend`` accepts.
BACKENDS = ("auto", "gloo", "nccl")


@dataclass(frozen=True)
class WorkerDevices:
    """What one worker's process sees: its GPUs (UUIDs and names, in its index order)."""

    uuids: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    nccl: bool = False  # whether this process's torch has the NCCL backend


@dataclass(frozen=True)
class DevicePlan:
    """The job's device type and backend, and each rank's device (``"cpu"``, ``"cuda:i"``)."""

    device: str
    backend: str
    rank_devices: tuple[str, ...]
    gpu_names: tuple[str, ...] = ()  # per rank, on CUDA


def probe() -> WorkerDevices:
    """Run in a worker's process: the GPUs it sees (starts CUDA there when it has any)."""
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        return WorkerDevices()
    props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    host = socket.gethostname()
    return WorkerDevices(
        # A torch without device UUIDs: (host, index) names the same GPU for every worker
        # of a host that sees the GPUs in the same order.
        uuids=tuple(str(getattr(p, "uuid", "")) or f"{host}/{i}" for i, p in enumerate(props)),
        names=tuple(str(p.name) for p in props),
        nccl=bool(dist.is_available() and dist.is_nccl_available()),
    )


async def _probe_off_loop() -> WorkerDevices:
    # client.run calls a plain function on the worker's event loop, which starting CUDA
    # (seconds) would block: run it in a thread instead.
    return await asyncio.get_running_loop().run_in_executor(None, probe)


def probe_workers(client: Any, workers: Sequence[str]) -> list[WorkerDevices]:
    """:func:`probe` on each of ``workers``, in their order."""
    found = client.run(_probe_off_loop, workers=list(workers))
    return [found[w] for w in workers]


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InvalidParameterError(
            name, f"expected one of {', '.join(map(repr, allowed))}, got {value!r}"
        )


def check_device_params(device: Any, backend: Any) -> None:
    """The checks that need no cluster (run in ``fit`` before anything is sent)."""
    _choice("device", device, DEVICES)
    _choice("backend", backend, BACKENDS)
    if device == "cpu" and backend == "nccl":
        raise InvalidParameterError(
            "backend",
            "'nccl' runs on GPUs only and device='cpu'; use backend='gloo' (or 'auto'), "
            "or device='cuda' (or 'auto') on workers with GPUs",
        )


def _assign(probes: Sequence[WorkerDevices]) -> list[int]:
    """Each rank's GPU index in its own process: the first one no earlier rank has, else
    the one the fewest earlier ranks share."""
    taken: Counter[str] = Counter()
    indices = []
    for p in probes:
        i = min(range(len(p.uuids)), key=lambda j: (taken[p.uuids[j]], j))
        taken[p.uuids[i]] += 1
        indices.append(i)
    return indices


def plan_devices(
    device: str, backend: str, probes: Sequence[WorkerDevices], workers: Sequence[str]
) -> DevicePlan:
    """The plan for ranks ``0..len(workers)-1`` (``probes[r]``: rank r's worker's answer).

    Raises :class:`InvalidParameterError` when ``device``/``backend`` ask for what the
    workers do not have; ``probes`` is not read for ``device="cpu"``.
    """
    check_device_params(device, backend)
    n = len(workers)
    if device == "cpu":
        return DevicePlan("cpu", "gloo", ("cpu",) * n)
    without = [w for w, p in zip(workers, probes, strict=True) if not p.uuids]
    if without and device == "cuda":
        raise InvalidParameterError(
            "device",
            f"'cuda' needs a GPU on every rank's worker, and {', '.join(without)} see none "
            "(torch.cuda.is_available() is False there); use device='auto' to train on "
            "CPU whenever a worker has no GPU, or device='cpu'",
        )
    if without:  # "auto": the ranks must agree, so all on CPU
        if backend == "nccl":
            raise InvalidParameterError(
                "backend",
                f"'nccl' needs a GPU on every rank's worker, and {', '.join(without)} "
                "see none; use backend='gloo' or 'auto'",
            )
        return DevicePlan("cpu", "gloo", ("cpu",) * n)
    indices = _assign(probes)
    uuids = [p.uuids[i] for p, i in zip(probes, indices, strict=True)]
    shared = [r for r, u in enumerate(uuids) if uuids.count(u) > 1]
    no_nccl = [w for w, p in zip(workers, probes, strict=True) if not p.nccl]
    if backend == "nccl" and (shared or no_nccl):
        why = (
            f"ranks {', '.join(map(str, shared))} share a GPU, and NCCL needs a GPU of its "
            "own for every rank (use as many GPUs as n_workers)"
            if shared
            else f"torch on {', '.join(no_nccl)} has no NCCL"
        )
        raise InvalidParameterError(
            "backend", f"'nccl' cannot run here: {why}; use 'gloo' or 'auto'"
        )
    chosen = backend if backend != "auto" else ("gloo" if shared or no_nccl else "nccl")
    names = tuple(
        p.names[i] if i < len(p.names) else "" for p, i in zip(probes, indices, strict=True)
    )
    return DevicePlan("cuda", chosen, tuple(f"cuda:{i}" for i in indices), names)
