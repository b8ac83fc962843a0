"""Worker-side evaluation: the default-accuracy fast path matches scikit-learn exactly."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, check_scoring
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeClassifier

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
