"""Stacking on the cluster: scikit-learn compatibility and equality, fold units, failures."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from distributed import Client
from sklearn.base import clone
from sklearn.datasets import load_diabetes, load_iris, make_classification
from sklearn.ensemble import StackingClassifier as SkStackingClassifier
from sklearn.ensemble import StackingRegressor as SkStackingRegressor
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.model_selection import KFold, StratifiedKFold, cross_val_predict
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor
from sklearn.utils.estimator_checks import parametrize_with_checks

from dmlsearch import InvalidParameterError
from dmlsearch.ensemble import MemberFitError, StackingClassifier, StackingRegressor
from dmlsearch.testing import FailingClassifier, SleepyClassifier

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def iris() -> tuple[np.ndarray, np.ndarray]:
    return load_iris(return_X_y=True)


def base_classifiers() -> list[tuple[str, object]]:
    return [
        ("lr", LogisticRegression(max_iter=1000)),
        ("dt", DecisionTreeClassifier(random_state=0)),
    ]


# -- scikit-learn's estimator checks -------------------------------------------------------

ESTIMATORS = [
    StackingClassifier(base_classifiers(), cv=3),
    StackingRegressor([("ridge", Ridge()), ("dt", DecisionTreeRegressor(random_state=0))], cv=3),
]


def expected_failures(estimator: object) -> dict[str, str]:
    return {
        "check_dtype_object": (
            "a base estimator's TypeError on a dict in X reaches the caller as "
            "MemberFitError (a ValueError naming the estimator and fold, the TypeError as "
            "its __cause__), not as TypeError"
        ),
    }


class TestEstimatorChecks:
    @pytest.fixture(autouse=True)
    def _current_client(self, client: Client) -> Iterator[None]:
        with client.as_current():
            yield

    @parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failures)
    def test_sklearn_compatible(self, estimator, check):
        check(estimator)


# -- equal to scikit-learn ----------------------------------------------------------------


@pytest.mark.parametrize("passthrough", [False, True])
def test_classifier_equals_scikit_learn_on_the_same_folds(client, iris, passthrough):
    X, y = iris
    cv = KFold(n_splits=4, shuffle=True, random_state=0)
    ours = StackingClassifier(
        base_classifiers(), cv=cv, passthrough=passthrough, client=client
    ).fit(X, y)
    theirs = SkStackingClassifier(base_classifiers(), cv=cv, passthrough=passthrough).fit(X, y)
    np.testing.assert_array_equal(ours.predict(X), theirs.predict(X))
    np.testing.assert_array_equal(ours.predict_proba(X), theirs.predict_proba(X))
    np.testing.assert_array_equal(ours.transform(X), theirs.transform(X))
    # The final estimator saw the same out-of-fold matrix: it learnt the same coefficients.
    np.testing.assert_array_equal(ours.final_estimator_.coef_, theirs.final_estimator_.coef_)
    assert ours.stack_method_ == theirs.stack_method_ == ["predict_proba", "predict_proba"]
    assert list(ours.named_estimators_) == ["lr", "dt"]
    assert ours.n_features_in_ == 4
    # One unit per (estimator x fold) plus one refit per estimator.
    assert ours.runner_stats_.recorded == 2 * 4 + 2


def test_out_of_fold_matrix_equals_cross_val_predict(client):
    X, y = make_classification(n_samples=120, n_features=6, random_state=0)  # binary
    cv = StratifiedKFold(n_splits=3, shuffle=True, random_state=1)
    ests = [
        ("lr", LogisticRegression()),
        ("svc", LinearSVC()),
        ("dt", DecisionTreeClassifier(random_state=0)),
    ]

    final = LogisticRegression()
    ours = StackingClassifier(ests, final_estimator=final, cv=cv, client=client).fit(X, y)
    assert ours.stack_method_ == ["predict_proba", "decision_function", "predict_proba"]
    expected = np.column_stack(
        [
            cross_val_predict(LogisticRegression(), X, y, cv=cv, method="predict_proba")[:, 1],
            cross_val_predict(LinearSVC(), X, y, cv=cv, method="decision_function"),
            cross_val_predict(
                DecisionTreeClassifier(random_state=0), X, y, cv=cv, method="predict_proba"
            )[:, 1],
        ]
    )
    # The final estimator was fitted on the out-of-fold matrix: refitting it on the
    # expected matrix gives the same model.
    reference = LogisticRegression().fit(expected, y)
    np.testing.assert_array_equal(ours.final_estimator_.coef_, reference.coef_)
    np.testing.assert_array_equal(ours.final_estimator_.intercept_, reference.intercept_)


def test_regressor_equals_scikit_learn(client):
    X, y = load_diabetes(return_X_y=True)
    ests = [("lin", LinearRegression()), ("dt", DecisionTreeRegressor(random_state=0, max_depth=4))]
    ours = StackingRegressor(ests, cv=KFold(3), client=client).fit(X, y)
    theirs = SkStackingRegressor(ests, cv=KFold(3)).fit(X, y)
    np.testing.assert_array_equal(ours.predict(X), theirs.predict(X))
    assert ours.score(X, y) > 0.4


def test_string_labels_and_drop(client, iris):
    X, y = iris
    labels = np.array(["setosa", "versicolor", "virginica"])[y]
    ests = [*base_classifiers(), ("off", "drop")]
    ours = StackingClassifier(ests, cv=3, client=client).fit(X, labels)
    assert ours.named_estimators_["off"] == "drop"
    assert len(ours.estimators_) == 2
    assert set(ours.predict(X)) <= set(labels)
    assert ours.score(X, labels) > 0.9


# -- parameters ------------------------------------------------------------------------------


def test_nested_parameters_and_clone(client):
    stack = StackingClassifier(base_classifiers(), client=client)
    params = stack.get_params()
    assert params["lr__max_iter"] == 1000 and params["client"] is client
    twin = clone(stack)
    twin.set_params(lr__C=0.5, dt="drop")
    assert dict(twin.estimators)["dt"] == "drop"
    assert dict(twin.estimators)["lr"].C == 0.5
    assert dict(stack.estimators)["lr"].C == 1.0
    assert twin.get_params()["client"] is client


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"estimators": []}, "estimators"),
        ({"estimators": [("a", LogisticRegression()), ("a", LogisticRegression())]}, "estimators"),
        ({"estimators": [("a", "drop")]}, "estimators"),
        ({"final_estimator": Ridge()}, "final_estimator"),
        ({"cv": "prefit"}, "cv"),
        ({"cv": 1}, "cv"),
        ({"stack_method": "predict_log"}, "stack_method"),
        ({"estimators": [("svc", LinearSVC())], "stack_method": "predict_proba"}, "stack_method"),
        ({"passthrough": "yes"}, "passthrough"),
    ],
)
def test_bad_parameters_are_refused_before_any_work(iris, params, name):
    X, y = iris
    base = {"estimators": base_classifiers(), **params}
    stack = StackingClassifier(client="tcp://127.0.0.1:1", **base)
    with pytest.raises(InvalidParameterError) as info:
        stack.fit(X, y)
    assert info.value.param == name


def test_folds_that_are_not_a_partition_are_refused(iris):
    X, y = iris
    splits = [(np.arange(0, 100), np.arange(100, 150))]  # rows 0-99 never predicted
    stack = StackingClassifier(base_classifiers(), cv=splits, client="tcp://127.0.0.1:1")
    with pytest.raises(InvalidParameterError, match="exactly once"):
        stack.fit(X, y)


def test_nan_reaches_members_that_impute_and_is_refused_for_those_that_cannot(client, iris):
    X, y = iris
    X = X.copy()
    X[::7, 1] = np.nan
    imputing = make_pipeline(SimpleImputer(), LogisticRegression(max_iter=1000))
    ours = StackingClassifier([("p", imputing)], cv=3, client=client).fit(X, y)
    theirs = SkStackingClassifier([("p", imputing)], cv=3).fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(X), theirs.predict_proba(X), atol=1e-8)
    with pytest.raises(ValueError, match="NaN"):
        StackingClassifier([("lr", LogisticRegression())], cv=3, client="tcp://127.0.0.1:1").fit(
            X, y
        )


def test_sample_weight_for_an_estimator_without_it_is_refused_before_any_work(iris):
    X, y = iris
    ests = [("lr", LogisticRegression()), ("knn", KNeighborsClassifier())]
    stack = StackingClassifier(ests, cv=3, client="tcp://127.0.0.1:1")
    with pytest.raises(InvalidParameterError, match=r"estimator 'knn' \(KNeighbors"):
        stack.fit(X, y, sample_weight=np.ones(len(y)))


# -- failures --------------------------------------------------------------------------------


def test_a_base_estimator_that_raises_is_named(client, iris):
    X, y = iris
    ests = [("lr", LogisticRegression(max_iter=1000)), ("bad", FailingClassifier(fail=True))]
    with pytest.raises(MemberFitError, match=r"estimator 'bad' \(FailingClassifier\)") as info:
        StackingClassifier(ests, cv=3, client=client).fit(X, y)
    assert "FailingClassifier asked to fail" in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)


def test_worker_killed_mid_fit_is_retried(fresh_cluster, iris):
    X, y = iris
    ests = [
        ("slow", SleepyClassifier(seconds=0.4)),
        ("lr", LogisticRegression(max_iter=1000)),
    ]
    with Client(fresh_cluster, set_as_default=False) as c:
        pids = c.run(os.getpid)
        victim = next(iter(pids))
        busy: list[str] = []

        def killer() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                keys = c.processing([victim]).get(victim, [])
                if any("stacking-fit" in str(k) for k in keys):
                    busy.extend(str(k) for k in keys)
                    time.sleep(0.1)  # inside the sleepy fit
                    os.kill(pids[victim], signal.SIGKILL)
                    return
                time.sleep(0.02)

        thread = threading.Thread(target=killer)
        thread.start()
        stack = StackingClassifier(ests, cv=KFold(3, shuffle=True, random_state=0), client=c)
        stack.fit(X, y)
        thread.join()
    assert busy, "the victim worker never ran a fold fit"
    assert stack.runner_stats_.recorded == 2 * 3 + 2
    reference = SkStackingClassifier(ests, cv=KFold(3, shuffle=True, random_state=0)).fit(X, y)
    np.testing.assert_array_equal(stack.predict_proba(X), reference.predict_proba(X))
