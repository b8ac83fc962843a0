"""Ensemble selection over a search (Caruana et al. 2004), members refitted on the cluster.

``fit`` reads the out-of-fold predictions that ``SearchCV(keep_oof=True)`` kept for the
best ``max_candidates`` trials (from the registry's artifact store, or from the workers'
memory), selects members greedily with replacement on the driver
(:func:`~dmlsearch.ensemble._selection_algo.ensemble_selection`), then refits each chosen
trial on all rows as a unit of the runner's one loop. ``predict_proba`` is the weighted
mean of the members' probabilities (one-hot votes for members without
``predict_proba``), ``predict`` of a regressor the weighted mean prediction.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, clone, is_classifier
from sklearn.utils import indexable
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _num_samples, check_is_fitted, validate_data

from .. import _oof
from .._scoring import resolve_scoring
from .._validation import check_fit_data
from ..exceptions import InvalidParameterError
from ..runner import resolve_client
from ..runner.units import Unit
from ._common import (
    ClientParam,
    check_takes_sample_weight,
    entropy_of,
    sample_weight_of,
    weight_key,
)
from ._members import FULL, MAX_INT, MemberData, StackKind, StackSpec, member_seed
from ._run import member_policy, run_members
from ._selection_algo import diversity, ensemble_selection
from ._selection_source import Library, library_of

__all__ = ["EnsembleSelection"]


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InvalidParameterError(name, f"expected an int >= 1, got {value!r}")
    return int(value)


def votes(method: str, values: np.ndarray, n_classes: int) -> np.ndarray:
    """A classifier's output as rows of class weights: probabilities as they are, a
    decision function as a one-hot vote for its class (scores of two models are not on
    one scale), votes of ``predict`` as they are."""
    if method != "decision_function":
        return values
    columns = (values > 0).astype(np.intp) if values.ndim == 1 else values.argmax(axis=1)
    return _oof.one_hot(columns, n_classes).astype(np.float32)


def weighted_proba(estimators: Any, weights: Any, classes: np.ndarray, X: Any) -> np.ndarray:
    """The members' weighted mean class weights (:func:`votes`); members of weight 0 are
    not asked."""
    total: Any = 0.0
    for estimator, weight in zip(estimators, weights, strict=True):
        if weight:
            method, values = _oof.response(estimator, X, classes)
            total = total + weight * votes(method, values, len(classes))
    return np.asarray(total)


def weighted_mean(estimators: Any, weights: Any, X: Any) -> np.ndarray:
    """The members' weighted mean prediction (regressors)."""
    total: Any = 0.0
    for estimator, weight in zip(estimators, weights, strict=True):
        if weight:
            total = total + weight * np.asarray(estimator.predict(X), dtype=np.float64)
    return np.asarray(total)


class WeightedPredictions:
    """``predict_proba``/``predict`` of fitted ``estimators_`` weighted by ``weights_``
    (classifiers: ``classes_`` set, and ``_is_classifier()`` True)."""

    estimators_: list[Any]
    weights_: np.ndarray

    def _is_classifier(self) -> bool:
        raise NotImplementedError

    def _labels(self) -> np.ndarray | None:
        """``classes_`` of a classifier; None for a regressor, which has none (as in
        scikit-learn: ``hasattr(regressor, "classes_")`` is False)."""
        return getattr(self, "classes_", None)

    def _set_labels(self, classes: np.ndarray | None) -> None:
        if classes is None:
            self.__dict__.pop("classes_", None)  # a refit as a regressor
        else:
            self.classes_ = classes

    @available_if(lambda self: self._is_classifier())
    def predict_proba(self, X: Any) -> np.ndarray:
        """The members' weighted mean class probabilities (votes for members without them)."""
        check_is_fitted(self)
        labels = self._labels()
        assert labels is not None
        return weighted_proba(self.estimators_, self.weights_, labels, X)

    def predict(self, X: Any) -> np.ndarray:
        """The class of highest weighted probability, or the weighted mean prediction."""
        check_is_fitted(self)
        labels = self._labels()
        if labels is not None:
            return labels.take(self.predict_proba(X).argmax(axis=1))
        return weighted_mean(self.estimators_, self.weights_, X)


class _Fixed(BaseEstimator):
    """Stands for an ensemble whose predictions are known, so that any scikit-learn scorer
    can score them."""

    def __init__(self, prediction: np.ndarray, classes: np.ndarray | None) -> None:
        self.prediction = prediction
        self.classes = classes

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.estimator_type = "regressor" if self.classes is None else "classifier"
        return tags

    @property
    def classes_(self) -> np.ndarray | None:
        return self.classes

    def predict(self, X: Any) -> np.ndarray:
        if self.classes is None:
            return self.prediction
        return self.classes.take(self.prediction.argmax(axis=1))

    def predict_proba(self, X: Any) -> np.ndarray:
        # Rows of float32 probabilities sum to 1 only within float32's precision, which
        # scikit-learn's log loss warns about: make them exact.
        return self.prediction / self.prediction.sum(axis=1, keepdims=True)

    def score(self, X: Any, y: Any) -> float:
        if self.classes is None:
            from sklearn.metrics import r2_score

            return float(r2_score(y, self.prediction))
        return float(np.mean(self.predict(X) == y))


def _default_score(estimator: _Fixed, X: Any, y: Any) -> float:
    """Accuracy or R^2, as a classifier's or a regressor's ``score``."""
    return estimator.score(X, y)


def _unset_random_states(estimator: Any, seed: int) -> None:
    """Seed the ``random_state`` parameters a member leaves None (the search's own stay)."""
    rng = np.random.default_rng(seed)
    params = estimator.get_params(deep=True)
    names = sorted(
        k
        for k, v in params.items()
        if (k == "random_state" or k.endswith("__random_state")) and v is None
    )
    if names:
        estimator.set_params(**{k: int(rng.integers(MAX_INT)) for k in names})


class EnsembleSelection(WeightedPredictions, ClientParam, BaseEstimator):
    """Caruana's ensemble selection over the trials of a search, refitted on a cluster.

    Parameters
    ----------
    search : SearchCV or str
        A SearchCV fitted with ``keep_oof=True``, or the name of an experiment it
        recorded in ``registry``.
    ensemble_size : int
        Rounds of selection (with replacement): the most members, counted with
        multiplicity. The best ensemble met on the way is kept.
    n_init : int
        Start from the ``N <= n_init`` individually best trials (``N`` chosen on the
        out-of-fold score).
    max_candidates : int
        The library: the search's best trials by its own objective, at most this many.
    scoring : str, callable or None
        What selection maximises, as a scikit-learn scorer; None: the search's scoring
        (its refit metric), else accuracy or R^2.
    registry : Registry or str, optional
        The registry holding experiment ``search`` (only with an experiment name).
    client : distributed.Client, str or None
        Where members are refitted; None: the search's client, else the current default
        client, else an embedded LocalCluster.
    random_state : int, RandomState, Generator or None
        Seeds the ``random_state`` parameters that members leave None, so refits are
        repeatable; None leaves them as the search ran them.

    Attributes
    ----------
    members_ : list of int
        The trial numbers selected, most weight first.
    weights_ : ndarray
        Each member's weight (its count over the ensemble's size; they sum to 1).
    estimators_ : list
        The members refitted on all rows of ``X``.
    oof_score_ : float
        The ensemble's out-of-fold score; never below the best single trial's.
    single_scores_ : dict
        Each candidate trial's own out-of-fold score.
    score_path_ : list of float
        The score at each round of selection.
    diversity_ : dict
        ``members`` (trial numbers), pairwise ``disagreement`` and ``correlation``
        matrices of the members' out-of-fold predictions, and their means over pairs.
    classes_ : ndarray
        The classes (classifiers).
    n_features_in_ : int
        The number of columns of ``X`` in ``fit``.
    feature_names_in_ : ndarray
        The column names of ``X`` in ``fit``, when it is a DataFrame with string names.
    """

    def __init__(
        self,
        search: Any,
        ensemble_size: int = 50,
        *,
        n_init: int = 5,
        max_candidates: int = 50,
        scoring: Any = None,
        registry: Any = None,
        client: Any = None,
        random_state: Any = None,
    ) -> None:
        self.search = search
        self.ensemble_size = ensemble_size
        self.n_init = n_init
        self.max_candidates = max_candidates
        self.scoring = scoring
        self.registry = registry
        self.client = client
        self.random_state = random_state

    # -- scikit-learn protocol ---------------------------------------------------------------
    def __sklearn_clone__(self) -> EnsembleSelection:
        # The search, the registry and the client are handles to shared things, not state.
        params = self.get_params(deep=False)
        shared = {k: params.pop(k) for k in ("search", "registry", "client")}
        return type(self)(**shared, **{k: clone(v, safe=False) for k, v in params.items()})

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()  # a live client is dropped (ClientParam)
        registry = state.get("registry")
        if registry is not None and not isinstance(registry, str):
            state["registry"] = getattr(registry, "url", None)
        return state

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        classifier = getattr(self, "_classifier", None)
        if classifier is None and not isinstance(self.search, str):
            classifier = is_classifier(self.search)
        tags.estimator_type = "classifier" if classifier else "regressor"
        return tags

    def _check_params(self) -> tuple[int, int, int]:
        size = _positive_int("ensemble_size", self.ensemble_size)
        n_init = _positive_int("n_init", self.n_init)
        if n_init > size:
            raise InvalidParameterError(
                "n_init", f"{n_init} is more than ensemble_size={size}; lower it"
            )
        return size, n_init, _positive_int("max_candidates", self.max_candidates)

    # -- fit ---------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> EnsembleSelection:
        """Select members from the search's out-of-fold predictions and refit them on ``X``.

        ``X`` and ``y`` must be the data the search was fitted on (same rows, same order);
        ``sample_weight``, the weights it was fitted with (the members are refitted with
        them, a Pipeline's by its final step, as the search's ``<step>__sample_weight``;
        the selection scores the out-of-fold predictions unweighted, as the search scored
        its folds).
        """
        size, n_init, max_candidates = self._check_params()
        check_fit_data(X, y)  # a Dask DataFrame, no rows, a missing target
        library = library_of(self.search, self.registry, max_candidates)
        X, y = indexable(X, y)
        # n_features_in_ and feature_names_in_ (a DataFrame's), as scikit-learn's
        # estimators set them; X itself is the members' to check.
        validate_data(self, X, skip_check_array=True)
        y = np.asarray(y)
        classes = self._check_y(library, y, _num_samples(X))
        sw = sample_weight_of(sample_weight, _num_samples(X))
        key, final = weight_key(library.estimator)
        if sw is not None:
            check_takes_sample_weight("the search's estimator", final)
        scorer = self._scorer(library)
        entropy = None if self.random_state is None else entropy_of(self.random_state)
        client = self.client if self.client is not None else library.client
        with resolve_client(client) as c:
            P = self._library_predictions(library, c, classes, _num_samples(X), scorer)

            def score(prediction: np.ndarray) -> float:
                return float(scorer(_Fixed(prediction, classes), X, y))

            selection = ensemble_selection(P, score, size, n_init)
            chosen = np.flatnonzero(selection.counts)
            chosen = chosen[np.argsort(-selection.counts[chosen], kind="stable")]
            candidates = [library.candidates[i] for i in chosen]
            self.estimators_ = self._refit(
                library, candidates, MemberData(X, y, sw, key), entropy, c
            )
        self._set_labels(classes)
        self.members_ = [c.number for c in candidates]
        self.weights_ = selection.counts[chosen] / selection.counts.sum()
        self.oof_score_ = selection.score
        self.score_path_ = selection.path
        self.single_scores_ = {
            c.number: float(s) for c, s in zip(library.candidates, selection.single, strict=True)
        }
        disagreement, correlation = diversity(P[chosen], classes is not None)
        pairs = ~np.eye(len(chosen), dtype=bool)
        with np.errstate(invalid="ignore"):
            self.diversity_ = {
                "members": list(self.members_),
                "disagreement": disagreement,
                "correlation": correlation,
                "mean_disagreement": float(disagreement[pairs].mean()) if pairs.any() else 0.0,
                "mean_correlation": float(np.nanmean(correlation[pairs])) if pairs.any() else 1.0,
            }
        self.scorer_ = scorer
        return self

    def _check_y(self, library: Library, y: np.ndarray, n_samples: int) -> np.ndarray | None:
        self._classifier = library.classifier
        if library.n_samples is not None and library.n_samples != n_samples:
            raise InvalidParameterError(
                "X",
                f"has {n_samples} rows but {library.where} ran on {library.n_samples}: pass "
                "the data the search was fitted on",
            )
        if not library.classifier:
            return None
        check_classification_targets(y)
        classes = np.unique(y)
        if library.classes is not None and not np.array_equal(classes, library.classes):
            raise InvalidParameterError(
                "y",
                f"has classes {classes.tolist()} but {library.where} ran on "
                f"{library.classes.tolist()}: pass the data the search was fitted on",
            )
        # The search's own (a nullable Int64 y gives it floats, as scikit-learn's do):
        # the ensemble predicts labels of the search's dtype.
        own = getattr(self.search, "classes_", None)
        return np.asarray(own) if own is not None and np.array_equal(own, classes) else classes

    def _scorer(self, library: Library) -> Any:
        scoring = self.scoring if self.scoring is not None else library.scoring
        if scoring is None:
            return _default_score
        if isinstance(scoring, (dict, list, tuple, set)):
            raise InvalidParameterError(
                "scoring",
                "the search had several metrics and no refit metric: pass scoring= (one "
                "scorer name or callable) to say what the selection maximises",
            )
        return resolve_scoring(library.estimator, scoring).scorer

    @staticmethod
    def _warn_votes(scorer: Any, voting: list[int]) -> None:
        """Warn when a scorer that ranks or weighs probabilities (ROC AUC, log loss) is to
        score one-hot votes: it then misjudges those trials and the ensembles."""
        method = getattr(scorer, "_response_method", "predict")
        if not voting or method == "predict":
            return
        warnings.warn(
            f"EnsembleSelection: trials {sorted(voting)[:10]} have no predict_proba, so "
            "they take part as one-hot votes, and the scoring (it reads "
            f"{method!r}) scores those votes, not their decision functions: it ranks them "
            "below what the search measured. Use estimators with predict_proba "
            "(SVC(probability=True), CalibratedClassifierCV) or a scoring on labels "
            "(accuracy, f1)",
            UserWarning,
            stacklevel=4,
        )

    def _library_predictions(
        self,
        library: Library,
        client: Any,
        classes: np.ndarray | None,
        n_samples: int,
        scorer: Any = None,
    ) -> np.ndarray:
        """The candidates' out-of-fold predictions, stacked ``(M, n, ...)``."""
        found, lost = _oof.load(
            [c.ref for c in library.candidates], client, library.storage_options
        )
        if lost:
            raise LookupError(
                f"the out-of-fold predictions of trials {lost[:10]} are no longer in the "
                "memory of the workers that ran them (released with release_oof, or the "
                "workers left or restarted); run the search again, with a registry to keep "
                "them in its artifact store"
            )
        if classes is not None:
            self._warn_votes(scorer, [n for n, (m, _) in found.items() if m != "predict_proba"])
        out = []
        for c in library.candidates:
            method, values = found[c.number]
            if values.shape[0] != n_samples:
                raise InvalidParameterError(
                    "X",
                    f"has {n_samples} rows but the search's out-of-fold predictions have "
                    f"{values.shape[0]}: pass the data the search was fitted on",
                )
            if classes is not None:
                values = votes(method, values, len(classes))
                if values.shape[1] != len(classes):
                    raise InvalidParameterError(
                        "y",
                        f"has {len(classes)} classes but the search's out-of-fold "
                        f"predictions have {values.shape[1]}: pass the data the search was "
                        "fitted on",
                    )
            out.append(values)
        return np.stack(out)

    def _refit(
        self,
        library: Library,
        candidates: list[Any],
        data: MemberData,
        entropy: int | None,
        client: Any,
    ) -> list[Any]:
        estimators = []
        for c in candidates:
            estimator = clone(library.estimator).set_params(**clone(c.params, safe=False))
            if entropy is not None:
                _unset_random_states(estimator, member_seed(entropy, c.number))
            estimators.append(estimator)
        spec = StackSpec(estimators, [""] * len(estimators), [], None)
        units = [Unit((i, FULL), (i, FULL)) for i in range(len(estimators))]
        name = type(library.estimator).__name__

        def describe(uid: Any) -> str:
            return f"EnsembleSelection member trial {candidates[uid[0]].number} ({name})"

        results, self.runner_stats_ = run_members(
            client,
            StackKind(data, spec, member_policy()),
            units,
            describe,
            "EnsembleSelection.fit",
            {"estimator": name, "kind": "ensemble selection"},
        )
        return [results[(i, FULL)].estimator for i in range(len(estimators))]

    # -- prediction ---------------------------------------------------------------------------
    def _is_classifier(self) -> bool:
        return bool(getattr(self, "_classifier", True))

    def score(self, X: Any, y: Any) -> float:
        """The selection's scorer (``scoring``) on ``X``, ``y``."""
        check_is_fitted(self)
        labels = self._labels()
        prediction = self.predict_proba(X) if labels is not None else self.predict(X)
        return float(self.scorer_(_Fixed(prediction, labels), X, y))
