"""Bagging on the cluster: each member is a unit of the runner's one futures loop.

``fit`` scatters ``(X, y, sample_weight)`` once; a unit carries only ``(index, seed)``
and its worker draws the member's rows and features from that seed
(:func:`~dmlsearch.ensemble._members.draw_member`), so the same ``random_state`` gives the
same ensemble on any cluster and with any batching. Fitted members come back to the
driver (they are the model); ``predict`` and ``predict_proba`` average them there, or on
the workers for large inputs (:mod:`dmlsearch.ensemble._predict`).
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.metrics import accuracy_score, r2_score
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor
from sklearn.utils import get_tags
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from ..exceptions import InvalidParameterError
from ..runner import resolve_client
from ..runner.units import Unit
from ._common import (
    ClientParam,
    check_bool,
    check_estimator,
    entropy_of,
    nan_allowed,
    sample_weight_of,
)
from ._members import BagKind, BagSpec, MemberData, draw_member, member_seed
from ._predict import summed_predictions
from ._run import member_policy, run_members

__all__ = ["BaggingClassifier", "BaggingRegressor"]


def _count(name: str, value: Any, total: float, default: int) -> int:
    """An int >= 1 or a float in (0, 1] (a fraction of ``total``) as a count."""
    if value is None:
        return default
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if value < 1:
            raise InvalidParameterError(
                name, f"expected an int >= 1 or a float in (0, 1], got {value}"
            )
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if not 0.0 < float(value) <= 1.0:
            raise InvalidParameterError(
                name,
                f"a float must be in (0, 1] (a fraction), got {value}; pass an int for a count",
            )
        return max(int(float(value) * total), 1)
    raise InvalidParameterError(name, f"expected an int >= 1 or a float in (0, 1], got {value!r}")


class _BaseBagging(ClientParam, BaseEstimator):
    """Shared by :class:`BaggingClassifier` and :class:`BaggingRegressor`."""

    _default: type

    def __init__(
        self,
        estimator: Any = None,
        n_estimators: int = 10,
        *,
        max_samples: int | float | None = None,
        max_features: int | float = 1.0,
        bootstrap: bool = True,
        bootstrap_features: bool = False,
        oob_score: bool = False,
        random_state: Any = None,
        client: Any = None,
    ) -> None:
        self.estimator = estimator
        self.n_estimators = n_estimators
        self.max_samples = max_samples
        self.max_features = max_features
        self.bootstrap = bootstrap
        self.bootstrap_features = bootstrap_features
        self.oob_score = oob_score
        self.random_state = random_state
        self.client = client

    # -- parameters --------------------------------------------------------------------------
    def _base(self) -> Any:
        return self._default() if self.estimator is None else self.estimator

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        base = get_tags(self._base())
        tags.input_tags.sparse = base.input_tags.sparse
        tags.input_tags.allow_nan = nan_allowed(self._base())
        return tags

    def _check_params(self) -> None:
        if self.estimator is not None:
            check_estimator("estimator", self.estimator)
        n = self.n_estimators
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
            raise InvalidParameterError("n_estimators", f"expected an int >= 1, got {n!r}")
        for name in ("bootstrap", "bootstrap_features", "oob_score"):
            check_bool(name, getattr(self, name))
        if self.oob_score and not self.bootstrap:
            raise InvalidParameterError(
                "oob_score",
                "out-of-bag estimation needs bootstrap=True (rows drawn with replacement)",
            )
        if self.max_features is None:
            raise InvalidParameterError(
                "max_features", "expected an int >= 1 or a float in (0, 1], got None"
            )

    def _encode_y(self, y: np.ndarray) -> np.ndarray:
        return y

    # -- fit ---------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> _BaseBagging:
        """Fit ``n_estimators`` members, each a unit on the cluster, from one scatter of the data."""
        self._check_params()
        X, y = validate_data(
            self,
            X,
            y,
            accept_sparse=["csr", "csc"],
            dtype=None,
            ensure_all_finite=not get_tags(self).input_tags.allow_nan,
            multi_output=True,
        )
        y_fit = self._encode_y(y)
        n_samples = X.shape[0]
        sw = sample_weight_of(sample_weight, n_samples)
        total = n_samples if sw is None else float(sw.sum())
        max_samples = _count("max_samples", self.max_samples, total, n_samples)
        if not self.bootstrap and max_samples > n_samples:
            raise InvalidParameterError(
                "max_samples",
                f"{max_samples} rows cannot be drawn without replacement from {n_samples}; "
                "lower it or set bootstrap=True",
            )
        if sw is not None and not self.bootstrap and np.count_nonzero(sw) < max_samples:
            raise InvalidParameterError(
                "sample_weight",
                f"only {np.count_nonzero(sw)} rows have a positive weight, fewer than the "
                f"{max_samples} drawn without replacement; set bootstrap=True",
            )
        max_features = _count("max_features", self.max_features, self.n_features_in_, 1)
        if max_features > self.n_features_in_:
            raise InvalidParameterError(
                "max_features",
                f"{max_features} is more than the {self.n_features_in_} features of X",
            )
        entropy = entropy_of(self.random_state)
        seeds = [member_seed(entropy, i) for i in range(int(self.n_estimators))]

        self.estimator_ = clone(self._base())
        spec = BagSpec(
            estimator=self.estimator_,
            n_samples=n_samples,
            n_features=self.n_features_in_,
            max_samples=max_samples,
            max_features=max_features,
            bootstrap=bool(self.bootstrap),
            bootstrap_features=bool(self.bootstrap_features),
            oob=bool(self.oob_score),
            n_classes=self._n_classes(),
        )
        units = [Unit(i, (i, seed)) for i, seed in enumerate(seeds)]
        name = type(self).__name__

        def describe(index: Any) -> str:
            return (
                f"{name} member {index} of {len(seeds)} "
                f"({type(self.estimator_).__name__}, seed {seeds[index]})"
            )

        with resolve_client(self.client) as client:
            results, stats = run_members(
                client,
                BagKind(MemberData(X, y_fit, sw), spec, member_policy()),
                units,
                describe,
                name=f"{name}.fit",
                meta={"strategy": "bagging", "estimator": type(self.estimator_).__name__},
            )
        self._seeds = seeds
        self._n_samples = n_samples
        self._max_samples = max_samples
        self._max_features = max_features
        self._sample_weight = sw
        self.runner_stats_ = stats
        self.estimators_ = [results[i].estimator for i in range(len(seeds))]
        self.estimators_features_ = [results[i].features for i in range(len(seeds))]
        if self.oob_score:
            self._set_oob_score(y, [results[i].predictions for i in range(len(seeds))])
        return self

    def _n_classes(self) -> int | None:
        return None

    def _spec(self) -> BagSpec:
        return BagSpec(
            estimator=None,
            n_samples=self._n_samples,
            n_features=self.n_features_in_,
            max_samples=self._max_samples,
            max_features=self._max_features,
            bootstrap=bool(self.bootstrap),
            bootstrap_features=bool(self.bootstrap_features),
        )

    def _out_of_bag_rows(self) -> list[np.ndarray]:
        out = []
        for rows in self.estimators_samples_:
            mask = np.ones(self._spec().n_samples, dtype=bool)
            mask[rows] = False
            out.append(np.flatnonzero(mask))
        return out

    @property
    def estimators_samples_(self) -> list[np.ndarray]:
        """The rows each member was fitted on (drawn again from its seed, as scikit-learn does)."""
        check_is_fitted(self, "estimators_")
        spec = self._spec()
        return [draw_member(seed, spec, self._sample_weight)[2] for seed in self._seeds]

    def _set_oob_score(self, y: np.ndarray, predictions: list[Any]) -> None:
        raise NotImplementedError

    def _members(self) -> list[tuple[Any, np.ndarray | None]]:
        """(member, its feature columns, or None for all of them in order)."""
        every = np.arange(self.n_features_in_)
        return [
            (estimator, None if np.array_equal(np.asarray(features), every) else features)
            for estimator, features in zip(self.estimators_, self.estimators_features_, strict=True)
        ]

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_members_future", None)  # a future of a live client: never pickled
        return state

    def _check_X(self, X: Any) -> Any:
        # fit sets estimator_ and classes_ before the members: a fit that failed left those.
        check_is_fitted(self, "estimators_")
        return validate_data(
            self,
            X,
            accept_sparse=["csr", "csc"],
            dtype=None,
            ensure_all_finite=not get_tags(self).input_tags.allow_nan,
            reset=False,
        )


class BaggingClassifier(ClassifierMixin, _BaseBagging):
    """scikit-learn's ``BaggingClassifier`` with its members fitted on a Dask cluster.

    Same parameters (``n_jobs``, ``warm_start`` and ``verbose`` excepted) plus ``client``:
    a :class:`distributed.Client`, a scheduler address, or None (the current default
    client, else an embedded LocalCluster started for the fit). ``predict_proba`` averages
    the members' probabilities (votes for members without ``predict_proba``).
    """

    _default = DecisionTreeClassifier

    def _encode_y(self, y: np.ndarray) -> np.ndarray:
        y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        self.classes_, encoded = np.unique(y, return_inverse=True)
        self.n_classes_ = len(self.classes_)
        return encoded

    def _n_classes(self) -> int | None:
        return int(self.n_classes_)

    def _set_oob_score(self, y: np.ndarray, predictions: list[Any]) -> None:
        y = column_or_1d(y)
        total = np.zeros((len(y), self.n_classes_))
        for rows, votes in zip(self._out_of_bag_rows(), predictions, strict=True):
            total[rows] += votes
        counts = total.sum(axis=1)
        if (counts == 0).any():
            warnings.warn(
                "Some inputs do not have OOB scores. This probably means too few "
                "estimators were used to compute any reliable oob estimates.",
                UserWarning,
                stacklevel=3,
            )
        with np.errstate(invalid="ignore", divide="ignore"):
            self.oob_decision_function_ = total / counts[:, np.newaxis]
        self.oob_score_ = float(accuracy_score(y, self.classes_.take(np.argmax(total, axis=1))))

    def predict_proba(self, X: Any) -> np.ndarray:
        """The members' mean class probabilities (columns in ``classes_`` order)."""
        X = self._check_X(X)
        votes = summed_predictions(self, self._members(), X, self.n_classes_)
        return votes / len(self.estimators_)

    def predict(self, X: Any) -> np.ndarray:
        """The class with the highest mean probability."""
        proba = self.predict_proba(X)
        return self.classes_.take(np.argmax(proba, axis=1))


class BaggingRegressor(RegressorMixin, _BaseBagging):
    """scikit-learn's ``BaggingRegressor`` with its members fitted on a Dask cluster.

    Same parameters (``n_jobs``, ``warm_start`` and ``verbose`` excepted) plus ``client``
    (see :class:`BaggingClassifier`). ``predict`` is the members' mean prediction.
    """

    _default = DecisionTreeRegressor

    def _encode_y(self, y: np.ndarray) -> np.ndarray:
        if y.ndim == 1 or y.shape[1] == 1:
            return column_or_1d(y, warn=True)
        return y

    def _set_oob_score(self, y: np.ndarray, predictions: list[Any]) -> None:
        y = self._encode_y(y)
        total = np.zeros(y.shape)
        counts = np.zeros(len(y))
        for rows, pred in zip(self._out_of_bag_rows(), predictions, strict=True):
            total[rows] += pred
            counts[rows] += 1
        if (counts == 0).any():
            warnings.warn(
                "Some inputs do not have OOB scores. This probably means too few "
                "estimators were used to compute any reliable oob estimates.",
                UserWarning,
                stacklevel=3,
            )
            counts[counts == 0] = 1
        self.oob_prediction_ = total / (counts if y.ndim == 1 else counts[:, np.newaxis])
        self.oob_score_ = float(r2_score(y, self.oob_prediction_))

    def predict(self, X: Any) -> np.ndarray:
        """The members' mean prediction."""
        X = self._check_X(X)
        return summed_predictions(self, self._members(), X, None) / len(self.estimators_)
