"""Units of work: what the runner's one futures loop moves to the cluster.

A *unit* is one piece of work with an id (a search trial, a bagging member, a fold fit).
A :class:`UnitKind` says how units of one kind run: the function a worker calls, the
objects every task shares (scattered once per run), and what a unit that could not run
records. A :class:`UnitSource` says which unit comes next: a unit, :data:`WAIT` (nothing
now; ask again when something ends) or :data:`DONE`. Neither imports Dask: the loop in
:mod:`dmlsearch.runner.loop` is the only code that does.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

__all__ = [
    "DONE",
    "WAIT",
    "Unit",
    "UnitKind",
    "UnitPolicy",
    "UnitSource",
]

P = TypeVar("P")  # what a unit carries to its worker
R = TypeVar("R")  # what a unit gives back


class _Signal:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: A source has nothing to run now but will have once a unit in flight ends (ASHA's rungs).
WAIT: Final = _Signal("WAIT")
#: A source has nothing more to run, ever.
DONE: Final = _Signal("DONE")


@dataclass(frozen=True)
class UnitPolicy:
    """How the loop treats units of one kind: data, never a branch in the loop.

    ``max_retries``: times a unit lost with its worker is resubmitted.
    ``timeout``: seconds a unit may run, counted from when its task starts on a worker;
    past it (plus ``grace``) the task is given up and, if ``restart_stuck_worker``, the
    worker still running it is restarted.
    ``batchable``: cheap units may be packed several to a task.
    ``report_starts``: tasks announce when they start and where (a small message per task;
    needed for ``timeout``, and to tell a unit that crashed its worker from the units lost
    with it).
    ``timeout_name``: what the user set, for messages (``trial_timeout``).
    """

    max_retries: int = 2
    timeout: float | None = None
    grace: float = 5.0
    restart_stuck_worker: bool = True
    batchable: bool = True
    report_starts: bool = True
    timeout_name: str = "timeout"

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 or None, got {self.timeout}")


@dataclass(frozen=True)
class Unit(Generic[P]):
    """One unit of work: its id (unique within a run) and what its worker needs."""

    id: Hashable
    payload: P


class UnitKind(abc.ABC, Generic[P, R]):
    """How units of one kind run on a worker and what a unit that cannot run records.

    Contract:

    * :meth:`function` returns a module-level callable (picklable by reference) called on a
      worker as ``function(*shared, payloads, start_by, stop_by)``: ``shared`` are the
      objects of :meth:`shared` (scattered), ``payloads`` a list of unit payloads,
      ``start_by`` a wall-clock time (``time.time()``) after which no unit may start and
      ``stop_by`` one at which a running unit should stop (``None``: no limit). It returns
      one result per unit that ran, in any order; a unit that did not start is left out.
    * Results are matched to units by :meth:`result_id`; the loop records each id once,
      whatever Dask reruns.
    * :meth:`failed` builds the result recorded for a unit that never gave one (lost too
      often, timed out, crashed its worker); it must not raise.
    """

    #: Used in task keys and messages.
    name: str = "unit"

    def __init__(self, policy: UnitPolicy | None = None) -> None:
        self.policy = policy or UnitPolicy()

    @abc.abstractmethod
    def function(self) -> Callable[..., Sequence[R]]:
        """The task function run on a worker (see the class docstring)."""

    def shared(self) -> tuple[Any, ...]:
        """Objects every task of a run needs: scattered once, passed as futures."""
        return ()

    @abc.abstractmethod
    def result_id(self, result: R) -> Hashable:
        """The id of the unit that gave ``result``."""

    @abc.abstractmethod
    def failed(self, unit: Unit[P], state: str, error: str) -> R:
        """The result recorded for ``unit`` when it could not run (``state``: why)."""

    def duration(self, result: R) -> float | None:
        """Seconds the unit ran, to size batches; ``None`` if it did not complete."""
        return None

    def started(self, result: R) -> bool:
        """Whether the unit ran at all (False: it was never started, record nothing)."""
        return True

    def placement(self, units: list[Unit[P]]) -> list[str] | None:
        """Worker addresses the task of ``units`` should prefer (None: anywhere).

        A preference, not a pin: the task runs elsewhere when those workers are gone or
        Dask moves it (a rung step then refits what it would have continued).
        """
        return None


class UnitSource(abc.ABC, Generic[P, R]):
    """Which unit comes next, and what happens to each result.

    A source is a policy: it reads what the loop tells it and answers; it never touches
    Dask. :meth:`propose` is called whenever there is room for more work; :meth:`record`
    exactly once per unit id, in the order results arrive. Any exception raised by a
    source's method ends the run: the loop cancels the tasks in flight, releases the
    shared objects and re-raises it (an ensemble stops at a member that failed this way).
    """

    @property
    def total(self) -> int | None:
        """How many units there will be, if known (for progress)."""
        return None

    @property
    def remaining(self) -> int | None:
        """How many units are still to be proposed, if known (batches shrink near the end)."""
        return None

    @property
    def done_before(self) -> int:
        """Units of :attr:`total` an earlier run finished (a resume): progress counts them."""
        return 0

    @abc.abstractmethod
    def propose(self) -> Unit[P] | _Signal:
        """The next unit, :data:`WAIT` or :data:`DONE`."""

    @abc.abstractmethod
    def record(self, unit: Unit[P], result: R, retries: int) -> float | None:
        """Take the result of ``unit`` (resubmitted ``retries`` times).

        Returns the objective (or None) for progress.
        """

    def submitted(self, units: list[Unit[P]]) -> None:
        """Hears that ``units`` were just sent to the cluster."""

    def reported(self, unit: Unit[P], message: dict[str, Any]) -> None:
        """Hears what a running unit reported (``report_progress`` on the worker)."""

    def cancellations(self) -> list[Hashable]:
        """Ids of units to cancel now (asked after each batch of results and reports).

        A cancelled unit is recorded once, with the kind's ``failed(unit, "cancelled",
        ...)``; its task is cancelled when no other unit of it is still running.
        """
        return []

    def failed_count(self) -> int:
        """How many recorded units failed (for progress)."""
        return 0

    def as_shown(self, objective: float) -> float:
        """An objective :meth:`record` returned (larger is better) as progress shows it:
        the value itself (a minimised one is returned negated)."""
        return objective
