"""One rank of a data-parallel training job: the task a gang runs on each worker."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ._checkpoint import state_bytes, state_from_bytes
from ._shm import capacity_for, open_collectives
from ._stop import StopSignal, meet
from ._sync import make_sync, settle

__all__ = [
    "EpochReporter",
    "JobSpec",
    "build_model",
    "free_port",
    "publish",
    "rank_batches",
    "train_rank",
]

#: Epochs rank 0 hands over at once for the dashboard, and how often (seconds).
REPORTED_EPOCHS = 50
REPORT_EVERY = 0.5


@dataclass(frozen=True)
class JobSpec:
    """What every rank of one job needs (the same for all ranks; small: no data)."""

    model_fn: Any
    loss_fn: Any
    optimizer_fn: Any
    initial: bytes  # state_bytes() of the model (and optimizer) to start from
    start_epoch: int
    epochs: int
    batch_size: int
    steps: int  # per epoch, the same on every rank
    sync: str
    average_every: int
    shuffle: bool
    seed: int
    host: str
    port: int
    world_size: int
    timeout: float
    checkpoint_every: int | None
    checkpoint_var: str | None
    backend: str = "gloo"
    rank_devices: tuple[str, ...] = ()  # per rank, "cpu" or "cuda:i"; () is CPU everywhere
    progress_var: str | None = None  # rank 0's latest epochs, for the dashboard
    # The torch dtypes X and y are trained as, decided on the driver (initial_model).
    dtypes: tuple[str, str] = ("", "")
    # torch's default dtype on the driver, under which model_fn built the initial model.
    default_dtype: str = "float32"
    # Ranks on one host may exchange through shared memory (Dask config, on the driver).
    shared_memory: bool = True
    # The distributed.Event the driver raises to stop the ranks (see _stop).
    stop_event: str | None = None

    def device(self, rank: int) -> torch.device:
        """Rank ``rank``'s device (made current on its thread when it is a GPU)."""
        device = torch.device(self.rank_devices[rank] if self.rank_devices else "cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        return device


def free_port() -> int:
    """A TCP port free on this host now (run on rank 0's worker)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        port: int = s.getsockname()[1]
        return port


def rank_batches(n_rows: int, steps: int, batch_size: int, order: np.ndarray | None) -> list[Any]:
    """The row indices (or slices) of a rank's ``steps`` batches: step t takes rows t*b..(t+1)*b."""
    if order is None:
        return [slice(t * batch_size, (t + 1) * batch_size) for t in range(steps)]
    # Tensors, not arrays: a tensor indexed by a NumPy array converts it at every use
    # (100 µs a batch of 2048 rows here, about 3 % of the benchmark's step).
    rows = torch.from_numpy(np.ascontiguousarray(order, dtype=np.int64))
    return [rows[t * batch_size : (t + 1) * batch_size] for t in range(steps)]


def _tensor(a: np.ndarray, dtype: str = "") -> torch.Tensor:
    """``a`` as a tensor of ``dtype`` (a torch dtype's name); "": floating as torch's
    default dtype, integers as int64 (what class-index losses expect), bool as it is."""
    a = np.ascontiguousarray(a)
    if not a.flags.writeable:
        # pandas 3 hands out read-only arrays, and so are the shards scattered from them:
        # torch would share (and warn of) the read-only memory. Writable ones are not copied.
        a = a.copy()
    t = torch.from_numpy(a)
    if dtype:
        return t.to(getattr(torch, dtype))
    if t.is_floating_point():
        return t.to(torch.get_default_dtype())
    if a.dtype.kind in "iu":
        return t.to(torch.int64)  # what class-index losses expect
    return t


def publish(job: JobSpec, epoch: int, data: bytes, history: list[dict[str, Any]]) -> None:
    """Rank 0: hand a checkpoint to the driver through a Dask Variable (one slot)."""
    from distributed import Variable, get_client

    value = {
        "epoch": epoch,
        "data": data,
        "sha256": hashlib.sha256(data).hexdigest(),
        "history": history,
    }
    Variable(job.checkpoint_var, client=get_client()).set(value)


class EpochReporter:
    """Rank 0: its latest epochs' figures, for the dashboard (a Dask Variable, one slot).

    At most every :data:`REPORT_EVERY` seconds, and after the last epoch: the driver reads
    the Variable once a second. Best effort: the page is a view, and a failure here must
    never fail the rank.
    """

    def __init__(self, job: JobSpec) -> None:
        self.job = job
        self.last = 0.0

    def __call__(self, history: list[dict[str, Any]]) -> None:
        job = self.job
        now = time.monotonic()
        final = bool(history) and history[-1]["epoch"] >= job.epochs
        if not job.progress_var or not history or (now - self.last < REPORT_EVERY and not final):
            return
        self.last = now
        from distributed import Variable, get_client

        with contextlib.suppress(Exception):
            value = {"epoch": history[-1]["epoch"], "history": history[-REPORTED_EPOCHS:]}
            Variable(job.progress_var, client=get_client()).set(value)


def seed_epoch(seed: int, rank: int, epoch: int) -> None:
    """Seed torch's generator for ``epoch`` of ``rank``."""
    # Dropout and other draws of epoch e depend on (seed, rank, e) alone: a job continued
    # from epoch e trains as the one that ran all its epochs at once.
    torch.manual_seed(int(np.random.SeedSequence([seed, rank, epoch]).generate_state(1)[0]))


def _epoch(
    job: JobSpec,
    rank: int,
    epoch: int,
    net: Any,
    sync: Any,
    opt: Any,
    X: Any,
    y: Any,
    stop: StopSignal,
) -> dict[str, Any]:
    device = job.device(rank)
    order = None
    if job.shuffle:
        order = np.random.default_rng([job.seed, rank, epoch]).permutation(len(X))
    seed_epoch(job.seed, rank, epoch)
    started = time.perf_counter()
    sync_before, rounds_before = sync.sync_seconds, sync.rounds
    # Summed where the loss is: reading it every step would wait for a GPU every step.
    total = torch.zeros((), dtype=torch.float64, device=device)
    for t, rows in enumerate(rank_batches(len(X), job.steps, job.batch_size, order)):
        stop.check()
        opt.zero_grad()
        # The shard stays in host memory; each batch goes to the device as it is used.
        xb = X[rows].to(device, non_blocking=True)
        yb = y[rows].to(device, non_blocking=True)
        loss = job.loss_fn(net(xb), yb)
        loss.backward()
        sync.after_backward()
        opt.step()
        sync.after_step(t)
        total += loss.detach().reshape(())
    sync.end_epoch(job.steps)
    settle(device)
    seconds = time.perf_counter() - started
    # One small collective for the epoch's figures, averaged over the ranks (on the
    # rank's device: NCCL reduces GPU tensors only).
    spent = torch.tensor([sync.sync_seconds - sync_before], dtype=torch.float64, device=device)
    stats = torch.cat([(total / job.steps).reshape(1), spent])
    sync.comm.all_reduce(stats)
    stats /= job.world_size
    return {
        "epoch": epoch + 1,
        "loss": float(stats[0]),
        "seconds": seconds,
        "samples_per_s": job.steps * job.batch_size * job.world_size / seconds,
        "sync_s": float(stats[1]),
        "sync_rounds": sync.rounds - rounds_before,
    }


def build_model(job: JobSpec) -> torch.nn.Module:
    """``job.model_fn()`` under the driver's default dtype, as the driver built it (a
    worker's default is float32: loading float64 weights there would cast them down)."""
    dtype = getattr(torch, job.default_dtype)
    before = torch.get_default_dtype()
    if dtype == before:
        return job.model_fn()
    torch.set_default_dtype(dtype)
    try:
        return job.model_fn()
    finally:
        torch.set_default_dtype(before)


def _build(job: JobSpec, rank: int) -> tuple[torch.nn.Module, Any]:
    """The model (on the rank's device, in training mode) and its optimizer, as saved."""
    state = state_from_bytes(job.initial)
    model = build_model(job)
    model.load_state_dict(state["model"])
    model.to(job.device(rank))  # before the optimizer is built on its parameters
    model.train()
    opt = job.optimizer_fn(model.parameters())
    if state.get("optimizer") is not None:
        opt.load_state_dict(state["optimizer"])
    return model, opt


def _train(
    job: JobSpec, rank: int, model: torch.nn.Module, opt: Any, X: Any, y: Any
) -> dict[str, Any]:
    on_cpu = job.backend == "gloo" and all(d == "cpu" for d in job.rank_devices)
    comm = open_collectives(
        rank,
        job.world_size,
        capacity_for([*model.parameters(), *model.buffers()]),
        job.timeout,
        job.shared_memory and on_cpu,
        _memory_limit(),
    )
    try:
        result = _epochs(
            job, rank, model, opt, make_sync(job.sync, model, job.average_every, comm), X, y
        )
    except BaseException as exc:
        # The failed collective's frames hold views of the shared file, and a mapping
        # with views cannot be closed: it stayed mapped in the worker for good.
        traceback.clear_frames(exc.__traceback__)
        comm.close(failed=True)  # a peer waiting in a collective learns that this rank failed
        raise
    comm.close(failed=False)
    result["transport"] = comm.name if comm.name == "shared-memory" else job.backend
    return result


def _memory_limit() -> int | None:
    """The memory limit of this rank's worker in bytes (None: none, or not in a worker)."""
    try:
        from distributed import get_worker

        limit = get_worker().memory_manager.memory_limit
    except Exception:
        return None
    return int(limit) if limit else None


def _epochs(
    job: JobSpec, rank: int, model: torch.nn.Module, opt: Any, sync: Any, X: Any, y: Any
) -> dict[str, Any]:
    Xt, yt = _tensor(X, job.dtypes[0]), _tensor(y, job.dtypes[1])
    history = []
    report = EpochReporter(job)
    stop = StopSignal(job.stop_event)
    for epoch in range(job.start_epoch, job.epochs):
        history.append(_epoch(job, rank, epoch, model, sync, opt, Xt, yt, stop))
        if rank == 0:
            report(history)
        every = job.checkpoint_every
        if rank == 0 and job.checkpoint_var and every and (epoch + 1) % every == 0:
            publish(job, epoch + 1, state_bytes(epoch + 1, model, opt), history)
    final = state_bytes(job.epochs, model, opt) if rank == 0 else None
    return {"rank": rank, "history": history, "state": final}


def _reset_group_names() -> None:
    """Name this process's next default group as a fresh process names it."""
    # torch names a default group after a per-process counter, raised before the
    # rendezvous and reset only by destroy_process_group: after an init that failed (a
    # peer lost at the rendezvous) the next job's ranks here would wait under another name
    # than a restarted peer's, until their timeout.
    if not dist.is_initialized():
        dist.distributed_c10d._world.group_count = 0


def train_rank(job: JobSpec, rank: int, nthreads: int, X: Any, y: Any) -> dict[str, Any]:
    """Train rank ``rank`` on its shard ``(X, y)``; rank 0 returns the final state's bytes."""
    # Dask's nanny sets OMP_NUM_THREADS=1; use the threads the worker was given.
    torch.set_num_threads(max(1, nthreads))
    torch.manual_seed(job.seed + rank)
    device = job.device(rank)
    options: dict[str, Any] = {}
    if job.backend == "nccl":
        # By default NCCL's watchdog kills the process when a collective times out; with
        # blocking waits the collective raises in the rank instead, as gloo's do (read
        # when the process group is made; a user's own setting is kept).
        os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")
        options["device_id"] = device
    # Before the process group exists: importing torch._dynamo brings in
    # torch.distributed._shard, which keeps a default group that exists when it is
    # imported alive for good, and destroy_process_group then leaves that group's store
    # (rank 0's listens on every interface) and gloo's listener open in the worker. The
    # first optimizer or DistributedDataParallel a process builds imports it (plain torch
    # leaks so too; docs/training.md). Here, not at module level: the driver imports this
    # module without training. The model and optimizer are built here too, in case the
    # user's code imports more of torch.
    importlib.import_module("torch._dynamo")
    model, opt = _build(job, rank)
    _reset_group_names()
    meet(job.stop_event, rank, job.world_size, job.timeout)
    dist.init_process_group(
        job.backend,
        init_method=f"tcp://{job.host}:{job.port}",
        rank=rank,
        world_size=job.world_size,
        timeout=timedelta(seconds=job.timeout),
        **options,
    )
    try:
        return _train(job, rank, model, opt, X, y)
    finally:
        dist.destroy_process_group()
