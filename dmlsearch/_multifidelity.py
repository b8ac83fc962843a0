"""``SearchCV(scheduler=...)``: a multi-fidelity search on the cluster (driver side).

``fit`` dispatches here when a scheduler is set. Validation comes first (nothing is
submitted before every argument is checked); then rung steps run through the runner's one
loop (:mod:`dmlsearch.runner.rungs`), with the trials' fitted states on the workers
(:mod:`dmlsearch._rungs`), released as the scheduler gives trials up and at the end.
"""

from __future__ import annotations

import contextlib
import difflib
import math
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dask
import numpy as np
from sklearn.base import clone, is_classifier
from sklearn.utils import indexable

from ._evaluate import COMPLETE, STOPPED, EvalContext, SearchData, TrialOutcome
from ._results import build_rung_results, rung_attributes
from ._rungs import RungContext, RungResult, drop_states
from ._validation import cv_splits
from .exceptions import AllTrialsFailedError, InvalidParameterError
from .fidelity import check_resource, train
from .schedulers import (
    ASHA,
    SCHEDULERS,
    Hyperband,
    MedianStopping,
    Scheduler,
    SuccessiveHalving,
    check_schedule,
    make_scheduler,
    rung_resources,
)
from .space import as_space
from .strategies import Strategy, make_strategy

if TYPE_CHECKING:
    from distributed import Client

    from .search import SearchCV

__all__ = ["SchedulePlan", "fit_multifidelity", "plan_schedule"]

#: Seconds between two releases of trial states on the workers (one client.run each).
_RELEASE_EVERY = 1.0


@dataclass(frozen=True)
class SchedulePlan:
    """A checked schedule: the scheduler, the resource ladder and the strategy's count."""

    scheduler: Scheduler
    resource: str
    ladder: tuple[int, ...]
    steps: tuple[int, ...] | None
    #: ASHA or median stopping by name: their trial count comes from the strategy.
    bind: bool = False


def _bounds(
    search: SearchCV, splits: list[tuple[np.ndarray, np.ndarray]], y: Any
) -> tuple[int, int]:
    """``(min_resource, max_resource)`` with the defaults filled in, and n_samples checked."""
    smallest = min(len(train) for train, _ in splits)
    low, high = search.min_resource, search.max_resource
    if search.resource == "n_samples":
        if high is None:
            high = smallest
        elif isinstance(high, int | float) and high > smallest:
            raise InvalidParameterError(
                "max_resource",
                f"resource='n_samples' trains on at most the {smallest} rows of the smallest "
                f"training fold, got max_resource={high}; lower it (or leave it None)",
            )
        if low is None:
            # As scikit-learn's Halving searches: a few rows per fold (and per class).
            classes = len(np.unique(y)) if is_classifier(search.estimator) else 1
            low = min(2 * len(splits) * classes, int(high))
    elif high is None:
        raise InvalidParameterError(
            "max_resource",
            f"a scheduler needs max_resource, the most {search.resource!r} a trial gets "
            "(e.g. max_resource=81)",
        )
    return (1 if low is None else low), high


def plan_schedule(
    search: SearchCV, splits: list[tuple[np.ndarray, np.ndarray]], y: Any
) -> tuple[SchedulePlan, int | None]:
    """Check the scheduler's arguments; the plan and the number of trials to ask for.

    Raises :class:`InvalidParameterError` before any work: an unknown scheduler, no or a
    bad ``resource``, ``min_resource > max_resource``, ``reduction_factor < 2``, an
    ``n_samples`` budget larger than the data, ``resume`` or ``keep_oof``.
    """
    if search.resume:
        raise InvalidParameterError(
            "resume", "resume=True is not supported with a scheduler yet; run without resume"
        )
    if getattr(search, "keep_oof", False):
        raise InvalidParameterError(
            "keep_oof",
            "out-of-fold predictions are not kept with a scheduler yet; drop keep_oof or "
            "the scheduler",
        )
    if search.resource is None:
        raise InvalidParameterError(
            "resource",
            "a scheduler needs resource=: 'partial_fit' (epochs), 'n_samples' (rows) or an "
            "estimator parameter such as 'n_estimators' or 'max_iter'",
        )
    resource = check_resource(search.resource, search.estimator)
    given = search.scheduler
    if isinstance(given, Scheduler):
        if search.min_resource is not None or search.max_resource is not None:
            raise InvalidParameterError(
                "scheduler",
                "a Scheduler instance carries its own min_resource/max_resource; leave "
                "SearchCV's unset",
            )
        ladder = _ladder_of(given)
        steps = None
        if isinstance(given, MedianStopping):
            ladder = steps = rung_resources(1, given.max_resource, search.reduction_factor)
        return SchedulePlan(given, resource, ladder, steps), search.n_trials
    if not isinstance(given, str) or given.lower() not in SCHEDULERS:
        close = difflib.get_close_matches(str(given).lower(), SCHEDULERS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidParameterError(
            "scheduler",
            f"unknown scheduler {given!r}{hint} Choose one of {list(SCHEDULERS)} or pass a "
            "dmlsearch.schedulers.Scheduler",
        )
    name = given.lower()
    low, high = _bounds(search, splits, y)
    r_min, R, eta = check_schedule(low, high, search.reduction_factor)
    ladder = rung_resources(r_min, R, eta)
    n = search.n_trials
    if name == "halving":
        halving = SuccessiveHalving(r_min, R, eta, n)
        return SchedulePlan(halving, resource, ladder, None), halving.n_trials
    if name == "hyperband":
        hyperband = Hyperband(r_min, R, eta)
        return SchedulePlan(hyperband, resource, ladder, None), n or hyperband.n_trials
    # ASHA and median stopping learn their trial count from the strategy (see bind).
    placeholder = make_scheduler(name, max_resource=R)
    steps = ladder if name == "median" else None
    return SchedulePlan(placeholder, resource, ladder, steps, bind=True), n


def _bind(plan: SchedulePlan, strategy: Strategy, eta: int) -> Scheduler:
    """The scheduler, with ASHA's and median stopping's trial count from the strategy."""
    s = plan.scheduler
    if plan.bind and isinstance(s, ASHA):
        return ASHA(plan.ladder[0], plan.ladder[-1], eta, max_trials=strategy.total)
    if plan.bind and isinstance(s, MedianStopping):
        return MedianStopping(s.max_resource, strategy.total, s.warmup_steps, s.min_trials)
    return s


def _ladder_of(scheduler: Scheduler) -> tuple[int, ...]:
    if isinstance(scheduler, Hyperband):
        return tuple(sorted({r for b in scheduler.brackets for r in b.resources}))
    resources = getattr(scheduler, "resources", None)
    if resources is not None:
        return tuple(resources)
    return (int(getattr(scheduler, "max_resource", 1)),)


class _Rows:
    """What the driver keeps of each step: its row of ``cv_results_`` and the registry."""

    def __init__(self, primary: str, n_splits: int, recorder: Any) -> None:
        self.primary = primary
        self.n_splits = n_splits
        self.recorder = recorder
        self.outcomes: dict[tuple[int, int], RungResult] = {}
        self.curves: dict[int, list[tuple[int, float]]] = {}

    def score(self, result: RungResult) -> float | None:
        values = [fold.get(self.primary, np.nan) for fold in result.test_scores]
        value = float(np.mean(values)) if values else float("nan")
        return value if math.isfinite(value) else None

    def add(self, result: RungResult, retries: int) -> None:
        result.retries = retries
        self.outcomes[result.id] = result
        value = self.score(result) if result.state == COMPLETE else None
        curve = self.curves.setdefault(result.trial, [])
        if value is not None:
            curve.append((result.resource, value))
        if self.recorder is not None:
            # The trial's record holds its latest step; its learning curve is in
            # ``intermediate`` (resource -> score).
            self.recorder.add(result, intermediate={str(r): s for r, s in curve})


def _release(client: Client, run: str, trials: list[int] | None) -> None:
    # A worker gone mid-call took its states with it: nothing to drop there.
    with contextlib.suppress(Exception):
        client.run(drop_states, run, trials, on_error="ignore")


@dataclass
class _Setup:
    """Everything checked and built before the cluster is touched."""

    scoring: Any
    refit_metric: str | None
    primary: str
    X: Any
    y: Any
    groups: Any
    splits: list[tuple[np.ndarray, np.ndarray]]
    plan: SchedulePlan
    seed: int
    space: Any
    strategy: Strategy
    scheduler: Scheduler
    context: RungContext


def _prepare(search: SearchCV, X: Any, y: Any, groups: Any) -> _Setup:
    """Validate every argument and build the schedule, before any work is submitted."""
    from .search import _resolve_seed

    scoring, refit_metric = search._validate()
    space = as_space(search.search_space)
    X, y, groups = indexable(X, y, groups)
    splits = cv_splits(search.cv, X, y, groups, classifier=is_classifier(search.estimator))
    plan, n_trials = plan_schedule(search, splits, y)
    seed = _resolve_seed(search.random_state)
    strategy = make_strategy(search.strategy, space, n_trials, seed)
    evaluation = EvalContext(
        estimator=search.estimator,
        scorer=scoring.scorer,
        multimetric=scoring.multimetric,
        splits=splits,
        error_score=search.error_score,
        return_train_score=search.return_train_score,
        trial_timeout=None if search.trial_timeout is None else float(search.trial_timeout),
    )
    classes = np.unique(y) if is_classifier(search.estimator) and y is not None else None
    return _Setup(
        scoring=scoring,
        refit_metric=refit_metric,
        primary=refit_metric or scoring.names[0],
        X=X,
        y=y,
        groups=groups,
        splits=splits,
        plan=plan,
        seed=seed,
        space=space,
        strategy=strategy,
        scheduler=_bind(plan, strategy, int(search.reduction_factor)),
        context=RungContext(evaluation, plan.resource, uuid.uuid4().hex, seed, classes),
    )


def _run_steps(
    search: SearchCV,
    client: Client,
    setup: _Setup,
    rows: _Rows,
    fit_params: dict[str, Any],
    *,
    progress: Any,
    budget_ends: float | None,
    experiment: str,
) -> None:
    """Every rung step through the runner's loop; every state of the run dropped after."""
    from .runner import WorkLoop
    from .runner.rungs import RungKind, RungSource
    from .runner.units import UnitPolicy
    from .search import _strategy_name

    run = setup.context.run
    name = f"{_strategy_name(search.strategy)} + {setup.scheduler.name}"
    reporter = _reporter(search, client, setup, experiment, name)
    source = RungSource(
        setup.scheduler,
        setup.strategy,
        setup.seed,
        rows.score,
        rows.add,
        estimator=search.estimator,
        steps=setup.plan.steps,
        observer=reporter,
    )
    policy = UnitPolicy(
        max_retries=search.max_retries,
        timeout=setup.context.evaluation.trial_timeout,
        batchable=False,
        timeout_name="trial_timeout",
    )
    kind = RungKind(
        SearchData(setup.X, setup.y, dict(fit_params)), setup.context, policy, source.holder.get
    )
    last_release = [time.monotonic()]

    def tick() -> None:
        if rows.recorder is not None:
            rows.recorder.tick()
        if reporter is not None:
            reporter.tick()
        if time.monotonic() - last_release[0] >= _RELEASE_EVERY:
            last_release[0] = time.monotonic()
            released = source.take_released()
            if released:
                _release(client, run, released)

    loop = WorkLoop(
        client,
        kind,
        source,
        # ASHA decides better on fresh results: no more steps than threads.
        max_units_in_flight=search.max_concurrent_trials or max(1, sum(client.nthreads().values())),
        progress=progress,
        name=f"{type(search.estimator).__name__} ({name})",
        budget_ends=budget_ends,
        budget_policy=search.time_budget_policy,
        no_workers_timeout=float(dask.config.get("dmlsearch.no-workers-timeout", 60.0)),
        on_tick=tick,
    )
    status = "failed"
    try:
        search.runner_stats_ = loop.run()
        status = "complete"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        _release(client, run, None)
        if reporter is not None:
            reporter.experiment_finished(status)
    source.finish()


def _reporter(
    search: SearchCV, client: Client, setup: _Setup, experiment: str, strategy: str
) -> Any:
    """The dashboard's reporter for this search (one row per rung step), or None."""
    if not search.dashboard:
        return None
    from .dashboard import DashboardReporter

    return DashboardReporter.attach(
        client,
        experiment,
        {
            "estimator": type(search.estimator).__name__,
            "strategy": strategy,
            "total": None,  # steps: as many as the scheduler promotes
            "n_splits": len(setup.splits),
            "metric": setup.primary,
            "scoring": search.scoring if isinstance(search.scoring, str) else None,
            "resume": False,
        },
    )


def fit_multifidelity(
    search: SearchCV, X: Any, y: Any, groups: Any, fit_params: dict[str, Any]
) -> SearchCV:
    """``SearchCV.fit`` with a scheduler: rung steps on the cluster, then the refit."""
    from ._recording import data_fingerprint
    from .progress import make_progress
    from .registry import as_registry
    from .runner import cluster_shape, resolve_client
    from .search import _PhaseClock

    clock = _PhaseClock()
    setup = _prepare(search, X, y, groups)
    registry = None if search.registry is None else as_registry(search.registry)
    name = search.experiment_name or f"{type(search.estimator).__name__}-{uuid.uuid4().hex[:8]}"
    recorder = None
    progress = make_progress(search.progress)
    budget_ends = None if search.time_budget is None else clock.start + search.time_budget
    try:
        with resolve_client(search.client) as client:
            if registry is not None:
                fingerprint = data_fingerprint(setup.X, setup.y, setup.groups)
                recorder, _, _ = search._open_recorder(
                    registry, name, setup.primary, setup.seed, setup.strategy, setup.space,
                    len(setup.splits), fingerprint, cluster_shape(client), {}, set(),
                )  # fmt: skip
            rows = _Rows(setup.primary, len(setup.splits), recorder)
            clock.lap("setup")
            _run_steps(
                search,
                client,
                setup,
                rows,
                fit_params,
                progress=progress,
                budget_ends=budget_ends,
                experiment=name,
            )
            clock.lap("search")
    except BaseException as exc:
        if recorder is not None:
            recorder.close("interrupted" if isinstance(exc, KeyboardInterrupt) else "failed")
        elif registry is not None and registry is not search.registry:
            registry.close()
        raise
    try:
        _finish(search, rows, setup)
        search.seed_ = setup.seed
        if search.refit:
            _refit(search, setup.plan.resource, setup.X, setup.y, fit_params)
            clock.lap("refit")
        if recorder is not None:
            search._register_best(recorder, setup.X)
            clock.lap("register")
    except BaseException:
        if recorder is not None:
            recorder.close("failed")
        raise
    if recorder is not None:
        recorder.close("complete")
    search.phase_times_ = clock.laps
    progress.message(clock.summary())
    return search


def _finish(search: SearchCV, rows: _Rows, setup: _Setup) -> None:
    """``cv_results_`` and the other fitted attributes, from the steps recorded."""
    from .search import check_failures

    scoring, refit_metric, plan = setup.scoring, setup.refit_metric, setup.plan
    n_splits = len(setup.splits)
    keys = sorted(rows.outcomes, key=lambda k: (k[1], k[0]))  # by resource, then trial
    steps = [rows.outcomes[k] for k in keys]
    if not steps or all(s.state == STOPPED for s in steps):
        raise AllTrialsFailedError("no rung step finished (time_budget too short?)")
    bad = [s for s in steps if s.state not in (COMPLETE, STOPPED)]
    check_failures(steps, bad, "rung steps", search.error_score, stacklevel=5)
    error_score = float("nan") if search.error_score == "raise" else float(search.error_score)
    results = build_rung_results(
        steps,
        scoring.names,
        n_splits,
        return_train_score=search.return_train_score,
        error_score=error_score,
    )
    search.cv_results_ = results
    search.trials_ = list[TrialOutcome](steps)
    search.n_splits_ = n_splits
    search.scorer_ = scoring.scorer_
    search.multimetric_ = scoring.multimetric
    for key, value in rung_attributes(results, rows.curves, plan.ladder).items():
        setattr(search, key, value)
    if search.refit or not scoring.multimetric:
        if callable(search.refit):
            search.best_index_ = int(search.refit(results))
        else:
            metric = refit_metric or scoring.names[0]
            search.best_index_ = int(results[f"rank_test_{metric}"].argmin())
            search.best_score_ = float(results[f"mean_test_{metric}"][search.best_index_])
        search.best_params_ = results["params"][search.best_index_]
        search.best_resource_ = int(results["n_resources"][search.best_index_])


def _refit(search: SearchCV, resource: str, X: Any, y: Any, fit_params: dict[str, Any]) -> None:
    """Refit the best candidate on all of ``X`` at its highest resource.

    With ``resource='n_samples'`` on all rows (as scikit-learn's Halving searches).
    """
    estimator = clone(search.estimator).set_params(**clone(search.best_params_, safe=False))
    t0 = time.perf_counter()
    if resource == "n_samples":
        estimator.fit(X, y, **fit_params)
    else:
        estimator = train(
            resource, estimator, X, y, search.best_resource_, fit_params=fit_params
        ).estimator
    search.refit_time_ = time.perf_counter() - t0
    search.best_estimator_ = estimator
    if hasattr(estimator, "feature_names_in_"):
        search.feature_names_in_ = estimator.feature_names_in_
