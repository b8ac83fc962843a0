"""The scheduler contract: WHEN to start, promote or stop a trial, as a pure policy.

A scheduler reads an immutable :class:`History` and answers with a decision. It keeps no
record of its own of what happened: everything it needs is in the snapshot, so the same
snapshot always gives the same answer, and a scheduler can be tested as a plain function.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..exceptions import InvalidParameterError

#: Counts and resources past int64 cannot reach a worker or the registry.
_INT64_MAX: Final = 2**63 - 1

__all__ = [
    "DONE",
    "WAIT",
    "Decision",
    "History",
    "Promote",
    "Result",
    "Scheduler",
    "Signal",
    "Start",
    "Stop",
    "check_int",
    "rank",
]


class Signal:
    """A decision that is not a unit of work: :data:`WAIT` or :data:`DONE`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> str:  # pickles (and deep-copies) as the same object
        return self.name


#: Nothing to run now; ask again when a running trial ends. (The runner's
#: ``dmlsearch.runner.units.WAIT`` means the same; the wrapping source maps one onto the
#: other, so that this package never imports the runner, which imports Dask.)
WAIT: Final = Signal("WAIT")
#: Nothing more to run, ever.
DONE: Final = Signal("DONE")


@dataclass(frozen=True, order=True)
class Result:
    """One score of a trial: at ``rung`` (a step index), after ``resource`` units of budget.

    ``score``: greater is better (as scikit-learn's scorers); ``nan`` ranks last.
    """

    rung: int
    resource: int
    score: float


@dataclass(frozen=True)
class Start:
    """Start new trial ``trial`` and train it to ``resource`` (rung ``rung`` of ``bracket``)."""

    trial: int
    resource: int
    rung: int = 0
    bracket: int = 0


@dataclass(frozen=True)
class Promote:
    """Continue trial ``trial`` from its state at ``from_resource`` up to ``resource``.

    The trial's last result is at rung ``rung - 1``; this step gives its result at ``rung``.
    Where the fidelity allows it (:mod:`dmlsearch.fidelity`) the trial continues from its
    trained state, so the step costs ``resource - from_resource``.
    """

    trial: int
    rung: int
    resource: int
    from_resource: int
    bracket: int = 0


@dataclass(frozen=True)
class Stop:
    """Stop running trial ``trial`` now (``reason`` is for messages and records)."""

    trial: int
    reason: str = ""


#: What :meth:`Scheduler.propose` returns.
Decision = Start | Promote | Signal


class _FrozenMap(Mapping[int, tuple[Result, ...]]):
    """A read-only ``{trial: results}``: no method of it can change it."""

    __slots__ = ("_data",)

    def __init__(self, data: dict[int, tuple[Result, ...]]) -> None:
        self._data = data

    def __getitem__(self, key: int) -> tuple[Result, ...]:
        return self._data[key]

    def __iter__(self) -> Iterator[int]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._data.items())))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"


def _as_result(item: Any, trial: int) -> Result:
    if isinstance(item, Result):
        return item
    try:
        rung, resource, score = item
    except (TypeError, ValueError):
        raise InvalidParameterError(
            "history",
            f"trial {trial}: a result must be (rung, resource, score), got {item!r}",
        ) from None
    return Result(int(rung), int(resource), float(score))


@dataclass(frozen=True)
class History:
    """An immutable snapshot of a search's trials, the only thing a scheduler reads.

    ``results``: every trial started so far, ``trial id -> (Result, ...)`` in the order the
    results came (a trial still running its first step has ``()``).
    ``running``: trials being trained now. With rung steps (halving, Hyperband, ASHA), a
    running trial whose last result is at rung ``k`` is running rung ``k + 1``.
    ``failed``: trials whose last step gave no score (an error, a timeout, a cancellation,
    a stop); they are never continued.
    ``closed``: no new trial can start (the strategy has no more candidates, a grid smaller
    than the schedule); a scheduler then only promotes.

    Build one with :meth:`of`, which copies what it is given, so the caller may go on
    changing its own lists.
    """

    results: Mapping[int, tuple[Result, ...]]
    running: frozenset[int] = frozenset()
    failed: frozenset[int] = frozenset()
    closed: bool = False
    _index: dict[tuple[int, int], float] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def of(
        cls,
        results: Mapping[int, Iterable[Any]] | None = None,
        running: Iterable[int] = (),
        failed: Iterable[int] = (),
        closed: bool = False,
    ) -> History:
        """A snapshot of ``results`` (``{trial: [(rung, resource, score), ...]}``).

        Trials named in ``running`` or ``failed`` but absent from ``results`` are added
        with no results. Raises :class:`InvalidParameterError` for a malformed result or a
        trial both running and failed.
        """
        data: dict[int, tuple[Result, ...]] = {}
        for trial, items in (results or {}).items():
            data[int(trial)] = tuple(_as_result(item, int(trial)) for item in items)
        running_set = frozenset(int(t) for t in running)
        failed_set = frozenset(int(t) for t in failed)
        both = running_set & failed_set
        if both:
            raise InvalidParameterError(
                "history", f"trials {sorted(both)} are both running and failed; a trial is one"
            )
        for trial in sorted(running_set | failed_set):
            data.setdefault(trial, ())
        return cls(_FrozenMap(dict(sorted(data.items()))), running_set, failed_set, bool(closed))

    def __post_init__(self) -> None:
        # A lookup table built once here, while the snapshot is being made, never later.
        for trial, results in self.results.items():
            for result in results:
                self._index[(trial, result.rung)] = result.score

    @property
    def trials(self) -> tuple[int, ...]:
        """Every trial id, in increasing order."""
        return tuple(sorted(self.results))

    def next_trial(self, first: int = 0) -> int:
        """The id a new trial gets: one past the largest id at or above ``first``."""
        ids = [t for t in self.results if t >= first]
        return max(ids) + 1 if ids else first

    def last_rung(self, trial: int) -> int:
        """The highest rung ``trial`` has a result at (``-1``: none yet)."""
        return max((r.rung for r in self.results[trial]), default=-1)

    def resource_reached(self, trial: int) -> int:
        """The largest resource ``trial`` has a result at (0: none yet)."""
        return max((r.resource for r in self.results[trial]), default=0)

    def score(self, trial: int, rung: int) -> float | None:
        """``trial``'s score at ``rung``, or ``None`` if it has none there."""
        return self._index.get((trial, rung))

    def at_rung(self, rung: int) -> dict[int, float]:
        """``{trial: score}`` of every trial with a result at ``rung``."""
        return {t: s for (t, k), s in self._index.items() if k == rung}

    def restrict(self, trials: Iterable[int]) -> History:
        """The snapshot of ``trials`` only (a bracket's own trials)."""
        keep = set(trials)
        return History(
            _FrozenMap({t: r for t, r in self.results.items() if t in keep}),
            self.running & keep,
            self.failed & keep,
            self.closed,
        )


def rank(scores: Mapping[int, float]) -> list[int]:
    """Trial ids best first: greater score first, ``nan`` last, ties by smaller trial id."""

    def key(item: tuple[int, float]) -> tuple[float, int]:
        trial, score = item
        return (math.inf if math.isnan(score) else -score, trial)

    return [trial for trial, _ in sorted(scores.items(), key=key)]


def check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]``, else :class:`InvalidParameterError` naming both.

    Without ``high`` the bound is int64's: a resource or count past it cannot reach a worker
    (Dask's messages) or the registry.
    """
    allowed = f">= {low} (below 2**63)" if high is None else f"in [{low}, {high}]"
    high = _INT64_MAX if high is None else high
    # numbers.Real: numpy's integers and floats too, as scikit-learn takes them.
    whole = isinstance(value, numbers.Integral) or (
        isinstance(value, numbers.Real)
        and math.isfinite(float(value))
        and float(value) == math.floor(float(value))
    )
    if isinstance(value, bool) or not whole:
        raise InvalidParameterError(name, f"must be an integer {allowed}, got {value!r}")
    value = int(value)
    if value < low or value > high:
        raise InvalidParameterError(name, f"must be an integer {allowed}, got {value}")
    return value


class Scheduler(ABC):
    """Decides WHEN a trial starts, is promoted to more budget, or stops.

    Contract:

    * A scheduler is a policy over an immutable snapshot. :meth:`propose` and :meth:`stops`
      read a :class:`History` and return decisions; they never change the history they are
      given, and never write into ``self`` (no lazily-filled caches, no counters): every
      attribute is set in ``__init__`` and stays as it was. The same snapshot always gives
      the same decisions. (dask-ml's ``_adapt`` and Optuna's pruners keep state as they
      decide; that is what this contract rules out.)
    * The caller owns the history: after :class:`Start` or :class:`Promote` it marks the
      trial running in its next snapshot, and records each step's result (or the trial as
      failed) once. A new trial's id is the one :class:`Start` names; the caller uses it.
    * :meth:`propose` is asked whenever a worker is free. It returns :class:`Start`,
      :class:`Promote`, :data:`WAIT` (nothing now; ask again when a running trial ends) or
      :data:`DONE` (nothing more, ever, once the running trials end).
    * :meth:`stops` is asked whenever results or intermediate reports arrive; it names the
      running trials to stop now (the caller cancels them and marks them failed).
    * Scores are "greater is better". Ties are broken by the smaller trial id.
    * Arguments are checked in ``__init__``: :class:`~dmlsearch.exceptions.InvalidParameterError`
      names the value and the allowed range, before any work is dispatched.
    * Not thread-safe: one thread (the runner's loop) drives it.
    """

    #: The name ``SearchCV(scheduler=...)`` takes.
    name: str = "scheduler"

    @abstractmethod
    def propose(self, history: History) -> Decision:
        """What to run on a free worker: :class:`Start`, :class:`Promote`, WAIT or DONE."""

    def stops(self, history: History) -> tuple[Stop, ...]:
        """Running trials to stop now (none by default)."""
        return ()

    def finished(self, history: History) -> frozenset[int]:
        """Trials that will never be continued, so their trained state may be released.

        By default the failed ones; policies that know more (a complete rung's losers)
        say more.
        """
        return frozenset(history.failed)

    def spent(self, history: History) -> int:
        """Budget used so far, counting continued training once.

        Each trial counts the largest resource it has reached, or is being trained to
        (a running trial counts its current step's target): a trial promoted from 9 to 27
        has cost 27, not 36, because it continues from its state.
        """
        return sum(self._target(history, t) for t in history.results)

    def _target(self, history: History, trial: int) -> int:
        """The resource ``trial`` has reached or is being trained to now."""
        return history.resource_reached(trial)
