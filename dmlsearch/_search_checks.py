"""``SearchCV``'s parameters checked on the driver, before any work reaches the cluster.

Apart from ``search.py`` so that the estimator reads as the search it runs; the
multi-fidelity path (:mod:`dmlsearch._multifidelity`) runs the same checks.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

from ._rung_store import check_state_store
from ._scoring import Scoring, resolve_scoring
from ._validation import check_search_params, check_space_names, final_step
from ._xgb_matrices import stops_early
from .exceptions import DmlsearchError, InvalidParameterError
from .registry._checks import check_model_name
from .space import as_space

if TYPE_CHECKING:
    from .search import SearchCV

__all__ = ["check_early_stopping", "validate_search"]

#: Multi-fidelity parameters, with the value that means "not set".
_FIDELITY_DEFAULTS = {
    "resource": None,
    "min_resource": None,
    "max_resource": None,
    "reduction_factor": 3,
    "state_store": "auto",
}


def validate_search(search: SearchCV) -> tuple[Scoring, str | None]:
    """Every parameter of ``search`` (``InvalidParameterError`` naming the first bad one);
    its scoring and the metric that picks the best candidate (None: a refit callable)."""
    check_search_params(search)  # estimator class, cv, return_train_score
    if not hasattr(search.estimator, "fit"):
        raise InvalidParameterError(
            "estimator", f"expected an estimator with a fit method, got {search.estimator!r}"
        )
    _check_counts(search)
    _check_flags(search)
    scoring = resolve_scoring(search.estimator, search.scoring, search.error_score == "raise")
    refit_metric = _refit_metric(search, scoring)
    check_state_store(search.state_store)
    if search.scheduler is None:
        unused = [k for k, unset in _FIDELITY_DEFAULTS.items() if getattr(search, k) != unset]
        if unused:
            raise InvalidParameterError(
                unused[0],
                f"{', '.join(unused)} only apply to a multi-fidelity search: set scheduler "
                "('asha', 'hyperband', 'halving' or 'median') or drop them",
            )
    _check_gang(search)
    # Unknown parameter names fail here, on the driver, not on a worker after dispatch.
    check_space_names(search.estimator, as_space(search.search_space))
    return scoring, refit_metric


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_counts(search: SearchCV) -> None:
    """Trial counts, retries and time limits."""
    for name in ("n_trials", "max_concurrent_trials"):
        n = getattr(search, name)
        if n is not None and (not _is_int(n) or n < 1):
            raise InvalidParameterError(name, f"must be an integer >= 1 or None, got {n!r}")
    for name in ("trial_timeout", "time_budget"):
        t = getattr(search, name)
        if t is not None and (
            isinstance(t, bool)
            or not isinstance(t, numbers.Real)
            or not float(t) > 0
            or not math.isfinite(float(t))
        ):
            raise InvalidParameterError(name, f"must be a number of seconds > 0, got {t!r}")
    if search.time_budget_policy not in ("stop", "finish"):
        raise InvalidParameterError(
            "time_budget_policy",
            f"must be 'stop' or 'finish', got {search.time_budget_policy!r}",
        )
    r = search.max_retries
    if not _is_int(r) or r < 0:
        raise InvalidParameterError("max_retries", f"must be an integer >= 0, got {r!r}")


def _check_flags(search: SearchCV) -> None:
    """error_score, the booleans, and the experiment's name and resume."""
    error_score = search.error_score
    if not (
        error_score == "raise"
        or (isinstance(error_score, numbers.Real) and not isinstance(error_score, bool))
    ):
        raise InvalidParameterError(
            "error_score", f"must be 'raise' or a number, got {error_score!r}"
        )
    for flag in ("dashboard", "resume"):
        if not isinstance(getattr(search, flag), bool):
            raise InvalidParameterError(
                flag, f"must be True or False, got {getattr(search, flag)!r}"
            )
    name = search.experiment_name
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise InvalidParameterError("experiment_name", f"must be a non-empty string, got {name!r}")
    if name is not None:
        # The best model is registered under the experiment's name.
        check_model_name("experiment_name", name, "an experiment name (the best model's name)")
    if search.resume and (search.registry is None or name is None):
        raise InvalidParameterError(
            "resume", "resume=True needs a registry and the experiment_name to continue"
        )
    if search.progress is not None and not isinstance(search.progress, bool):
        raise InvalidParameterError(
            "progress", f"must be True, False or None, got {search.progress!r}"
        )


def _refit_metric(search: SearchCV, scoring: Scoring) -> str | None:
    """The metric ``refit`` picks the best candidate by (None: a callable picks it)."""
    refit = search.refit
    if scoring.multimetric:
        if refit is True or (isinstance(refit, str) and refit not in scoring.names):
            raise InvalidParameterError(
                "refit",
                f"with several scorers, refit must be one of {scoring.names}, a callable "
                f"or False; got {refit!r}",
            )
        return refit if isinstance(refit, str) else None
    if not (isinstance(refit, (bool, str)) or callable(refit)):
        raise InvalidParameterError(
            "refit", f"must be True, False, a string or a callable, got {refit!r}"
        )
    # scikit-learn takes any string as "refit on the one metric": refit="f1_macro" with
    # scoring="accuracy" then picks by accuracy, silently. Only the scorer's own name is.
    if isinstance(refit, str) and refit != search.scoring:
        raise InvalidParameterError(
            "refit", f"with one scorer, refit is True or False{_refit_hint(search.scoring, refit)}"
        )
    return "score"


def _refit_hint(scoring: Any, refit: str) -> str:
    """What to write instead of ``refit=<name>`` with the one scorer ``scoring``."""
    if isinstance(scoring, str):
        return (
            f" (or {scoring!r}, the scorer's name); a name picks among several scorers: "
            f"scoring=[{scoring!r}, {refit!r}] with refit={refit!r} picks by {refit!r}; "
            f"got {refit!r}"
        )
    if scoring is None:
        return (
            f"; got {refit!r}, with no scoring (the estimator's own score): to pick by "
            f"{refit!r}, pass scoring={refit!r} (a scikit-learn scorer name) and refit=True"
        )
    return (
        f"; got {refit!r}, with one callable scorer: use refit=True, or name the callable "
        f"as scoring={{{refit!r}: <the callable>}} with refit={refit!r}"
    )


def _check_gang(search: SearchCV) -> None:
    """``workers_per_trial`` and what does not combine with data-parallel trials yet."""
    from .runner.gang_trials import check_data_parallel_refit, check_workers_per_trial

    if search.refit:
        check_data_parallel_refit(search.estimator)
    k = check_workers_per_trial(search.workers_per_trial, search.estimator)
    if k == 1:
        return
    if search.scheduler is not None:
        from .runner.gang_rungs import check_gang_resource

        check_gang_resource(search.resource, k, search.estimator)
    for param, value, default, why in (
        ("keep_oof", search.keep_oof, False, "gang trials keep no out-of-fold predictions"),
        ("trial_timeout", search.trial_timeout, None, "a gang's collective has its own timeout"),
    ):
        if value != default:
            raise InvalidParameterError(
                param,
                f"{param}={value!r} does not combine with workers_per_trial="
                f"{search.workers_per_trial} yet ({why}); drop it or use workers_per_trial=1",
            )


def check_gang_net(search: SearchCV, X: Any, y: Any) -> None:
    """A torch estimator trained on a gang (``workers_per_trial > 1``): what its one-process
    fit refuses before the first epoch (a module's outputs that do not match the classes,
    its constructor's arguments), refused before any trial as the fit would. Skipped when
    the space sets the module's or criterion's arguments: its candidates may differ."""
    from .runner.gang_trials import is_torch_estimator

    k = search.workers_per_trial
    if not (_is_int(k) and k > 1) or not is_torch_estimator(search.estimator):
        return
    if hasattr(X, "dask") or y is None:
        return  # not the arrays a gang trial trains on: its own checks say so
    try:
        names = {name for sub in as_space(search.search_space).subspaces for name in sub}
    except DmlsearchError:  # the space's own check reports it
        return
    if any(name.split("__")[0] in ("module", "criterion") for name in names):
        return
    search.estimator.check_before_training(X, y)


def check_early_stopping(
    estimator: Any, search_space: Any, fit_params: dict[str, Any], workers_per_trial: Any = 1
) -> None:
    """InvalidParameterError for xgboost early stopping without the ``eval_set`` it stops on,
    or on a gang (``workers_per_trial > 1``), whose trials take no fit parameters.

    xgboost's scikit-learn models with ``early_stopping_rounds`` need ``fit(...,
    eval_set=...)``; without it every trial would fail on a worker with xgboost's message.
    The final step of a Pipeline counts (``<step>__eval_set``).
    """
    prefix, final = final_step(estimator)
    if not type(final).__module__.startswith("xgboost"):
        return
    key = f"{prefix}early_stopping_rounds"
    try:
        subspaces = as_space(search_space).subspaces
    except DmlsearchError:  # the space's own check reports it
        subspaces = ()
    by_rounds = getattr(final, "early_stopping_rounds", None) is not None or any(
        key in sub for sub in subspaces
    )
    stops = by_rounds or stops_early(final)  # also an EarlyStopping in its callbacks
    key = key if by_rounds else f"{prefix}callbacks"
    if stops and isinstance(workers_per_trial, int) and workers_per_trial > 1:
        raise InvalidParameterError(
            key,
            f"xgboost's early stopping is not available with workers_per_trial="
            f"{workers_per_trial} (gang trials take no eval_set): drop early_stopping_rounds "
            "(or the EarlyStopping callback) "
            "and let a scheduler stop poor trials (scheduler='asha', resource='n_estimators'), "
            "or use workers_per_trial=1",
        )
    if stops and f"{prefix}eval_set" not in fit_params:
        raise InvalidParameterError(
            key,
            f"{type(final).__name__} stops early on an eval_set, which fit was not given: "
            f"pass fit(X, y, {prefix}eval_set=[(X_val, y_val)]) (the same rows for every "
            "fold), or drop early_stopping_rounds (or the EarlyStopping callback) and let a "
            "scheduler stop poor trials "
            "(scheduler='asha', resource='n_estimators')",
        )
