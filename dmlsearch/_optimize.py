"""``dmlsearch.optimize``: tune any objective function on the cluster, with pruning.

For code that is not a scikit-learn estimator. The driver runs the trials through the
runner's one loop (:class:`~dmlsearch.runner.loop.WorkLoop`) as units of a new kind: the
worker side is in :mod:`dmlsearch._objective`. Intermediate values come back over the
report stream; a pruner (``"median"``, ``"asha"``) decides on them, and a trial it stops
hears so through ``trial.should_stop()``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dask

from ._evaluate import TrialOutcome
from ._objective import (
    PRUNED,
    AshaPruner,
    MedianPruner,
    ObjectiveKind,
    ObjectiveOutcome,
    ObjectiveSpec,
    Pruner,
    Trial,
)
from ._states import COMPLETE
from .exceptions import InvalidParameterError
from .runner.loop import RunStats, WorkLoop
from .runner.trials import trial_seed
from .runner.units import DONE, Unit, UnitPolicy, UnitSource, _Signal
from .strategies import Strategy, make_strategy

__all__ = ["PRUNERS", "OptimizeResult", "Trial", "optimize"]

logger = logging.getLogger("dmlsearch")

#: The schedulers ``optimize`` takes, used as pruners.
PRUNERS: tuple[str, ...] = ("median", "asha")


@dataclass
class OptimizeResult:
    """What :func:`optimize` found: every trial, and the best completed one.

    ``trials``: one :class:`~dmlsearch._objective.ObjectiveOutcome` per trial, by number
    (``params``, ``value`` as the objective returned it, ``state``: ``complete``,
    ``pruned``, ``failed``, ``timeout``, ``intermediate``: ``{step: value}``).
    """

    trials: list[ObjectiveOutcome]
    direction: str
    experiment_name: str | None = None
    stats: RunStats = field(default_factory=RunStats)

    @property
    def best_trial(self) -> ObjectiveOutcome:
        done = [t for t in self.trials if t.state == COMPLETE and t.value is not None]
        if not done:
            raise InvalidParameterError(
                "objective", "no trial completed: see each trial's error in result.trials"
            )
        sign = 1.0 if self.direction == "maximize" else -1.0
        return max(done, key=lambda t: (sign * float(t.value or 0.0), -t.number))

    @property
    def best_params(self) -> dict[str, Any]:
        return dict(self.best_trial.params)

    @property
    def best_value(self) -> float:
        return float(self.best_trial.value)  # type: ignore[arg-type]

    @property
    def n_pruned(self) -> int:
        return sum(t.state == PRUNED for t in self.trials)

    def trials_dataframe(self) -> Any:
        """One row per trial: number, state, value, duration, worker, steps, ``params_*``."""
        import pandas as pd

        rows = []
        for t in self.trials:
            row: dict[str, Any] = {
                "number": t.number,
                "state": t.state,
                "value": t.value,
                "duration": t.duration,
                "worker": t.worker,
                "n_steps": len(t.intermediate),
                "last_step": max(t.intermediate, default=None),
                "error": t.error,
            }
            row.update({f"params_{k}": v for k, v in t.params.items()})
            rows.append(row)
        return pd.DataFrame(rows)


class ObjectiveSource(UnitSource[ObjectiveSpec, ObjectiveOutcome]):
    """Trials from a strategy; each reported value goes to the pruner, which may stop it.

    ``stop(number)`` tells the worker (the driver gives a Dask-backed one; the source
    itself never touches Dask). ``on_finish`` hears each trial once, as it is recorded.
    """

    def __init__(
        self,
        strategy: Strategy,
        seed: int,
        *,
        sign: float,
        pruner: Pruner | None,
        stop: Callable[[int], None],
        stop_event: Callable[[int], str | None],
        on_finish: Callable[[ObjectiveOutcome], None],
        watcher: Any = None,
    ) -> None:
        self.strategy = strategy
        self.seed = seed
        self.sign = sign
        self.pruner = pruner
        self.stop = stop
        self.stop_event = stop_event
        self.on_finish = on_finish
        self.watcher = watcher
        self.next_number = 0
        self.curves: dict[int, dict[int, float]] = {}
        self.running: set[int] = set()
        self.stopped: dict[int, str] = {}
        self.outcomes: dict[int, ObjectiveOutcome] = {}

    @property
    def total(self) -> int | None:
        return self.strategy.total

    @property
    def remaining(self) -> int | None:
        total = self.strategy.total
        return None if total is None else max(total - self.next_number, 0)

    def propose(self) -> Unit[ObjectiveSpec] | _Signal:
        total = self.strategy.total
        if total is not None and self.next_number >= total:
            return DONE
        number = self.next_number
        params = self.strategy.ask(number)
        if params is None:
            return DONE
        self.next_number += 1
        self.running.add(number)
        self.curves[number] = {}
        spec = ObjectiveSpec(number, params, trial_seed(self.seed, number), self.stop_event(number))
        return Unit(number, spec)

    def submitted(self, units: list[Unit[ObjectiveSpec]]) -> None:
        if self.watcher is not None:
            self.watcher.units_submitted([(u.payload.number, u.payload.params) for u in units])

    def reported(self, unit: Unit[ObjectiveSpec], message: dict[str, Any]) -> None:
        number = unit.payload.number
        try:
            step, value = int(message["step"]), float(message["value"])
        except (KeyError, TypeError, ValueError):
            return
        self.curves[number][step] = self.sign * value
        if self.pruner is None or number in self.stopped:
            return
        reason = self.pruner.stop(number, self.curves, frozenset(self.running))
        if reason is not None:
            self.stopped[number] = reason
            self.stop(number)

    def record(
        self, unit: Unit[ObjectiveSpec], result: ObjectiveOutcome, retries: int
    ) -> float | None:
        result.retries = retries
        self.running.discard(result.number)
        if result.intermediate:  # the worker's own curve is complete (reports can be late)
            self.curves[result.number] = {s: self.sign * v for s, v in result.intermediate.items()}
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


def make_pruner(
    scheduler: Any, min_resource: int, reduction_factor: int, warmup_steps: int, min_trials: int
) -> Pruner | None:
    """The pruner named by ``scheduler`` (None: no pruning); bad values raise first."""
    for name, value, low in (
        ("min_resource", min_resource, 1),
        ("reduction_factor", reduction_factor, 2),
        ("warmup_steps", warmup_steps, 0),
        ("min_trials", min_trials, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidParameterError(name, f"must be an integer >= {low}, got {value!r}")
    if scheduler is None or isinstance(scheduler, Pruner):
        return scheduler
    if scheduler == "median":
        return MedianPruner(warmup_steps=warmup_steps, min_trials=min_trials)
    if scheduler == "asha":
        return AshaPruner(min_resource=min_resource, reduction_factor=reduction_factor)
    raise InvalidParameterError(
        "scheduler",
        f"unknown scheduler {scheduler!r} for optimize; choose one of {list(PRUNERS)} or None "
        "(the synchronous 'halving' and 'hyperband' need SearchCV's rung steps)",
    )


def check_objective_args(objective: Any, n_trials: Any, direction: Any) -> float:
    """Refuse bad arguments before any work; the sign that makes greater better."""
    if not callable(objective):
        raise InvalidParameterError(
            "objective", f"must be a callable objective(params, trial), got {objective!r}"
        )
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise InvalidParameterError("n_trials", f"must be an integer >= 1, got {n_trials!r}")
    if direction not in ("maximize", "minimize"):
        raise InvalidParameterError(
            "direction", f"must be 'maximize' or 'minimize', got {direction!r}"
        )
    return 1.0 if direction == "maximize" else -1.0


def stop_signals(client: Any, run: str) -> tuple[Callable[[int], None], Callable[[], None]]:
    """``set(number)`` raises trial ``number``'s stop Event; ``clear()`` removes them all."""
    from distributed import Event

    raised: list[str] = []

    def set_(number: int) -> None:
        name = f"{run}-{number}"
        try:
            Event(name, client=client).set()
            raised.append(name)
        except Exception as exc:  # the trial then runs to its end: slower, never wrong
            logger.warning("dmlsearch: could not stop trial %d: %r", number, exc)

    def clear() -> None:
        for name in raised:
            try:
                Event(name, client=client).clear()
            except Exception:  # the cluster is going: nothing is left to clear
                return

    return set_, clear


def reporter(client: Any, name: str, meta: dict[str, Any], enabled: bool) -> Any:
    """The dashboard's reporter for this run, or None (off, or the page cannot start)."""
    if not enabled or not dask.config.get("dmlsearch.dashboard", True):
        return None
    from .dashboard import DashboardReporter

    try:
        return DashboardReporter.attach(client, name, meta)
    except Exception as exc:  # the page is a view: it never fails a run
        logger.warning("dmlsearch: the dashboard page is off for %s: %r", name, exc)
        return None


def _tick(*hooks: Any) -> Callable[[], None]:
    live = [h for h in hooks if h is not None]

    def tick() -> None:
        for hook in live:
            hook.tick()

    return tick


def optimize(
    objective: Callable[[dict[str, Any], Trial], Any],
    space: Any,
    *,
    n_trials: int,
    scheduler: str | Pruner | None = None,
    strategy: Any = "random",
    direction: str = "maximize",
    client: Any = None,
    registry: Any = None,
    experiment_name: str | None = None,
    random_state: Any = None,
    min_resource: int = 1,
    reduction_factor: int = 3,
    warmup_steps: int = 0,
    min_trials: int = 5,
    max_concurrent_trials: int | None = None,
    trial_timeout: float | None = None,
    max_retries: int = 2,
    dashboard: bool = True,
    progress: bool | None = False,
) -> OptimizeResult:
    """Run ``objective(params, trial)`` for ``n_trials`` parameter sets from ``space``.

    Each trial runs on a worker; ``trial.report(value, step)`` sends an intermediate value,
    ``trial.should_stop()`` is True once ``scheduler`` (``"median"`` or ``"asha"``, used as
    a pruner; ``None``: never) stopped the trial. The objective returns the trial's value
    (greater is better, or ``direction="minimize"``). ``strategy`` is any of
    :data:`~dmlsearch.STRATEGIES` or an Optuna sampler. ``"asha"`` judges a trial at steps
    ``min_resource * reduction_factor**k``; ``"median"`` stops a trial below the median of
    the others' values at a step ``>= warmup_steps`` once ``min_trials`` others have one.
    With ``registry`` (a :class:`~dmlsearch.Registry` or URL) each trial is recorded in
    experiment ``experiment_name``, its reported values as ``intermediate``.

    Raises :class:`~dmlsearch.InvalidParameterError` for bad arguments, before any work.
    """
    from .progress import make_progress
    from .registry import as_registry
    from .runner import cluster_shape, resolve_client
    from .search import _resolve_seed
    from .space import as_space

    sign = check_objective_args(objective, n_trials, direction)
    pruner = make_pruner(scheduler, min_resource, reduction_factor, warmup_steps, min_trials)
    if not isinstance(dashboard, bool):
        raise InvalidParameterError("dashboard", f"must be True or False, got {dashboard!r}")
    if trial_timeout is not None and not (
        isinstance(trial_timeout, int | float) and trial_timeout > 0
    ):
        raise InvalidParameterError("trial_timeout", f"must be > 0 or None, got {trial_timeout!r}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise InvalidParameterError("max_retries", f"must be an integer >= 0, got {max_retries!r}")
    seed = _resolve_seed(random_state)
    search_space = as_space(space)
    strategy_ = make_strategy(strategy, search_space, n_trials, seed)
    store = None if registry is None else as_registry(registry)
    name = (
        experiment_name
        or f"optimize-{getattr(objective, '__name__', 'objective')}-{uuid.uuid4().hex[:8]}"
    )
    policy = UnitPolicy(
        max_retries=max_retries, timeout=trial_timeout, batchable=False,
        timeout_name="trial_timeout",
    )  # fmt: skip
    with resolve_client(client) as dask_client:
        recorder = None
        if store is not None:
            from ._recording import SearchRecorder

            recorder = SearchRecorder(
                store, name, metric="score", owns_registry=store is not registry
            )
            config = {
                "kind": "optimize", "objective": repr(objective), "search_space": repr(space),
                "strategy": repr(strategy), "scheduler": repr(scheduler), "direction": direction,
                "n_trials": n_trials, "seed": seed,
            }  # fmt: skip
            recorder.open(
                resume=False,
                config=config,
                # No data to fingerprint: the objective names what was tuned.
                fingerprint=f"objective {getattr(objective, '__qualname__', repr(objective))}",
                cluster=cluster_shape(dask_client),
            )
        watcher = reporter(
            dask_client, name, {"objective": repr(objective), "total": n_trials}, dashboard
        )
        run = f"dmlsearch-stop-{uuid.uuid4().hex[:8]}"
        stop, clear = stop_signals(dask_client, run)

        def finished(outcome: ObjectiveOutcome) -> None:
            if recorder is not None:
                curve = {str(s): v for s, v in sorted(outcome.intermediate.items())}
                recorder.add(as_trial_outcome(outcome), intermediate=curve)

        source = ObjectiveSource(
            strategy_, seed, sign=sign, pruner=pruner, stop=stop,
            stop_event=lambda number: None if pruner is None else f"{run}-{number}",
            on_finish=finished, watcher=watcher,
        )  # fmt: skip
        loop: WorkLoop[ObjectiveSpec, ObjectiveOutcome] = WorkLoop(
            dask_client,
            ObjectiveKind(objective, policy),
            source,
            max_units_in_flight=max_concurrent_trials,
            progress=make_progress(progress),
            name="optimize",
            no_workers_timeout=float(dask.config.get("dmlsearch.no-workers-timeout", 60.0)),
            on_tick=_tick(recorder, watcher),
        )
        status = "failed"
        try:
            stats = loop.run()
            status = "complete"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            clear()
            if watcher is not None:
                watcher.experiment_finished(status)
            if recorder is not None:
                recorder.close(status)
    trials = [source.outcomes[n] for n in sorted(source.outcomes)]
    return OptimizeResult(trials, direction, name if store is not None else None, stats)
