"""The one futures loop: moves units of any kind to the cluster and records each once.

Guarantees, whatever the kind of unit (see docs/design.md):

* the objects a kind shares are scattered **once** per run (to every worker, so a worker
  that dies takes no data with it) and passed to tasks as futures;
* a bounded number of tasks is in flight; the next is submitted as soon as one ends;
  cheap units are packed several to a task (:class:`AdaptiveBatcher`);
* each unit id is recorded exactly once, whatever Dask reruns; futures are released
  once recorded; a unit lost with its worker is resubmitted up to its policy's
  ``max_retries``, alone, so one bad unit cannot take others down with it;
* a unit's timeout counts from when its task **starts** on a worker (workers report it);
  only a worker still running the task is restarted;
* with no worker for ``no_workers_timeout`` seconds the run fails with
  :class:`~dmlsearch.exceptions.NoWorkersError` instead of waiting forever;
* past the time budget no unit starts, and with ``budget_policy="stop"`` running units
  are stopped and recorded as such.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from distributed import Client, Future
from distributed.client import FutureCancelledError
from distributed.comm.core import CommClosedError
from distributed.scheduler import KilledWorker

from .._states import CANCELLED, FAILED, STOPPED, TIMEOUT
from ..exceptions import DmlsearchError
from ..progress import NullProgress
from ._batching import AdaptiveBatcher
from ._loop_cluster import SharedData, Slots
from ._task import execute
from .cluster import scheduler_loss
from .reports import ReportStream, wire_id
from .units import DONE, WAIT, Unit, UnitKind, UnitSource

__all__ = ["FAILED", "STOPPED", "TIMEOUT", "RunStats", "WorkLoop"]

logger = logging.getLogger("dmlsearch")

_LOST = (KilledWorker, CommClosedError, FutureCancelledError, OSError)

#: Losses of the cluster's copy of the shared data a unit may suffer without being charged.
_FREE_LOSSES = 3

#: Solo runs a suspect may lose by cancellation (not ``KilledWorker``) before it is judged.
_SOLO_LOSSES = 2

P = TypeVar("P")
R = TypeVar("R")


@dataclass
class RunStats:
    """Counters of one run, for progress, the registry and tests."""

    submitted_tasks: int = 0
    resubmitted_trials: int = 0
    rescattered: int = 0
    hard_timeouts: int = 0
    stopped_by_budget: bool = False
    stopped_units: int = 0
    recorded: int = 0
    probes: int = 0
    batch_sizes: list[int] = field(default_factory=list)


@dataclass
class _Task(Generic[P]):
    units: list[Unit[P]]
    submitted: float
    started: float | None = None
    worker: str | None = None
    deadline: float | None = None
    done: bool = False


class WorkLoop(Generic[P, R]):
    """Runs the units a source proposes, of one kind, on a Dask cluster.

    One object holds the loop's state (in flight, retries, recorded ids); each step of
    the loop is a method. ``budget_ends`` is a ``time.monotonic()`` instant after which
    no unit starts; ``stop_at`` the same instant on the wall clock, for workers.
    """

    def __init__(
        self,
        client: Client,
        kind: UnitKind[P, R],
        source: UnitSource[P, R],
        *,
        max_units_in_flight: int | None = None,
        target_task_seconds: float = 0.25,
        poll_interval: float = 0.2,
        progress: NullProgress | None = None,
        name: str = "run",
        budget_ends: float | None = None,
        budget_policy: str = "stop",
        no_workers_timeout: float = 60.0,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        if budget_policy not in ("stop", "finish"):
            raise ValueError(f"budget_policy must be 'stop' or 'finish', got {budget_policy!r}")
        self.client = client
        self.kind = kind
        self.source = source
        self.policy = kind.policy
        self.max_units_in_flight = max_units_in_flight
        self.batcher = AdaptiveBatcher(target_task_seconds)
        self.poll_interval = poll_interval
        self.progress = progress or NullProgress()
        self.name = name
        self.budget_ends = budget_ends
        self.budget_policy = budget_policy
        self.no_workers_timeout = no_workers_timeout
        self.on_tick = on_tick
        self.stats = RunStats()

        self.run_id = uuid.uuid4().hex[:8]
        self._slots = Slots(client, name, no_workers_timeout)
        self._data = SharedData(client, name, no_workers_timeout)
        self._inflight: dict[Future, _Task[P]] = {}
        # Finished futures, and None when a worker's report arrived (see _wake).
        self._finished: queue.Queue[Future | None] = queue.Queue()
        self._woken = threading.Event()
        # Task key -> (True, results) or (False, the error fetching them); see _fetch.
        self._fetched: dict[Hashable, tuple[bool, Any]] = {}
        self._retry: deque[Unit[P]] = deque()
        self._retries: dict[Hashable, int] = {}
        self._free_losses: dict[Hashable, int] = {}
        self._solo_losses: dict[Hashable, int] = {}
        self._quarantine: deque[Unit[P]] = deque()
        self._probe: Future | None = None
        self._recorded: set[Hashable] = set()
        self._exhausted = False
        self._waiting = False
        self._stopping = False
        self._task_counter = 0
        self._best: float | None = None
        self._reports: ReportStream | None = None

    # -- cluster -------------------------------------------------------------------------
    def _ensure_shared(self, verify: bool = False) -> list[Future]:
        futures = self._data.ensure(verify)
        self.stats.rescattered = self._data.rescattered
        return futures

    # -- submitting ------------------------------------------------------------------------
    def _limits(self) -> tuple[float | None, float | None]:
        """``(start_by, stop_by)`` on the wall clock, for workers."""
        if self.budget_ends is None:
            return None, None
        start_by = time.time() + (self.budget_ends - time.monotonic())
        return start_by, (start_by if self.budget_policy == "stop" else None)

    def _submit(self, units: list[Unit[P]], verify: bool = False) -> Future:
        shared = self._ensure_shared(verify)
        key = f"dmlsearch-{self.kind.name}-{self.run_id}-{self._task_counter}"
        self._task_counter += 1
        topic = None if self._reports is None else self._reports.topic
        preferred = self.kind.placement(units)
        where = {} if not preferred else {"workers": preferred, "allow_other_workers": True}
        fut = self.client.submit(
            execute,
            self.kind.function(),
            topic,
            *shared,
            [u.payload for u in units],
            *self._limits(),
            key=key,
            pure=False,
            **where,
        )
        # Called on Dask's callback thread whether the task ends, errs or is cancelled.
        fut.add_done_callback(self._fetch)
        self.source.submitted(units)
        now = time.monotonic()
        task = _Task(units, now)
        if self.policy.timeout is not None and self._reports is None:
            # No start reports to go by: count from submission, with room to queue.
            task.deadline = now + self._allowance(len(units)) + self.policy.timeout
        self._inflight[fut] = task
        self.stats.submitted_tasks += 1
        self.stats.batch_sizes.append(len(units))
        return fut

    def _allowance(self, n_units: int) -> float:
        timeout = self.policy.timeout
        assert timeout is not None
        return timeout * n_units + self.policy.grace + 0.25 * timeout

    def _units_in_flight(self) -> int:
        return sum(len(t.units) for t in self._inflight.values())

    def _max_tasks(self) -> int:
        # With a timeout, one task per thread: a queued task must not wait behind a slow one.
        return self._slots.count if self.policy.timeout is not None else 2 * self._slots.count

    def _next_units(self, size: int) -> list[Unit[P]]:
        units: list[Unit[P]] = []
        self._waiting = False
        while len(units) < size:
            proposal = self.source.propose()
            if proposal is DONE:
                self._exhausted = True
                break
            if proposal is WAIT:
                self._waiting = True
                break
            assert isinstance(proposal, Unit)
            units.append(proposal)
        return units

    def _budget_spent(self) -> bool:
        return self.budget_ends is not None and time.monotonic() >= self.budget_ends

    def _fill(self) -> None:
        self._slots.refresh()
        if self._probe is not None:
            if self._probe in self._inflight:
                return  # a suspect runs alone: nothing else starts beside it
            self._probe = None
        if self._quarantine and not self._stopping and not self._budget_spent():
            if not self._inflight:
                # Alone on the cluster, a suspect that crashes a worker again is the culprit.
                self._probe = self._submit([self._quarantine.popleft()], verify=True)
                self.stats.probes += 1
            return
        while len(self._inflight) < self._max_tasks():
            cap = self.max_units_in_flight
            room = None if cap is None else cap - self._units_in_flight()
            if room is not None and room <= 0:
                return
            if self._budget_spent():
                if not self._stopping:
                    self._stopping = True
                    self.stats.stopped_by_budget = True
                return
            if self._retry:
                self._submit([self._retry.popleft()])
                continue
            if self._exhausted:
                return
            size = 1
            if self.policy.batchable and self.policy.timeout is None:
                size = self.batcher.size(self.source.remaining, self._slots.count)
            if room is not None:
                size = min(size, room)
            units = self._next_units(size)
            if units:
                self._submit(units)
            if self._exhausted or self._waiting:
                return

    # -- recording -------------------------------------------------------------------------
    def _record(self, unit: Unit[P], result: R) -> None:
        if unit.id in self._recorded:
            return  # a rerun of a task already recorded
        if not self.kind.started(result):
            return  # never started (the budget ran out first): nothing to record
        self._recorded.add(unit.id)
        self.stats.recorded += 1
        value = self.source.record(unit, result, self._retries.get(unit.id, 0))
        if value is not None and (self._best is None or value > self._best):
            self._best = value

    def _record_failed(self, unit: Unit[P], state: str, error: str) -> None:
        if unit.id not in self._recorded:
            self._record(unit, self.kind.failed(unit, state, error))

    def _lost(self, task: _Task[P], reason: str, killed: bool = False, probe: bool = False) -> None:
        if probe:
            unit = task.units[0]
            solo = self._solo_losses.get(unit.id, 0) + 1
            self._solo_losses[unit.id] = solo
            if not killed and solo < _SOLO_LOSSES:
                # Cancelled, not KilledWorker: the data it needed may have gone with an
                # earlier crash before the driver heard of it. A crasher loses it again.
                self._quarantine.appendleft(unit)
                return
            # It ran alone and was lost: it crashed its worker (and Dask's reruns of it).
            self._record_failed(
                unit,
                FAILED,
                f"{self.kind.name} {unit.id} killed its worker when it ran alone ({reason}): "
                "it crashes its worker (a native crash, or memory past the worker's limit)",
            )
            return
        innocent = self._innocent(task)
        unseen = task.started is None and not task.done
        if (killed and not innocent) or (unseen and (killed or self._data.lost())):
            # Dask charges a worker's death to every task assigned to it, queued ones too,
            # and gives up on a task after `allowed-failures` such deaths: a bystander
            # queued behind the culprit on one worker and running beside its rerun on the
            # next gets KilledWorker just as the culprit does (and a crash can discard the
            # culprit's start report). So a killed unit is never judged here: it runs
            # again alone, which tells the culprit from a bystander.
            for unit in task.units:
                if unit.id not in self._recorded:
                    self._quarantine.append(unit)
            return
        # Several units shared the task: retry each alone.
        for unit in task.units:
            if unit.id in self._recorded:
                continue
            if innocent and self._free_losses.get(unit.id, 0) < _FREE_LOSSES:
                self._free_losses[unit.id] = self._free_losses.get(unit.id, 0) + 1
                self.stats.resubmitted_trials += 1
                self._retry.append(unit)
                continue
            count = self._retries.get(unit.id, 0) + 1
            self._retries[unit.id] = count
            if count > self.policy.max_retries:
                hint = (
                    "; it ran alone when lost, so it probably crashes its worker "
                    "(native crash, out of memory)"
                    if len(task.units) == 1
                    else ""
                )
                self._record_failed(unit, FAILED, f"lost {count} times: {reason}{hint}")
            else:
                self.stats.resubmitted_trials += 1
                self._retry.append(unit)

    def _innocent(self, task: _Task[P]) -> bool:
        """Whether a lost task cannot have caused its loss, so it is not charged a retry.

        A task is suspect when it was running on a worker that is gone. One that was
        still queued, had ended (its result went with the worker), or was running on a
        worker that is alive was lost with something else: typically another unit crashed
        its worker, or every worker in turn. Without a start report, only a cluster-wide
        loss of the shared data clears it.
        """
        if task.done:
            return True  # it ended; only its result was lost
        if task.started is None or task.worker is None:
            # Never reported a start: it was queued (innocent), unless reports are off.
            if self._reports is not None and self._reports.subscribed:
                return True
            return self._data.lost()
        try:
            alive = set(self.client.nthreads())
        except Exception:  # cannot tell: charge it, as before start reports
            return False
        return task.worker in alive

    def _fetch(self, fut: Future) -> None:
        """On Dask's callback thread: take a task's results as soon as it ends.

        A result still on its worker when the worker dies is lost, and Dask runs the task
        again: a unit run twice for one kill. Fetched here, and the key released, it is
        safe at once, even while the driver is busy recording other results.
        """
        try:
            if fut.status == "finished":
                try:
                    self._fetched[fut.key] = (True, fut.result())
                except BaseException as exc:  # judged by _handle, as any lost result
                    self._fetched[fut.key] = (False, exc)
                else:
                    fut.release()
        finally:
            self._finished.put(fut)  # whatever happened, the loop must hear of it

    def _results(self, fut: Future) -> Sequence[R]:
        fetched = self._fetched.pop(fut.key, None)
        if fetched is None:
            return fut.result()
        ok, value = fetched
        if not ok:
            raise value
        return value

    def _handle(self, fut: Future) -> None:
        task = self._inflight.pop(fut)
        probe = fut is self._probe
        if probe:
            self._probe = None
        # A released key reads "cancelled": what _fetch took decides.
        status = "finished" if fut.key in self._fetched else fut.status
        if status == "finished":
            try:
                results: Sequence[R] = self._results(fut)
            except _LOST as exc:
                # The result went with its worker before we gathered it.
                self._lost(
                    task,
                    f"{type(exc).__name__}: {exc}",
                    isinstance(exc, KilledWorker),
                    probe=probe and not task.done,
                )
                fut.release()
                return
            durations = [self.kind.duration(r) for r in results]
            self.batcher.observe([d for d in durations if d is not None])
            by_id = {u.id: u for u in task.units}
            for result in results:
                unit = by_id.get(self.kind.result_id(result))
                if unit is not None:
                    self._record(unit, result)
        elif status == "error":
            error = fut.exception()
            # Units catch their own errors unless told to raise; so apart from KilledWorker,
            # an error here is the user's and must surface as is.
            if isinstance(error, KilledWorker):
                self._lost(task, f"KilledWorker: {error}", killed=True, probe=probe)
            else:
                # Raised as the client holds it, with the worker's traceback; released
                # first: raising it adds this loop's frames to its traceback, and the
                # client's record of the future (kept while a frame holds the future)
                # then kept the loop, and the search's data with it, for good.
                fut.release()
                raise error
        else:  # cancelled: the worker or the data it needed is gone
            self._lost(task, "the task was cancelled (worker or scattered data lost)", probe=probe)
        fut.release()

    # -- time ------------------------------------------------------------------------------
    def _read_reports(self) -> None:
        if self._reports is None:
            return
        # Before the drain: a report queued after it wakes the next wait (none is lost).
        self._woken.clear()
        messages = self._reports.drain()
        if not messages:
            return
        by_key = {f.key: t for f, t in self._inflight.items()}
        now = time.monotonic()
        for msg in messages:
            task = by_key.get(str(msg.get("key")))
            if task is None:
                continue
            if msg.get("kind") == "done":
                task.done = True
                continue
            if msg.get("kind") == "progress":
                self._progress_report(task, msg)
                continue
            if msg.get("kind") != "started":
                continue
            # A rerun after a worker loss reports again: the clock restarts with it.
            task.started = now
            task.done = False
            task.worker = str(msg.get("worker") or "") or None
            if self.policy.timeout is not None:
                task.deadline = now + self._allowance(len(task.units))

    def _progress_report(self, task: _Task[P], msg: dict[str, Any]) -> None:
        wanted = wire_id(msg.get("unit"))
        for unit in task.units:
            if unit.id not in self._recorded and wire_id(unit.id) == wanted:
                self.source.reported(unit, msg)
                return

    def cancel(self, unit_id: Hashable, reason: str = "cancelled by its source") -> bool:
        """Record the unit ``unit_id`` as cancelled and stop its task if nothing else runs in it.

        Returns False if the unit is not waiting or in flight (already recorded, unknown).
        A running task keeps its thread until the unit returns (Dask cannot stop a thread);
        its result is then ignored.
        """
        if unit_id in self._recorded:
            return False
        for unit in list(self._retry):
            if unit.id == unit_id:
                self._retry.remove(unit)
                self._record_failed(unit, CANCELLED, reason)
                return True
        for fut, task in list(self._inflight.items()):
            for unit in task.units:
                if unit.id == unit_id:
                    self._record_failed(unit, CANCELLED, reason)
                    if all(u.id in self._recorded for u in task.units):
                        del self._inflight[fut]
                        fut.cancel()
                    return True
        return False

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        expired = [
            f for f, t in self._inflight.items() if t.deadline is not None and now > t.deadline
        ]
        if not expired:
            return
        processing = self.client.processing()
        for fut in expired:
            task = self._inflight[fut]
            worker = next((w for w, keys in processing.items() if fut.key in keys), None)
            if task.worker is not None and worker != task.worker:
                # Not on the worker that started it: it ended, or went back to the queue
                # with a lost worker. Look again after the result (or a new start) arrives.
                task.deadline = now + self.policy.grace
                continue
            del self._inflight[fut]
            fut.cancel()
            self.stats.hard_timeouts += 1
            what = "its task was cancelled"
            if self.policy.restart_stuck_worker and worker is not None:
                what = self._restart_stuck(worker)
            for unit in task.units:
                self._record_failed(
                    unit,
                    TIMEOUT,
                    f"TrialTimeoutError: {self.kind.name} {unit.id} ran past "
                    f"{self.policy.timeout_name}={self.policy.timeout}s and did not stop; " + what,
                )

    def _restart_stuck(self, worker: str) -> str:
        """Restart ``worker``, which runs a unit that would not stop; say what happened."""
        try:
            self.client.restart_workers([worker], raise_for_error=True)
        except Exception as exc:
            # A worker without a nanny (LocalCluster(processes=False), `dask worker
            # --no-nanny`) cannot be restarted: its thread runs on until the unit returns.
            logger.warning("could not restart stuck worker %s: %s", worker, exc)
            return (
                f"its task was cancelled, but its worker {worker} could not be restarted "
                f"({type(exc).__name__}: {exc}), so the unit runs on there until it returns"
            )
        return f"its worker {worker} was restarted"

    def _stop_overrun(self) -> None:
        """Past the budget and its grace, give up the units still in flight."""
        assert self.budget_ends is not None
        if time.monotonic() < self.budget_ends + self.policy.grace:
            return
        futures = list(self._inflight)
        tasks = [self._inflight.pop(f) for f in futures]
        self.client.cancel(futures)
        for task in tasks:
            for unit in task.units:
                if unit.id not in self._recorded:
                    self.stats.stopped_units += 1
                    self._record_failed(
                        unit,
                        STOPPED,
                        f"{self.kind.name} {unit.id} was still running when the time budget "
                        "ran out and did not stop in time; its task was cancelled",
                    )

    # -- the loop --------------------------------------------------------------------------
    def _wait_for_results(self) -> list[Future]:
        got: list[Future | None] = []
        try:
            got.append(self._finished.get(timeout=self.poll_interval))
            while True:
                got.append(self._finished.get_nowait())
        except queue.Empty:
            pass
        return [f for f in got if f is not None]

    def _wake(self) -> None:
        """A worker's report arrived (on the client's event loop): end the loop's wait, so
        that a pruner judges it now rather than at the next poll (0.2 s later, when a
        trial of 5 ms steps has run 40 more). One wake at a time, however many reports."""
        if not self._woken.is_set():
            self._woken.set()
            self._finished.put(None)

    def run(self) -> RunStats:
        """Run every unit the source proposes; returns the run's counters.

        Raises :class:`~dmlsearch.exceptions.SchedulerLostError` if the scheduler dies.
        """
        with scheduler_loss(self.client):
            return self._run()

    def _run(self) -> RunStats:
        self._data.objects = tuple(self.kind.shared())
        self._slots.refresh(force=True)
        if self.policy.report_starts:
            self._reports = ReportStream(self.client, f"dmlsearch-{self.run_id}", self._wake)
            self._reports.subscribe()
        self.progress.start(self.source.total, self.name, self.source.done_before)
        try:
            self._slots.wait_for_a_worker()
            self._ensure_shared()
            while True:
                self._fill()
                if not self._inflight:
                    if (self._retry or self._quarantine) and not self._stopping:
                        continue
                    if self._waiting and not self._exhausted and not self._stopping:
                        raise DmlsearchError(
                            f"{self.name}: the policy waits for results but nothing is running"
                        )
                    break
                done = self._wait_for_results()
                # Starts first: a loss is judged by where its task was running.
                self._read_reports()
                for fut in done:
                    if fut in self._inflight:  # a given-up task may still report
                        self._handle(fut)
                for unit_id in self.source.cancellations():
                    self.cancel(unit_id)
                if self.policy.timeout is not None:
                    self._check_deadlines()
                if self._stopping and self.budget_policy == "stop":
                    self._stop_overrun()
                if self.on_tick is not None:
                    self.on_tick()
                self._progress()
        except BaseException:
            self.client.cancel(list(self._inflight))
            raise
        finally:
            self.progress.update(self._done(), self.source.failed_count(), 0, self._shown_best())
            self.progress.close()
            if self._reports is not None:
                self._reports.close()
            self._data.release()
            self._fetched.clear()
        return self.stats

    def _progress(self) -> None:
        self.progress.update(
            self._done(), self.source.failed_count(), self._units_in_flight(), self._shown_best()
        )

    def _shown_best(self) -> float | None:
        return None if self._best is None else self.source.as_shown(self._best)

    def _done(self) -> int:
        """Units done for progress: this run's and those an earlier run finished."""
        return len(self._recorded) + self.source.done_before
