"""How a budget maps onto an estimator: pure helpers that train a model up to a resource.

``resource`` names what the budget counts:

* ``"partial_fit"``: calls of ``partial_fit`` over the training data (epochs);
* an estimator parameter, e.g. ``"n_estimators"`` (scikit-learn ensembles with
  ``warm_start``, which the helper sets; xgboost's boosting rounds, continued from the
  previous booster), ``"max_iter"`` or ``"max_epochs"`` (torch epochs of skorch nets such
  as ``dmlsearch.training.TorchClassifier``, continued on the trained module); in a
  Pipeline, the step's parameter (``"clf__n_estimators"``);
* ``"n_samples"``: training rows, a deterministic subsample by seed (as scikit-learn's
  Halving searches).

Each ``train_*`` helper takes ``(state, X, y, resource, previous)``: ``state`` is the
unfitted estimator when ``previous == 0``, else the model trained to ``previous``. It
continues from that state where the estimator allows it, else refits from scratch, and
says which it did in the returned :class:`TrainStep`. It never changes ``state`` (a
continued model is a copy): a retried task sees the state it was given. The one exception
is asked for: ``train_param(..., consume=True)``, for a state its caller gives up.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import clone, is_classifier
from sklearn.exceptions import NotFittedError
from sklearn.utils import _safe_indexing
from sklearn.utils.validation import _num_samples, check_is_fitted

from .exceptions import InvalidParameterError

__all__ = [
    "RESOURCES",
    "TrainStep",
    "all_classes",
    "check_resource",
    "is_torch_net",
    "is_xgboost",
    "is_xgboost_forest",
    "subsample",
    "train",
    "train_n_samples",
    "train_param",
    "train_partial_fit",
]

#: The estimator parameters that scikit-learn's ``warm_start`` trains on from a fitted
#: state (ensembles grow, iterative solvers iterate on): the counting ones it continues.
_GROWN = ("n_estimators", "max_iter")

#: The resource names that are not an estimator parameter.
RESOURCES: tuple[str, ...] = ("partial_fit", "n_samples")


@dataclass(frozen=True)
class TrainStep:
    """A model trained to ``resource``.

    ``continued``: trained on from the state at ``previous`` (False: refitted from
    scratch). ``work``: resource units trained in this step, ``resource - previous`` when
    continued, ``resource`` when refitted; summed over a trial's steps it is the training
    actually done.
    """

    estimator: Any
    resource: int
    previous: int
    continued: bool
    work: int


def _check_budget(resource: Any, previous: Any) -> tuple[int, int]:
    for name, value, low in (("resource", resource, 1), ("previous", previous, 0)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
            raise InvalidParameterError(name, f"must be an integer >= {low}, got {value!r}")
    if previous > resource:
        raise InvalidParameterError(
            "resource",
            f"must be >= previous ({previous}), got {resource}: training cannot go back",
        )
    return int(resource), int(previous)


def _is_fitted(estimator: Any) -> bool:
    try:
        check_is_fitted(estimator)
    except (NotFittedError, TypeError):
        return False
    return True


def _fresh(state: Any) -> Any:
    """An unfitted copy of ``state`` with its parameters."""
    return clone(state)


def _warm_start_key(param: str) -> str:
    prefix, _, _ = param.rpartition("__")
    return f"{prefix}__warm_start" if prefix else "warm_start"


def check_resource(resource: Any, estimator: Any) -> str:
    """``resource`` if ``estimator`` can take it, else :class:`InvalidParameterError`.

    ``"partial_fit"`` needs a ``partial_fit`` method; ``"n_samples"`` any estimator; any
    other name must be one of ``estimator.get_params()``.
    """
    if not isinstance(resource, str) or not resource:
        raise InvalidParameterError(
            "resource",
            f"expected 'partial_fit', 'n_samples' or an estimator parameter name, got {resource!r}",
        )
    if resource == "partial_fit":
        if not callable(getattr(estimator, "partial_fit", None)):
            counts = _count_parameters(estimator)
            named = f"{counts[:3]}" if counts else "(e.g. 'n_estimators', 'max_iter')"
            raise InvalidParameterError(
                "resource",
                f"'partial_fit' needs an estimator with a partial_fit method; "
                f"{type(estimator).__name__} has none. Use an estimator parameter {named} "
                "or 'n_samples'",
            )
        return resource
    if resource == "n_samples":
        return resource
    params = estimator.get_params(deep=True)
    if resource not in params:
        # A step's parameter of that name first (a Pipeline's 'rf__n_estimators').
        close = [p for p in params if p.rpartition("__")[2] == resource]
        close = close or difflib.get_close_matches(resource, list(params), n=3)
        hint = f"; did you mean {close}?" if close else ""
        raise InvalidParameterError(
            "resource",
            f"{type(estimator).__name__} has no parameter {resource!r}{hint} "
            f"(or use one of {_takes(estimator)})",
        )
    refusal = _refuses_counts(estimator, params, resource)
    if refusal is not None:
        raise InvalidParameterError(
            "resource",
            f"{refusal}: the resource counts training units (1, 2, ...) up to max_resource; "
            f"pick one this estimator takes: {_takes(estimator)}",
        )
    return resource


def _takes(estimator: Any) -> list[str]:
    """The resources ``estimator`` can take: ``partial_fit`` where it has one, its
    counting parameters, and ``n_samples``."""
    fits = ["partial_fit"] if callable(getattr(estimator, "partial_fit", None)) else []
    return [*fits, *_count_parameters(estimator), "n_samples"]


def _count_parameters(estimator: Any) -> list[str]:
    """``estimator``'s parameters that count training units (``n_estimators``,
    ``max_iter``, ``max_epochs``), a Pipeline's steps' included."""
    try:
        params = estimator.get_params(deep=True)
    except Exception:  # not an estimator: nothing to suggest
        return []
    leaves = (*_GROWN, "max_epochs")  # and a skorch net's epochs
    return [p for p in params if p.rpartition("__")[2] in leaves]


def _refuses_counts(estimator: Any, params: dict[str, Any], name: str) -> str | None:
    """Why ``name`` cannot take integer counts, by scikit-learn's parameter constraints
    of the estimator that owns it; None where it can, or where no constraints say."""
    prefix, _, leaf = name.rpartition("__")
    owner = params.get(prefix) if prefix else estimator
    constraints = getattr(type(owner), "_parameter_constraints", None)
    if not isinstance(constraints, dict) or leaf not in constraints:
        return None
    try:
        from sklearn.utils._param_validation import validate_parameter_constraints
    except ImportError:  # scikit-learn moved it: the estimator's fit will say
        return None
    try:
        for count in (1, 3):
            validate_parameter_constraints(
                {leaf: constraints[leaf]}, {leaf: count}, caller_name=type(owner).__name__
            )
    except (TypeError, ValueError) as exc:
        return re.sub(r"\s*Got .* instead\.?$", "", str(exc)).rstrip(".")
    return None


def all_classes(y: Any) -> Any:
    """What a classifier's first ``partial_fit`` takes as ``classes``: ``y``'s labels, or
    one array of labels per output of a multi-output ``y`` (``MultiOutputClassifier``)."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] > 1:
        return [np.unique(y[:, j]) for j in range(y.shape[1])]
    return np.unique(y)


def train_partial_fit(
    state: Any,
    X: Any,
    y: Any,
    resource: int,
    previous: int = 0,
    *,
    classes: Any = None,
    fit_params: dict[str, Any] | None = None,
) -> TrainStep:
    """Call ``partial_fit(X, y)`` until ``resource`` calls in all; continue a fitted state.

    A classifier's first call gets ``classes`` (default: :func:`all_classes` of ``y``).
    """
    resource, previous = _check_budget(resource, previous)
    check_resource("partial_fit", state)
    fit_params = dict(fit_params or {})
    # fit(X, y, classes=...) as partial_fit's users write it: the first call's classes.
    classes = fit_params.pop("classes", classes)
    continued = previous > 0 and _is_fitted(state)
    if continued:
        model, done = copy.deepcopy(state), previous
    else:
        model, done = _fresh(state), 0
    for call in range(done, resource):
        extra: dict[str, Any] = {}
        if call == 0 and is_classifier(model):
            extra["classes"] = all_classes(y) if classes is None else classes
        model.partial_fit(X, y, **extra, **fit_params)
    return TrainStep(model, resource, previous, continued, resource - done)


def _grows(estimator: Any, param: str) -> bool:
    """Whether a warm-started fit with ``param`` raised trains on from the fitted state.

    scikit-learn's ``warm_start`` grows ``n_estimators`` (ensembles) and ``max_iter``
    (iterative solvers); any other parameter (``max_depth``, ``max_leaf_nodes``) is read
    anew by a refit, and a warm-started fit without more members or iterations keeps the
    old model. ``LogisticRegression(solver="liblinear")`` ignores ``warm_start``.
    """
    if param.rpartition("__")[2] not in _GROWN:
        return False
    step = _step_of(estimator, param)
    return not (type(step).__name__ == "LogisticRegression" and step.solver == "liblinear")


def _counts_total(estimator: Any, param: str) -> bool:
    """Whether a warm-started fit with ``param = r`` ends at ``r`` in all (ensembles).

    scikit-learn's ensembles grow to ``n_estimators`` (HistGradientBoosting to
    ``max_iter``) in all; iterative solvers (LogisticRegression, MLP, SGD) run up to
    ``max_iter`` *more* iterations from their previous solution.
    """
    name = param.rpartition("__")[2]
    if name == "n_estimators":
        return True
    return type(_step_of(estimator, param)).__name__.startswith("HistGradientBoosting")


def _step_of(estimator: Any, param: str) -> Any:
    """The estimator that owns ``param`` (a Pipeline's step, or ``estimator`` itself)."""
    prefix = param.rpartition("__")[0]
    return estimator.get_params(deep=True).get(prefix, estimator) if prefix else estimator


def _stops_early(estimator: Any, param: str, X: Any) -> bool:
    """Whether the model owning ``param`` stops early on validation data.

    Gradient boosting's ``n_iter_no_change``, ``early_stopping=True`` (HistGradientBoosting
    and the SGD family, MLP), HistGradientBoosting's ``"auto"`` past 10,000 rows: a
    warm-started fit forgets its early-stopping history and trains past where a fit from
    scratch stops, so a continued step would not be the model of its resource. xgboost's
    ``early_stopping_rounds`` likewise: boosted on from a booster that stopped, it adds
    rounds past the stop, with a validation history of their own.
    """
    from sklearn.ensemble import GradientBoostingClassifier, GradientBoostingRegressor

    step = _step_of(estimator, param)
    if is_xgboost(step):
        from ._xgb_matrices import stops_early

        return stops_early(step)
    flag = getattr(step, "early_stopping", False)
    if flag is True or (flag == "auto" and _num_samples(X) > 10_000):
        return True
    return isinstance(step, GradientBoostingClassifier | GradientBoostingRegressor) and (
        step.n_iter_no_change is not None
    )


def is_xgboost(estimator: Any) -> bool:
    """Whether ``estimator`` is one of xgboost's scikit-learn models (XGBClassifier, ...).

    Tested by module name and method, so that this module never imports xgboost.
    """
    return type(estimator).__module__.split(".")[0] == "xgboost" and callable(
        getattr(estimator, "get_booster", None)
    )


def is_xgboost_forest(estimator: Any) -> bool:
    """Whether ``estimator`` is xgboost's random forest (``XGBRFClassifier``, ...): its
    ``n_estimators`` are the trees of one round, which cannot be continued by boosting."""
    names = {cls.__name__ for cls in type(estimator).__mro__}
    return is_xgboost(estimator) and bool(names & {"XGBRFClassifier", "XGBRFRegressor"})


def _xgboost_rounds(state: Any, param: str) -> bool:
    """Whether ``param`` counts an xgboost model's boosting rounds (its ``n_estimators``;
    not a random forest's trees, which are refitted at every budget)."""
    step = _step_of(state, param)
    counts = param.rpartition("__")[2] == "n_estimators"
    return counts and is_xgboost(step) and not is_xgboost_forest(step)


def _xgb_fit(
    model: Any, X: Any, y: Any, param: str, key: Hashable | None, **fit_params: Any
) -> None:
    """``model.fit``, its training matrix built once per ``key`` (a fold of one search)."""
    from ._xgb_matrices import cached_train_matrix

    # In a Pipeline the booster sees transformed rows, new on every fit: nothing to reuse.
    with cached_train_matrix(model, None if "__" in param else key, X):
        model.fit(X, y, **fit_params)


def _boost_in_place(state: Any, param: str, key: Hashable | None, rounds: int) -> bool:
    """Train ``state``'s own booster ``rounds`` more rounds (not in a Pipeline); False if not."""
    from ._xgb_matrices import boost_in_place

    return "__" not in param and boost_in_place(state, key, rounds)


def _continue_xgboost(
    state: Any,
    X: Any,
    y: Any,
    resource: int,
    previous: int,
    param: str,
    fit_params: dict[str, Any],
    matrix_key: Hashable | None,
) -> TrainStep:
    """Train ``resource - previous`` more rounds on the booster of ``state``.

    xgboost's ``fit(..., xgb_model=booster)`` starts from a copy of that booster and adds
    ``n_estimators`` rounds, so the fit gets the difference; the parameter is then set back
    to the total, which is what the model now holds.
    """
    booster = _step_of(state, param).get_booster()
    prefix = param.rpartition("__")[0]
    key = f"{prefix}__xgb_model" if prefix else "xgb_model"
    model = _fresh(state)
    model.set_params(**{param: resource - previous})
    _xgb_fit(model, X, y, param, matrix_key, **{key: booster}, **fit_params)
    model.set_params(**{param: resource})
    return TrainStep(model, resource, previous, True, resource - previous)


def is_torch_net(estimator: Any) -> bool:
    """Whether ``estimator`` is a skorch net (``dmlsearch.training.TorchClassifier``, ...).

    Tested by the modules of its classes, so that this module never imports skorch.
    """
    return any(cls.__module__.split(".")[0] == "skorch" for cls in type(estimator).__mro__)


def _torch_epochs(state: Any, param: str) -> bool:
    """Whether ``param`` counts a skorch net's epochs (its ``max_epochs``)."""
    return param.rpartition("__")[2] == "max_epochs" and is_torch_net(_step_of(state, param))


def _train_epochs(
    state: Any, X: Any, y: Any, resource: int, previous: int, param: str, fit_params: dict[str, Any]
) -> TrainStep:
    """Train a skorch net to ``resource`` epochs, continuing the module trained to ``previous``.

    A fitted net continues with ``warm_start`` for ``resource - previous`` more epochs (the
    same module, optimizer state and history); then ``max_epochs`` is set back to the
    total and ``warm_start`` to what it was, so the model says what it holds.
    """
    if previous > 0 and _is_fitted(state):
        model = copy.deepcopy(state)
        if resource > previous:
            warm = _warm_start_key(param)
            was = model.get_params(deep=True)[warm]
            model.set_params(**{param: resource - previous, warm: True})
            model.fit(X, y, **fit_params)
            model.set_params(**{param: resource, warm: was})
        return TrainStep(model, resource, previous, True, resource - previous)
    model = _fresh(state)
    model.set_params(**{param: resource})
    model.fit(X, y, **fit_params)
    return TrainStep(model, resource, previous, False, resource)


def train_param(
    state: Any,
    X: Any,
    y: Any,
    resource: int,
    previous: int = 0,
    *,
    param: str,
    fit_params: dict[str, Any] | None = None,
    matrix_key: Hashable | None = None,
    consume: bool = False,
) -> TrainStep:
    """Train with estimator parameter ``param`` set to the budget.

    With ``warm_start`` (set here) and a state trained to ``previous``, training continues:
    an ensemble grows from ``previous`` to ``resource`` members (same model as fitting
    ``resource`` at once, for a fixed ``random_state``); an iterative solver runs
    ``resource - previous`` more iterations from its previous solution. xgboost's
    ``n_estimators`` (boosting rounds) continue from the previous booster, the same model
    as ``resource`` rounds at once; a skorch net's ``max_epochs`` train ``resource -
    previous`` more epochs on its module (:func:`is_torch_net`). Otherwise (a model that
    stops early on validation data included: xgboost's ``early_stopping_rounds`` too) the
    model is refitted with ``param = resource``. ``matrix_key`` names ``(X, y)`` (a
    search's fold): an xgboost model's training matrix is then built once per key on this
    worker.

    ``consume``: the caller gives ``state`` up (a worker's cached fold model, taken out of
    its cache), so an xgboost model with ``matrix_key`` trains on in place, on its own
    booster (:func:`dmlsearch._xgb_matrices.boost_in_place`): the returned model is
    ``state``, changed. Otherwise ``state`` is never changed.
    """
    resource, previous = _check_budget(resource, previous)
    check_resource(param, state)
    fit_params = dict(fit_params or {})
    if _torch_epochs(state, param):
        return _train_epochs(state, X, y, resource, previous, param, fit_params)
    goes_on = previous > 0 and _is_fitted(state) and not _stops_early(state, param, X)
    if _xgboost_rounds(state, param) and goes_on:
        if resource == previous:
            return TrainStep(copy.deepcopy(state), resource, previous, True, 0)
        if (
            consume
            and not fit_params
            and _boost_in_place(state, param, matrix_key, resource - previous)
        ):
            state.set_params(**{param: resource})
            return TrainStep(state, resource, previous, True, resource - previous)
        return _continue_xgboost(state, X, y, resource, previous, param, fit_params, matrix_key)
    warm = _warm_start_key(param)
    params = state.get_params(deep=True)
    if warm in params and goes_on and _grows(state, param):
        model = copy.deepcopy(state)
        if resource == previous:
            return TrainStep(model, resource, previous, True, 0)
        budget = resource if _counts_total(model, param) else resource - previous
        model.set_params(**{param: budget, warm: True})
        model.fit(X, y, **fit_params)
        # The model says what it holds, and a later fit of it starts afresh unless its
        # owner asked for warm starts (a refit of best_estimator_ on new data).
        model.set_params(**{param: resource, warm: params[warm]})
        return TrainStep(model, resource, previous, True, resource - previous)
    model = _fresh(state)
    model.set_params(**{param: resource})
    if _xgboost_rounds(state, param):
        from ._xgb_matrices import reset_callbacks

        reset_callbacks(model)  # a clone copies what the callbacks learnt in state's fit
        _xgb_fit(model, X, y, param, matrix_key, **fit_params)
    else:
        model.fit(X, y, **fit_params)
    return TrainStep(model, resource, previous, False, resource)


def subsample(n_rows: int, resource: int, seed: int) -> np.ndarray:
    """Row indices of a ``resource``-row subsample of ``n_rows`` rows, fixed by ``seed``.

    Nested: the rows for a smaller budget are a prefix of those for a larger one (the same
    permutation of ``range(n_rows)``, cut shorter), and sorted, so row order is kept.
    """
    if isinstance(resource, bool) or not 1 <= resource <= n_rows:
        raise InvalidParameterError(
            "resource",
            f"n_samples must be an integer in [1, {n_rows}] (the training rows), got {resource!r}",
        )
    order = np.random.default_rng(np.random.SeedSequence(seed)).permutation(n_rows)
    return np.sort(order[: int(resource)])


def train_n_samples(
    state: Any,
    X: Any,
    y: Any,
    resource: int,
    previous: int = 0,
    *,
    seed: int = 0,
    fit_params: dict[str, Any] | None = None,
) -> TrainStep:
    """Fit on a ``resource``-row subsample (:func:`subsample`); always from scratch.

    More rows cannot be added to a fitted model without changing it, so this refits.
    Fit parameters with one value per row (``sample_weight``) are subsampled too.
    """
    resource, previous = _check_budget(resource, previous)
    n_rows = len(X) if not hasattr(X, "shape") else X.shape[0]
    rows = subsample(n_rows, resource, seed)
    params = {
        k: _safe_indexing(v, rows) if hasattr(v, "__len__") and len(v) == n_rows else v
        for k, v in (fit_params or {}).items()
    }
    model = _fresh(state)
    model.fit(_safe_indexing(X, rows), None if y is None else _safe_indexing(y, rows), **params)
    return TrainStep(model, resource, previous, False, resource)


def train(
    resource_name: str,
    state: Any,
    X: Any,
    y: Any,
    resource: int,
    previous: int = 0,
    *,
    seed: int = 0,
    fit_params: dict[str, Any] | None = None,
) -> TrainStep:
    """Train ``state`` to ``resource`` units of ``resource_name`` (dispatches to a helper)."""
    check_resource(resource_name, state)
    if resource_name == "partial_fit":
        return train_partial_fit(state, X, y, resource, previous, fit_params=fit_params)
    if resource_name == "n_samples":
        return train_n_samples(state, X, y, resource, previous, seed=seed, fit_params=fit_params)
    return train_param(state, X, y, resource, previous, param=resource_name, fit_params=fit_params)
