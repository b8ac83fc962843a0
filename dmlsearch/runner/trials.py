"""Search trials as units of work: the kind (fit and score on CV splits) and the source
(a strategy's proposals, minus the trials an earlier run finished)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._evaluate import EvalContext, SearchData, TrialOutcome, TrialSpec, run_trials
from .._states import COMPLETE
from .._validation import CandidateCache, check_candidate
from ..strategies import Strategy
from .units import DONE, Unit, UnitKind, UnitPolicy, UnitSource, _Signal

__all__ = ["StrategySource", "TrialKind", "trial_seed"]


def trial_seed(seed: int, number: int) -> int:
    """The seed handed to trial ``number``: a pure function of the search seed."""
    return int(np.random.SeedSequence(seed, spawn_key=(number, 1)).generate_state(1)[0])


class TrialKind(UnitKind[TrialSpec, TrialOutcome]):
    """A trial fits and scores one candidate on every CV split (``run_trials``)."""

    name = "trial"

    def __init__(self, data: SearchData, context: EvalContext, policy: UnitPolicy) -> None:
        super().__init__(policy)
        self.data = data
        self.context = context

    def function(self) -> Callable[..., Sequence[TrialOutcome]]:
        return run_trials

    def shared(self) -> tuple[Any, ...]:
        return (self.data, self.context)

    def result_id(self, result: TrialOutcome) -> int:
        return result.number

    def duration(self, result: TrialOutcome) -> float | None:
        return result.duration if result.state == COMPLETE else None

    def failed(self, unit: Unit[TrialSpec], state: str, error: str) -> TrialOutcome:
        spec = unit.payload
        n = len(self.context.splits)
        now = time.time()
        return TrialOutcome(
            number=spec.number,
            params=spec.params,
            seed=spec.seed,
            state=state,
            test_scores=[{} for _ in range(n)],
            train_scores=[{} for _ in range(n)] if self.context.return_train_score else None,
            fit_times=[0.0] * n,
            score_times=[0.0] * n,
            started=now,
            finished=now,
            worker="",
            error=error,
        )


class StrategySource(UnitSource[TrialSpec, TrialOutcome]):
    """Trials in number order from a strategy; ``skip`` lists numbers already recorded.

    ``on_outcome`` is called once per trial as it ends and returns the objective told to
    the strategy (``None`` if the trial failed). ``observer`` hears submissions and ends.
    """

    def __init__(
        self,
        strategy: Strategy,
        seed: int,
        on_outcome: Callable[[TrialOutcome], float | None],
        *,
        skip: set[int] | frozenset[int] = frozenset(),
        observer: Any = None,
        estimator: Any = None,
    ) -> None:
        self.strategy = strategy
        self.seed = seed
        self.on_outcome = on_outcome
        self.skip = skip
        self.observer = observer
        self.next_number = 0
        self.failed = 0
        self.estimator = estimator
        self._shapes: CandidateCache = {}

    @property
    def total(self) -> int | None:
        return self.strategy.total

    @property
    def remaining(self) -> int | None:
        total = self.strategy.total
        return None if total is None else max(total - self.next_number, 0)

    @property
    def done_before(self) -> int:
        total = self.strategy.total
        return sum(1 for n in self.skip if total is None or n < total)

    def propose(self) -> Unit[TrialSpec] | _Signal:
        total = self.strategy.total
        while self.next_number in self.skip:  # finished in an earlier, interrupted run
            self.next_number += 1
        if total is not None and self.next_number >= total:
            return DONE
        number = self.next_number
        params = self.strategy.ask(number)
        if params is None:
            return DONE
        if self.estimator is not None:
            # On the driver, before dispatch: an unknown parameter name is the user's to fix
            # (cached by the candidate's shape, so it costs nothing per trial).
            check_candidate(self.estimator, params, self._shapes)
        self.next_number += 1
        return Unit(number, TrialSpec(number, params, trial_seed(self.seed, number)))

    def submitted(self, units: list[Unit[TrialSpec]]) -> None:
        if self.observer is not None:
            self.observer.trials_submitted([u.payload for u in units])

    def record(self, unit: Unit[TrialSpec], result: TrialOutcome, retries: int) -> float | None:
        result.retries = retries
        if result.state != COMPLETE:
            self.failed += 1
        value = self.on_outcome(result)
        self.strategy.tell(result.number, value)
        if self.observer is not None:
            self.observer.trial_finished(result, value)
        return value

    def failed_count(self) -> int:
        return self.failed
