"""``SearchCV``: the scikit-learn-compatible front over strategy + runner.

``fit`` owns validation, cross-validation splits, bookkeeping and refit; the strategy
only says what to try next and the runner only moves work to the cluster.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone, is_classifier
from sklearn.utils import indexable
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from ._evaluate import COMPLETE, STOPPED, EvalContext, SearchData, TrialOutcome
from ._experiment import folds_digest
from ._oof import artifact_sink, memory_sink
from ._recording import SearchRecorder, data_fingerprint
from ._results import build_cv_results
from ._scoring import Scoring, scorer_takes_weight
from ._search_checks import check_early_stopping, check_gang_net, validate_search
from ._search_recording import open_recorder, register_best
from ._search_support import (
    PhaseClock,
    check_failures,
    page_told,
    refit_index,
    resolve_seed,
    seeded_globals,
    strategy_name,
    warn_lost_oof,
)
from ._validation import check_fit_data, cv_splits
from .exceptions import AllTrialsFailedError
from .progress import make_progress
from .registry import as_registry
from .runner import DaskRunner, cluster_shape, resolve_client
from .space import as_space
from .strategies import Strategy, make_strategy

if TYPE_CHECKING:
    from .runner.gang_trials import GangTrialRunner

__all__ = ["SearchCV"]

logger = logging.getLogger("dmlsearch")


def _estimator_has(attr: str) -> Callable[[SearchCV], bool]:
    """Whether ``attr`` can be delegated, as scikit-learn's ``_search_estimator_has``.

    With ``refit=False`` there is never a best estimator to delegate to, so the method
    is absent (``hasattr`` is False, fitted or not) instead of present but raising.
    """

    def check(self: SearchCV) -> bool:
        if not self.refit:
            raise AttributeError(_refit_false_message(self, attr))
        if hasattr(self, "best_estimator_"):
            return hasattr(self.best_estimator_, attr)
        return hasattr(self.estimator, attr)

    return check


def _refit_false_message(search: SearchCV, attr: str) -> str:
    return (
        f"This {type(search).__name__} was created with refit=False: {attr} is available "
        "only after refitting on the best parameters; use refit=True, or fit the estimator "
        "yourself with best_params_"
    )


class SearchCV(MetaEstimatorMixin, BaseEstimator):
    """Hyperparameter search with cross-validation, run on a Dask cluster.

    Parameters
    ----------
    estimator : estimator
        A scikit-learn estimator (Pipelines included); cloned for every fit.
    search_space : dict, list of dicts or SearchSpace
        Parameter name -> ``Float``/``Int``/``Categorical``, a list of values or a scipy
        distribution. A list of dicts gives conditional sub-spaces. Any scikit-learn
        ``param_grid`` or ``param_distributions`` is accepted as is.
    strategy : {"grid", "random", "tpe", "cmaes", "gp", "nsga2"} or optuna sampler
        What to try next. Model-based strategies run Optuna samplers with ask/tell.
    n_trials : int, optional
        Candidates to evaluate. Default: the whole grid for ``"grid"``, 10 otherwise
        (with a scheduler: as many as ``"halving"``/``"hyperband"`` schedule).
    scheduler : {"asha", "hyperband", "halving", "median"}, Scheduler or None
        Multi-fidelity search (docs/multifidelity.md): trials train on a small budget
        of ``resource`` first and only the promising ones get more, continuing from
        their trained state on the worker that holds it. ``None``: every trial trains
        in full. ``cv_results_`` then has one row per (trial, rung), as scikit-learn's
        Halving searches, and ``history_`` each trial's learning curve.
    resource : str, optional
        What the budget counts (with a scheduler): ``"partial_fit"`` (calls, i.e.
        epochs), ``"n_samples"`` (training rows) or an estimator parameter such as
        ``"n_estimators"`` (with ``warm_start``) or ``"max_iter"``.
    min_resource, max_resource : int, optional
        Smallest and largest budget of a trial. ``max_resource`` is required unless
        ``resource="n_samples"`` (default: the rows of the smallest training fold).
    reduction_factor : int
        ``eta``: each rung keeps the best ``1 / eta`` of the trials, at ``eta`` times the
        budget.
    cv, scoring, refit, error_score, return_train_score
        As in scikit-learn's ``GridSearchCV``.
    random_state : int, RandomState, Generator or None
        Seeds the strategy and each trial (``numpy.random`` and ``random`` are seeded per
        trial on the worker), so grid and random searches give identical results on 1 or
        N workers.
    client : distributed.Client, str or None
        A client, a scheduler address, or None for the current default client; with no
        default client an embedded ``LocalCluster`` is started and closed after ``fit``.
    max_concurrent_trials : int, optional
        Upper bound on trials in flight. Default: unbounded for grid/random (tasks are
        bounded at two per worker thread), two per worker thread for model-based strategies.
    trial_timeout : float, optional
        Seconds a trial may run. A timed-out trial scores ``error_score`` and is recorded
        with state ``"timeout"``; a trial stuck in native code has its worker restarted.
    time_budget : float, optional
        Seconds the search may take, counted from the start of ``fit``: once spent, no
        trial starts (queued ones included). ``n_trials`` still caps the count, so pair a
        budget with a large ``n_trials``. Results cover the trials that ran; the refit
        comes after the budget and its time is reported apart (``phase_times_``).
    time_budget_policy : {"stop", "finish"}
        What happens to trials running when the budget ends: ``"stop"`` them (recorded
        with state ``"stopped"``, scored ``error_score``) or let them ``"finish"``.
    max_retries : int
        How many times a trial lost with its worker is resubmitted.
    progress : bool or None
        Show a progress bar; ``None`` shows it when stderr is a terminal.
    registry : Registry, str or None
        Record every trial as it ends (and register ``best_estimator_``) in this registry,
        or in the one at this database URL. ``None`` records nothing.
    experiment_name : str, optional
        The experiment to record into; default ``<Estimator>-<random suffix>``.
    resume : bool
        Continue the experiment ``experiment_name``: trials it finished are not rerun,
        model-based samplers learn from them, and the final count is exact.
    dashboard : bool
        Show the search live on the Dask dashboard's ``/dmlsearch`` page (a scheduler
        plugin registered once per cluster; see docs/dashboard.md).
    keep_oof : bool
        Keep each trial's out-of-fold predictions for ``dmlsearch.ensemble.
        EnsembleSelection`` (``cv`` must put every row in exactly one test fold). Workers
        store them: in the registry's artifact store when there is a registry, else in
        their own memory (then ``client`` must be a cluster that outlives ``fit``). Read
        one with :meth:`oof_predictions`; see docs/ensembles.md.
    workers_per_trial : int
        Workers each trial trains on at once. Above 1, each trial is a gang of that many
        workers reserved together, each CV fold trained on all of them: with xgboost's
        Dask engine for xgboost's ``XGBClassifier``/``XGBRegressor`` (or an RF variant),
        data-parallel (``DataParallelTrainer``'s ranks, ``trainer__sync``) for
        ``dmlsearch.training.TorchClassifier``/``TorchRegressor``; other estimators are
        refused. A worker lost mid-training fails that trial within seconds and the search
        goes on. A torch estimator's own ``trainer__n_workers`` does not change how many
        workers a trial's folds train on (this does); it makes the refit of
        ``best_estimator_`` data-parallel. See docs/ensembles.md (Boosting on a gang) and
        docs/training.md (Data-parallel trials).
    state_store : "auto", str or False
        With a scheduler: where workers copy each trial's fold models after a rung step,
        so a promotion on a worker without them (its holder died, or Dask ran it
        elsewhere) continues from the copy instead of refitting. ``"auto"``: the
        registry's artifact store when there is a registry, else no copies; a path or
        fsspec URL every worker can read; ``False``: no copies. See docs/multifidelity.md.

    Attributes
    ----------
    cv_results_, best_params_, best_score_, best_index_, best_estimator_, n_splits_,
    refit_time_, scorer_, multimetric_ : as in scikit-learn.
    trials_ : list of TrialOutcome
        One record per trial: state, scores, duration, worker, retries, error traceback.
    seed_ : int
        The seed the search used (drawn at random when ``random_state=None``).
    phase_times_ : dict
        Seconds spent in each phase of ``fit``: ``setup`` (validation, cluster, registry),
        ``search``, ``refit`` and ``register``.
    """

    def __init__(
        self,
        estimator: Any,
        search_space: Any,
        *,
        strategy: Any = "random",
        n_trials: int | None = None,
        scheduler: Any = None,
        resource: str | None = None,
        min_resource: int | None = None,
        max_resource: int | None = None,
        reduction_factor: int = 3,
        cv: Any = 5,
        scoring: Any = None,
        refit: Any = True,
        error_score: Any = np.nan,
        return_train_score: bool = False,
        random_state: Any = None,
        client: Any = None,
        max_concurrent_trials: int | None = None,
        trial_timeout: float | None = None,
        time_budget: float | None = None,
        time_budget_policy: str = "stop",
        max_retries: int = 2,
        progress: bool | None = None,
        registry: Any = None,
        experiment_name: str | None = None,
        resume: bool = False,
        dashboard: bool = True,
        keep_oof: bool = False,
        workers_per_trial: int = 1,
        state_store: str | bool = "auto",
    ) -> None:
        self.estimator = estimator
        self.search_space = search_space
        self.strategy = strategy
        self.n_trials = n_trials
        self.scheduler = scheduler
        self.resource = resource
        self.min_resource = min_resource
        self.max_resource = max_resource
        self.reduction_factor = reduction_factor
        self.cv = cv
        self.scoring = scoring
        self.refit = refit
        self.error_score = error_score
        self.return_train_score = return_train_score
        self.random_state = random_state
        self.client = client
        self.max_concurrent_trials = max_concurrent_trials
        self.trial_timeout = trial_timeout
        self.time_budget = time_budget
        self.time_budget_policy = time_budget_policy
        self.max_retries = max_retries
        self.progress = progress
        self.registry = registry
        self.experiment_name = experiment_name
        self.resume = resume
        self.dashboard = dashboard
        self.keep_oof = keep_oof
        self.workers_per_trial = workers_per_trial
        self.state_store = state_store

    # -- scikit-learn protocol --------------------------------------------------
    def __sklearn_clone__(self) -> SearchCV:
        # A Client or a Registry is a handle to a shared resource, not state: share it,
        # never deepcopy it.
        params = self.get_params(deep=False)
        shared = {k: params.pop(k) for k in ("client", "registry")}
        cloned = {k: clone(v, safe=False) for k, v in params.items()}
        return type(self)(**shared, **cloned)

    def __getstate__(self) -> dict[str, Any]:
        # A fitted search must pickle (joblib.dump); a live Client cannot, and would be
        # meaningless in another process anyway.
        state = dict(super().__getstate__())
        if not isinstance(state.get("client"), (str, type(None))):
            state["client"] = None
        registry = state.get("registry")
        if registry is not None and not isinstance(registry, str):
            state["registry"] = getattr(registry, "url", None)
        return state

    def __sklearn_tags__(self) -> Any:
        from copy import deepcopy

        from sklearn.utils import get_tags

        tags = super().__sklearn_tags__()
        sub = get_tags(self.estimator)
        tags.estimator_type = sub.estimator_type
        tags.classifier_tags = deepcopy(sub.classifier_tags)
        tags.regressor_tags = deepcopy(sub.regressor_tags)
        tags.input_tags.pairwise = sub.input_tags.pairwise
        tags.input_tags.sparse = sub.input_tags.sparse
        tags.input_tags.allow_nan = sub.input_tags.allow_nan
        tags.target_tags.required = sub.target_tags.required
        tags.target_tags.multi_output = sub.target_tags.multi_output
        return tags

    # -- validation --------------------------------------------------------------
    def _validate(self) -> tuple[Scoring, str | None]:
        return validate_search(self)

    # -- fit ---------------------------------------------------------------------
    def fit(self, X: Any, y: Any = None, *, groups: Any = None, **fit_params: Any) -> SearchCV:
        """Run the search, then refit the best candidate on all of ``X``.

        Every argument is validated before any work is sent to the cluster.
        """
        check_early_stopping(self.estimator, self.search_space, fit_params, self.workers_per_trial)
        # Before anything reads the data's length (a Dask DataFrame would compute it).
        check_fit_data(X, y, groups)
        check_gang_net(self, X, y)
        if self.scheduler is not None:
            from ._multifidelity import fit_multifidelity

            return fit_multifidelity(self, X, y, groups, fit_params)
        clock = PhaseClock()
        scoring, refit_metric = self._validate()
        space = as_space(self.search_space)
        X, y, groups = indexable(X, y, groups)
        splits = cv_splits(self.cv, X, y, groups, classifier=is_classifier(self.estimator))
        n_splits = len(splits)
        # Recorded (the experiment's config), so that a resume on other folds is refused.
        self._cv_folds = None if self.registry is None else folds_digest(splits)
        primary = refit_metric or scoring.names[0]
        seed = resolve_seed(self.random_state)
        # Built now so that a bad strategy or space fails before the registry is touched.
        strategy = make_strategy(self.strategy, space, self.n_trials, seed)

        context = self._eval_context(scoring, splits, X, y)
        context.score_weight = scorer_takes_weight(scoring, fit_params)
        data = SearchData(X, y, dict(fit_params))
        outcomes: dict[int, TrialOutcome] = {}
        skip: set[int] = set()
        recorder: SearchRecorder | None = None
        registry = None if self.registry is None else as_registry(self.registry)
        name = self.experiment_name or f"{type(self.estimator).__name__}-{uuid.uuid4().hex[:8]}"

        def on_outcome(outcome: TrialOutcome) -> float | None:
            outcomes[outcome.number] = outcome
            if recorder is not None:
                recorder.add(outcome)
            if outcome.state != COMPLETE:
                return None
            values = [fold.get(primary, np.nan) for fold in outcome.test_scores]
            value = float(np.mean(values)) if values else float("nan")
            return value if math.isfinite(value) else None

        progress = make_progress(self.progress)
        try:
            with resolve_client(self.client) as client:
                if registry is not None:
                    # Opened once the client is known, so the experiment records where it ran.
                    recorder, seed, strategy = open_recorder(
                        self,
                        registry,
                        name,
                        primary,
                        seed,
                        strategy,
                        space,
                        n_splits,
                        data_fingerprint(X, y, groups),
                        cluster_shape(client),
                        outcomes,
                        skip,
                    )
                    if context.oof is not None:
                        context.oof = artifact_sink(context.oof, registry, recorder.experiment_id)
                reporter = self._attach_dashboard(
                    client, name, strategy, n_splits, primary, progress
                )
                runner = self._make_runner(client, clock.start, progress, reporter)
                clock.lap("setup")
                on_tick = recorder.tick if recorder is not None else None
                # The page's status is the fit's: an all-failed search, a refit or a
                # registration that fails ends it failed (the cluster is still up).
                with page_told(reporter):
                    runner.run(
                        strategy, data, context, seed, on_outcome, skip=skip, on_tick=on_tick
                    )
                    self.runner_stats_ = runner.stats
                    # The rows and classes the out-of-fold predictions hold
                    # (EnsembleSelection checks its data against them).
                    self._oof_sink = context.oof
                    clock.lap("search")
                    self._finish(outcomes, scoring, refit_metric, n_splits, strategy)
                    self.seed_ = seed
                    if self.refit:
                        self._refit(X, y, fit_params)
                        clock.lap("refit")
                    if recorder is not None:
                        register_best(self, recorder, X)
                        clock.lap("register")
                if recorder is not None:
                    recorder.close("complete")
        except BaseException as exc:
            if recorder is not None:
                recorder.ended_by(exc)
            elif registry is not None and registry is not self.registry:
                registry.close()
            raise
        self.phase_times_ = clock.laps
        summary = clock.summary()
        logger.info("dmlsearch: %s", summary)
        progress.message(summary)
        return self

    def _eval_context(self, scoring: Scoring, splits: Any, X: Any, y: Any) -> EvalContext:
        """What every trial needs to fit and score a candidate on each split."""
        return EvalContext(
            estimator=self.estimator,
            scorer=scoring.scorer,
            multimetric=scoring.multimetric,
            splits=splits,
            error_score=self.error_score,
            return_train_score=self.return_train_score,
            trial_timeout=None if self.trial_timeout is None else float(self.trial_timeout),
            oof=memory_sink(self, splits, X, y),
        )

    def _attach_dashboard(
        self,
        client: Any,
        name: str,
        strategy: Strategy,
        n_splits: int,
        primary: str,
        progress: Any,
    ) -> Any:
        """The ``/dmlsearch`` page's reporter (None with ``dashboard=False``); the links
        logged and shown."""
        link = getattr(client, "dashboard_link", None)
        reporter = None
        if self.dashboard:
            from .dashboard import DashboardReporter, page_link

            reporter = DashboardReporter.attach(
                client,
                name,
                {
                    "estimator": type(self.estimator).__name__,
                    "strategy": strategy_name(self.strategy),
                    "total": strategy.total,
                    "n_splits": n_splits,
                    "metric": primary,
                    # The scorer's name, as `dmlsearch show` names the metric.
                    "scoring": self.scoring if isinstance(self.scoring, str) else None,
                    "resume": self.resume,
                },
            )
        if link:
            logger.info("dmlsearch: Dask dashboard at %s", link)
            progress.message(f"Dask dashboard: {link}")
            if reporter is not None:
                logger.info("dmlsearch: live page at %s", page_link(link))
                progress.message(f"dmlsearch page: {page_link(link)}")
        return reporter

    def _make_runner(
        self, client: Any, start: float, progress: Any, reporter: Any
    ) -> DaskRunner | GangTrialRunner:
        """The runner of this search's trials: one worker each, or gangs of
        ``workers_per_trial``."""
        runner: DaskRunner | GangTrialRunner
        if self.workers_per_trial > 1:
            from .runner.gang_trials import GangTrialRunner

            runner = GangTrialRunner(
                client,
                int(self.workers_per_trial),
                time_budget=self.time_budget,
                budget_start=start,
                progress=progress,
                observer=reporter,
                name=f"{type(self.estimator).__name__} (gangs of {self.workers_per_trial})",
            )
        else:
            runner = DaskRunner(
                client,
                max_concurrent_trials=self.max_concurrent_trials,
                trial_timeout=self.trial_timeout,
                time_budget=self.time_budget,
                budget_policy=self.time_budget_policy,
                budget_start=start,
                max_retries=self.max_retries,
                progress=progress,
                name=f"{type(self.estimator).__name__} ({strategy_name(self.strategy)})",
                observer=reporter,
                seeded=self.random_state is not None,
            )
        return runner

    def _finish(
        self,
        outcomes: dict[int, TrialOutcome],
        scoring: Scoring,
        refit_metric: str | None,
        n_splits: int,
        strategy: Strategy,
    ) -> None:
        trials = [outcomes[k] for k in sorted(outcomes)]
        # Trials the time budget stopped are expected, not failures (their state says so).
        bad = [t for t in trials if t.state not in (COMPLETE, STOPPED)]
        if not trials or all(t.state == STOPPED for t in trials):
            raise AllTrialsFailedError(
                f"no trial finished within time_budget={self.time_budget} s; raise the "
                "budget (or use time_budget_policy='finish')"
                if self.time_budget is not None
                else "no trial ran"
            )
        check_failures(trials, bad, "trials", self.error_score, stacklevel=4)
        warn_lost_oof(trials, stacklevel=4)
        error_score = float("nan") if self.error_score == "raise" else float(self.error_score)
        results = build_cv_results(
            trials,
            scoring.names,
            n_splits,
            return_train_score=self.return_train_score,
            error_score=error_score,
        )
        self.cv_results_ = results
        self.trials_ = trials
        self.n_splits_ = n_splits
        self.scorer_ = scoring.scorer_
        self.multimetric_ = scoring.multimetric
        # As scikit-learn: with one metric the best candidate is known even when refit=False.
        if self.refit or not scoring.multimetric:
            if callable(self.refit):
                self.best_index_ = refit_index(self.refit, results, len(trials))
            else:
                assert refit_metric is not None
                self.best_index_ = int(results[f"rank_test_{refit_metric}"].argmin())
                self.best_score_ = float(results[f"mean_test_{refit_metric}"][self.best_index_])
            self.best_params_ = results["params"][self.best_index_]

    def _refit(self, X: Any, y: Any, fit_params: dict[str, Any]) -> None:
        estimator = clone(self.estimator).set_params(**clone(self.best_params_, safe=False))
        t0 = time.perf_counter()
        # As the best trial's fits drew: an estimator left at random_state=None refits
        # the same model on every run of a seeded search.
        with seeded_globals(self.trials_[self.best_index_].seed):
            if y is None:
                estimator.fit(X, **fit_params)
            else:
                estimator.fit(X, y, **fit_params)
        self.refit_time_ = time.perf_counter() - t0
        self.best_estimator_ = estimator
        if hasattr(estimator, "feature_names_in_"):
            self.feature_names_in_ = estimator.feature_names_in_

    # -- results helpers ---------------------------------------------------------
    def trials_dataframe(self) -> pd.DataFrame:
        """``trials_`` as a DataFrame: one row per trial, one ``param_`` column per parameter.

        ``value`` is the objective the strategy maximised, as Optuna names it: the mean
        test score of the refit metric (the first metric when ``refit`` names none), NaN
        for a trial that did not complete. ``mean_test_<metric>`` are ``cv_results_``'s
        columns, as scikit-learn names them (failed trials hold ``error_score``). With a
        scheduler, one row per (trial, rung) step, with its ``iter`` and ``n_resources``.
        """
        check_is_fitted(self, "trials_")
        results = self.cv_results_
        metrics = [k[len("mean_test_") :] for k in results if k.startswith("mean_test_")]
        primary = (
            self.refit
            if self.multimetric_ and isinstance(self.refit, str) and self.refit in metrics
            else metrics[0]
        )
        rows = []
        for i, t in enumerate(self.trials_):
            value = float(results[f"mean_test_{primary}"][i])
            row: dict[str, Any] = {
                "number": t.number,
                "value": value if t.state == COMPLETE else float("nan"),
                "state": t.state,
            }
            row.update({f"mean_test_{m}": float(results[f"mean_test_{m}"][i]) for m in metrics})
            row.update({k: int(results[k][i]) for k in ("iter", "n_resources") if k in results})
            row.update(
                {
                    "duration": t.duration,
                    "worker": t.worker,
                    "retries": t.retries,
                    "seed": t.seed,
                    "error": t.error,
                }
            )
            row.update({f"param_{k}": v for k, v in t.params.items()})
            rows.append(row)
        return pd.DataFrame(rows)

    def oof_predictions(self, trial: int) -> np.ndarray:
        """The out-of-fold predictions of trial number ``trial`` (needs ``keep_oof=True``)."""
        from ._oof import for_search

        return for_search(self, trial)

    # -- delegation to the refitted estimator -------------------------------------
    def _check_refit(self, method: str) -> None:
        if not self.refit:
            raise AttributeError(_refit_false_message(self, method))
        check_is_fitted(self, "best_estimator_")

    @property
    def classes_(self) -> Any:
        self._check_refit("classes_")
        return self.best_estimator_.classes_

    @property
    def n_features_in_(self) -> int:
        self._check_refit("n_features_in_")
        return int(self.best_estimator_.n_features_in_)

    def score(self, X: Any, y: Any = None) -> float:
        """Score of the refitted estimator with the refit scorer."""
        self._check_refit("score")
        scorer = self.scorer_[self.refit] if self.multimetric_ else self.scorer_
        if y is None:
            return float(scorer(self.best_estimator_, X))
        return float(scorer(self.best_estimator_, X, y))

    @available_if(_estimator_has("predict"))
    def predict(self, X: Any) -> Any:
        self._check_refit("predict")
        return self.best_estimator_.predict(X)

    @available_if(_estimator_has("predict_proba"))
    def predict_proba(self, X: Any) -> Any:
        self._check_refit("predict_proba")
        return self.best_estimator_.predict_proba(X)

    @available_if(_estimator_has("predict_log_proba"))
    def predict_log_proba(self, X: Any) -> Any:
        self._check_refit("predict_log_proba")
        return self.best_estimator_.predict_log_proba(X)

    @available_if(_estimator_has("decision_function"))
    def decision_function(self, X: Any) -> Any:
        self._check_refit("decision_function")
        return self.best_estimator_.decision_function(X)

    @available_if(_estimator_has("score_samples"))
    def score_samples(self, X: Any) -> Any:
        self._check_refit("score_samples")
        return self.best_estimator_.score_samples(X)

    @available_if(_estimator_has("transform"))
    def transform(self, X: Any) -> Any:
        self._check_refit("transform")
        return self.best_estimator_.transform(X)

    @available_if(_estimator_has("inverse_transform"))
    def inverse_transform(self, X: Any) -> Any:
        self._check_refit("inverse_transform")
        return self.best_estimator_.inverse_transform(X)
