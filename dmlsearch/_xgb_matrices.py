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
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["MAX_MATRICES", "boost_in_place", "cached_train_matrix", "matrix_stats"]

#: Matrices kept per worker process (a few searches' folds), least recently used dropped.
MAX_MATRICES = 16

_lock = threading.Lock()
_matrices: OrderedDict[Hashable, Any] = OrderedDict()
_stats = {"built": 0, "reused": 0, "in_place": 0}


def _config(model: Any) -> tuple[Any, ...]:
    """What the matrix depends on besides the rows: xgboost builds it from these."""
    names = ("max_bin", "missing", "enable_categorical", "tree_method", "device", "booster")
    values = tuple(repr(getattr(model, name, None)) for name in names)
    return (type(model).__qualname__, repr(model.get_params().get("feature_types")), *values)


def matrix_stats() -> dict[str, int]:
    """Training matrices this process built and reused, continuations in place (tests)."""
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
        or getattr(model, "early_stopping_rounds", None) is not None
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
