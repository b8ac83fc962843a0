"""Ensemble selection over a search: out-of-fold predictions kept by the workers, Caruana's
greedy selection, members refitted on the cluster, from a fitted search or a registry."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_diabetes, load_iris
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import KFold, ShuffleSplit, StratifiedKFold, cross_val_predict
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier

from dmlsearch import InvalidParameterError, Registry, SearchCV

pytestmark = pytest.mark.cluster

CV = StratifiedKFold(3, shuffle=True, random_state=0)
TREES = {"max_depth": [1, 2, 3, 5, None], "min_samples_leaf": [1, 5, 20]}


@pytest.fixture(scope="module")
def iris() -> tuple[np.ndarray, np.ndarray]:
    X, y = load_iris(return_X_y=True)
    return X, np.array(["setosa", "versicolor", "virginica"])[y]


@pytest.fixture(scope="module")
def tree_search(client, iris) -> SearchCV:
    X, y = iris
    return SearchCV(
        DecisionTreeClassifier(random_state=0),
        TREES,
        strategy="grid",
        cv=CV,
        client=client,
        keep_oof=True,
        random_state=0,
    ).fit(X, y)


# -- out-of-fold predictions -----------------------------------------------------------------


def test_oof_equals_cross_val_predict_and_stays_on_the_workers(tree_search, iris):
    X, y = iris
    assert all(t.oof is not None and t.oof.backing == "memory" for t in tree_search.trials_)
    assert {t.oof.location for t in tree_search.trials_} <= set(
        tree_search.client.scheduler_info()["workers"]
    )
    for trial in tree_search.trials_[:4]:
        model = clone(tree_search.estimator).set_params(**trial.params)
        expected = cross_val_predict(model, X, y, cv=CV, method="predict_proba")
        got = tree_search.oof_predictions(trial.number)
        assert got.dtype == np.float32 and trial.oof.method == "predict_proba"
        np.testing.assert_array_equal(got, expected.astype(np.float32))


def test_oof_of_decision_function_and_regressors(client):
    X, y = load_iris(return_X_y=True)
    search = SearchCV(
        LinearSVC(), {"C": [0.1, 1.0]}, strategy="grid", cv=CV, client=client, keep_oof=True
    ).fit(X, y)
    expected = cross_val_predict(LinearSVC(C=0.1), X, y, cv=CV, method="decision_function")
    np.testing.assert_array_equal(search.oof_predictions(0), expected.astype(np.float32))

    Xr, yr = load_diabetes(return_X_y=True)
    cv = KFold(4, shuffle=True, random_state=1)
    search = SearchCV(
        Ridge(), {"alpha": [0.1, 10.0]}, strategy="grid", cv=cv, client=client, keep_oof=True
    ).fit(Xr, yr)
    expected = cross_val_predict(Ridge(alpha=10.0), Xr, yr, cv=cv)
    np.testing.assert_array_equal(search.oof_predictions(1), expected.astype(np.float32))


def test_keep_oof_false_keeps_nothing(client, iris, tree_search):
    X, y = iris
    plain = SearchCV(
        DecisionTreeClassifier(random_state=0),
        TREES,
        strategy="grid",
        cv=CV,
        client=client,
        random_state=0,
    ).fit(X, y)
    assert all(t.oof is None for t in plain.trials_)
    for key in ("mean_test_score", "rank_test_score"):
        np.testing.assert_array_equal(plain.cv_results_[key], tree_search.cv_results_[key])
    with pytest.raises(InvalidParameterError, match="keep_oof=True"):
        plain.oof_predictions(0)


def test_keep_oof_refuses_folds_that_are_not_a_partition(client, iris):
    X, y = iris
    search = SearchCV(
        LogisticRegression(),
        {"C": [1.0]},
        cv=ShuffleSplit(3, random_state=0),
        client=client,
        keep_oof=True,
    )
    with pytest.raises(InvalidParameterError, match="exactly once"):
        search.fit(X, y)


def test_oof_go_to_the_registry_artifact_store(client, iris, tmp_path):
    X, y = iris
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    with Registry(url, str(tmp_path / "artifacts")) as registry:
        search = SearchCV(
            LogisticRegression(max_iter=500),
            {"C": [0.01, 1.0, 100.0]},
            strategy="grid",
            cv=CV,
            client=client,
            keep_oof=True,
            registry=registry,
            experiment_name="lr",
        ).fit(X, y)
        refs = [t.oof for t in search.trials_]
        assert all(r is not None and r.backing == "artifacts" for r in refs)
        assert all((tmp_path / "artifacts").as_posix() in r.key for r in refs)
        expected = cross_val_predict(
            LogisticRegression(max_iter=500, C=100.0), X, y, cv=CV, method="predict_proba"
        )
        np.testing.assert_array_equal(search.oof_predictions(2), expected.astype(np.float32))
        # The registry's garbage collection leaves them alone (they are not model blobs).
        registry.gc(grace_seconds=0)
        np.testing.assert_array_equal(search.oof_predictions(2), expected.astype(np.float32))
