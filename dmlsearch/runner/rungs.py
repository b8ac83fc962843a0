"""Rung steps as units of work: a multi-fidelity scheduler driving the runner's one loop.

:class:`RungSource` wraps a pure scheduler (:mod:`dmlsearch.schedulers`) and a strategy:
it owns the :class:`~dmlsearch.schedulers.History`, maps each decision onto a unit
(``Start``/``Promote`` -> a rung step; the scheduler's WAIT/DONE -> the runner's) and
asks the strategy for the parameters of every trial the scheduler starts.
:class:`RungKind` runs the steps (:func:`dmlsearch._rungs.run_rung_steps`) and asks the
loop to place a promotion on the worker that holds the trial's state.

Neither touches Dask: the loop submits, and the driver's tick releases the states of the
trials :meth:`RungSource.take_released` names and deletes the state store's copies
:meth:`RungSource.take_stale_copies` names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from .._evaluate import SearchData
from .._rungs import RungContext, RungResult, RungSpec, run_rung_steps
from .._states import COMPLETE
from .._validation import CandidateCache, check_candidate
from ..schedulers import DONE as SCHEDULER_DONE
from ..schedulers import WAIT as SCHEDULER_WAIT
from ..schedulers import History, Promote, Result, Scheduler, Start
from ..strategies import Strategy
from .trials import trial_seed
from .units import DONE, WAIT, Unit, UnitKind, UnitPolicy, UnitSource, _Signal

__all__ = ["RungKind", "RungSource"]

#: Starts the strategy may decline in a row (it ran out of candidates) before the source
#: stops asking for more: a bound, so an unbounded scheduler cannot spin.
_MAX_SKIPS = 10_000


class RungKind(UnitKind[RungSpec, RungResult]):
    """A rung step trains and scores one trial's fold models up to a resource.

    ``locate(trial)`` names the worker holding the trial's state (None: none known);
    a promotion prefers it (Dask may still run it elsewhere, which then continues from
    the state store's copy, or refits without one).
    """

    name = "rung"

    def __init__(
        self,
        data: SearchData,
        context: RungContext,
        policy: UnitPolicy,
        locate: Callable[[int], str | None],
    ) -> None:
        super().__init__(policy)
        self.data = data
        self.context = context
        self.locate = locate

    def function(self) -> Callable[..., Sequence[RungResult]]:
        return run_rung_steps

    def shared(self) -> tuple[Any, ...]:
        return (self.data, self.context)

    def result_id(self, result: RungResult) -> tuple[int, int]:
        return result.id

    def duration(self, result: RungResult) -> float | None:
        return result.duration if result.state == COMPLETE else None

    def placement(self, units: list[Unit[RungSpec]]) -> list[str] | None:
        held = {self.locate(u.payload.trial) for u in units if u.payload.from_resource > 0}
        held.discard(None)
        return sorted(w for w in held if w is not None) or None

    def failed(self, unit: Unit[RungSpec], state: str, error: str) -> RungResult:
        ev = self.context.evaluation
        return RungResult.of(
            unit.payload, state, len(ev.splits), ev.return_train_score, error=error
        )


class RungSource(UnitSource[RungSpec, RungResult]):
    """Rung steps as a scheduler decides them, parameters as a strategy proposes them.

    ``score(result)`` is the objective of a completed step (greater is better; None or
    NaN: no score). ``on_result(result, retries)`` hears every step once, as it ends.
    ``steps``: the resources of successive steps of one trial, for a scheduler that
    starts trials at their full budget and stops them (median stopping): such a trial
    runs as one step per resource, and ``scheduler.stops`` is asked between its steps.

    A trial's score is told to the strategy once the scheduler says it will never be
    continued (``finished``), its score at its highest rung, so a model-based strategy
    learns from the trials' final fidelity (TPE + Hyperband behaves as BOHB).
    """

    def __init__(
        self,
        scheduler: Scheduler,
        strategy: Strategy,
        seed: int,
        score: Callable[[RungResult], float | None],
        on_result: Callable[[RungResult, int], None],
        *,
        estimator: Any = None,
        steps: tuple[int, ...] | None = None,
        observer: Any = None,
    ) -> None:
        self.scheduler = scheduler
        self.observer = observer  # hears each step start and end (the dashboard's reporter)
        self.strategy = strategy
        self.seed = seed
        self.score = score
        self.on_result = on_result
        self.estimator = estimator
        self.steps = steps
        self.results: dict[int, list[Result]] = {}
        self.params: dict[int, dict[str, Any]] = {}
        self.running: set[int] = set()
        self.failed: set[int] = set()
        self.skipped: set[int] = set()
        self.in_flight: set[int] = set()
        self.holder: dict[int, str] = {}
        #: trial -> (resource, sha256) of its latest copy in the state store.
        self.copies: dict[int, tuple[int, str]] = {}
        self._stale: list[tuple[int, int]] = []
        self.told: set[int] = set()
        #: Trials an earlier run recorded (resume), and ids it started but never recorded.
        self.restored: set[int] = set()
        self._gaps: list[int] = []
        self.n_failed = 0
        self._release: list[int] = []
        self._shapes: CandidateCache = {}
        self._exhausted = False

    # -- the scheduler's view ------------------------------------------------------------
    def history(self) -> History:
        return History.of(
            self.results,
            running=self.running,
            failed=self.failed | self.skipped,
            closed=self._exhausted,
        )

    def take_released(self) -> list[int]:
        """Trials whose state the workers may drop now (each named once)."""
        out, self._release = self._release, []
        return out

    def take_stale_copies(self) -> list[tuple[int, int]]:
        """State store copies ``(trial, resource)`` nothing will continue from (once each):
        a trial's older copy once its next step finished, any copy of a trial given up."""
        out, self._stale = self._stale, []
        return out

    def restore(self, steps: Sequence[RungResult]) -> None:
        """Rebuild the history from the steps an earlier run recorded (resume).

        Each step is recorded as :meth:`record` would have (a step without a score fails
        its trial), without hearing ``on_result`` again. No trial's state is held: a
        promotion of a restored trial refits it on the worker it runs on. With steps
        (median stopping), a restored trial between its steps goes on unless the rule
        stops it on the restored history. Ids below the largest restored one that no
        step names (started, but lost with the old run) are given to the next new
        trials, where the scheduler names new trials by counting on
        (:meth:`History.next_trial`).
        """
        for step in sorted(steps, key=lambda s: (s.trial, s.resource)):
            trial = step.trial
            self.params[trial] = step.params
            self.results.setdefault(trial, [])
            self.restored.add(trial)
            value = self.score(step) if step.state == COMPLETE else None
            if value is not None and not math.isnan(value):
                self.results[trial].append(Result(step.rung, step.resource, value))
            else:
                self.failed.add(trial)
            if self.observer is not None:
                self.observer.rung_finished(trial, step.resource, step.state, value, restored=True)
        if not self.results:
            return
        if self.steps is not None:
            self.running.update(
                t
                for t, done in self.results.items()
                if t not in self.failed and len(done) < len(self.steps)
            )
            self._stop_poor_trials()
        self._gaps = [t for t in range(max(self.results)) if t not in self.results]
        self._settle()

    def _new_trial(self, decision: Start) -> int:
        """The id of a new trial: a lost one's first, where ids only count on."""
        if self._gaps and decision.trial == self.history().next_trial():
            return self._gaps.pop(0)
        return decision.trial

    # -- proposing -------------------------------------------------------------------------
    def propose(self) -> Unit[RungSpec] | _Signal:
        if self.steps is not None:
            unit = self._next_step()
            if unit is not None:
                return unit
        for _ in range(_MAX_SKIPS):
            decision = self.scheduler.propose(self.history())
            if decision is SCHEDULER_DONE:
                return DONE
            if decision is SCHEDULER_WAIT:
                return WAIT
            if isinstance(decision, Promote):
                return self._unit(
                    decision.trial,
                    decision.rung,
                    decision.resource,
                    decision.from_resource,
                    decision.bracket,
                )
            assert isinstance(decision, Start)
            trial = self._new_trial(decision)
            params = None if self._exhausted else self.strategy.ask(trial)
            if params is None:
                # The strategy has no more candidates (a grid smaller than the schedule):
                # the trial counts as started and failed, so rungs can fill without it.
                self._exhausted = True
                self.skipped.add(trial)
                continue
            if self.estimator is not None:
                check_candidate(self.estimator, params, self._shapes)
            self.params[trial] = params
            self.results[trial] = []
            if self.steps is not None:
                return self._unit(trial, 0, self.steps[0], 0, 0)
            return self._unit(trial, decision.rung, decision.resource, 0, decision.bracket)
        return WAIT if self.running else DONE

    def _next_step(self) -> Unit[RungSpec] | None:
        """The next step of a trial between steps (median stopping), lowest trial first."""
        assert self.steps is not None
        for trial in sorted(self.running - self.in_flight):
            done = len(self.results[trial])
            if done < len(self.steps):
                return self._unit(trial, done, self.steps[done], self.steps[done - 1], 0)
        return None

    def _unit(
        self, trial: int, rung: int, resource: int, start: int, bracket: int
    ) -> Unit[RungSpec]:
        self.running.add(trial)
        self.in_flight.add(trial)
        copy = self.copies.get(trial)
        spec = RungSpec(
            trial,
            self.params[trial],
            trial_seed(self.seed, trial),
            rung,
            resource,
            start,
            bracket,
            state_copy=copy[1] if copy is not None and start > 0 and copy[0] == start else None,
        )
        return Unit(spec.id, spec)

    # -- recording -------------------------------------------------------------------------
    def submitted(self, units: list[Unit[RungSpec]]) -> None:
        if self.observer is not None:
            self.observer.rungs_submitted(
                [
                    (s.trial, s.rung, s.resource, s.from_resource, s.bracket)
                    for s in (u.payload for u in units)
                ]
            )
            self.observer.units_submitted(
                [
                    (
                        u.payload.trial,
                        {
                            **u.payload.params,
                            "rung": u.payload.rung,
                            "resource": u.payload.resource,
                        },
                    )
                    for u in units
                ]
            )

    def record(self, unit: Unit[RungSpec], result: RungResult, retries: int) -> float | None:
        trial = result.trial
        self.in_flight.discard(trial)
        value = self.score(result) if result.state == COMPLETE else None
        if value is not None and not math.isnan(value):
            self.results[trial].append(Result(result.rung, result.resource, value))
            if result.stored:
                self.holder[trial] = result.worker
            if result.state_copy is not None:
                self._copied(trial, result.resource, result.state_copy)
            last_step = self.steps is None or len(self.results[trial]) >= len(self.steps)
            if last_step:
                self.running.discard(trial)
        else:
            self.n_failed += 1
            self.running.discard(trial)
            self.failed.add(trial)
            value = None
            if result.state_copy is not None:  # a step without a score: never continued
                self._stale.append((trial, result.resource))
        self.on_result(result, retries)
        if self.observer is not None:
            self.observer.unit_finished(
                trial,
                result.state,
                value,
                result.worker,
                result.duration,
                result.error,
                resource=result.resource,
            )
            self.observer.rung_finished(trial, result.resource, result.state, value)
        if self.steps is not None:
            self._stop_poor_trials()
        self._settle()
        return value

    def _copied(self, trial: int, resource: int, digest: str) -> None:
        old = self.copies.get(trial)
        self.copies[trial] = (resource, digest)
        if old is not None and old[0] != resource:
            self._stale.append((trial, old[0]))

    def _stop_poor_trials(self) -> None:
        for stop in self.scheduler.stops(self.history()):
            if stop.trial in self.running and stop.trial not in self.in_flight:
                self.running.discard(stop.trial)
                self.failed.add(stop.trial)  # in the scheduler's sense: never continued

    def _settle(self) -> None:
        """Tell the strategy about, and release the states of, trials never to continue."""
        for trial in sorted(self.scheduler.finished(self.history()) - self.told - self.skipped):
            self.tell(trial)

    def tell(self, trial: int) -> None:
        """Tell the strategy ``trial``'s score at its highest rung (None: it has none)."""
        if trial in self.told or trial in self.skipped or trial not in self.params:
            return
        self.told.add(trial)
        results = self.results.get(trial, [])
        last = max(results, key=lambda r: r.resource) if results else None
        score = None if last is None else last.score
        if trial in self.restored:
            # Asked in an earlier run: the strategy learns it as a finished trial.
            self.strategy.restore(trial, self.params[trial], score)
        else:
            self.strategy.tell(trial, score)
        if self.holder.pop(trial, None) is not None:
            self._release.append(trial)
        copy = self.copies.pop(trial, None)
        if copy is not None:
            self._stale.append((trial, copy[0]))

    def finish(self) -> None:
        """At the end of the run: tell the strategy about every trial not told yet."""
        for trial in sorted(self.params):
            self.tell(trial)

    def failed_count(self) -> int:
        return self.n_failed
