"""Ensemble members as units of the runner's one futures loop; what runs on a worker.

Two kinds of unit:

* :class:`BagKind`: one bagging member. The data is scattered once; a unit's payload is
  ``(index, seed)`` and the member's rows, features and estimator seed are drawn on the
  worker from ``seed`` alone (:func:`draw_member`), so the same ``random_state`` gives the
  same members whatever the cluster and the batching.
* :class:`StackKind`: one (base estimator x fold) fit of stacking, giving that fold's
  out-of-fold predictions, or (fold ``-1``) the base estimator refit on all rows.

A unit that raises is returned with its traceback (never dropped); the driver raises
:class:`MemberFitError` naming it. This module is imported by worker processes: no Dask
at module level.
"""

from __future__ import annotations

import pickle
import time
import traceback
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.utils import _safe_indexing
from sklearn.utils.validation import has_fit_parameter

from .._states import FAILED
from ..exceptions import DmlsearchError
from ..runner.units import Unit, UnitKind, UnitPolicy

__all__ = [
    "BagKind",
    "BagSpec",
    "MemberData",
    "MemberError",
    "MemberFitError",
    "MemberLostError",
    "MemberResult",
    "StackKind",
    "StackSpec",
    "draw_member",
    "fit_bag_members",
    "fit_stack_units",
    "member_seed",
    "set_random_states",
]

MAX_INT = int(np.iinfo(np.int32).max)
#: The fold number of a stacking unit that refits its base estimator on all rows.
FULL = -1


class MemberError(DmlsearchError):
    """An ensemble member could not be fitted; ``member`` names it.

    (``"BaggingClassifier member 3 of 10 (...)"``, ``"StackingClassifier estimator 'lr'
    (...), fold 2 of 5"``.)
    """

    def __init__(self, member: str, message: str) -> None:
        self.member = member
        super().__init__(message)


class MemberFitError(MemberError, ValueError):
    """A member's ``fit`` (or its out-of-fold prediction) raised.

    ``__cause__`` is the member's own exception when it could be sent back from its worker;
    the message carries the worker's traceback either way.
    """


class MemberLostError(MemberError, RuntimeError):
    """A member's unit was lost with its worker more often than the runner retries it."""


def member_seed(entropy: int, index: int) -> int:
    """The seed of bagging member ``index``: a pure function of the ensemble's entropy."""
    state = np.random.SeedSequence(entropy, spawn_key=(index,)).generate_state(2, np.uint32)
    return int(state[0]) << 32 | int(state[1])


def set_random_states(estimator: Any, seed: int) -> None:
    """Fix every ``random_state`` parameter of ``estimator`` (nested ones too) from ``seed``."""
    rng = np.random.default_rng(seed)
    names = sorted(
        k
        for k in estimator.get_params(deep=True)
        if k == "random_state" or k.endswith("__random_state")
    )
    if names:
        estimator.set_params(**{k: int(rng.integers(MAX_INT)) for k in names})


@dataclass(frozen=True)
class MemberData:
    """The rows every bagging member draws from; scattered once per fit."""

    X: Any
    y: Any
    sample_weight: np.ndarray | None = None
    # The fit parameter the weights go to: a Pipeline's is its final step's (see
    # weight_key), for callers that route them there.
    weight_key: str = "sample_weight"


@dataclass(frozen=True)
class BagSpec:
    """How members are drawn and fitted (small; scattered once per fit).

    ``n_classes`` is ``None`` for a regressor. ``oob``: return each member's predictions
    on the rows it did not draw.
    """

    estimator: Any
    n_samples: int
    n_features: int
    max_samples: int
    max_features: int
    bootstrap: bool
    bootstrap_features: bool
    oob: bool = False
    n_classes: int | None = None


@dataclass
class MemberResult:
    """What one unit gives back: its id, the fitted estimator or predictions, or an error."""

    id: Hashable
    estimator: Any = None
    features: np.ndarray | None = None
    predictions: np.ndarray | None = None
    duration: float = 0.0
    worker: str = ""
    error: str | None = None
    exception: BaseException | None = None
    state: str = "complete"
    #: The member's own code raised (False: the loop gave the unit up; see ``state``).
    raised: bool = False


def draw_member(
    seed: int, spec: BagSpec, sample_weight: np.ndarray | None = None
) -> tuple[int, np.ndarray, np.ndarray]:
    """``(estimator seed, feature indices, row indices)`` of the member seeded ``seed``.

    Rows are drawn with replacement if ``bootstrap`` (with probabilities proportional to
    ``sample_weight`` when given, as scikit-learn does), features likewise with
    ``bootstrap_features``; a draw without replacement is sorted.
    """
    rng = np.random.default_rng(seed)
    estimator_seed = int(rng.integers(MAX_INT))
    if spec.bootstrap_features:
        features = rng.integers(0, spec.n_features, spec.max_features)
    elif spec.max_features == spec.n_features:
        features = np.arange(spec.n_features)
    else:
        features = np.sort(rng.choice(spec.n_features, spec.max_features, replace=False))
    if sample_weight is not None:
        p = sample_weight / sample_weight.sum()
        rows = rng.choice(spec.n_samples, spec.max_samples, replace=spec.bootstrap, p=p)
        if not spec.bootstrap:
            rows = np.sort(rows)
    elif spec.bootstrap:
        rows = rng.integers(0, spec.n_samples, spec.max_samples)
    else:
        rows = np.sort(rng.choice(spec.n_samples, spec.max_samples, replace=False))
    return estimator_seed, features.astype(np.intp), rows.astype(np.intp)


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except Exception:  # not on a worker (a test calling the function directly)
        return ""


def _sendable(exc: BaseException) -> BaseException | None:
    """``exc`` if it survives pickling (to be the driver's ``__cause__``), else None."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return None
    return exc


def _raised(uid: Any, exc: BaseException, duration: float, worker: str) -> MemberResult:
    """The result of a fit that raised: its traceback, and the exception if it travels."""
    return MemberResult(
        uid,
        duration=duration,
        worker=worker,
        error=traceback.format_exc(),
        exception=_sendable(exc),
        state=FAILED,
        raised=True,
    )


def _columns(X: Any, features: np.ndarray, n_features: int) -> Any:
    if len(features) == n_features and np.array_equal(features, np.arange(n_features)):
        return X
    return X[:, features]


def class_votes(estimator: Any, X: Any, n_classes: int) -> np.ndarray:
    """Class probabilities (or one-hot votes) of ``estimator``, over all ``n_classes``.

    A member trained on rows missing a class knows fewer classes; its columns go where its
    (encoded) ``classes_`` say, as in scikit-learn's bagging.
    """
    out = np.zeros((X.shape[0], n_classes))
    if hasattr(estimator, "predict_proba"):
        proba = estimator.predict_proba(X)
        classes = np.asarray(estimator.classes_, dtype=np.intp)
        if len(classes) == n_classes:
            out += proba
        else:
            out[:, classes] += proba
    else:
        predicted = np.asarray(estimator.predict(X), dtype=np.intp)
        out[np.arange(len(predicted)), predicted] += 1
    return out


def _out_of_bag(
    estimator: Any, data: MemberData, spec: BagSpec, rows: np.ndarray, features: np.ndarray
) -> np.ndarray:
    mask = np.ones(spec.n_samples, dtype=bool)
    mask[rows] = False
    oob = np.flatnonzero(mask)
    if len(oob) == 0:  # the member drew every row: no predictions, in the usual shape
        if spec.n_classes:
            return np.zeros((0, spec.n_classes))
        return np.zeros((0, *np.shape(data.y)[1:]))
    X_oob = _columns(data.X[oob], features, spec.n_features)
    if spec.n_classes is not None:
        return class_votes(estimator, X_oob, spec.n_classes)
    return np.asarray(estimator.predict(X_oob))


def _fit_member(
    estimator: Any, data: MemberData, spec: BagSpec, rows: np.ndarray, features: np.ndarray
) -> None:
    """Fit a bagging member on its drawn rows.

    As scikit-learn's bagging does, an estimator that takes ``sample_weight`` is fitted on
    every row weighted by how often it was drawn (0: not drawn): the same loss as on the
    drawn rows repeated (estimators that count rows, such as a tree's ``min_samples_leaf``,
    count distinct rows), and cheaper (no copy; a tree on 75,000 rows: 1.2 s instead of
    1.7 s). Only when at least half as many rows are drawn as there are: fitting on all
    rows costs more than on a small sample. With the user's ``sample_weight`` the rows were drawn by weight, and are copied.
    """
    if (
        data.sample_weight is None
        and 2 * spec.max_samples >= spec.n_samples
        and has_fit_parameter(estimator, "sample_weight")
    ):
        counts = np.bincount(rows, minlength=spec.n_samples).astype(np.float64)
        X = _columns(data.X, features, spec.n_features)
        estimator.fit(X, data.y, sample_weight=counts)
    else:
        estimator.fit(_columns(data.X[rows], features, spec.n_features), data.y[rows])


def fit_bag_members(
    data: MemberData,
    spec: BagSpec,
    payloads: list[tuple[int, int]],
    start_by: float | None,
    stop_by: float | None,
) -> list[MemberResult]:
    """Fit the bagging members ``(index, seed)`` of ``payloads`` (runs on a worker)."""
    out = []
    worker = _worker_address()
    for index, seed in payloads:
        if start_by is not None and time.time() >= start_by:
            break
        t0 = time.perf_counter()
        try:
            estimator_seed, features, rows = draw_member(seed, spec, data.sample_weight)
            estimator = clone(spec.estimator)
            set_random_states(estimator, estimator_seed)
            _fit_member(estimator, data, spec, rows, features)
            oob = _out_of_bag(estimator, data, spec, rows, features) if spec.oob else None
        except Exception as exc:
            out.append(_raised(index, exc, time.perf_counter() - t0, worker))
            continue
        out.append(
            MemberResult(
                index,
                estimator=estimator,
                features=features,
                predictions=oob,
                duration=time.perf_counter() - t0,
                worker=worker,
            )
        )
    return out


class _MemberKind(UnitKind[Any, MemberResult]):
    """Ensemble fits as units: the data and the spec are shared (scattered once)."""

    #: The task function, set by each subclass.
    task: Callable[..., Sequence[MemberResult]]

    def __init__(self, data: MemberData, spec: Any, policy: UnitPolicy | None = None) -> None:
        super().__init__(policy)
        self.data = data
        self.spec = spec

    def function(self) -> Callable[..., Sequence[MemberResult]]:
        return type(self).task

    def shared(self) -> tuple[Any, ...]:
        return (self.data, self.spec)

    def result_id(self, result: MemberResult) -> Hashable:
        return result.id

    def duration(self, result: MemberResult) -> float | None:
        return result.duration if result.error is None else None

    def failed(self, unit: Unit[Any], state: str, error: str) -> MemberResult:
        return MemberResult(unit.id, error=error, state=state)


class BagKind(_MemberKind):
    """Bagging members: unit id = member index, payload = ``(index, seed)``."""

    name = "bagging-member"
    task = staticmethod(fit_bag_members)


# -- stacking ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StackSpec:
    """Base estimators, their stack methods and the one fold assignment (scattered once).

    ``n_classes`` is ``None`` for a regressor.
    """

    estimators: list[Any]
    methods: list[str]
    folds: list[tuple[np.ndarray, np.ndarray]]
    n_classes: int | None = None


def order_predictions(
    classes: np.ndarray, predictions: np.ndarray, n_classes: int, method: str
) -> np.ndarray:
    """Columns of a fold's predictions for every class, when its training rows missed some.

    As scikit-learn's ``cross_val_predict``: a missing class gets probability 0, and the
    lowest float for a decision function.
    """
    if method == "predict" or len(classes) == n_classes:
        return predictions
    if method == "decision_function" and predictions.ndim == 1:
        raise ValueError(
            f"a fold's training rows hold {len(classes)} of the {n_classes} classes, so its "
            "decision_function has one column; use stratified folds or stack_method="
            "'predict_proba'"
        )
    fill = 0.0 if method == "predict_proba" else np.finfo(predictions.dtype).min
    out = np.full((predictions.shape[0], n_classes), fill, dtype=predictions.dtype)
    out[:, np.asarray(classes, dtype=np.intp)] = predictions
    return out


def fit_stack_units(
    data: MemberData,
    spec: StackSpec,
    payloads: list[tuple[int, int]],
    start_by: float | None,
    stop_by: float | None,
) -> list[MemberResult]:
    """Fit each ``(estimator index, fold)`` of ``payloads`` (runs on a worker).

    A fold unit returns the fold's out-of-fold predictions; a :data:`FULL` unit returns
    the estimator fitted on every row.
    """
    out = []
    worker = _worker_address()
    sw = data.sample_weight
    for est_idx, fold in payloads:
        if start_by is not None and time.time() >= start_by:
            break
        t0 = time.perf_counter()
        uid = (est_idx, fold)
        try:
            estimator = clone(spec.estimators[est_idx])
            if fold == FULL:
                kwargs = {} if sw is None else {data.weight_key: sw}
                estimator.fit(data.X, data.y, **kwargs)
                out.append(
                    MemberResult(
                        uid, estimator=estimator, duration=time.perf_counter() - t0, worker=worker
                    )
                )
                continue
            train, test = spec.folds[fold]
            kwargs = {} if sw is None else {data.weight_key: sw[train]}
            estimator.fit(_safe_indexing(data.X, train), data.y[train], **kwargs)
            method = spec.methods[est_idx]
            predictions = getattr(estimator, method)(_safe_indexing(data.X, test))
            if spec.n_classes is not None:
                predictions = order_predictions(
                    estimator.classes_, np.asarray(predictions), spec.n_classes, method
                )
        except Exception as exc:
            out.append(_raised(uid, exc, time.perf_counter() - t0, worker))
            continue
        out.append(
            MemberResult(
                uid, predictions=predictions, duration=time.perf_counter() - t0, worker=worker
            )
        )
    return out


class StackKind(_MemberKind):
    """Stacking fits: unit id = payload = ``(estimator index, fold)`` (fold -1: all rows)."""

    name = "stacking-fit"
    task = staticmethod(fit_stack_units)


def member_sum(
    members: list[tuple[Any, np.ndarray | None]], X: Any, n_classes: int | None
) -> np.ndarray:
    """The sum over ``members`` ((estimator, feature indices or None)) of their class votes
    (``n_classes``) or predictions (None), on rows ``X``; summed in member order, so the
    driver and the workers give the same numbers."""
    total: Any = 0.0
    for estimator, features in members:
        Xm = X if features is None else X[:, features]
        if n_classes is None:
            total = total + estimator.predict(Xm)
        else:
            total = total + class_votes(estimator, Xm, n_classes)
    return np.asarray(total)
