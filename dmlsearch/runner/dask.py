"""The one layer that talks to Dask: the futures loop of a search.

Design rules (see docs/design.md):

* the dataset and the evaluation context are scattered **once** per search; tasks take
  their futures as arguments, never a closure over the data;
* a bounded number of tasks is in flight and the next one is submitted as soon as one
  ends (no waves); short trials are packed into one task by :class:`AdaptiveBatcher`;
* results are recorded idempotently by trial number, so a task that Dask reruns after a
  worker loss never yields a duplicate; futures are released once recorded;
* a trial lost with its worker is resubmitted up to ``max_retries`` times.
"""

from __future__ import annotations

import logging
import queue
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import dask
import numpy as np
from distributed import Client, Future, LocalCluster
from distributed.client import FutureCancelledError
from distributed.comm.core import CommClosedError
from distributed.scheduler import KilledWorker

from .._evaluate import (
    FAILED,
    TIMEOUT,
    EvalContext,
    SearchData,
    TrialOutcome,
    TrialSpec,
    run_trials,
)
from ..exceptions import DmlsearchError, InvalidParameterError
from ..progress import NullProgress
from ..strategies import Strategy
from ._batching import AdaptiveBatcher

__all__ = [
    "DaskRunner",
    "RunObserver",
    "cluster_shape",
    "embedded_cluster",
    "resolve_client",
    "start_local_cluster",
    "trial_seed",
]

logger = logging.getLogger("dmlsearch")

_LOST = (KilledWorker, CommClosedError, FutureCancelledError, OSError)


def trial_seed(seed: int, number: int) -> int:
    """The seed handed to trial ``number``: a pure function of the search seed."""
    return int(np.random.SeedSequence(seed, spawn_key=(number, 1)).generate_state(1)[0])


def start_local_cluster(
    n_workers: int | None = None, threads_per_worker: int = 1, **cluster_kwargs: Any
) -> LocalCluster:
    """Worker processes on 127.0.0.1, a dashboard on a free port, the worker profiler off.

    The profiler samples every thread every 10 ms and costs about a third of the
    throughput of tiny trials (docs/benchmarks.md). The embedded default, the CLI's local
    cluster, the tests and the benchmarks all start their clusters here. ``cluster_kwargs``
    (``memory_limit``, say) go to :class:`distributed.LocalCluster` and override these
    defaults.
    """
    kwargs: dict[str, Any] = {
        "processes": True,
        "host": "127.0.0.1",
        "dashboard_address": "127.0.0.1:0",
        "silence_logs": logging.ERROR,
        **cluster_kwargs,
    }
    with dask.config.set({"distributed.worker.profile.enabled": False}):
        return LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, **kwargs)


@contextmanager
def embedded_cluster(n_workers: int | None = None) -> Iterator[Client]:
    """A :func:`start_local_cluster` with a client, both closed on exit."""
    cluster = start_local_cluster(n_workers)
    client = Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def cluster_shape(client: Client) -> dict[str, Any]:
    """Where a search runs: scheduler address, workers, threads and memory (for the registry)."""
    shape: dict[str, Any] = {"address": getattr(client.scheduler, "address", None)}
    try:
        workers = client.scheduler_info(n_workers=-1).get("workers", {})
    except TypeError:  # a distributed without the n_workers argument
        workers = client.scheduler_info().get("workers", {})
    except Exception as exc:  # an informational record must never fail a search
        logger.warning("could not read the cluster's shape: %s", exc)
        return shape
    shape.update(
        workers=len(workers),
        threads=sum(int(w.get("nthreads", 0)) for w in workers.values()),
        memory_bytes=sum(int(w.get("memory_limit") or 0) for w in workers.values()),
        dashboard=getattr(client, "dashboard_link", None),
    )
    return shape


@contextmanager
def resolve_client(client: Any) -> Iterator[Client]:
    """The client a search runs on, resolved once at the edge.

    ``client`` may be a :class:`distributed.Client`, a scheduler address, or ``None``: then
    the current default client is used if there is one, else an embedded LocalCluster is
    started and closed afterwards.
    """
    if isinstance(client, Client):
        yield client
        return
    if isinstance(client, str):
        try:
            c = Client(client, set_as_default=False, timeout="10s")
        except OSError as exc:
            raise InvalidParameterError(
                "client", f"cannot reach a Dask scheduler at {client!r}: {exc}"
            ) from exc
        try:
            yield c
        finally:
            c.close()
        return
    if client is not None:
        raise InvalidParameterError(
            "client",
            f"expected a distributed.Client, a scheduler address or None, got {type(client).__name__}",
        )
    try:
        # Honours `with client.as_current():` as well as the global default client.
        found = Client.current()
    except ValueError:
        found = None
    if found is not None and found.status == "running":
        yield found
        return
    with embedded_cluster() as c:
        yield c


class RunObserver:
    """Hears what a run does (the dashboard reporter is one); every hook is a no-op here.

    Hooks run on the driver inside the runner's loop, so they must be quick and must not
    raise.
    """

    def trials_submitted(self, specs: list[TrialSpec]) -> None:
        """Trials just sent to the cluster."""

    def trial_finished(self, outcome: TrialOutcome, value: float | None) -> None:
        """A trial recorded, with the objective told to the strategy (None if it failed)."""

    def tick(self) -> None:
        """Once per pass of the runner's loop (a few times a second)."""


@dataclass
class _Task:
    specs: list[TrialSpec]
    submitted: float
    deadline: float | None = None


@dataclass
class RunStats:
    """Counters of one run, for progress and tests."""

    submitted_tasks: int = 0
    resubmitted_trials: int = 0
    rescattered: int = 0
    hard_timeouts: int = 0
    stopped_by_budget: bool = False
    batch_sizes: list[int] = field(default_factory=list)


class DaskRunner:
    """Runs a strategy's trials on a Dask cluster, asynchronously.

    ``on_outcome`` is called on the driver for each trial as it ends (exactly once per
    trial number). It returns the objective told to the strategy (or ``None``).
    """

    def __init__(
        self,
        client: Client,
        *,
        max_concurrent_trials: int | None = None,
        trial_timeout: float | None = None,
        max_retries: int = 2,
        target_task_seconds: float = 0.25,
        poll_interval: float = 0.2,
        progress: NullProgress | None = None,
        name: str = "search",
        time_budget: float | None = None,
        observer: RunObserver | None = None,
    ) -> None:
        self.client = client
        self.max_concurrent_trials = max_concurrent_trials
        self.trial_timeout = trial_timeout
        self.max_retries = max_retries
        self.batcher = AdaptiveBatcher(target_task_seconds)
        self.poll_interval = poll_interval
        self.progress = progress or NullProgress()
        self.name = name
        self.time_budget = time_budget
        self.observer = observer or RunObserver()
        self.stats = RunStats()

    # -- cluster helpers -------------------------------------------------------
    def _n_slots(self) -> int:
        try:
            return max(1, sum(self.client.nthreads().values()))
        except Exception:
            return 1

    def _scatter(self, obj: Any, patience: float = 60.0) -> Future:
        """Send ``obj`` to one worker; wait up to ``patience`` seconds for a live one."""
        deadline = time.monotonic() + patience
        delay = 0.25
        while True:
            try:
                # hash=False: tokenizing a large array costs a full pass over it.
                # direct: straight to the workers, no copy through the scheduler.
                # broadcast: every worker needs a copy to run trials anyway, and with one
                # copy per worker a worker that dies (a trial crashing it, say) takes no
                # data with it, so the other workers' tasks carry on.
                return self.client.scatter(
                    [obj],
                    hash=False,
                    direct=True,
                    broadcast=True,
                    timeout=max(1.0, patience / 4),
                )[0]
            except (CommClosedError, OSError) as exc:
                # The scheduler may still list a worker that has just died, or none may
                # be up yet after a crash: wait for the cluster to recover, within reason.
                if time.monotonic() > deadline:
                    raise DmlsearchError(
                        f"could not send the search's data to any worker for {patience:.0f} s "
                        f"({exc}); check that the cluster has live workers"
                    ) from exc
                logger.warning("scatter failed (%s); retrying", exc)
                time.sleep(delay)
                delay = min(delay * 2, 4.0)

    # -- the loop ---------------------------------------------------------------
    def run(
        self,
        strategy: Strategy,
        data: SearchData,
        context: EvalContext,
        seed: int,
        on_outcome: Callable[[TrialOutcome], float | None],
        *,
        skip: set[int] | frozenset[int] = frozenset(),
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        """Run every trial the strategy proposes; ``skip`` lists numbers already done."""
        client = self.client
        run_id = uuid.uuid4().hex[:8]
        data_f = self._scatter(data)
        ctx_f = self._scatter(context)
        inflight: dict[Future, _Task] = {}
        finished: queue.Queue[Future] = queue.Queue()
        retry_queue: deque[TrialSpec] = deque()
        retries: dict[int, int] = {}
        recorded: set[int] = set()
        next_number = 0
        exhausted = False
        total = strategy.total
        n_slots = self._n_slots()
        slots_checked = time.monotonic()
        timeout = self.trial_timeout
        max_tasks = n_slots if timeout is not None else 2 * n_slots
        max_trials = self.max_concurrent_trials
        if max_trials is None and strategy.adaptive:
            max_trials = 2 * n_slots
        failed = 0
        best: float | None = None
        task_counter = 0
        observer = self.observer
        budget_ends = None if self.time_budget is None else time.monotonic() + self.time_budget

        def trials_in_flight() -> int:
            return sum(len(t.specs) for t in inflight.values())

        def submit(specs: list[TrialSpec]) -> None:
            nonlocal data_f, ctx_f, task_counter
            if data_f.status != "finished" or ctx_f.status != "finished":
                # The only copy of the data went with a worker: send it again.
                data_f = self._scatter(data)
                ctx_f = self._scatter(context)
                self.stats.rescattered += 1
            key = f"dmlsearch-trial-{run_id}-{task_counter}"
            task_counter += 1
            fut = client.submit(run_trials, data_f, ctx_f, specs, key=key, pure=False)
            # Called on the client's event loop whether the task ends, errs or is cancelled.
            fut.add_done_callback(finished.put)
            observer.trials_submitted(specs)
            now = time.monotonic()
            deadline = None
            if timeout is not None:
                deadline = now + timeout * len(specs) + max(5.0, timeout)
            inflight[fut] = _Task(specs, now, deadline)
            self.stats.submitted_tasks += 1
            self.stats.batch_sizes.append(len(specs))

        def record(outcome: TrialOutcome) -> None:
            nonlocal failed, best
            if outcome.number in recorded:
                return  # a rerun of a task already recorded
            recorded.add(outcome.number)
            outcome.retries = retries.get(outcome.number, 0)
            if outcome.state != "complete":
                failed += 1
            value = on_outcome(outcome)
            strategy.tell(outcome.number, value)
            observer.trial_finished(outcome, value)
            if value is not None and (best is None or value > best):
                best = value

        def lost(task: _Task, reason: str, killed: bool = False) -> None:
            if killed and len(task.specs) == 1:
                # Dask already ran it on `allowed-failures` workers that all died: the
                # trial itself crashes its worker (native crash, out of memory).
                spec = task.specs[0]
                if spec.number not in recorded:
                    record(
                        _failed_outcome(
                            spec,
                            FAILED,
                            f"trial {spec.number} killed every worker that ran it ({reason}); "
                            "it probably crashes in native code or runs out of memory",
                            context,
                        )
                    )
                return
            # Several trials shared the task: retry each alone, so one bad trial cannot
            # take the others down with it.
            for spec in task.specs:
                if spec.number in recorded:
                    continue
                count = retries.get(spec.number, 0) + 1
                retries[spec.number] = count
                if count > self.max_retries:
                    hint = (
                        "; it ran alone when lost, so it probably crashes its worker "
                        "(native crash, out of memory)"
                        if len(task.specs) == 1
                        else ""
                    )
                    record(
                        _failed_outcome(
                            spec, FAILED, f"lost {count} times: {reason}{hint}", context
                        )
                    )
                else:
                    self.stats.resubmitted_trials += 1
                    retry_queue.append(spec)

        def fill() -> None:
            nonlocal next_number, exhausted, n_slots, slots_checked, max_tasks
            if time.monotonic() - slots_checked > 2.0:
                n_slots = self._n_slots()
                slots_checked = time.monotonic()
                max_tasks = n_slots if timeout is not None else 2 * n_slots
            while len(inflight) < max_tasks:
                room = None if max_trials is None else max_trials - trials_in_flight()
                if room is not None and room <= 0:
                    return
                if retry_queue:
                    specs = [retry_queue.popleft()]
                    submit(specs)
                    continue
                if exhausted:
                    return
                if budget_ends is not None and time.monotonic() >= budget_ends:
                    # Trials already started finish; no new one starts.
                    exhausted = True
                    self.stats.stopped_by_budget = True
                    return
                remaining = None if total is None else total - next_number
                size = 1 if timeout is not None else self.batcher.size(remaining, n_slots)
                if room is not None:
                    size = min(size, room)
                specs = []
                while len(specs) < size:
                    if next_number in skip:  # finished in an earlier, interrupted run
                        next_number += 1
                        if total is not None and next_number >= total:
                            exhausted = True
                            break
                        continue
                    params = strategy.ask(next_number)
                    if params is None:
                        exhausted = True
                        break
                    specs.append(TrialSpec(next_number, params, trial_seed(seed, next_number)))
                    next_number += 1
                if specs:
                    submit(specs)

        def handle(fut: Future) -> None:
            task = inflight.pop(fut)
            status = fut.status
            if status == "finished":
                try:
                    outcomes: list[TrialOutcome] = fut.result()
                except _LOST as exc:
                    # The result went with its worker before we gathered it.
                    lost(task, f"{type(exc).__name__}: {exc}", isinstance(exc, KilledWorker))
                    fut.release()
                    return
                self.batcher.observe([o.duration for o in outcomes if o.state == "complete"])
                for outcome in outcomes:
                    record(outcome)
            elif status == "error":
                error = fut.exception()
                # Trials catch their own errors unless error_score="raise"; so apart from
                # KilledWorker, an error here is the user's and must surface as is.
                if isinstance(error, KilledWorker):
                    lost(task, f"KilledWorker: {error}", killed=True)
                else:
                    fut.result()  # re-raises with the worker's traceback
            else:  # cancelled: the worker or the data it needed is gone
                lost(task, "the task was cancelled (worker or scattered data lost)")
            fut.release()

        def check_deadlines() -> None:
            now = time.monotonic()
            expired = [
                f for f, t in inflight.items() if t.deadline is not None and now > t.deadline
            ]
            if not expired:
                return
            processing = client.processing()
            for fut in expired:
                task = inflight.pop(fut)
                worker = next((w for w, keys in processing.items() if fut.key in keys), None)
                fut.cancel()
                self.stats.hard_timeouts += 1
                for spec in task.specs:
                    record(
                        _failed_outcome(
                            spec,
                            TIMEOUT,
                            f"TrialTimeoutError: trial {spec.number} ran past trial_timeout="
                            f"{timeout}s and did not stop; "
                            + (
                                f"its worker {worker} was restarted"
                                if worker is not None
                                else "its task was cancelled"
                            ),
                            context,
                        )
                    )
                if worker is not None:
                    try:
                        client.restart_workers([worker], raise_for_error=False)
                    except Exception as exc:
                        logger.warning("could not restart stuck worker %s: %s", worker, exc)

        self.progress.start(total, self.name)
        try:
            while True:
                fill()
                if not inflight:
                    break
                done: list[Future] = []
                try:
                    done.append(finished.get(timeout=self.poll_interval))
                    while True:
                        done.append(finished.get_nowait())
                except queue.Empty:
                    pass
                for fut in done:
                    if fut in inflight:  # a hard-timed-out task may still report
                        handle(fut)
                if timeout is not None:
                    check_deadlines()
                if on_tick is not None:
                    on_tick()
                observer.tick()
                self.progress.update(len(recorded), failed, trials_in_flight(), best)
        except BaseException:
            client.cancel(list(inflight))
            raise
        finally:
            self.progress.update(len(recorded), failed, 0, best)
            self.progress.close()
            client.cancel([data_f, ctx_f])


def _failed_outcome(spec: TrialSpec, state: str, error: str, context: EvalContext) -> TrialOutcome:
    n = len(context.splits)
    now = time.time()
    return TrialOutcome(
        number=spec.number,
        params=spec.params,
        seed=spec.seed,
        state=state,
        test_scores=[{} for _ in range(n)],
        train_scores=[{} for _ in range(n)] if context.return_train_score else None,
        fit_times=[0.0] * n,
        score_times=[0.0] * n,
        started=now,
        finished=now,
        worker="",
        error=error,
    )
