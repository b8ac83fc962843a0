"""``SearchCV(scheduler=...)``: a multi-fidelity search on the cluster (driver side).

``fit`` dispatches here when a scheduler is set. Validation comes first (nothing is
submitted before every argument is checked); then rung steps run through the runner's one
loop (:mod:`dmlsearch.runner.rungs`), with the trials' fitted states on the workers
(:mod:`dmlsearch._rungs`), released as the scheduler gives trials up and at the end;
so are their copies in the state store (:mod:`dmlsearch._rung_store`), if there is one.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dask
import numpy as np
from sklearn.base import clone, is_classifier
from sklearn.utils import indexable

from ._evaluate import COMPLETE, STOPPED, EvalContext, SearchData, TrialOutcome
from ._experiment import folds_digest, warn_recorded_beyond
from ._results import build_rung_results, rung_attributes
from ._rung_records import RungRows, open_experiment, restore_steps
from ._rung_store import StateStore, state_store_for
from ._rungs import RungContext, RungResult, drop_states
from ._schedule_plan import SchedulePlan, bind_scheduler, plan_schedule
from ._scoring import scorer_takes_weight
from ._search_recording import register_best
from ._search_support import (
    PhaseClock,
    check_failures,
    page_told,
    refit_index,
    resolve_seed,
    seeded_globals,
    strategy_name,
)
from ._validation import cv_splits
from .exceptions import AllTrialsFailedError
from .fidelity import all_classes, train
from .schedulers import Scheduler
from .space import as_space
from .strategies import Strategy, make_strategy

if TYPE_CHECKING:
    from distributed import Client

    from .search import SearchCV

__all__ = ["fit_multifidelity"]

#: Seconds between two releases of trial states on the workers (one client.run each).
_RELEASE_EVERY = 1.0


def _steps_in_flight(client: Client) -> int:
    """One step per worker thread, and one more per worker, queued behind its running one.

    A worker that ends a step starts its queued one at once instead of idling through the
    round trip (its result to the driver, the next step back); ASHA decides on results at
    most one step older than with a step per thread.
    """
    nthreads = client.nthreads()
    return max(1, sum(nthreads.values()) + len(nthreads))


def _release(client: Client, run: str, trials: list[int] | None) -> None:
    # A worker gone mid-call took its states with it: nothing to drop there.
    with contextlib.suppress(Exception):
        client.run(drop_states, run, trials, on_error="ignore")


def _delete_copies(store: StateStore | None, copies: list[tuple[int, int]] | None) -> None:
    """Delete state store copies (all of the run's if ``copies`` is None).

    A failure only leaves files behind: the run's folder goes at the end, or with
    ``Registry.gc`` after a crash.
    """
    if store is None:
        return
    with contextlib.suppress(Exception):
        if copies is None:
            store.clear()
        elif copies:
            store.delete(copies)


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


def _prepare(
    search: SearchCV,
    X: Any,
    y: Any,
    groups: Any,
    fit_params: dict[str, Any],
    seed: int | None = None,
) -> _Setup:
    """Validate every argument and build the schedule, before any work is submitted.

    ``seed``: the one a resumed experiment ran with (else from ``random_state``).
    """

    scoring, refit_metric = search._validate()
    space = as_space(search.search_space)
    X, y, groups = indexable(X, y, groups)
    splits = cv_splits(search.cv, X, y, groups, classifier=is_classifier(search.estimator))
    # Recorded with the experiment's config, so that a resume on other folds is refused.
    search._cv_folds = None if search.registry is None else folds_digest(splits)
    plan, n_trials = plan_schedule(search, splits, y)
    seed = resolve_seed(search.random_state) if seed is None else seed
    strategy = make_strategy(search.strategy, space, n_trials, seed)
    evaluation = EvalContext(
        estimator=search.estimator,
        scorer=scoring.scorer,
        multimetric=scoring.multimetric,
        splits=splits,
        error_score=search.error_score,
        return_train_score=search.return_train_score,
        trial_timeout=None if search.trial_timeout is None else float(search.trial_timeout),
        score_weight=scorer_takes_weight(scoring, fit_params),
    )
    classes = all_classes(y) if is_classifier(search.estimator) and y is not None else None
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
        scheduler=bind_scheduler(plan, strategy, int(search.reduction_factor)),
        context=RungContext(evaluation, plan.resource, uuid.uuid4().hex, seed, classes),
    )


def _run_steps(
    search: SearchCV,
    client: Client,
    setup: _Setup,
    rows: RungRows,
    fit_params: dict[str, Any],
    *,
    restored: list[RungResult],
    progress: Any,
    budget_ends: float | None,
    reporter: Any,
) -> None:
    """Every rung step through the runner's loop; every state of the run dropped after.

    ``restored``: the steps an earlier run recorded (resume); the scheduler's history
    starts from them, so none of them runs again. ``reporter``: the page's (or None),
    told of each step; the search tells it how the fit ended.
    """
    from .runner import WorkLoop
    from .runner.rungs import RungKind, RungSource
    from .runner.units import UnitPolicy

    run = setup.context.run
    name = _run_name(search, setup)
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
    source.restore(restored)
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

    def heartbeat() -> None:
        if rows.recorder is not None:
            rows.recorder.tick()
        if reporter is not None:
            reporter.tick()

    def tick() -> None:
        heartbeat()
        if time.monotonic() - last_release[0] >= _RELEASE_EVERY:
            last_release[0] = time.monotonic()
            released = source.take_released()
            if released:
                _release(client, run, released)
            _delete_copies(setup.context.store, source.take_stale_copies())

    loop = WorkLoop(
        client,
        kind,
        source,
        max_units_in_flight=search.max_concurrent_trials or _steps_in_flight(client),
        progress=progress,
        name=f"{type(search.estimator).__name__} ({name})",
        budget_ends=budget_ends,
        budget_policy=search.time_budget_policy,
        no_workers_timeout=float(dask.config.get("dmlsearch.no-workers-timeout", 60.0)),
        on_tick=tick,
    )
    try:
        if search.workers_per_trial > 1:
            search.runner_stats_ = _run_gang_steps(
                search, client, setup, source, fit_params, heartbeat, progress, budget_ends, name
            )
        else:
            search.runner_stats_ = loop.run()
    finally:
        _release(client, run, None)
        _delete_copies(setup.context.store, None)
    source.finish()


def _run_name(search: SearchCV, setup: _Setup) -> str:
    return f"{strategy_name(search.strategy)} + {setup.scheduler.name}"


def _run_gang_steps(
    search: SearchCV,
    client: Client,
    setup: _Setup,
    source: Any,
    fit_params: dict[str, Any],
    heartbeat: Any,
    progress: Any,
    budget_ends: float | None,
    name: str,
) -> Any:
    """The rung steps of gang trials (``workers_per_trial > 1``), each on a gang; the
    trials' fold models are held on the driver between rungs (:mod:`.runner.gang_rungs`)
    and dropped at the first tick after the scheduler gives a trial up."""
    from .runner.gang_rungs import GangRungSteps
    from .runner.gang_trials import GangTrialRunner

    k = int(search.workers_per_trial)
    runner = GangTrialRunner(
        client,
        k,
        progress=progress,
        name=f"{type(search.estimator).__name__} ({name}, gangs of {k})",
    )
    steps = GangRungSteps(
        SearchData(setup.X, setup.y, dict(fit_params)),
        setup.context,
        float(runner.collective_timeout),
    )

    def gang_tick() -> None:
        heartbeat()
        steps.release(source.take_released())  # cheap here: no call to the workers

    return runner.run_rungs(source, steps, ends=budget_ends, on_tick=gang_tick)


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
            "resume": bool(search.resume),
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

    clock = PhaseClock()
    setup = _prepare(search, X, y, groups, fit_params)
    registry = None if search.registry is None else as_registry(search.registry)
    name = search.experiment_name or f"{type(search.estimator).__name__}-{uuid.uuid4().hex[:8]}"
    recorder = None
    progress = make_progress(search.progress)
    budget_ends = None if search.time_budget is None else clock.start + search.time_budget
    try:
        with resolve_client(search.client) as client:
            restored: list[RungResult] = []
            if registry is not None:
                fingerprint = data_fingerprint(setup.X, setup.y, setup.groups)
                opened, prior, previous = open_experiment(
                    search, registry, name, setup.primary, setup.seed, len(setup.splits),
                    fingerprint, cluster_shape(client),
                )  # fmt: skip
                if prior is not None:
                    if prior.seed != setup.seed:  # the seed the experiment started with
                        setup = _prepare(search, X, y, groups, fit_params, prior.seed)
                    warn_recorded_beyond(name, prior, setup.strategy.total, search.n_trials)
                    restored = restore_steps(
                        search, opened, prior, previous, setup.strategy, setup.space,
                        len(setup.splits),
                    )  # fmt: skip
                recorder = opened  # a refused resume closed it, with the status it had
            rows = RungRows(setup.primary, len(setup.splits), recorder)
            rows.restore(restored)
            setup.context.store = state_store_for(
                search.state_store,
                registry,
                setup.context.run,
                setup.plan.ladder[-1],
                setup.plan.resource,
            )
            clock.lap("setup")
            reporter = _reporter(search, client, setup, name, _run_name(search, setup))
            # The page's status is the fit's: it ends after the refit and the registration
            # (the cluster is still up).
            with page_told(reporter):
                _run_steps(
                    search,
                    client,
                    setup,
                    rows,
                    fit_params,
                    restored=restored,
                    progress=progress,
                    budget_ends=budget_ends,
                    reporter=reporter,
                )
                clock.lap("search")
                _finish(search, rows, setup)
                search.seed_ = setup.seed
                if search.refit:
                    _refit(search, setup.plan.resource, setup.X, setup.y, fit_params)
                    clock.lap("refit")
                if recorder is not None:
                    register_best(search, recorder, setup.X)
                    clock.lap("register")
            if recorder is not None:
                recorder.close("complete")
    except BaseException as exc:
        if recorder is not None:
            recorder.ended_by(exc)
        elif registry is not None and registry is not search.registry:
            registry.close()
        raise
    search.phase_times_ = clock.laps
    progress.message(clock.summary())
    return search


def _finish(search: SearchCV, rows: RungRows, setup: _Setup) -> None:
    """``cv_results_`` and the other fitted attributes, from the steps recorded."""

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
        resource=plan.resource,
    )
    search.cv_results_ = results
    search.trials_ = list[TrialOutcome](steps)
    search.n_splits_ = n_splits
    search.scorer_ = scoring.scorer_
    search.multimetric_ = scoring.multimetric
    eta = getattr(plan.scheduler, "reduction_factor", search.reduction_factor)
    for key, value in rung_attributes(results, rows.curves, plan.ladder, eta).items():
        setattr(search, key, value)
    if search.refit or not scoring.multimetric:
        if callable(search.refit):
            search.best_index_ = refit_index(search.refit, results, len(results["params"]))
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
    with seeded_globals(search.trials_[search.best_index_].seed):  # as SearchCV's refit
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
