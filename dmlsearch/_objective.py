"""What runs on a worker for :func:`dmlsearch.optimize`: a user objective and its trial.

``objective(params, trial)`` gets a :class:`Trial`: ``trial.report(value, step)`` sends an
intermediate value to the driver over the runner's report stream; ``trial.should_stop()``
asks whether the driver's pruner has decided to stop this trial. The decision travels the
other way as a :class:`distributed.Event` per trial (set by the driver, read by the
worker), since the report stream only goes from workers to the driver.

The pruners are pure and live in :mod:`dmlsearch._pruners` (re-exported here).
"""

from __future__ import annotations

import math
import numbers
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ._evaluate import _deadline, _worker_name, run_limit
from ._pruners import AshaPruner, HyperbandPruner, JudgedSteps, MedianPruner, Pruner
from ._states import COMPLETE, FAILED, STOPPED, TIMEOUT
from .exceptions import InvalidParameterError, TrialTimeoutError
from .runner.reports import report_progress
from .runner.stop_flags import StopCheck, forget
from .runner.units import Unit, UnitKind, UnitPolicy

__all__ = [
    "PRUNED",
    "AshaPruner",
    "HyperbandPruner",
    "MedianPruner",
    "ObjectiveKind",
    "ObjectiveOutcome",
    "ObjectiveSpec",
    "Pruner",
    "Trial",
    "run_objectives",
]

#: A trial its pruner stopped (``should_stop()`` answered True) before it ended.
PRUNED = "pruned"
#: Seconds between the sends of a trial's reports that its pruner does not decide on.
SEND_EVERY = 0.5


@dataclass(frozen=True)
class ObjectiveSpec:
    """One trial of an objective: its number, parameters, seed, stop signal's name and the
    steps its pruner decides on (None: every one)."""

    number: int
    params: dict[str, Any]
    seed: int
    stop_event: str | None = None
    judged: JudgedSteps | None = None


@dataclass
class ObjectiveOutcome:
    """What a trial gives back: the objective's value (as returned) and its curve."""

    number: int
    params: dict[str, Any]
    seed: int
    state: str
    value: float | None
    intermediate: dict[int, float]
    started: float
    finished: float
    worker: str
    error: str | None = None
    retries: int = 0
    bracket: int | None = None  # the Hyperband pruner's, set on the driver

    @property
    def duration(self) -> float:
        return self.finished - self.started


class Trial:
    """The handle an objective gets: report intermediate values, ask whether to stop."""

    def __init__(
        self,
        number: int,
        params: dict[str, Any],
        seed: int = 0,
        stop_event: str | None = None,
        judged: JudgedSteps | None = None,
    ) -> None:
        self.number = number
        self.params = params
        self.seed = seed
        self.intermediate: dict[int, float] = {}
        self._stop_event = stop_event
        self._stop_check = StopCheck(stop_event)
        self._stopped = False
        # A report the pruner decides on goes to the driver at once; the others wait and
        # go together (each message costs the worker, the scheduler and the driver about
        # a millisecond of CPU: a report per xgboost round took a quarter of the trials' time).
        self._judged = judged
        self._pending: list[list[float]] = []
        self._sent_at = time.monotonic()
        self._last_step: int | None = None
        self._awaiting: int | None = None  # a judged step whose answer should_stop waits for

    def report(self, value: float, step: int) -> None:
        """Record ``value`` at ``step`` (an epoch, a budget) and send it to the driver: at
        once if the pruner decides on that step, else with the next report sent (or half
        a second on); the trial's result carries its whole curve in any case."""
        # An int64 at most: the step travels to the scheduler (msgpack) and the registry.
        if (
            isinstance(step, bool)
            or not isinstance(step, numbers.Integral)
            or not 0 <= step < 2**63
        ):
            raise InvalidParameterError(
                "step", f"must be an integer >= 0 (below 2**63), got {step!r}"
            )
        step = int(step)
        try:
            if isinstance(value, (str, bytes, bool)):
                raise TypeError
            number = float(value)
        except (TypeError, ValueError):
            raise InvalidParameterError(
                "value", f"trial.report needs a number, got {value!r}"
            ) from None
        if step in self.intermediate:
            # Optuna's rule: a pruner must not see a step's value change after it judged it.
            warnings.warn(
                f"trial.report: step {step} of trial {self.number} was already reported "
                f"(value {self.intermediate[step]!r}); the value {number!r} is ignored",
                UserWarning,
                stacklevel=2,
            )
            return
        self.intermediate[step] = number
        previous, self._last_step = self._last_step, max(step, self._last_step or 0)
        self._pending.append([step, number])
        now = time.monotonic()
        judged = self._judged is None or self._judged.judged(previous, step)
        if judged or now - self._sent_at >= SEND_EVERY:
            pending, self._pending, self._sent_at = self._pending, [], now
            if judged and self._judged is not None and self._judged.wait:
                self._awaiting = step
                report_progress(self.number, steps=pending, answer=step)
            else:
                report_progress(self.number, steps=pending)

    def should_stop(self) -> bool:
        """True once the driver's pruner has stopped this trial (it stays True).

        Cheap: the driver sends the stop to the trial's worker, which reads it locally
        (the scheduler is asked on the first call, then at most once a second, in case
        that message was lost). After a report at one of its rungs (ASHA, successive
        halving, Hyperband) the call waits for the pruner's answer about it, a few
        milliseconds, as Optuna's ``should_prune`` answers on the spot. False outside a run.
        """
        if self._stopped or self._stop_event is None:
            return self._stopped
        awaiting, self._awaiting = self._awaiting, None
        try:
            if awaiting is not None:
                self._stopped = self._stop_check.answer(awaiting)
            else:
                self._stopped = self._stop_check.is_set()
        except TrialTimeoutError:
            raise  # the trial's deadline, fired during the round trip: not ours to swallow
        except Exception:  # not on a worker, or the scheduler is going: keep training
            return False
        return self._stopped


def _value(returned: Any, trial: Trial) -> tuple[float | None, str | None]:
    """The trial's value and, if it is not usable, why."""
    if returned is None and trial._stopped and trial.intermediate:
        return trial.intermediate[max(trial.intermediate)], None
    if isinstance(returned, (str, bytes, bool)):
        # float("4.5") and float(True) work: a text or a flag is not the objective's value.
        return None, f"the objective returned {returned!r}; it must return a number"
    try:
        value = float(returned)
    except (TypeError, ValueError):
        return None, f"the objective returned {returned!r}; it must return a number"
    if not math.isfinite(value):
        return None, f"the objective returned {value!r}; it must return a finite number"
    return value, None


def _pruned_by(exc: BaseException) -> bool:
    """Whether ``exc`` is Optuna's ``TrialPruned`` (not imported: optional here)."""
    return any(
        c.__name__ == "TrialPruned" and c.__module__.startswith("optuna") for c in type(exc).__mro__
    )


def run_objectives(
    objective: Callable[[dict[str, Any], Trial], Any],
    trial_timeout: float | None,
    payloads: Sequence[ObjectiveSpec],
    start_by: float | None,
    stop_by: float | None,
) -> list[ObjectiveOutcome]:
    """The task function of an objective's trials (see ``UnitKind.function``).

    A trial still running after ``trial_timeout`` seconds (or at ``stop_by``) is stopped
    in its thread, as a ``SearchCV`` trial is: recorded ``timeout`` (``stopped``) with the
    steps it reported.
    """
    out = []
    for spec in payloads:
        if start_by is not None and time.time() > start_by:
            break  # the time budget ran out before this trial started
        trial = Trial(spec.number, dict(spec.params), spec.seed, spec.stop_event, spec.judged)
        started = time.time()
        value: float | None = None
        error: str | None = None
        seconds, by_budget = run_limit(trial_timeout, stop_by)
        state = COMPLETE
        try:
            with _deadline(seconds):
                value, error = _value(objective(dict(spec.params), trial), trial)
        except TrialTimeoutError:
            state = STOPPED if by_budget else TIMEOUT
            error = (
                f"trial {spec.number} was still running when the time budget ran out"
                if by_budget
                else f"TrialTimeoutError: trial {spec.number} ran past trial_timeout="
                f"{trial_timeout}s and was stopped"
            )
        except Exception as exc:
            if not _pruned_by(exc):
                error = traceback.format_exc()
            else:  # Optuna's idiom: `if trial.should_stop(): raise optuna.TrialPruned()`
                trial._stopped = True
                value = trial.intermediate[max(trial.intermediate)] if trial.intermediate else None
        except (SystemExit, KeyboardInterrupt):
            # sys.exit or a KeyboardInterrupt of the objective's own (a worker's task thread
            # gets no SIGINT) would end the worker, and its retries others: the trial fails.
            error = traceback.format_exc()
        if spec.stop_event is not None:
            forget(spec.stop_event)
        if state == COMPLETE:
            state = FAILED if error is not None else (PRUNED if trial._stopped else COMPLETE)
        out.append(
            ObjectiveOutcome(
                spec.number,
                spec.params,
                spec.seed,
                state,
                value,
                dict(trial.intermediate),
                started,
                time.time(),
                _worker_name(),
                error,
            )
        )
    return out


class ObjectiveKind(UnitKind[ObjectiveSpec, ObjectiveOutcome]):
    """A trial of a user objective: one per task with a pruner, so it decides on fresh
    values; without one, cheap trials are packed several to a task."""

    name = "objective"

    def __init__(self, objective: Callable[..., Any], policy: UnitPolicy) -> None:
        super().__init__(policy)
        self.objective = objective

    def function(self) -> Callable[..., Sequence[ObjectiveOutcome]]:
        return run_objectives

    def shared(self) -> tuple[Any, ...]:
        timeout = self.policy.timeout
        return (self.objective, None if timeout is None else float(timeout))

    def result_id(self, result: ObjectiveOutcome) -> int:
        return result.number

    def duration(self, result: ObjectiveOutcome) -> float | None:
        return result.duration if result.state == COMPLETE else None

    def failed(self, unit: Unit[ObjectiveSpec], state: str, error: str) -> ObjectiveOutcome:
        spec, now = unit.payload, time.time()
        return ObjectiveOutcome(
            spec.number, spec.params, spec.seed, state, None, {}, now, now, "", error
        )
