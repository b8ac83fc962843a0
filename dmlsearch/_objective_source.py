"""The driver's side of :func:`dmlsearch.optimize`: trials from a strategy, judged by a pruner.

:class:`ObjectiveSource` is the runner's :class:`~dmlsearch.runner.units.UnitSource` for
an objective's trials. It never touches Dask itself: stopping a trial is a callable the
driver gives it (a ``distributed.Event`` per trial).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ._evaluate import TrialOutcome
from ._objective import PRUNED, ObjectiveOutcome, ObjectiveSpec
from ._pruners import JudgedSteps, Pruner
from ._states import COMPLETE
from .runner.trials import trial_seed
from .runner.units import DONE, Unit, UnitSource, _Signal
from .strategies import Strategy

__all__ = ["ObjectiveSource", "as_trial_outcome", "record_curve"]

#: Without a pruner no report is decided on: a trial sends them now and then, for the page.
NOTHING_JUDGED = JudgedSteps()


class ObjectiveSource(UnitSource[ObjectiveSpec, ObjectiveOutcome]):
    """Trials from a strategy; each reported value goes to the pruner, which may stop it.

    ``stop(number, worker)`` tells the trial's worker (the address its report came from,
    if known; the driver gives a Dask-backed one, the source itself never touches Dask);
    ``go_on(number, worker, step)`` answers a report that waits for its judgement
    (``answer`` in the message) when the trial goes on. ``on_finish`` hears each trial once, as it is recorded.
    ``watcher`` (the dashboard's reporter) also hears each rung a trial reaches, for the
    rung view of the rung pruners. ``skip``: trial numbers an earlier run finished
    (resume), never proposed again.
    """

    def __init__(
        self,
        strategy: Strategy,
        seed: int,
        *,
        sign: float,
        pruner: Pruner | None,
        stop: Callable[[int, str | None], None],
        stop_event: Callable[[int], str | None],
        go_on: Callable[[int, str | None, int], None] = lambda number, worker, step: None,
        on_finish: Callable[[ObjectiveOutcome], None],
        watcher: Any = None,
        skip: Iterable[int] = (),
    ) -> None:
        self.strategy = strategy
        self.seed = seed
        self.sign = sign
        self.pruner = pruner
        self.stop = stop
        self.go_on = go_on
        self.stop_event = stop_event
        self.on_finish = on_finish
        self.watcher = watcher
        self.skip = frozenset(skip)
        self.next_number = 0
        self.curves: dict[int, dict[int, float]] = {}
        self.running: set[int] = set()
        self.stopped: dict[int, str] = {}
        self.outcomes: dict[int, ObjectiveOutcome] = {}
        self.shown: dict[int, set[int]] = {}  # rung steps each trial's rung view has

    @property
    def total(self) -> int | None:
        return self.strategy.total

    @property
    def remaining(self) -> int | None:
        total = self.strategy.total
        if total is None:
            return None
        restored = sum(1 for n in self.skip if self.next_number <= n < total)
        return max(total - self.next_number - restored, 0)

    @property
    def done_before(self) -> int:
        total = self.strategy.total
        return sum(1 for n in self.skip if total is None or n < total)

    def restore(self, outcome: ObjectiveOutcome) -> None:
        """Take trial ``outcome`` as finished by an earlier run: its curve counts for the
        pruner, its rungs for the rung view; it is not told to the strategy again."""
        self.curves[outcome.number] = {s: self.sign * v for s, v in outcome.intermediate.items()}
        self.outcomes[outcome.number] = outcome
        if outcome.state == PRUNED:
            self.stopped[outcome.number] = "pruned by an earlier run"
        self._show_rungs(outcome.number, restored=True)

    def propose(self) -> Unit[ObjectiveSpec] | _Signal:
        total = self.strategy.total
        while self.next_number in self.skip:
            self.next_number += 1
        if total is not None and self.next_number >= total:
            return DONE
        number = self.next_number
        params = self.strategy.ask(number)
        if params is None:
            return DONE
        self.next_number += 1
        self.running.add(number)
        self.curves[number] = {}
        judged = NOTHING_JUDGED if self.pruner is None else self.pruner.judged_steps(number)
        spec = ObjectiveSpec(
            number, params, trial_seed(self.seed, number), self.stop_event(number), judged
        )
        return Unit(number, spec)

    def submitted(self, units: list[Unit[ObjectiveSpec]]) -> None:
        if self.watcher is not None:
            self.watcher.units_submitted([(u.payload.number, u.payload.params) for u in units])

    def reported(self, unit: Unit[ObjectiveSpec], message: dict[str, Any]) -> None:
        try:
            pairs = [(int(s), float(v)) for s, v in message["steps"]]
        except (KeyError, TypeError, ValueError):
            return
        number = unit.payload.number
        worker = message.get("worker")  # the scheduler's stamp: where the trial runs
        where = worker if isinstance(worker, str) else None
        for step, value in pairs:  # in the order the trial reported them
            self._heard(number, step, value, where)
        answer = message.get("answer")
        if isinstance(answer, int) and number not in self.stopped:
            self.go_on(number, where, answer)

    def _heard(self, number: int, step: int, value: float, worker: str | None) -> None:
        if number in self.stopped:
            # Reported before the trial saw its stop: no rung it passed, so no peer of the
            # trials judged there (it shows when recorded, if the trial went on anyway).
            return
        self.curves[number][step] = self.sign * value
        if self.pruner is None:
            return
        self._show_rungs(number)
        reason = self.pruner.stop(number, self.curves, frozenset(self.running))
        if reason is not None:
            self.stopped[number] = reason
            self.stop(number, worker)

    def _show_rungs(self, number: int, *, restored: bool = False) -> None:
        """Tell the rung view of each rung ``number`` reached that it has not heard of.

        A rung reached is a step that ended there; reaching rung ``k > 0`` is a promotion
        from rung ``k - 1`` (the trial was not pruned there).
        """
        if self.watcher is None or self.pruner is None:
            return
        shown = self.shown.setdefault(number, set())
        for rung in self.pruner.rungs(number, self.curves[number]):
            if rung.resource in shown:
                continue
            shown.add(rung.resource)
            self.watcher.rungs_submitted(
                [(number, rung.rung, rung.resource, rung.from_resource, rung.bracket)]
            )
            self.watcher.rung_finished(
                number, rung.resource, COMPLETE, self.sign * rung.score, restored=restored
            )

    def record(
        self, unit: Unit[ObjectiveSpec], result: ObjectiveOutcome, retries: int
    ) -> float | None:
        result.retries = retries
        if self.pruner is not None:
            result.bracket = self.pruner.bracket_of(result.number)
        self.running.discard(result.number)
        heard = self.curves.get(result.number) or {}
        missing = {s: self.sign * v for s, v in heard.items() if s not in result.intermediate}
        if missing:
            # Steps the driver heard that the result lacks: a trial lost with its worker
            # comes back with no curve, a retry with the retry's steps only (the pruner
            # judged the first attempt's); none of them is lost from the record.
            result.intermediate = dict(sorted({**missing, **result.intermediate}.items()))
        if result.intermediate:  # the worker's own curve is complete (reports can be late)
            curve = {s: self.sign * v for s, v in result.intermediate.items()}
            known = self.curves.get(result.number)
            if result.state == PRUNED and result.number in self.stopped and known:
                # Steps after the one it was stopped at were never judged: not counted.
                curve = {s: v for s, v in curve.items() if s <= max(known)}
            self.curves[result.number] = curve
        if result.state != PRUNED:  # it went on past any stop: each rung it reached counts
            self._show_rungs(result.number)  # (and the reports that came too late)
        score = None
        if result.state == COMPLETE and result.value is not None:
            score = self.sign * result.value
        self.strategy.tell(result.number, score)
        self.outcomes[result.number] = result
        self.on_finish(result)
        if self.watcher is not None:
            self.watcher.unit_finished(
                result.number, result.state, result.value, result.worker, result.duration,
                result.error,
            )  # fmt: skip
        return score

    def failed_count(self) -> int:
        return sum(o.state not in (COMPLETE, PRUNED) for o in self.outcomes.values())

    def as_shown(self, objective: float) -> float:
        return self.sign * objective  # the sign is +1 or -1: its own inverse


def as_trial_outcome(outcome: ObjectiveOutcome) -> TrialOutcome:
    """The registry's form of a trial: its value as the one fold score ``"score"``."""
    scores = [{} if outcome.value is None else {"score": float(outcome.value)}]
    return TrialOutcome(
        number=outcome.number,
        params=outcome.params,
        seed=outcome.seed,
        state=outcome.state,
        test_scores=scores,
        train_scores=None,
        fit_times=[outcome.duration],
        score_times=[0.0],
        started=outcome.started,
        finished=outcome.finished,
        worker=outcome.worker,
        error=outcome.error,
        retries=outcome.retries,
    )


def record_curve(outcome: ObjectiveOutcome) -> dict[str, float]:
    """A trial's record ``intermediate``: ``{"step": value}``, and ``"bracket"`` if it has one
    (not a number, so not part of the learning curve)."""
    curve = {str(s): v for s, v in sorted(outcome.intermediate.items())}
    if outcome.bracket is not None:
        curve["bracket"] = float(outcome.bracket)
    return curve
