"""Scoring as scikit-learn's searches score: weights, and metrics that fail apart.

Each test runs scikit-learn's ``GridSearchCV`` and ``SearchCV`` on the same inputs and
compares their ``cv_results_`` (a search with a scheduler is compared with a manual
cross-validation at its one resource).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression, SGDClassifier
from sklearn.metrics import accuracy_score
from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold

from dmlsearch import SearchCV
from dmlsearch.exceptions import AllTrialsFailedError

X, Y = make_classification(n_samples=150, n_features=5, flip_y=0.1, random_state=0)
W = np.random.default_rng(0).uniform(0.1, 3.0, size=len(Y))
GRID = {"C": [0.01, 1.0, 100.0]}
CV = StratifiedKFold(3, shuffle=True, random_state=0)


def _both(client: Any, scoring: Any, **kwargs: Any) -> tuple[Any, Any]:
    fit_params = kwargs.pop("fit_params", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn warns about each failed score
        ours = SearchCV(
            LogisticRegression(), GRID, strategy="grid", cv=CV, scoring=scoring,
            client=client, progress=False, dashboard=False, **kwargs,
        ).fit(X, Y, **fit_params)  # fmt: skip
        theirs = GridSearchCV(LogisticRegression(), GRID, cv=CV, scoring=scoring, **kwargs)
        theirs.fit(X, Y, **fit_params)
    return ours, theirs


def _same(ours: Any, theirs: Any, *keys: str) -> None:
    for key in keys:
        np.testing.assert_allclose(ours.cv_results_[key], theirs.cv_results_[key], err_msg=key)
    assert ours.best_params_ == theirs.best_params_


@pytest.mark.parametrize("scoring", [None, "accuracy", ["accuracy", "balanced_accuracy"]])
def test_sample_weight_reaches_the_scorer_as_in_scikit_learn(client, scoring):
    ours, theirs = _both(
        client, scoring, fit_params={"sample_weight": W}, return_train_score=True,
        refit="accuracy" if isinstance(scoring, list) else True,
    )  # fmt: skip
    names = ["accuracy", "balanced_accuracy"] if isinstance(scoring, list) else ["score"]
    _same(ours, theirs, *(f"mean_{p}_{n}" for p in ("test", "train") for n in names))


def _undefined_for_large_C(estimator: Any, X: Any, y: Any) -> float:
    if estimator.C > 1:
        raise ValueError("undefined for this model")
    return 1.0


def test_a_failing_metric_leaves_the_others_their_scores(client):
    scoring = {"acc": "accuracy", "flaky": _undefined_for_large_C}
    ours, theirs = _both(client, scoring, refit="acc")
    _same(ours, theirs, "mean_test_acc", "mean_test_flaky")
    assert np.isnan(ours.cv_results_["mean_test_flaky"][2])
    assert list(ours.cv_results_["mean_test_acc"]) == list(theirs.cv_results_["mean_test_acc"])


def _fails_on_the_training_rows(estimator: Any, X: Any, y: Any) -> float:
    if len(y) > 60:  # the training part of a fold (100 rows), not its test part (50)
        raise ValueError("too many rows")
    return float(accuracy_score(y, estimator.predict(X)))


def test_train_scores_that_fail_keep_the_test_scores(client):
    ours, theirs = _both(client, _fails_on_the_training_rows, return_train_score=True)
    _same(ours, theirs, "mean_test_score", "mean_train_score")
    assert np.isnan(ours.cv_results_["mean_train_score"]).all()


def test_a_metric_failing_with_error_score_raise_raises_its_own_error(client):
    scoring = {"acc": "accuracy", "flaky": _undefined_for_large_C}
    with pytest.raises(ValueError, match="undefined for this model"):
        SearchCV(
            LogisticRegression(), GRID, strategy="grid", cv=CV, scoring=scoring, refit="acc",
            error_score="raise", client=client, progress=False, dashboard=False,
        ).fit(X, Y)  # fmt: skip


def test_a_callable_returning_a_dict_is_told_to_be_a_dict_of_scorers(client):
    def both(estimator: Any, X: Any, y: Any) -> dict[str, float]:
        return {"acc": float(accuracy_score(y, estimator.predict(X))), "one": 1.0}

    with pytest.raises(AllTrialsFailedError, match=r"dict of one callable per metric"):
        SearchCV(
            LogisticRegression(), GRID, strategy="grid", cv=CV, scoring=both,
            client=client, progress=False, dashboard=False,
        ).fit(X, Y)  # fmt: skip


def test_a_rung_step_scores_with_the_folds_weights(client):
    cv = KFold(3, shuffle=True, random_state=0)
    search = SearchCV(
        SGDClassifier(random_state=0, tol=None), {"alpha": [1e-3]}, strategy="grid",
        scheduler="halving", resource="max_iter", min_resource=5, max_resource=5, cv=cv,
        client=client, progress=False, dashboard=False,
    ).fit(X, Y, sample_weight=W)  # fmt: skip
    expected = []
    for train, test in cv.split(X, Y):
        model = SGDClassifier(random_state=0, tol=None, alpha=1e-3, max_iter=5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence
            model.fit(X[train], Y[train], sample_weight=W[train])
        expected.append(accuracy_score(Y[test], model.predict(X[test]), sample_weight=W[test]))
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], [np.mean(expected)])
