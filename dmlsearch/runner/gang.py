"""Gangs: k workers reserved all at once for a collective job, one pinned rank on each.

Dask has no gang scheduling: two collective jobs that each start ranks on half the
workers wait forever for their other halves. Here a job is admitted only when it can have
all its k workers at once: admission runs under one cluster-wide :class:`distributed.Lock`
and records the reservation on the scheduler (task metadata), so every driver on the
cluster sees which workers a gang holds. A job that finds too few free workers waits for a
gang to end; one that asks for more workers than the cluster has fails at once (a search,
which checked the cluster before its first trial, waits instead for a lost worker to
come back: ``reserve(while_short=...)``).

Each rank runs as one task pinned to its worker (``workers=[w]``,
``allow_other_workers=False``, ``pure=False``), submitted once every worker has a thread
free: a rank queued behind a task still running there (a cancelled rank of an earlier job,
blocked in its collective until that times out) would make its peers' rendezvous time
out. The driver watches the ranks: when one
raises or its worker leaves the cluster, the other ranks are cancelled and
:class:`~dmlsearch.exceptions.GangError` names the rank and the worker, within seconds,
never after a collective's own timeout. A cancelled rank that is blocked in a collective
ends when its peers' connections close or its collective timeout passes (Dask cannot stop a
running task); collective jobs must set that timeout short.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import dask
from distributed import Client, Future, Lock, as_completed

from ..exceptions import GangError, GangWorkerLostError, InvalidParameterError
from ._malloc import call_tuned
from .cluster import wait_for_a_worker

__all__ = ["Gang", "alive_workers", "reserve", "run_gang"]

logger = logging.getLogger("dmlsearch")

#: The cluster-wide lock every admission and release runs under.
LOCK_NAME = "dmlsearch-gang-admission"
#: Where the scheduler keeps the reservations: ``{gang_id: {"workers", "client", "name"}}``.
METADATA_KEY = ["dmlsearch", "gangs"]

#: Seconds a rank error waits for the scheduler to notice a lost worker it may be a symptom of.
_LOSS_GRACE = 2.0


def alive_workers(client: Client, *, running: bool = True) -> dict[str, dict[str, Any]]:
    """The cluster's workers, address -> info: those running (not paused, not closing),
    or with ``running=False`` every worker not closing."""
    # Not ``client.scheduler_info()``: it returns the client's cached identity, which the
    # client's own periodic refresh (every 2 s, without per-worker details) may replace
    # between the fetch and the read: a cluster that seems to have no workers, whose first
    # rank would be named as lost (docs/training.md).
    scheduler = client.scheduler
    if scheduler is None:  # a client never connected: no workers, as scheduler_info says
        return {}
    try:
        info = client.sync(scheduler.identity, n_workers=-1)
    except TypeError:  # a distributed without the n_workers argument
        info = client.sync(scheduler.identity)
    workers = info.get("workers", {})
    allowed = ("running",) if running else ("running", "paused")
    return {a: w for a, w in workers.items() if w.get("status", "running") in allowed}


def _free_threads(dask_worker: Any) -> int:
    # ``executing`` keeps a cancelled task until its thread returns: Dask cannot stop it.
    state = dask_worker.state
    return int(state.nthreads) - len(state.executing)


def _connected_clients(dask_scheduler: Any) -> list[str]:
    return [str(c) for c in dask_scheduler.clients]


def _live_reservations(client: Client) -> dict[str, dict[str, Any]]:
    """The recorded reservations, less those of drivers no longer connected."""
    gangs: dict[str, dict[str, Any]] = dict(client.get_metadata(METADATA_KEY, default={}) or {})
    try:
        connected = set(client.run_on_scheduler(_connected_clients))
    except Exception:  # a scheduler that refuses to run functions: keep every record
        return gangs
    stale = [g for g, rec in gangs.items() if rec.get("client") not in connected]
    for gang_id in stale:
        logger.warning(
            "dmlsearch: releasing the workers of gang %s (its driver left the cluster)",
            gangs[gang_id].get("name", gang_id),
        )
        del gangs[gang_id]
    if stale:
        client.set_metadata(METADATA_KEY, gangs)
    return gangs


@contextlib.contextmanager
def _admission(client: Client) -> Iterator[None]:
    lock = Lock(LOCK_NAME, scheduler_rpc=client.scheduler, loop=client.loop)
    if not lock.acquire(timeout=60):
        raise GangError(f"could not take the cluster's gang lock {LOCK_NAME!r} within 60 s")
    try:
        yield
    finally:
        lock.release()


def _try_admit(client: Client, k: int, gang_id: str, name: str) -> list[str] | int:
    """Under the lock: the k workers reserved for the gang, or, if too few are free, the
    number of workers the cluster has (paused ones included)."""
    total = len(alive_workers(client, running=False))
    if total < k:
        return total
    alive = alive_workers(client)  # a paused worker (memory) is waited for, not chosen
    gangs = _live_reservations(client)
    taken = {w for rec in gangs.values() for w in rec.get("workers", ())}
    free = [w for w in sorted(alive) if w not in taken]
    if len(free) < k:
        return total
    chosen = free[:k]
    gangs[gang_id] = {"workers": chosen, "client": str(client.id), "name": name}
    client.set_metadata(METADATA_KEY, gangs)
    return chosen


def _release(client: Client, gang_id: str) -> None:
    with _admission(client):
        gangs = dict(client.get_metadata(METADATA_KEY, default={}) or {})
        if gangs.pop(gang_id, None) is not None:
            client.set_metadata(METADATA_KEY, gangs)


@dataclass
class Gang:
    """k workers reserved together; :meth:`run` starts one rank on each."""

    client: Client
    workers: list[str]
    id: str
    name: str = "gang"

    @property
    def size(self) -> int:
        return len(self.workers)

    def run(
        self,
        fn: Callable[..., Any],
        per_rank_args: Sequence[Sequence[Any]],
        *,
        timeout: float | None = None,
        finish_grace: float | None = 60.0,
        on_tick: Callable[[], None] | None = None,
        poll: float = 1.0,
        start_timeout: float | None = 120.0,
    ) -> list[Any]:
        """Run ``fn(*per_rank_args[r])`` as rank r on ``workers[r]``; the results by rank.

        The ranks are submitted once every worker has a thread free, waited for up to
        ``start_timeout`` seconds. Raises :class:`GangError` when that wait times out, a
        rank raises, a rank's worker leaves the cluster (checked every ``poll`` seconds),
        the ranks run past ``timeout`` seconds, or ranks are still running
        ``finish_grace`` seconds after one ended (the ranks of a collective job end
        together; one that does not is stuck); the other ranks are cancelled first.
        ``on_tick`` is called after each check.
        """
        if len(per_rank_args) != self.size:
            raise ValueError(f"{self.size} ranks need {self.size} argument tuples")
        self.wait_for_threads(start_timeout)
        # A fresh id per run: a key reused from a cancelled run would come back cancelled.
        prefix = f"{self.name}-{uuid.uuid4().hex[:12]}"
        futures = [
            self.client.submit(
                call_tuned,
                fn,
                *args,
                key=f"{prefix}-rank-{r}",
                workers=[worker],
                allow_other_workers=False,
                pure=False,
            )
            for r, (worker, args) in enumerate(zip(self.workers, per_rank_args, strict=True))
        ]
        try:
            return self._watch(futures, timeout, finish_grace, on_tick, poll)
        finally:
            self.client.cancel([f for f in futures if f.status != "finished"])

    def wait_for_threads(self, timeout: float | None = 120.0) -> None:
        """Return once every worker has a thread free; GangError after ``timeout`` s."""
        ends = None if timeout is None else time.monotonic() + timeout
        told = False
        while True:
            lost = self._lost(set(range(self.size)))
            if lost is not None:
                raise lost
            try:
                free = self.client.run(_free_threads, workers=self.workers, on_error="return")
            except Exception:  # a worker leaving in between: _lost names it next time
                free = {}
            busy = [w for w in self.workers if not (isinstance(free.get(w), int) and free[w] > 0)]
            if not busy:
                return
            if ends is not None and time.monotonic() > ends:
                r = self.workers.index(busy[0])
                raise GangError(
                    f"{self.name}: worker {busy[0]} (rank {r}) has had no free thread for "
                    f"{timeout} s (start_timeout): a task still runs there, perhaps a rank of "
                    "an earlier job blocked in its collective; no rank was started",
                    worker=busy[0],
                    rank=r,
                )
            if not told:
                logger.info("dmlsearch: %s waits for a free thread on %s", self.name, busy)
                told = True
            time.sleep(0.2)

    def _watch(
        self,
        futures: list[Future],
        timeout: float | None,
        finish_grace: float | None,
        on_tick: Callable[[], None] | None,
        poll: float,
    ) -> list[Any]:
        results: list[Any] = [None] * self.size
        rank_of = {f.key: r for r, f in enumerate(futures)}
        pending = set(range(self.size))
        ends = None if timeout is None else time.monotonic() + timeout
        first_end: float | None = None
        done = as_completed(futures, loop=self.client.loop)
        next_check = 0.0
        while pending:
            for future in done.next_batch(block=False):
                r = rank_of[future.key]
                if future.status != "finished":
                    raise self._rank_failed(future, r, pending)
                results[r] = future.result()
                pending.discard(r)
                first_end = first_end or time.monotonic()
            if not pending:
                break
            if time.monotonic() >= next_check:
                lost = self._lost(pending)
                if lost is not None:
                    raise lost
                if on_tick is not None:
                    on_tick()
                if ends is not None and time.monotonic() > ends:
                    raise GangError(
                        f"{self.name}: ranks {sorted(pending)} still running after "
                        f"timeout={timeout} s; all ranks were cancelled"
                    )
                stuck = self._stuck(pending, first_end, finish_grace)
                if stuck is not None:
                    raise stuck
                next_check = time.monotonic() + poll
            time.sleep(0.05)
        return results

    def _stuck(
        self, pending: set[int], first_end: float | None, grace: float | None
    ) -> GangError | None:
        if first_end is None or grace is None or time.monotonic() - first_end <= grace:
            return None
        r = min(pending)
        return GangError(
            f"{self.name}: rank {r} on worker {self.workers[r]} (and ranks {sorted(pending)} in "
            f"all) still running {grace} s after another rank ended (finish_grace); "
            "all ranks were cancelled",
            worker=self.workers[r],
            rank=r,
        )

    def _lost(self, pending: set[int]) -> GangWorkerLostError | None:
        """The error for the first pending rank whose worker left the cluster, if any."""
        alive = alive_workers(self.client, running=False)
        for r in sorted(pending):
            worker = self.workers[r]
            if worker not in alive:
                return GangWorkerLostError(
                    f"{self.name}: worker {worker} (rank {r} of {self.size}) left the cluster; "
                    "the other ranks were cancelled",
                    worker=worker,
                    rank=r,
                )
        return None

    def _rank_failed(self, future: Future, rank: int, pending: set[int]) -> GangError:
        # A rank that raised because a peer vanished (a collective's connection closed)
        # is a symptom: name the lost worker if the scheduler notices one soon.
        ends = time.monotonic() + _LOSS_GRACE
        lost = self._lost(pending)
        while lost is None and len(pending) > 1 and time.monotonic() < ends:
            time.sleep(0.2)
            lost = self._lost(pending)
        if lost is not None:
            return lost
        worker = self.workers[rank]
        exc: BaseException | None = None
        if future.status == "cancelled":
            what = "was cancelled (by another client, or its worker was restarted)"
        else:
            try:
                exc = future.exception(timeout=5)
            except Exception as err:  # the result went with its worker
                exc = err
            what = f"failed with {type(exc).__name__}: {exc}"
        # A rank that gave up waiting for a peer (its collective's timeout, or a peer that
        # failed) says which: that is the rank to blame, not the one that waited.
        blamed = getattr(exc, "rank", None) if isinstance(exc, GangError) else None
        if not isinstance(blamed, int) or not 0 <= blamed < self.size:
            blamed = rank
        error = GangError(
            f"{self.name}: rank {rank} of {self.size} on worker {worker} {what}; "
            "the other ranks were cancelled",
            worker=self.workers[blamed],
            rank=blamed,
        )
        error.__cause__ = exc
        return error


def _wait_for_a_worker(client: Client, k: int, name: str) -> None:
    """Wait for a cluster that has no worker yet (starting, or a batch queue), as searches
    do, up to ``dmlsearch.no-workers-timeout`` seconds; then NoWorkersError."""
    if alive_workers(client, running=False):
        return
    timeout = float(dask.config.get("dmlsearch.no-workers-timeout", 60.0))
    wait_for_a_worker(client, timeout, f"{name} (on {k} workers at once)")


@contextlib.contextmanager
def reserve(
    client: Client,
    k: int,
    *,
    name: str = "gang",
    wait_timeout: float | None = None,
    while_short: Callable[[int], None] | None = None,
) -> Iterator[Gang]:
    """Reserve ``k`` running workers at once for a collective job; released on exit.

    Raises :class:`~dmlsearch.exceptions.InvalidParameterError` at once if the cluster has
    fewer than ``k`` workers, and :class:`GangError` if ``k`` are not free within
    ``wait_timeout`` seconds (``None``: wait for as long as other gangs hold them).

    ``while_short``: for a caller that checked the cluster's size before (a search): a
    cluster that has fewer than ``k`` workers now (one was lost; its nanny restarts it)
    is waited for like a busy one, and ``while_short(n_workers)`` is called at each try
    meanwhile, to raise when the wait should end. No InvalidParameterError then.
    """
    if not isinstance(k, int) or k < 1:
        raise InvalidParameterError("n_workers", f"must be an int >= 1, got {k!r}")
    if while_short is None:
        _wait_for_a_worker(client, k, name)
    gang_id = uuid.uuid4().hex[:12]
    started = time.monotonic()
    delay = 0.1
    told = False
    while True:
        with _admission(client):
            chosen = _try_admit(client, k, gang_id, name)
        if isinstance(chosen, list):
            break
        if chosen < k:
            if while_short is None:
                raise InvalidParameterError(
                    "n_workers",
                    f"{name} needs {k} workers at once but the cluster has {chosen}; "
                    f"ask for at most {chosen} or add workers",
                )
            while_short(chosen)
        if wait_timeout is not None and time.monotonic() - started > wait_timeout:
            raise GangError(
                f"{name}: {k} workers were not free within wait_timeout={wait_timeout} s "
                "(other gangs hold them)"
            )
        if not told:
            logger.info("dmlsearch: %s waits for %d free workers", name, k)
            told = True
        time.sleep(delay)
        delay = min(delay * 2, 1.0)
    try:
        yield Gang(client, chosen, gang_id, name)
    finally:
        try:
            _release(client, gang_id)
        except Exception as exc:  # a closed client: the stale record goes at the next admission
            logger.warning("dmlsearch: could not release gang %s: %s", name, exc)


def run_gang(
    client: Client,
    fn: Callable[..., Any],
    per_rank_args: Sequence[Sequence[Any]],
    n_workers: int | None = None,
    *,
    timeout: float | None = None,
    name: str = "gang",
    wait_timeout: float | None = None,
) -> list[Any]:
    """Reserve ``n_workers`` (default: one per argument tuple) and run one rank on each.

    ``fn(*per_rank_args[r])`` runs as rank r; returns the results by rank. See
    :func:`reserve` and :meth:`Gang.run` for the errors.
    """
    k = len(per_rank_args) if n_workers is None else n_workers
    with reserve(client, k, name=name, wait_timeout=wait_timeout) as gang:
        return gang.run(fn, per_rank_args, timeout=timeout)
