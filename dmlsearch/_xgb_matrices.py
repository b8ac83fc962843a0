"""A worker's cache of xgboost training matrices, one per fold of a multi-fidelity search.

Every rung step fits its trial's fold models with xgboost's scikit-learn ``fit``, which
builds a new (quantile) ``DMatrix`` from the fold's rows each time: the sketch of every
feature, often costing more than the few boosting rounds a rung adds. The fold's rows are
the same for every trial and every rung of one search, so the matrix is built once per
worker thread and fold and handed to ``fit`` again (:func:`cached_train_matrix`).

A promoted trial's fold model trains on in place (:func:`boost_in_place`): its own
``Booster`` gets the further rounds on that matrix, so xgboost's prediction cache makes
the step cost only its new rounds (``fit(xgb_model=booster)`` would copy the booster and
predict every earlier tree again, in a new ``Booster`` built through the whole ``fit``).

The fold's rows themselves (training and test parts, copied out of the search's data by
fancy indexing at every step) are kept too, read-only, while they fit in a share of the
worker's memory (:func:`cached_fold_rows`): xgboost never writes to its input, and a
continued step then copies nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

__all__ = [
    "MAX_MATRICES",
    "ROWS_SHARE",
    "boost_in_place",
    "cached_fold_rows",
    "cached_train_matrix",
    "drop_run",
    "fold_rows_key",
    "matrix_stats",
    "reset_callbacks",
    "stops_early",
]

#: Matrices (and folds' rows) kept per worker process (a few searches' folds), least
#: recently used dropped.
MAX_MATRICES = 16
#: The share of the worker's memory limit that cached folds' rows may take (1 GiB of
#: rows where the process has no limit).
ROWS_SHARE = 0.1
_ROWS_WITHOUT_LIMIT = 1 << 30

_lock = threading.Lock()
_matrices: OrderedDict[Hashable, Any] = OrderedDict()
_rows: OrderedDict[Hashable, tuple[int, tuple[Any, ...]]] = OrderedDict()
_stats = {"built": 0, "reused": 0, "in_place": 0, "rows_reused": 0}


def _config(model: Any) -> tuple[Any, ...]:
    """What the matrix depends on besides the rows: xgboost builds it from these."""
    # The parameters are attributes (scikit-learn's convention): get_params would cost an
    # inspect.signature per call, at every fold of every step.
    names = (
        "max_bin",
        "missing",
        "enable_categorical",
        "tree_method",
        "device",
        "booster",
        "feature_types",
    )
    values = tuple(repr(getattr(model, name, None)) for name in names)
    return (type(model).__qualname__, *values)


def _arrays(value: Any) -> list[np.ndarray] | None:
    """The numpy arrays holding ``value`` (an ndarray, or a scipy sparse matrix's data,
    indices and indptr); None for anything else, which is never cached: a pandas frame
    cannot be made read-only, so a caller writing into it would change it unseen."""
    if type(value) is np.ndarray:
        return [value]
    parts = [getattr(value, name, None) for name in ("data", "indices", "indptr")]
    if all(type(part) is np.ndarray for part in parts) and callable(getattr(value, "tocsr", None)):
        return parts  # type: ignore[return-value]
    return None


def _rows_budget() -> int:
    try:
        from distributed import get_worker

        limit = get_worker().memory_manager.memory_limit
    except (ImportError, ValueError, AttributeError):
        limit = None
    return int(limit * ROWS_SHARE) if limit else _ROWS_WITHOUT_LIMIT


def fold_rows_key(resource: str, estimator: Any, key: Hashable) -> Hashable | None:
    """``key`` if a rung step training ``estimator`` by ``resource`` may cache its folds'
    rows (:func:`cached_fold_rows`), else None.

    Only an xgboost model, not in a Pipeline, keeps them: it never writes to its input (a
    transformer with ``copy=False`` would), and it is what trains in place on a cached
    matrix, where copying the rows is most of a continued step's cost. A random forest
    refits at every step: nothing to gain.
    """
    from .fidelity import is_xgboost, is_xgboost_forest

    if "__" in resource or not is_xgboost(estimator) or is_xgboost_forest(estimator):
        return None
    return key


def cached_fold_rows(key: Hashable | None, make: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
    """``make()`` (a fold's rows, as a tuple of arrays), kept per ``key`` in this process.

    Later calls with the same ``key`` (a search run and a fold) get the same objects, made
    read-only, while the rows of every cached fold fit in :data:`ROWS_SHARE` of the
    worker's memory limit. Only numpy arrays and scipy sparse matrices are kept (pandas
    frames cannot be made read-only). ``None`` turns the cache off.
    """
    if key is None:
        return make()
    with _lock:
        held = _rows.get(key)
        if held is not None:
            _rows.move_to_end(key)
            _stats["rows_reused"] += 1
            return held[1]
    rows = make()
    arrays: list[np.ndarray] = []
    for part in rows:
        if part is None:
            continue
        held_by = _arrays(part)
        if held_by is None:
            return rows
        arrays += held_by
    size = sum(int(array.nbytes) for array in arrays)
    budget = _rows_budget()
    if size > budget:
        return rows
    # A caller that wrote into cached rows would change them for every later step: make
    # that an error instead.
    for array in arrays:
        array.flags.writeable = False
    with _lock:
        _rows[key] = (size, rows)
        while len(_rows) > MAX_MATRICES or sum(n for n, _ in _rows.values()) > budget:
            _rows.popitem(last=False)
    return rows


def drop_run(run: str) -> int:
    """Forget the matrices and rows of search run ``run`` (keys ``(run, fold)``); how many."""

    def of_run(key: Any) -> bool:
        return isinstance(key, tuple) and len(key) == 2 and key[0] == run

    with _lock:
        # A matrix's key is ((run, fold), thread, config).
        gone = [k for k in _matrices if isinstance(k, tuple) and of_run(k[0])]
        for key in gone:
            del _matrices[key]
        rows = [k for k in _rows if of_run(k)]
        for row_key in rows:
            del _rows[row_key]
    return len(gone) + len(rows)


def matrix_stats() -> dict[str, int]:
    """Training matrices this process built and reused, continuations in place, and fold
    rows reused (tests)."""
    with _lock:
        return dict(_stats)


@contextmanager
def cached_train_matrix(model: Any, key: Hashable | None, X: Any) -> Iterator[None]:
    """While ``model.fit(X, y)`` runs, build its training matrix once per ``key``.

    ``key`` names the rows and labels (a search run and a fold); ``None`` turns the cache
    off. Only the training matrix of exactly ``X``, without weights or margins, is cached;
    evaluation sets and anything else go to xgboost as usual.
    """
    create = getattr(model, "_create_dmatrix", None)
    if key is None or create is None:
        yield
        return
    full = (key, threading.get_ident(), _config(model))

    def cached(ref: Any = None, **kwargs: Any) -> Any:
        plain = (
            ref is None
            and kwargs.get("data") is X
            and kwargs.get("weight") is None
            and kwargs.get("base_margin") is None
        )
        if not plain:
            return create(ref=ref, **kwargs)
        with _lock:
            matrix = _matrices.get(full)
            if matrix is not None:
                _matrices.move_to_end(full)
                _stats["reused"] += 1
                return matrix
        matrix = create(ref=ref, **kwargs)
        with _lock:
            _matrices[full] = matrix
            _stats["built"] += 1
            while len(_matrices) > MAX_MATRICES:
                _matrices.popitem(last=False)
        return matrix

    # An instance attribute shadows the method for this fit only.
    model._create_dmatrix = cached
    try:
        yield
    finally:
        model.__dict__.pop("_create_dmatrix", None)


def stops_early(model: Any) -> bool:
    """Whether xgboost model ``model`` stops early on ``fit``'s ``eval_set``
    (``early_stopping_rounds``, or an ``xgboost.callback.EarlyStopping`` in its
    ``callbacks``): its rounds then follow that one ``fit``'s validation history, which
    boosting on from its booster does not have."""
    if getattr(model, "early_stopping_rounds", None) is not None:
        return True
    callbacks = getattr(model, "callbacks", None)
    if not callbacks or not isinstance(callbacks, (list, tuple)):
        return False
    from xgboost.callback import EarlyStopping

    return any(isinstance(c, EarlyStopping) for c in callbacks)


#: An ``xgboost.callback.EarlyStopping``'s state, as its constructor sets it: a fit does
#: not reset it, so a callback that went through a fit stops the next one early.
_EARLY_STOPPING_STATE = {
    "stopping_history": dict,
    "best_scores": dict,
    "current_rounds": int,
    "starting_round": int,
}


def reset_callbacks(model: Any) -> None:
    """Give ``model``'s (an unfitted copy of a fitted xgboost model) EarlyStopping
    callbacks the state of new ones; the copy's other callbacks are left as they are."""
    from xgboost.callback import EarlyStopping

    for step in getattr(model, "steps", None) or [(None, model)]:
        for callback in getattr(step[1], "callbacks", None) or ():
            if isinstance(callback, EarlyStopping):
                for name, empty in _EARLY_STOPPING_STATE.items():
                    setattr(callback, name, empty())


def boost_in_place(model: Any, key: Hashable | None, rounds: int) -> bool:
    """Add ``rounds`` boosting rounds to ``model``'s own booster; False if it cannot.

    Trains on the training matrix :func:`cached_train_matrix` built for ``key`` in this
    thread, with the booster's parameters as ``fit`` set them, as ``fit(X, y,
    xgb_model=booster)`` with ``n_estimators=rounds`` does (its rounds count from 0), but
    on the booster itself: its prediction cache holds the earlier trees' predictions.
    ``model`` changes; the caller owns it. False (nothing done) where ``fit`` would do more
    than boost: callbacks, early stopping, a callable objective or metric, or no cached
    matrix (another thread, or dropped); the caller then fits as usual.
    """
    if key is None or rounds < 1:
        return False
    if (
        getattr(model, "callbacks", None)
        or stops_early(model)
        or callable(getattr(model, "objective", None))
        or callable(getattr(model, "eval_metric", None))
    ):
        return False
    with _lock:
        matrix = _matrices.get((key, threading.get_ident(), _config(model)))
    if matrix is None:
        return False
    booster = model.get_booster()
    for i in range(rounds):
        booster.update(matrix, iteration=i)
    with _lock:
        _stats["in_place"] += 1
    return True
