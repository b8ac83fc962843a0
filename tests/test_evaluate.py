"""Worker-side evaluation: the default-accuracy fast path matches scikit-learn exactly, and
an estimator that calls sys.exit fails its trial, not its worker."""

from __future__ import annotations

import sys
import warnings
from typing import Any

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.datasets import make_classification
from sklearn.exceptions import FitFailedWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, check_scoring
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeClassifier

from dmlsearch import SearchCV
from dmlsearch._scoring import _plain_accuracy
from dmlsearch._scoring import score as _score


@pytest.mark.parametrize("labels", ["int", "float", "bool", "uint8"])
def test_fast_accuracy_is_bit_identical(labels):
    X, y = make_classification(301, 6, n_classes=3, n_informative=4, random_state=1)
    y = {"int": y, "float": y.astype(float), "bool": y == 1, "uint8": y.astype(np.uint8)}[labels]
    est = LogisticRegression().fit(X[:200], y[:200])
    scorer = check_scoring(est)
    assert _plain_accuracy(scorer, est, y[200:])
    fast = _score(scorer, est, X[200:], y[200:], multimetric=False)["score"]
    assert fast == accuracy_score(y[200:], est.predict(X[200:]))
    assert fast == est.score(X[200:], y[200:])


def test_other_scorers_take_the_general_path():
    X, y = make_classification(100, 4, random_state=0)
    tree = DecisionTreeClassifier(random_state=0).fit(X, y)
    pipe = make_pipeline(StandardScaler(), LogisticRegression()).fit(X, y)
    # Pipelines define their own score; strings, 2-d and non-integral labels are left alone.
    assert not _plain_accuracy(check_scoring(pipe), pipe, y)
    assert not _plain_accuracy(check_scoring(tree, scoring="accuracy"), tree, y)
    assert not _plain_accuracy(check_scoring(tree), tree, np.array(["a", "b"] * 50))
    assert not _plain_accuracy(check_scoring(tree), tree, y.reshape(-1, 1))
    assert not _plain_accuracy(check_scoring(tree), tree, y + 0.5)
    assert _score(check_scoring(pipe), pipe, X, y, False)["score"] == pipe.score(X, y)


class _Exits(ClassifierMixin, BaseEstimator):
    """Calls sys.exit in fit when ``bad``."""

    def __init__(self, bad: bool = False) -> None:
        self.bad = bad

    def fit(self, X: Any, y: Any) -> _Exits:
        if self.bad:
            sys.exit(3)
        self.classes_ = np.unique(y)
        return self

    def predict(self, X: Any) -> Any:
        return np.full(len(X), self.classes_[0])


@pytest.mark.parametrize("scheduler", [None, "halving"])
def test_sys_exit_in_a_fit_fails_its_trial_and_leaves_the_workers(client, scheduler):
    X, y = make_classification(n_samples=60, n_features=4, random_state=0)
    before = len(client.scheduler_info()["workers"])
    kwargs: dict[str, Any] = {"client": client, "progress": False, "dashboard": False}
    if scheduler:
        kwargs.update(scheduler=scheduler, resource="n_samples", min_resource=10)
    search = SearchCV(_Exits(), {"bad": [False, True]}, strategy="grid", cv=3, **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        search.fit(X, y)
    if scheduler is None:
        assert any(issubclass(w.category, FitFailedWarning) for w in caught)
    failed = [t for t in search.trials_ if t.state == "failed"]
    assert failed and all("SystemExit: 3" in (t.error or "") for t in failed)
    assert len(client.scheduler_info()["workers"]) == before
    with pytest.raises(RuntimeError, match=r"called sys.exit\(3\)"):
        SearchCV(
            _Exits(), {"bad": [True]}, strategy="grid", cv=3, error_score="raise", **kwargs
        ).fit(X, y)
