"""What a search records in its registry: the experiment it opens (or reopens, restoring
finished trials), the configuration snapshot a resume is checked against, and the best
model's registration. Functions of a :class:`~dmlsearch.search.SearchCV` being fitted."""

from __future__ import annotations

import logging
import math
import warnings
from typing import TYPE_CHECKING, Any

from ._evaluate import TrialOutcome
from ._experiment import open_experiment, recorded_params, warn_recorded_beyond
from ._recording import SearchRecorder, input_signature, outcome_from_record
from ._search_support import strategy_name
from ._space_values import base_params
from .exceptions import InvalidParameterError
from .registry import FormatError, Registry, RegistryError
from .space import as_space, describe_value
from .strategies import Strategy, make_strategy

if TYPE_CHECKING:
    from ._recording import PriorRun
    from .registry import TrialRecord
    from .search import SearchCV

__all__ = [
    "config_snapshot",
    "open_recorder",
    "open_search_experiment",
    "recorded_search_params",
    "register_best",
]

logger = logging.getLogger("dmlsearch")


def open_recorder(
    search: SearchCV,
    registry: Registry,
    name: str,
    primary: str,
    seed: int,
    strategy: Strategy,
    space: Any,
    n_splits: int,
    fingerprint: str,
    cluster: dict[str, Any],
    outcomes: dict[int, TrialOutcome],
    skip: set[int],
) -> tuple[SearchRecorder, int, Strategy]:
    """Open (or, with ``resume``, reopen) the experiment and restore its finished trials.

    A refused resume leaves the experiment as it found it (status included).
    """
    config = config_snapshot(search, seed, n_splits)
    recorder, prior, previous_status = open_search_experiment(
        search, registry, name, primary, config, fingerprint, cluster
    )
    if prior is None:
        return recorder, seed, strategy
    if prior.seed != seed:
        seed = prior.seed
        strategy = make_strategy(search.strategy, space, search.n_trials, seed)
    warn_recorded_beyond(name, prior, strategy.total, search.n_trials)
    for record in prior.trials:
        params = recorded_search_params(search, record, strategy, space, recorder, previous_status)
        if params is None:
            continue
        strategy.restore(record.number, params, record.value)
        outcomes[record.number] = outcome_from_record(
            record, params, n_splits, search.return_train_score
        )
        skip.add(record.number)
    return recorder, seed, strategy


def open_search_experiment(
    search: SearchCV,
    registry: Registry,
    name: str,
    primary: str,
    config: dict[str, Any],
    fingerprint: str,
    cluster: dict[str, Any],
) -> tuple[SearchRecorder, PriorRun | None, str | None]:
    """Open (or, with ``resume``, reopen) experiment ``name``, its configuration checked.

    Returns the recorder, what an earlier run recorded (None for a new experiment) and
    the experiment's status before this run (to put back on a refused resume).
    """
    recorder, prior, previous_status = open_experiment(
        registry, name, config, resume=search.resume, owns=registry is not search.registry,
        metric=primary, fingerprint=fingerprint, cluster=cluster, cv=search.cv,
    )  # fmt: skip
    search.experiment_name_ = name
    search.experiment_id_ = recorder.experiment_id
    return recorder, prior, previous_status


def recorded_search_params(
    search: SearchCV,
    record: TrialRecord,
    strategy: Strategy,
    space: Any,
    recorder: SearchRecorder,
    previous_status: str | None,
) -> dict[str, Any] | None:
    """The parameters of recorded trial ``record`` under this search (None: beyond it).

    A record this search cannot give the same parameters is refused (the recorder is
    closed with the experiment's earlier status).
    """

    def refuse(message: str) -> InvalidParameterError:
        recorder.close(previous_status or "interrupted")
        return InvalidParameterError("resume", message)

    return recorded_params(record, strategy, space, recorder.name, refuse)


def config_snapshot(search: SearchCV, seed: int, n_splits: int) -> dict[str, Any]:
    """What the experiment records about this search (JSON-friendly).

    The ``repr`` entries are for people; ``estimator_spec`` and ``search_space_spec``
    describe both exactly (see :func:`~dmlsearch.space.describe_value`) so that a
    resume can tell whether either changed, and ``cv_folds`` (the sha256 of the folds'
    index arrays, computed by ``fit``) whether the folds did.
    """
    folds = getattr(search, "_cv_folds", None)
    return {
        "estimator": repr(search.estimator),
        "search_space": repr(search.search_space),
        "strategy": strategy_name(search.strategy),
        "n_trials": search.n_trials,
        "time_budget": search.time_budget,
        "cv": repr(search.cv),
        "n_splits": n_splits,
        "scoring": repr(search.scoring),
        "refit": repr(search.refit),
        "seed": seed,
        "workers_per_trial": search.workers_per_trial,
        "estimator_spec": describe_value(search.estimator),
        "scoring_spec": describe_value(search.scoring),
        "search_space_spec": as_space(search.search_space).describe(),
        "base_params": base_params(search.estimator, as_space(search.search_space).subspaces),
        **({} if folds is None else {"cv_folds": folds}),
    }


def register_best(search: SearchCV, recorder: SearchRecorder, X: Any) -> None:
    search.model_version_ = None  # a warning says why it stays so
    if not hasattr(search, "best_estimator_"):
        return
    best = getattr(search, "best_score_", None)  # none with a callable refit
    if best is not None and math.isnan(best):
        # Every trial failed on some fold (scikit-learn still refits, and so do we):
        # a model of unknown quality must not become the model's next version.
        warnings.warn(
            f"experiment {recorder.name!r}: no trial was scored on every fold (see "
            "cv_results_ and the trials' errors), so the refitted best_estimator_ was "
            "not registered",
            UserWarning,
            stacklevel=3,
        )
        return
    metrics: dict[str, Any] = {}
    for key, values in search.cv_results_.items():
        if key.startswith(("mean_test_", "std_test_")):
            metrics[key] = float(values[search.best_index_])
    trial = search.trials_[search.best_index_].number
    earlier = recorder.registered(trial)
    if earlier is not None:
        # A resume that found no better trial: its refit is the model registered then.
        search.model_version_ = earlier
        logger.info(
            "dmlsearch: best trial %d of experiment %r is registered already, as %s v%d; "
            "not registered again",
            trial, recorder.name, earlier.model, earlier.version,
        )  # fmt: skip
        return
    try:
        # Retries a briefly unavailable registry; a finished search never fails here.
        search.model_version_ = recorder.register_model(
            search.best_estimator_,
            metrics=metrics,
            trial=trial,
            signature=input_signature(X),
        )
    except (FormatError, RegistryError) as exc:
        message = recorder.unregistered(search.best_estimator_, exc, trial)
        warnings.warn(message, UserWarning, stacklevel=3)
