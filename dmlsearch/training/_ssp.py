"""Bounded staleness (``sync="ssp"``): a parameter server on a Dask actor.

Each rank computes the gradient of its batch on the weights it holds and pushes it; the
server applies it at once with the job's optimizer, counts a clock per rank and answers
with the new weights and the slowest clock (one round trip a step). A rank whose clock is
more than ``staleness`` steps ahead of the slowest waits before its next step
(``staleness=None``: never, fully asynchronous). There are no collectives: a slow rank
slows the others only through the staleness bound. Only parameters are served; buffers
(BatchNorm statistics) stay each rank's own while it trains: a checkpoint taken during the
job holds rank 0's, and the final model (and its checkpoint) the mean of the ranks'
floating buffers (integer ones, such as BatchNorm's batch count, rank 0's), as
``sync="average"`` averages them. A parameter without a gradient in a step (frozen, or
unused by the forward) is sent as None and left alone by the server's optimizer, as a
one-process step leaves it. The server keeps the model in host memory; a rank on a GPU
sends its gradients and takes the weights through host memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from distributed import Client

from ..exceptions import GangError
from ..runner.gang import Gang
from ._checkpoint import CheckpointInbox, state_bytes, state_from_bytes
from ._rank import (
    EpochReporter,
    JobSpec,
    _tensor,
    build_model,
    publish,
    rank_batches,
    seed_epoch,
)
from ._stop import StopSignal

__all__ = ["ParameterServer", "mean_buffers", "run_ssp", "server_state", "train_ssp_rank"]


class ParameterServer:
    """The model's parameters, one optimizer and a clock per rank (a Dask actor)."""

    def __init__(self, job: JobSpec) -> None:
        torch.set_num_threads(1)
        state = state_from_bytes(job.initial)
        self.model = build_model(job)
        self.model.load_state_dict(state["model"])
        self.params = list(self.model.parameters())
        self.opt = job.optimizer_fn(self.params)
        if state.get("optimizer") is not None:
            self.opt.load_state_dict(state["optimizer"])
        self.clocks = [0] * job.world_size
        self.max_lag = 0

    def pull(self) -> tuple[list[np.ndarray], int]:
        """The weights, and the slowest rank's clock."""
        return [_host(p) for p in self.params], min(self.clocks)

    def min_clock(self) -> int:
        return min(self.clocks)

    def push(self, rank: int, grads: list[np.ndarray | None]) -> int:
        """Apply rank ``rank``'s gradients (None: that parameter has none this step);
        returns the slowest rank's clock."""
        for p, g in zip(self.params, grads, strict=True):
            p.grad = None if g is None else torch.from_numpy(g).to(p.dtype)
        self.opt.step()
        self.clocks[rank] += 1
        self.max_lag = max(self.max_lag, max(self.clocks) - min(self.clocks))
        return min(self.clocks)

    def push_pull(self, rank: int, grads: list[np.ndarray | None]) -> tuple[list[np.ndarray], int]:
        """:meth:`push`, then :meth:`pull`: one round trip per step instead of two."""
        self.push(rank, grads)
        return self.pull()

    def lag(self) -> int:
        """The largest clock difference seen after any push."""
        return self.max_lag

    def checkpoint(self, epoch: int, buffers: dict[str, np.ndarray] | None = None) -> bytes:
        """The model's state after ``epoch`` epochs, with ``buffers`` (rank 0's) in it."""
        with torch.no_grad():
            for name, value in (buffers or {}).items():
                self.model.get_buffer(name).copy_(torch.from_numpy(value))
        return state_bytes(epoch, self.model, self.opt)


def _host(t: torch.Tensor) -> np.ndarray:
    """``t`` as a NumPy array in host memory (a copy). Dtypes NumPy lacks (bfloat16, the
    float8s) travel as float32, which holds each of their values exactly; the receiver
    casts back to its own tensor's dtype."""
    t = t.detach().to("cpu", copy=True)
    if t.is_floating_point() and t.dtype not in (torch.float16, torch.float32, torch.float64):
        t = t.float()
    return t.numpy()


def _buffers(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """A rank's buffers (BatchNorm statistics...), by name, in host memory."""
    return {n: _host(b) for n, b in model.named_buffers()}


def mean_buffers(per_rank: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The ranks' buffers as one model's: floating ones averaged over the ranks, others
    (counts) rank 0's, as :class:`._sync.Averaging` treats them."""
    return {
        # asarray: the mean of 0-d buffers is a NumPy scalar, which torch does not take.
        name: np.asarray(np.mean([b[name] for b in per_rank], axis=0), dtype=value.dtype)
        if value.dtype.kind == "f"
        else value
        for name, value in per_rank[0].items()
    }


def server_state(ps: Any, epoch: int, buffers: dict[str, np.ndarray] | None = None) -> bytes:
    """A task: the server's state (called from a worker, where an actor handle works
    without a default client on the driver)."""
    data: bytes = ps.checkpoint(epoch, buffers).result()
    return data


def _answer(call: Any, timeout: float, what: str, stop: StopSignal) -> Any:
    """The parameter server's answer to ``call``; GangError once the driver stops the job
    or after ``timeout`` seconds. A server the driver dropped (it was interrupted, or
    another rank failed) never answers (its worker logs a KeyError): a rank waiting without
    a limit held its worker for good."""
    ends = time.monotonic() + timeout
    while True:
        try:
            return call.result(timeout=max(0.01, min(stop.every, ends - time.monotonic())))
        except TimeoutError:
            stop.check()
            if time.monotonic() >= ends:
                raise GangError(
                    f"the parameter server did not answer {what} within timeout={timeout:g} "
                    "s (the job was stopped, or the server's worker is gone)"
                ) from None


def _wait(
    ps: Any, clock: int, low: int, staleness: int | None, timeout: float, stop: StopSignal
) -> tuple[int, bool]:
    """Wait while ``clock`` is more than ``staleness`` steps ahead of the slowest rank.

    Returns the slowest clock seen and whether this rank waited (its weights are then
    stale). Waiting longer than ``timeout`` raises (as a collective would): a rank whose
    peer was lost must not wait for it forever.
    """
    if staleness is None or clock - low <= staleness:
        return low, False
    started = time.perf_counter()
    while clock - low > staleness:
        if time.perf_counter() - started > timeout:
            raise TimeoutError(
                f"waited {timeout} s for the slowest rank (at step {low}, this one at "
                f"{clock}, staleness={staleness})"
            )
        time.sleep(0.002)
        stop.check()
        low = _answer(ps.min_clock(), timeout, "the slowest clock", stop)
    return low, True


def _load(params: list[Any], weights: list[np.ndarray]) -> None:
    with torch.no_grad():
        for p, w in zip(params, weights, strict=True):
            p.copy_(torch.from_numpy(w))


def train_ssp_rank(
    job: JobSpec, rank: int, nthreads: int, X: Any, y: Any, ps: Any, staleness: int | None
) -> dict[str, Any]:
    """One rank of an SSP job; returns its own figures per epoch."""
    torch.set_num_threads(max(1, nthreads))
    torch.manual_seed(job.seed + rank)
    device = job.device(rank)
    model = build_model(job)
    model.load_state_dict(state_from_bytes(job.initial)["model"])
    model.to(device)
    model.train()
    params = list(model.parameters())
    Xt, yt = _tensor(X, job.dtypes[0]), _tensor(y, job.dtypes[1])
    history: list[dict[str, Any]] = []
    clock = 0
    stop = StopSignal(job.stop_event)
    weights, low = _answer(ps.pull(), job.timeout, "a pull", stop)
    report = EpochReporter(job)
    for epoch in range(job.start_epoch, job.epochs):
        order = None
        if job.shuffle:
            order = np.random.default_rng([job.seed, rank, epoch]).permutation(len(X))
        seed_epoch(job.seed, rank, epoch)
        started, waited, total = time.perf_counter(), 0.0, 0.0
        for rows in rank_batches(len(X), job.steps, job.batch_size, order):
            stop.check()
            sync_started = time.perf_counter()
            low, stale = _wait(ps, clock, low, staleness, job.timeout, stop)
            if stale:  # the others moved on while this rank waited
                weights, low = _answer(ps.pull(), job.timeout, "a pull", stop)
            _load(params, weights)
            waited += time.perf_counter() - sync_started
            model.zero_grad()
            xb, yb = Xt[rows].to(device, non_blocking=True), yt[rows].to(device, non_blocking=True)
            loss = job.loss_fn(model(xb), yb)
            loss.backward()
            pushed = time.perf_counter()
            # The weights for the next step come back with the push: one round trip.
            grads = [None if p.grad is None else _host(p.grad) for p in params]
            weights, low = _answer(ps.push_pull(rank, grads), job.timeout, "a push", stop)
            waited += time.perf_counter() - pushed
            clock += 1
            total += float(loss.detach())
        seconds = time.perf_counter() - started
        history.append(
            {
                "epoch": epoch + 1,
                "loss": total / job.steps,
                "seconds": seconds,
                "samples_per_s": job.steps * job.batch_size * job.world_size / seconds,
                "sync_s": waited,
                "sync_rounds": job.steps,
                "max_lag": int(_answer(ps.lag(), job.timeout, "its lag", stop)),
            }
        )
        if rank == 0:
            report(history)
        every = job.checkpoint_every
        if rank == 0 and job.checkpoint_var and every and (epoch + 1) % every == 0:
            state = _answer(
                ps.checkpoint(epoch + 1, _buffers(model)), job.timeout, "a checkpoint", stop
            )
            publish(job, epoch + 1, state, history)
    return {
        "rank": rank,
        "history": history,
        "state": None,
        "buffers": _buffers(model),
        "transport": "dask-actor",  # gradients and weights go through the parameter server
    }


def run_ssp(
    client: Client,
    gang: Gang,
    job: JobSpec,
    args: list[tuple[Any, ...]],
    checkpoints: CheckpointInbox,
    staleness: int | None,
    tick: Callable[[], Any],
) -> list[dict[str, Any]]:
    """On the driver: the ranks (``args``: each one's ``(job, rank, nthreads, X, y)``, the
    job as a future already on their workers) push to and pull from a parameter server (a
    Dask actor on rank 0's worker)."""
    first = gang.workers[0]
    sent = args[0][0]  # not ``job``: its model state would travel in the task graph
    # The server's task needs a thread of rank 0's worker: one still held by the ranks of
    # an earlier job would make it wait without a limit.
    gang.wait_for_threads()
    server = client.submit(
        ParameterServer, sent, actor=True, workers=[first], allow_other_workers=False
    )
    ps: Any = server.result()  # an Actor: its methods return futures
    ranks = [(*a, ps, staleness) for a in args]
    # No collectives, so a fast rank may end long before a slow one: no finish_grace.
    results: list[dict[str, Any]] = gang.run(train_ssp_rank, ranks, on_tick=tick, finish_grace=None)
    checkpoints.poll()
    buffers = mean_buffers([r.pop("buffers") for r in results])
    final = client.submit(server_state, ps, job.epochs, buffers, workers=[first], pure=False)
    results[0]["state"] = state = final.result()
    every = job.checkpoint_every
    if every and job.epochs % every == 0:
        # Rank 0 published its last epoch before the slower ranks' last steps.
        checkpoints.store(job.epochs, state, results[0]["history"])
    return results
