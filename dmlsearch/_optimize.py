"""``dmlsearch.optimize``: tune any objective function on the cluster, with pruning.

For code that is not a scikit-learn estimator. The driver runs the trials through the
runner's one loop (:class:`~dmlsearch.runner.loop.WorkLoop`) as units of a new kind: the
worker side is in :mod:`dmlsearch._objective`, the driver's source in
:mod:`dmlsearch._objective_source`. Intermediate values come back over the report
stream; a pruner (:mod:`dmlsearch._pruners`: ``"median"``, ``"asha"``, ``"halving"``,
``"hyperband"``) decides on them, and a trial it stops hears so through
``trial.should_stop()``. The registry side (and resume) is in
:mod:`dmlsearch._optimize_records`.
"""

from __future__ import annotations

import inspect
import logging
import numbers
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dask

from ._dask_config import config_flag
from ._experiment import open_experiment, warn_recorded_beyond
from ._objective import PRUNED, ObjectiveKind, ObjectiveOutcome, ObjectiveSpec, Trial
from ._objective_source import ObjectiveSource, as_trial_outcome, record_curve
from ._pruners import PRUNERS, Pruner, make_pruner
from ._search_support import resolve_seed, strategy_name
from ._states import COMPLETE
from .exceptions import InvalidParameterError
from .registry._checks import check_new_name
from .runner.loop import RunStats, WorkLoop
from .runner.stop_flags import push_go_on, push_stop
from .runner.units import UnitPolicy
from .strategies import Strategy

__all__ = ["PRUNERS", "OptimizeResult", "Trial", "make_pruner", "optimize"]

logger = logging.getLogger("dmlsearch")


@dataclass
class OptimizeResult:
    """What :func:`optimize` found: every trial, and the best completed one.

    ``trials``: one :class:`~dmlsearch._objective.ObjectiveOutcome` per trial, by number
    (``params``, ``value`` as the objective returned it, ``state``: ``complete``,
    ``pruned``, ``failed``, ``timeout``, ``intermediate``: ``{step: value}``, ``bracket``:
    the Hyperband pruner's, else None).
    """

    trials: list[ObjectiveOutcome]
    direction: str
    experiment_name: str | None = None
    stats: RunStats = field(default_factory=RunStats)
    #: The pruner that judged the trials (None: none), e.g. ``AshaPruner(...)`` for
    #: ``scheduler="halving"``, which is asynchronous.
    pruner: Pruner | None = None
    #: Trials an earlier run recorded, restored by ``resume=True`` and not run again.
    n_restored: int = 0

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
                "bracket": t.bracket,
                "error": t.error,
            }
            row.update({f"params_{k}": v for k, v in t.params.items()})
            rows.append(row)
        return pd.DataFrame(rows)


def _check_takes_params_and_trial(objective: Any) -> None:
    """Refuse an objective that cannot be called as ``objective(params, trial)``: each of
    its trials would fail on the workers with the same TypeError."""
    try:
        signature = inspect.signature(objective)
    except (TypeError, ValueError):  # a builtin or extension type: it will tell at the call
        return
    try:
        signature.bind(None, None)
    except TypeError:
        hint = (
            "; an Optuna objective takes the trial alone: here the parameters come first, "
            "as a dict, and the trial second (for trial.report and trial.should_stop)"
            if len(signature.parameters) == 1
            else ""
        )
        raise InvalidParameterError(
            "objective",
            f"must accept two positional arguments, objective(params, trial), but "
            f"{objective_qualname(objective)}{signature} cannot be called so{hint}",
        ) from None


def check_objective_args(objective: Any, n_trials: Any, direction: Any) -> float:
    """Refuse bad arguments before any work; the sign that makes greater better."""
    if not callable(objective):
        raise InvalidParameterError(
            "objective", f"must be a callable objective(params, trial), got {objective!r}"
        )
    _check_takes_params_and_trial(objective)
    if not _is_int(n_trials) or n_trials < 1:
        raise InvalidParameterError("n_trials", f"must be an integer >= 1, got {n_trials!r}")
    if direction not in ("maximize", "minimize"):
        raise InvalidParameterError(
            "direction", f"must be 'maximize' or 'minimize', got {direction!r}"
        )
    return 1.0 if direction == "maximize" else -1.0


def stop_signals(
    client: Any, run: str
) -> tuple[
    Callable[[int, str | None], None], Callable[[int, str | None, int], None], Callable[[], None]
]:
    """``set(number, worker)`` raises trial ``number``'s stop Event and sends the flag to
    ``worker`` (:mod:`~dmlsearch.runner.stop_flags`); ``go_on(number, worker, step)``
    answers a judged report of a trial that goes on; ``clear()`` removes the Events."""
    from distributed import Event

    raised: list[str] = []

    def set_(number: int, worker: str | None) -> None:
        name = f"{run}-{number}"
        try:
            push_stop(client, name, worker)
            raised.append(name)
        except Exception as exc:  # the trial then runs to its end: slower, never wrong
            logger.warning("dmlsearch: could not stop trial %d: %r", number, exc)

    def go_on(number: int, worker: str | None, step: int) -> None:
        push_go_on(client, f"{run}-{number}", step, worker)

    def clear() -> None:
        for name in raised:
            try:
                Event(name, client=client).clear()
            except Exception:  # the cluster is going: nothing is left to clear
                return

    return set_, go_on, clear


def objective_qualname(objective: Any) -> str:
    """How the experiment's fingerprint names the objective (no data to fingerprint)."""
    return str(getattr(objective, "__qualname__", repr(objective)))


def reporter(client: Any, name: str, meta: dict[str, Any], enabled: bool) -> Any:
    """The dashboard's reporter for this run, or None (off, or the page cannot start)."""
    if not enabled or not config_flag("dmlsearch.dashboard"):
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


def _is_int(value: Any) -> bool:
    """An integer (NumPy's too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_run_args(
    dashboard: Any,
    trial_timeout: Any,
    max_retries: Any,
    resume: Any,
    registry: Any,
    experiment_name: Any,
    max_concurrent_trials: Any = None,
    progress: Any = None,
) -> None:
    """Refuse bad run settings before any work."""
    m = max_concurrent_trials
    if m is not None and (not _is_int(m) or m < 1):
        raise InvalidParameterError(
            "max_concurrent_trials", f"must be an integer >= 1 or None, got {m!r}"
        )
    for label, value in (("dashboard", dashboard), ("resume", resume)):
        if not isinstance(value, bool):
            raise InvalidParameterError(label, f"must be True or False, got {value!r}")
    if progress is not None and not isinstance(progress, bool):
        raise InvalidParameterError("progress", f"must be True, False or None, got {progress!r}")
    if trial_timeout is not None and not (
        isinstance(trial_timeout, numbers.Real)
        and not isinstance(trial_timeout, bool)
        and float(trial_timeout) > 0
    ):
        raise InvalidParameterError("trial_timeout", f"must be > 0 or None, got {trial_timeout!r}")
    if not _is_int(max_retries) or max_retries < 0:
        raise InvalidParameterError("max_retries", f"must be an integer >= 0, got {max_retries!r}")
    if experiment_name is not None:
        check_new_name("experiment_name", experiment_name, "an experiment name")
    if resume and (registry is None or experiment_name is None):
        raise InvalidParameterError(
            "resume", "resume=True needs a registry and the experiment_name to continue"
        )


@dataclass
class _Setup:
    """A run's checked arguments, as :func:`optimize` hands them to :func:`_run`."""

    objective: Callable[..., Any]
    space: Any
    strategy: Any
    built: Strategy
    n_trials: int
    seed: int
    sign: float
    direction: str
    pruner: Pruner | None
    store: Any
    owns_store: bool
    name: str
    config: dict[str, Any]
    resume: bool
    policy: UnitPolicy
    max_concurrent_trials: int | None
    dashboard: bool
    progress: bool | None


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
    resume: bool = False,
    random_state: Any = None,
    min_resource: int = 1,
    max_resource: int | None = None,
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
    ``trial.should_stop()`` is True once ``scheduler`` (a pruner; ``None``: never) stopped
    the trial. The objective returns the trial's value (greater is better, or
    ``direction="minimize"``). ``strategy`` is any of :data:`~dmlsearch.STRATEGIES` or an
    Optuna sampler.

    Pruners (``scheduler``), all asynchronous: a trial is judged when it reports and goes
    on or stops, it never waits at a rung. ``"median"`` stops a trial below the median of
    the others' values at a step ``>= warmup_steps`` once ``min_trials`` others have one.
    ``"asha"`` judges a trial at rung steps ``min_resource * reduction_factor**k`` (with
    ``max_resource``: ``SearchCV``'s rungs up to it); it goes on if in the top
    ``1 / reduction_factor`` of the values at that rung so far. ``"halving"`` is the same
    asynchronous successive halving (as Optuna's ``SuccessiveHalvingPruner``; the
    synchronous one, which waits for full rungs, is ``SearchCV``'s). ``"hyperband"``
    (needs ``max_resource``, a trial's full budget in steps) is asynchronous Hyperband:
    each trial gets one of Li et al.'s brackets by a weighted round robin
    (:func:`~dmlsearch.schedulers.assign_brackets`) and ASHA's rule at its bracket's
    rungs, among the trials of its bracket.

    With ``registry`` (a :class:`~dmlsearch.Registry` or URL) each trial is recorded in
    experiment ``experiment_name``, its reported values as ``intermediate``;
    ``resume=True`` continues that experiment, running only the trials it has no record of.

    Raises :class:`~dmlsearch.InvalidParameterError` for bad arguments, before any work.
    """
    from ._optimize_records import optimize_config
    from .registry import as_registry
    from .runner import resolve_client
    from .space import as_space
    from .strategies import make_strategy

    sign = check_objective_args(objective, n_trials, direction)
    pruner = make_pruner(
        scheduler, min_resource, reduction_factor, warmup_steps, min_trials, max_resource, n_trials
    )
    check_run_args(
        dashboard, trial_timeout, max_retries, resume, registry, experiment_name,
        max_concurrent_trials, progress,
    )  # fmt: skip
    n_trials, max_retries = int(n_trials), int(max_retries)
    if max_concurrent_trials is not None:
        max_concurrent_trials = int(max_concurrent_trials)
    seed = resolve_seed(random_state)
    search_space = as_space(space)
    if not any(search_space.subspaces):
        raise InvalidParameterError(
            "space",
            "is empty: the objective would get no parameters (and one trial would run); "
            "give at least one, e.g. {'x': Float(0.0, 1.0)}",
        )
    built = make_strategy(strategy, search_space, n_trials, seed)
    store = None if registry is None else as_registry(registry)
    name = (
        experiment_name
        or f"optimize-{getattr(objective, '__name__', 'objective')}-{uuid.uuid4().hex[:8]}"
    )
    config = optimize_config(
        objective=objective, space=space, search_space=search_space, strategy=strategy,
        scheduler=scheduler, pruner=pruner, direction=direction, n_trials=n_trials, seed=seed,
    )  # fmt: skip
    # A pruner judges each report as it comes: a trial waiting in a batch behind others
    # would be judged late. Without one, tiny trials are packed as SearchCV's are.
    policy = UnitPolicy(
        max_retries=max_retries, timeout=trial_timeout, batchable=pruner is None,
        timeout_name="trial_timeout",
    )  # fmt: skip
    setup = _Setup(
        objective, search_space, strategy, built, n_trials, seed, sign, direction, pruner, store,
        store is not registry, name, config, resume, policy, max_concurrent_trials, dashboard,
        progress,
    )  # fmt: skip
    with resolve_client(client) as dask_client:
        return _run(dask_client, setup)


def _run(dask_client: Any, setup: _Setup) -> OptimizeResult:
    """Open the experiment, restore what an earlier run recorded, and run the rest."""
    from ._optimize_records import check_same_run, restore_trials
    from .progress import make_progress
    from .runner import cluster_shape
    from .strategies import make_strategy

    seed, strategy = setup.seed, setup.built
    recorder, restored = None, []
    if setup.store is not None:
        name, config = setup.name, setup.config
        recorder, prior, previous_status = open_experiment(
            setup.store, name, config, resume=setup.resume, owns=setup.owns_store,
            metric="score", fingerprint=f"objective {objective_qualname(setup.objective)}",
            cluster=cluster_shape(dask_client),
            check=lambda stored: check_same_run(name, stored, config),
        )  # fmt: skip
        records = [] if prior is None else prior.trials
        if prior is not None and prior.seed != seed:
            seed = prior.seed  # the earlier run's trials derive from its seed
            strategy = make_strategy(setup.strategy, setup.space, setup.n_trials, seed)
        if prior is not None:
            warn_recorded_beyond(name, prior, setup.n_trials, setup.n_trials)
        restored = restore_trials(
            records, strategy, setup.space, setup.sign, recorder, previous_status
        )
    strategy_label = strategy_name(setup.strategy)
    if setup.pruner is not None:
        strategy_label += f" + {setup.pruner.name}"
    meta = {
        "kind": "optimize",  # the page names its value "value" (no cross-validation)
        "objective": objective_qualname(setup.objective), "total": setup.n_trials,
        "strategy": strategy_label, "scheduler": repr(setup.pruner), "resume": setup.resume,
        "direction": setup.direction,  # the page's "best" is the least for "minimize"
    }  # fmt: skip
    watcher = reporter(dask_client, setup.name, meta, setup.dashboard)
    run = f"dmlsearch-stop-{uuid.uuid4().hex[:8]}"
    stop, go_on, clear = stop_signals(dask_client, run)

    def finished(outcome: ObjectiveOutcome) -> None:
        if recorder is not None:
            recorder.add(as_trial_outcome(outcome), intermediate=record_curve(outcome))

    pruner = setup.pruner
    source = ObjectiveSource(
        strategy, seed, sign=setup.sign, pruner=pruner, stop=stop, go_on=go_on,
        stop_event=lambda number: None if pruner is None else f"{run}-{number}",
        on_finish=finished, watcher=watcher, skip=[o.number for o in restored],
    )  # fmt: skip
    for outcome in restored:
        source.restore(outcome)
    loop: WorkLoop[ObjectiveSpec, ObjectiveOutcome] = WorkLoop(
        dask_client,
        ObjectiveKind(setup.objective, setup.policy),
        source,
        max_units_in_flight=setup.max_concurrent_trials,
        progress=make_progress(setup.progress),
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
    return OptimizeResult(
        trials, setup.direction, setup.name if setup.store is not None else None, stats,
        pruner, len(restored),
    )  # fmt: skip
