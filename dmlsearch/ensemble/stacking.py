"""Stacking on the cluster: every (base estimator x fold) fit is a unit of the one loop.

``fit`` computes ONE fold assignment on the driver and scatters it with the data; each
(base estimator, fold) fit runs as its own unit and returns that fold's out-of-fold
predictions, and each base estimator's refit on all rows is a unit too, all in the same
run. The driver assembles the out-of-fold matrix (it equals ``cross_val_predict``'s on the
same folds) and fits the final estimator on it.
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Hashable
from typing import Any, cast

import numpy as np
from scipy import sparse
from sklearn.base import (
    BaseEstimator,
    ClassifierMixin,
    RegressorMixin,
    TransformerMixin,
    clone,
    is_classifier,
    is_regressor,
)
from sklearn.linear_model import LogisticRegression, RidgeCV
from sklearn.model_selection import check_cv
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import Bunch, assert_all_finite, get_tags, indexable
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    _num_samples,
    check_consistent_length,
    check_is_fitted,
    column_or_1d,
)

from .._validation import check_fit_data
from ..exceptions import InvalidParameterError
from ..runner import resolve_client
from ..runner.units import Unit
from ._common import (
    ClientParam,
    check_bool,
    check_estimator,
    check_takes_sample_weight,
    nan_allowed,
    sample_weight_of,
)
from ._members import FULL, MemberData, StackKind, StackSpec
from ._run import member_policy, run_members

__all__ = ["StackingClassifier", "StackingRegressor"]

_METHODS = ("predict_proba", "decision_function", "predict")


def _final_has(method: str) -> Any:
    def check(self: Any) -> bool:
        final = (
            getattr(self, "final_estimator_", None) or self.final_estimator or self._final_default()
        )
        return hasattr(final, method)

    return check


class _BaseStacking(ClientParam, BaseEstimator):
    """Shared by :class:`StackingClassifier` and :class:`StackingRegressor`."""

    estimators: Any
    final_estimator: Any
    cv: Any
    passthrough: bool
    client: Any

    def _final_default(self) -> Any:
        raise NotImplementedError

    # -- parameters of the named estimators (``lr__C``) ------------------------------------------
    def _named(self) -> list[tuple[str, Any]]:
        try:
            return [(str(n), e) for n, e in self.estimators]
        except (TypeError, ValueError):
            return []

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Parameters, and with ``deep`` each named estimator's as ``name__param``."""
        out = super().get_params(deep=deep)
        if not deep:
            return out
        for name, est in self._named():
            out[name] = est
            if hasattr(est, "get_params"):
                for key, value in est.get_params(deep=True).items():
                    out[f"{name}__{key}"] = value
        return out

    def set_params(self, **params: Any) -> _BaseStacking:
        """Set parameters; a named estimator is replaced by passing its name."""
        if "estimators" in params:
            self.estimators = params.pop("estimators")
        names = [n for n, _ in self._named()]
        replace = {k: params.pop(k) for k in list(params) if k in names}
        if replace:
            self.estimators = [(n, replace.get(n, e)) for n, e in self._named()]
        super().set_params(**params)
        return self

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        named = [e for _, e in self._named() if not (isinstance(e, str) and e == "drop")]
        try:
            tags.input_tags.allow_nan = bool(named) and all(nan_allowed(e) for e in named)
            tags.input_tags.sparse = bool(named) and all(
                get_tags(e).input_tags.sparse for e in named
            )
        except Exception:  # an estimators value that is not a list of estimators: fit says why
            tags.input_tags.allow_nan = False
            tags.input_tags.sparse = False
        return tags

    def _check_estimators(self) -> tuple[list[str], list[Any]]:
        estimators = self.estimators
        message = "expected a non-empty list of (name, estimator) pairs"
        if not isinstance(estimators, (list, tuple)) or not estimators:
            raise InvalidParameterError("estimators", f"{message}, got {estimators!r}")
        if not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in estimators):
            raise InvalidParameterError("estimators", f"{message}, got {estimators!r}")
        names = [p[0] for p in estimators]
        ests = [p[1] for p in estimators]
        if not all(isinstance(n, str) and n for n in names):
            raise InvalidParameterError(
                "estimators", f"names must be non-empty strings, got {names}"
            )
        if len(set(names)) != len(names):
            raise InvalidParameterError("estimators", f"names must be unique, got {names}")
        clash = [n for n in names if "__" in n or n in self._get_param_names()]
        if clash:
            raise InvalidParameterError(
                "estimators",
                f"names {clash} contain '__' or are parameter names of {type(self).__name__}; rename them",
            )
        kept = [e for e in ests if not (isinstance(e, str) and e == "drop")]
        if not kept:
            raise InvalidParameterError(
                "estimators", "every estimator is 'drop'; keep at least one"
            )
        for name, est in zip(names, ests, strict=True):
            if not (isinstance(est, str) and est == "drop"):
                check_estimator(f"estimators ({name!r})", est)
        return names, ests

    def _check_cv(self) -> None:
        cv = self.cv
        if isinstance(cv, str):
            raise InvalidParameterError(
                "cv",
                f"{cv!r} is not supported here (cv='prefit' stacks fitted estimators, with no "
                "fits to distribute: use scikit-learn's own stacking); pass None, an int >= 2, "
                "a splitter or an iterable of (train, test) splits",
            )
        if isinstance(cv, numbers.Integral) and not isinstance(cv, bool) and cv < 2:
            raise InvalidParameterError("cv", f"an int cv must be >= 2, got {cv}")

    def _methods(self, names: list[str], estimators: list[Any]) -> list[str]:
        return ["predict" for _ in estimators]

    def _n_classes(self) -> int | None:
        return None

    def _prepare_y(self, y: Any) -> Any:
        return column_or_1d(y, warn=True)

    # -- fit ---------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> _BaseStacking:
        """Fit every (base estimator x fold) and every base estimator on all of X, on the cluster."""
        names, ests = self._check_estimators()
        self._check_cv()
        check_bool("passthrough", self.passthrough)
        final = self.final_estimator if self.final_estimator is not None else self._final_default()
        check_estimator("final_estimator", final)
        self._check_final(final)
        check_fit_data(X, y)  # a Dask DataFrame, no rows, a missing target
        check_consistent_length(X, y)
        # As cross_val_predict: rows must be indexable (sparse matrices become CSR).
        X, y = indexable(X, y)
        if (
            isinstance(X, np.ndarray)
            and X.dtype.kind in "fc"
            and not get_tags(self).input_tags.allow_nan
        ):
            assert_all_finite(X, input_name="X")
        y_fit = self._prepare_y(y)
        n_samples = _num_samples(X)
        sw = sample_weight_of(sample_weight, n_samples)
        if sw is not None:
            for name, est in zip(names, ests, strict=True):
                if not (isinstance(est, str) and est == "drop"):
                    check_takes_sample_weight(f"estimator {name!r}", est)
            check_takes_sample_weight("final_estimator", final)
        methods = self._methods(names, ests)

        cv = copy.deepcopy(check_cv(self.cv, y_fit, classifier=is_classifier(self)))
        if hasattr(cv, "random_state") and cv.random_state is None:
            cv.random_state = np.random.RandomState()
        folds = [(np.asarray(tr), np.asarray(te)) for tr, te in cv.split(X, y_fit)]
        tests = np.concatenate([te for _, te in folds]) if folds else np.zeros(0, dtype=int)
        if len(tests) != n_samples or not np.array_equal(np.sort(tests), np.arange(n_samples)):
            raise InvalidParameterError(
                "cv",
                "the test sets of the folds must cover each row exactly once (a partition), "
                "so that every row gets one out-of-fold prediction",
            )
        kept = [i for i, e in enumerate(ests) if not (isinstance(e, str) and e == "drop")]
        spec = StackSpec(
            estimators=[ests[i] if i in kept else None for i in range(len(ests))],
            methods=methods,
            folds=folds,
            n_classes=self._n_classes(),
        )
        units = [Unit((i, f), (i, f)) for i in kept for f in range(len(folds))]
        units += [Unit((i, FULL), (i, FULL)) for i in kept]
        cls = type(self).__name__

        def describe(uid: Hashable) -> str:
            i, fold = cast("tuple[int, int]", uid)
            where = "refit on all rows" if fold == FULL else f"fold {fold} of {len(folds)}"
            return f"{cls} estimator {names[i]!r} ({type(ests[i]).__name__}), {where}"

        with resolve_client(self.client) as client:
            results, stats = run_members(
                client,
                StackKind(MemberData(X, y_fit, sw), spec, member_policy()),
                units,
                describe,
                f"{cls}.fit",
                {"strategy": "stacking", "estimator": ", ".join(names[i] for i in kept)},
            )
        self.runner_stats_ = stats
        predictions = []
        inverse = np.empty(n_samples, dtype=np.intp)
        inverse[tests] = np.arange(n_samples)
        for i in kept:
            stacked = np.concatenate([results[(i, f)].predictions for f in range(len(folds))])
            predictions.append(stacked[inverse])
        self.estimators_ = [results[(i, FULL)].estimator for i in kept]
        self.named_estimators_ = Bunch()
        fitted = iter(self.estimators_)
        for i, name in enumerate(names):
            self.named_estimators_[name] = next(fitted) if i in kept else "drop"
        for est in self.estimators_:
            if hasattr(est, "feature_names_in_"):
                self.feature_names_in_ = est.feature_names_in_
        self.stack_method_ = [methods[i] for i in kept]
        X_meta = self._concatenate(X, predictions)
        self.final_estimator_ = clone(final)
        kwargs = {} if sw is None else {"sample_weight": sw}
        self.final_estimator_.fit(X_meta, y_fit, **kwargs)
        return self

    def _check_final(self, final: Any) -> None:
        raise NotImplementedError

    @property
    def n_features_in_(self) -> int:
        """Number of features seen during fit (as the base estimators saw them)."""
        try:
            check_is_fitted(self)
        except Exception as exc:
            raise AttributeError(
                f"{type(self).__name__} object has no attribute n_features_in_"
            ) from exc
        return int(self.estimators_[0].n_features_in_)

    def _concatenate(self, X: Any, predictions: list[np.ndarray]) -> Any:
        """The final estimator's input, as scikit-learn's stacking builds it."""
        X_meta = []
        for method, preds in zip(self.stack_method_, predictions, strict=True):
            preds = np.asarray(preds)
            if preds.ndim == 1:
                X_meta.append(preds.reshape(-1, 1))
            elif method == "predict_proba" and self._n_classes() == 2:
                # Both columns of a binary probability sum to one: keep the second.
                X_meta.append(preds[:, 1:])
            else:
                X_meta.append(preds)
        self._n_feature_outs = [p.shape[1] for p in X_meta]
        if self.passthrough:
            if sparse.issparse(X):
                return sparse.hstack([*X_meta, X], format=X.format)
            X_meta.append(np.asarray(X))
        return np.hstack(X_meta)

    def transform(self, X: Any) -> Any:
        """The base estimators' predictions for ``X`` (the final estimator's input)."""
        check_is_fitted(self)
        predictions = [
            getattr(est, m)(X) for est, m in zip(self.estimators_, self.stack_method_, strict=True)
        ]
        return self._concatenate(X, predictions)


class StackingClassifier(ClassifierMixin, TransformerMixin, _BaseStacking):
    """scikit-learn's ``StackingClassifier`` with its fits run on a Dask cluster.

    Same parameters (``n_jobs`` and ``verbose`` excepted; ``cv='prefit'`` refused) plus
    ``client``: a :class:`distributed.Client`, a scheduler address, or None (the current
    default client, else an embedded LocalCluster started for the fit).
    """

    def __init__(
        self,
        estimators: Any,
        final_estimator: Any = None,
        *,
        cv: Any = None,
        stack_method: str = "auto",
        passthrough: bool = False,
        client: Any = None,
    ) -> None:
        self.estimators = estimators
        self.final_estimator = final_estimator
        self.cv = cv
        self.stack_method = stack_method
        self.passthrough = passthrough
        self.client = client

    def _final_default(self) -> Any:
        return LogisticRegression()

    def _check_final(self, final: Any) -> None:
        if not is_classifier(final):
            raise InvalidParameterError(
                "final_estimator", f"expected a classifier, got {type(final).__name__}"
            )

    def _prepare_y(self, y: Any) -> Any:
        y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        self._label_encoder = LabelEncoder().fit(y)
        self.classes_ = self._label_encoder.classes_
        if len(self.classes_) < 2:
            raise InvalidParameterError(
                "y",
                f"stacking a classifier needs at least 2 classes; y holds 1 class ({self.classes_[0]!r})",
            )
        return self._label_encoder.transform(y)

    def _n_classes(self) -> int | None:
        return len(self.classes_)

    def _methods(self, names: list[str], estimators: list[Any]) -> list[str]:
        if self.stack_method not in ("auto", *_METHODS):
            raise InvalidParameterError(
                "stack_method",
                f"expected 'auto' or one of {list(_METHODS)}, got {self.stack_method!r}",
            )
        methods = []
        for name, est in zip(names, estimators, strict=True):
            if isinstance(est, str):
                methods.append("drop")
                continue
            wanted = _METHODS if self.stack_method == "auto" else (self.stack_method,)
            found = next((m for m in wanted if hasattr(est, m)), None)
            if found is None:
                raise InvalidParameterError(
                    "stack_method",
                    f"estimator {name!r} ({type(est).__name__}) has no {self.stack_method}",
                )
            methods.append(found)
        return methods

    @available_if(_final_has("predict"))
    def predict(self, X: Any) -> np.ndarray:
        """The final estimator's prediction, in the original labels."""
        check_is_fitted(self)
        return self._label_encoder.inverse_transform(
            self.final_estimator_.predict(self.transform(X))
        )

    @available_if(_final_has("predict_proba"))
    def predict_proba(self, X: Any) -> np.ndarray:
        """The final estimator's class probabilities (columns in ``classes_`` order)."""
        check_is_fitted(self)
        return self.final_estimator_.predict_proba(self.transform(X))

    @available_if(_final_has("decision_function"))
    def decision_function(self, X: Any) -> np.ndarray:
        """The final estimator's decision function."""
        check_is_fitted(self)
        return self.final_estimator_.decision_function(self.transform(X))


class StackingRegressor(RegressorMixin, TransformerMixin, _BaseStacking):
    """scikit-learn's ``StackingRegressor`` with its fits run on a Dask cluster.

    Same parameters (``n_jobs`` and ``verbose`` excepted; ``cv='prefit'`` refused) plus
    ``client`` (see :class:`StackingClassifier`).
    """

    def __init__(
        self,
        estimators: Any,
        final_estimator: Any = None,
        *,
        cv: Any = None,
        passthrough: bool = False,
        client: Any = None,
    ) -> None:
        self.estimators = estimators
        self.final_estimator = final_estimator
        self.cv = cv
        self.passthrough = passthrough
        self.client = client

    def _final_default(self) -> Any:
        return RidgeCV()

    def _check_final(self, final: Any) -> None:
        if not is_regressor(final):
            raise InvalidParameterError(
                "final_estimator", f"expected a regressor, got {type(final).__name__}"
            )

    def predict(self, X: Any) -> np.ndarray:
        """The final estimator's prediction."""
        check_is_fitted(self)
        return self.final_estimator_.predict(self.transform(X))
