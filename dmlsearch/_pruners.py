"""The pruners of :func:`dmlsearch.optimize`: pure rules over every trial's reported values.

A pruner reads ``curves`` (``{trial: {step: value}}``, greater is better) and says whether
the trial that just reported should stop. Nothing here imports Dask: the driver's source
asks a pruner, and the tests call the pruners as plain functions. Every attribute is set
in ``__init__``; deciding never changes the pruner or the curves.

All the rung pruners are asynchronous: a trial is judged the moment it reports at a rung
and goes on or stops, never waits (an objective in a worker thread cannot be paused). So
``"halving"`` is asynchronous successive halving (the same pruner as ``"asha"``, as
Optuna's ``SuccessiveHalvingPruner``) and ``"hyperband"`` is asynchronous Hyperband (ASHA
in each of Li et al.'s brackets, as Ray Tune's ``AsyncHyperBandScheduler`` and Optuna's
``HyperbandPruner``); see ``docs/multifidelity.md``.
"""

from __future__ import annotations

import difflib
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .exceptions import InvalidParameterError
from .schedulers import (
    Hyperband,
    asha_keeps,
    assign_brackets,
    check_schedule,
    rung_resources,
)
from .schedulers._base import check_int
from .schedulers.median import median_stop

__all__ = [
    "PRUNERS",
    "AshaPruner",
    "Curves",
    "HyperbandPruner",
    "JudgedSteps",
    "MedianPruner",
    "Pruner",
    "RungReport",
    "make_pruner",
]

#: The schedulers ``optimize`` takes, used as pruners.
PRUNERS: tuple[str, ...] = ("median", "asha", "halving", "hyperband")

#: Every trial's intermediate scores, ``{trial: {step: score}}``, greater is better.
Curves = Mapping[int, Mapping[int, float]]


@dataclass(frozen=True)
class RungReport:
    """A trial's first report at or past one of its rungs.

    ``rung``: the rung's index in the trial's bracket; ``resource``: the rung's step;
    ``from_resource``: the rung below's step (0 at the first rung); ``step`` and
    ``score``: the report judged there; ``top``: the bracket's last rung (never pruned).
    """

    rung: int
    resource: int
    from_resource: int
    step: int
    score: float
    bracket: int = 0
    top: bool = False


@dataclass(frozen=True)
class JudgedSteps:
    """The reports a pruner may decide on, which a trial sends to the driver at once.

    ``every_from``: every step from it on (None: none); ``rungs``: a step at or past a rung
    not reached before; ``geometric``: ``(first, factor)``, rungs ``first * factor**k``
    without end. A trial holds its other reports back and sends them together now and
    then (they are for the record and the dashboard: no pruner decides on them).
    ``wait``: the trial's next ``should_stop()`` after a judged report waits for the
    driver's answer (as Optuna's ``should_prune`` answers on the spot), so a trial whose
    steps are quicker than a round trip to the driver is still stopped at its rung.
    """

    every_from: int | None = None
    rungs: tuple[int, ...] = ()
    geometric: tuple[int, int] | None = None
    wait: bool = False

    def judged(self, previous: int | None, step: int) -> bool:
        """Whether a report at ``step``, after reports up to step ``previous``, is judged."""
        if previous is not None and step <= previous:
            return True  # out of order: which rung it counts for is the pruner's to say
        if self.every_from is not None and step >= self.every_from:
            return True
        low = -1 if previous is None else previous
        if any(low < r <= step for r in self.rungs):
            return True
        if self.geometric is not None:
            r, factor = self.geometric
            while r <= step:
                if r > low:
                    return True
                r *= factor
        return False


#: Every report is judged (a pruner that says nothing of its steps).
EVERY_STEP = JudgedSteps(every_from=0)


class Pruner:
    """Decides, from every trial's curve, whether ``trial`` should stop now."""

    name = "pruner"

    def judged_steps(self, trial: int) -> JudgedSteps:
        """The steps of ``trial`` that :meth:`stop` may stop it at (default: every one)."""
        return EVERY_STEP

    def stop(self, trial: int, curves: Curves, running: frozenset[int]) -> str | None:
        """Why ``trial`` (which just reported) should stop, or None to let it go on."""
        raise NotImplementedError

    def bracket_of(self, trial: int) -> int | None:
        """``trial``'s Hyperband bracket (None: the pruner has none)."""
        return None

    def rungs(self, trial: int, curve: Mapping[int, float]) -> list[RungReport]:
        """The rungs ``curve`` has reached, lowest first (none: the pruner has no rungs)."""
        return []


@dataclass(frozen=True)
class MedianPruner(Pruner):
    """:class:`~dmlsearch.schedulers.MedianStopping`'s rule on reported steps."""

    warmup_steps: int = 0
    min_trials: int = 5
    name = "median"

    def judged_steps(self, trial: int) -> JudgedSteps:
        return JudgedSteps(every_from=self.warmup_steps)

    def stop(self, trial: int, curves: Curves, running: frozenset[int]) -> str | None:
        # MedianStopping.stops for this one trial, reading only the values at its latest
        # step: building the whole History at every report cost time growing with every
        # step of every trial (12 ms a report at 200 trials x 50 steps).
        curve = curves[trial]
        if not curve:
            return None
        step = max(curve)
        if step < self.warmup_steps:
            return None
        others = [c[step] for t, c in curves.items() if t != trial and step in c]
        stop, median = median_stop(curve[step], others, self.min_trials)
        if not stop:
            return None
        return (
            f"score {curve[step]:.6g} at step {step} is below the median {median:.6g} of "
            f"{len(others)} other trials"
        )


def first_at(curve: Mapping[int, float], resource: int) -> float | None:
    """The value a curve has at a rung: its first at a step ``>= resource`` (None: none)."""
    steps = [s for s in curve if s >= resource]
    return curve[min(steps)] if steps else None


class _RungPruner(Pruner):
    """ASHA's rule at a trial's rungs, among the trials :meth:`peers` names."""

    reduction_factor: int
    min_resource: int

    def resources(self, trial: int, step: int) -> tuple[int, ...]:
        """``trial``'s rung steps, at least those up to ``step``, increasing."""
        raise NotImplementedError

    def bounded(self, trial: int) -> bool:
        """Whether the last of :meth:`resources` is the trial's full budget."""
        raise NotImplementedError

    def peers(self, trial: int, curves: Curves) -> Iterable[int]:
        """The trials ``trial`` is ranked against at a rung."""
        return curves

    def judged_steps(self, trial: int) -> JudgedSteps:
        # A few rungs a trial: each judged report's answer is worth waiting for. The last
        # rung of a bounded schedule is the full budget, where no trial is stopped.
        if self.bounded(trial):
            return JudgedSteps(rungs=self.resources(trial, 0)[:-1], wait=True)
        return JudgedSteps(geometric=(self.min_resource, self.reduction_factor), wait=True)

    def rungs(self, trial: int, curve: Mapping[int, float]) -> list[RungReport]:
        if not curve:
            return []
        steps = sorted(curve)
        res = self.resources(trial, steps[-1])
        bracket = self.bracket_of(trial) or 0
        top = len(res) - 1 if self.bounded(trial) else -1
        out = []
        for k, r in enumerate(res):
            i = bisect_right(steps, r - 1)  # the first step >= r
            if i == len(steps):
                break
            step = steps[i]
            out.append(
                RungReport(k, r, res[k - 1] if k else 0, step, curve[step], bracket, k == top)
            )
        return out

    def stop(self, trial: int, curves: Curves, running: frozenset[int]) -> str | None:
        curve = curves[trial]
        reached = self.rungs(trial, curve)
        if not reached or reached[-1].step != max(curve) or reached[-1].top:
            return None  # not a rung's first report, or the full budget: nothing to decide
        at = reached[-1]
        peers = [t for t in self.peers(trial, curves) if t != trial]
        others = [v for t in peers if (v := first_at(curves[t], at.resource)) is not None]
        if asha_keeps(at.score, others, self.reduction_factor):
            return None
        keep = max((len(others) + 1) // self.reduction_factor, 1)
        where = "" if self.bracket_of(trial) is None else f" of bracket {at.bracket}"
        return (
            f"score {at.score:.6g} at step {at.step} is not in the top {keep} of "
            f"{len(others) + 1} at rung step {at.resource}{where}"
        )


@dataclass(frozen=True)
class AshaPruner(_RungPruner):
    """Asynchronous successive halving as a pruner (as Optuna's ``SuccessiveHalvingPruner``).

    Rung ``k`` is at step ``min_resource * reduction_factor**k``, without end; with
    ``max_resource``, the rungs are ``SearchCV``'s (``rung_resources``: counted down from
    ``max_resource``, which is the last, where no trial is pruned). A trial is judged once
    per rung, with its first score at a step >= the rung's; it goes on if that score is
    in the top ``max(n // reduction_factor, 1)`` of the ``n`` scores judged at that rung so
    far, its own included (:func:`~dmlsearch.schedulers.asha_keeps`).
    """

    min_resource: int = 1
    reduction_factor: int = 3
    max_resource: int | None = None
    name = "asha"

    def __post_init__(self) -> None:
        if self.max_resource is None:
            check_int("min_resource", self.min_resource, 1)
            check_int("reduction_factor", self.reduction_factor, 2)
        else:
            check_schedule(self.min_resource, self.max_resource, self.reduction_factor)

    def resources(self, trial: int, step: int) -> tuple[int, ...]:
        if self.max_resource is not None:
            return rung_resources(self.min_resource, self.max_resource, self.reduction_factor)
        out, r = [], self.min_resource
        while r <= step:
            out.append(r)
            r *= self.reduction_factor
        return tuple(out)

    def bounded(self, trial: int) -> bool:
        return self.max_resource is not None


class HyperbandPruner(_RungPruner):
    """Asynchronous Hyperband (Li et al. 2020, as Ray Tune's ``AsyncHyperBandScheduler``).

    Li et al.'s brackets for ``R = max_resource`` (:func:`hyperband_brackets`): bracket
    ``s`` has rungs at ``R * eta**-s, ..., R`` (``SearchCV``'s ``"hyperband"`` rungs).
    Trial ``t`` belongs to bracket :meth:`bracket_of` (``t``),
    :func:`~dmlsearch.schedulers.assign_brackets`'s weighted round robin. Within its
    bracket it is judged by ASHA's rule at each rung below ``R``, against the trials of
    its own bracket only; bracket 0 (a single rung, at ``R``) is never pruned.

    ``n_trials``: how many trials the run has (the bracket table is built for those;
    later ids are computed when asked).
    """

    name = "hyperband"

    def __init__(
        self,
        min_resource: int = 1,
        max_resource: int = 81,
        reduction_factor: int = 3,
        n_trials: int | None = None,
    ) -> None:
        schedule = Hyperband(min_resource, max_resource, reduction_factor)
        self.min_resource = schedule.min_resource
        self.max_resource = schedule.max_resource
        self.reduction_factor = schedule.reduction_factor
        self.bracket_resources = {b.bracket: b.resources for b in schedule.brackets}
        self.cycle = schedule.n_trials  # the round robin repeats every sum(n) trials
        n = self.cycle if n_trials is None else min(check_int("n_trials", n_trials, 1), self.cycle)
        self.table = self._assign(n)

    def _assign(self, n: int) -> tuple[int, ...]:
        return assign_brackets(n, self.max_resource, self.reduction_factor, self.min_resource)

    def __repr__(self) -> str:
        return (
            f"HyperbandPruner(min_resource={self.min_resource}, "
            f"max_resource={self.max_resource}, reduction_factor={self.reduction_factor})"
        )

    def bracket_of(self, trial: int) -> int:
        position = trial % self.cycle
        if position < len(self.table):
            return self.table[position]
        return self._assign(position + 1)[-1]

    def resources(self, trial: int, step: int) -> tuple[int, ...]:
        return self.bracket_resources[self.bracket_of(trial)]

    def bounded(self, trial: int) -> bool:
        return True

    def peers(self, trial: int, curves: Curves) -> Iterable[int]:
        bracket = self.bracket_of(trial)
        return (t for t in curves if self.bracket_of(t) == bracket)


def make_pruner(
    scheduler: Any,
    min_resource: int,
    reduction_factor: int,
    warmup_steps: int,
    min_trials: int,
    max_resource: int | None = None,
    n_trials: int | None = None,
) -> Pruner | None:
    """The pruner named by ``scheduler`` (None: no pruning); bad values raise first."""
    # One rule for every count, as SearchCV's: NumPy integers and whole floats are taken
    # (as ints: the rungs and the recorded schedule hold ints), bools and fractions not.
    min_resource = check_int("min_resource", min_resource, 1)
    reduction_factor = check_int("reduction_factor", reduction_factor, 2)
    warmup_steps = check_int("warmup_steps", warmup_steps, 0)
    min_trials = check_int("min_trials", min_trials, 1)
    if max_resource is not None:
        max_resource = check_int("max_resource", max_resource, 1)
    if max_resource is not None and scheduler not in ("asha", "halving", "hyperband"):
        raise InvalidParameterError(
            "max_resource",
            f"is for the rung pruners ('asha', 'halving', 'hyperband'), not scheduler="
            f"{scheduler!r}; drop max_resource or choose one of them",
        )
    for name, value, default in (("warmup_steps", warmup_steps, 0), ("min_trials", min_trials, 5)):
        if value != default and scheduler != "median":
            raise InvalidParameterError(
                name,
                f"is for scheduler='median', not scheduler={scheduler!r}, which would ignore "
                f"it; drop {name} or choose 'median'",
            )
    if scheduler is None or isinstance(scheduler, Pruner):
        return scheduler
    if scheduler == "median":
        return MedianPruner(warmup_steps=warmup_steps, min_trials=min_trials)
    if scheduler in ("asha", "halving"):
        # Asynchronous in both cases: an objective's thread cannot wait at a rung.
        return AshaPruner(min_resource, reduction_factor, max_resource)
    if scheduler == "hyperband":
        if max_resource is None:
            raise InvalidParameterError(
                "max_resource",
                "scheduler='hyperband' needs max_resource, the step at which a trial has its "
                "full budget (its brackets' rungs are counted down from it)",
            )
        return HyperbandPruner(min_resource, max_resource, reduction_factor, n_trials)
    close = difflib.get_close_matches(str(scheduler).lower(), list(PRUNERS), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise InvalidParameterError(
        "scheduler",
        f"unknown scheduler {scheduler!r} for optimize{hint}. Choose one of {list(PRUNERS)}, "
        "a Pruner, or None",
    )
