"""Bagging on the cluster: scikit-learn compatibility, determinism, failures, the registry."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from distributed import Client, LocalCluster
from sklearn.base import clone
from sklearn.datasets import load_diabetes, make_classification
from sklearn.ensemble import BaggingClassifier as SkBaggingClassifier
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.exceptions import NotFittedError
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier
from sklearn.utils.estimator_checks import parametrize_with_checks

from dmlsearch import InvalidParameterError, Registry
from dmlsearch.ensemble import BaggingClassifier, BaggingRegressor, MemberFitError
from dmlsearch.ensemble._members import (
    BagSpec,
    MemberData,
    draw_member,
    fit_bag_members,
    member_seed,
)
from dmlsearch.testing import FailingClassifier, local_cluster

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return make_classification(
        n_samples=300, n_features=8, n_informative=5, n_classes=3, random_state=0
    )


# -- scikit-learn's estimator checks -------------------------------------------------------

ESTIMATORS = [
    BaggingClassifier(n_estimators=3, random_state=0),
    BaggingRegressor(n_estimators=3, random_state=0),
]


def expected_failures(estimator: object) -> dict[str, str]:
    return {
        "check_dtype_object": (
            "a member's TypeError on a dict in X reaches the caller as MemberFitError (a "
            "ValueError naming the member, the TypeError as its __cause__), not as TypeError"
        ),
        # As scikit-learn's own BaggingClassifier/Regressor declare: with max_samples=None
        # the number of rows drawn is n_samples whatever the weights.
        "check_sample_weight_equivalence_on_dense_data": (
            "sample_weight is not equivalent to removing/repeating samples"
        ),
        "check_sample_weight_equivalence_on_sparse_data": (
            "sample_weight is not equivalent to removing/repeating samples"
        ),
    }


class TestEstimatorChecks:
    @pytest.fixture(autouse=True)
    def _current_client(self, client: Client) -> Iterator[None]:
        # Built at collection time with client=None: inside this context the estimators
        # resolve the shared cluster's client as the current one.
        with client.as_current():
            yield

    @parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failures)
    def test_sklearn_compatible(self, estimator, check):
        check(estimator)


# -- parameters ------------------------------------------------------------------------------


def test_init_stores_and_clone_round_trips(client):
    bag = BaggingClassifier(KNeighborsClassifier(), n_estimators=4, max_samples=0.5, client=client)
    params = bag.get_params()
    assert params["n_estimators"] == 4 and params["client"] is client
    assert params["estimator__n_neighbors"] == 5
    twin = clone(bag)
    assert twin.get_params()["max_samples"] == 0.5
    twin.set_params(estimator__n_neighbors=3, n_estimators=2)
    assert twin.estimator.n_neighbors == 3 and bag.estimator.n_neighbors == 5


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"n_estimators": 0}, "n_estimators"),
        ({"max_samples": 1.5}, "max_samples"),
        ({"max_samples": 0}, "max_samples"),
        ({"max_samples": 1000, "bootstrap": False}, "max_samples"),
        ({"max_features": 0.0}, "max_features"),
        ({"max_features": 9}, "max_features"),
        ({"oob_score": True, "bootstrap": False}, "oob_score"),
        ({"random_state": -1}, "random_state"),
        ({"estimator": "tree"}, "estimator"),
    ],
)
def test_bad_parameters_are_refused_before_any_work(data, params, name):
    X, y = data
    # No scheduler listens there: a fit that got as far as the cluster would fail on it,
    # so the error below was raised before any work.
    bag = BaggingClassifier(client="tcp://127.0.0.1:1", **params)
    with pytest.raises(InvalidParameterError) as info:
        bag.fit(X, y)
    assert info.value.param == name


# -- results ---------------------------------------------------------------------------------


def test_accuracy_matches_scikit_learn_on_an_easy_problem(client):
    X, y = make_classification(
        n_samples=600, n_features=10, n_informative=6, class_sep=1.5, random_state=1
    )
    X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)
    ours = BaggingClassifier(n_estimators=10, random_state=0, client=client).fit(X_train, y_train)
    theirs = SkBaggingClassifier(n_estimators=10, random_state=0).fit(X_train, y_train)
    a, b = ours.score(X_test, y_test), theirs.score(X_test, y_test)
    assert a > 0.85 and b > 0.85
    assert abs(a - b) < 0.08
    assert len(ours.estimators_) == 10
    assert [len(r) for r in ours.estimators_samples_] == [len(X_train)] * 10
    assert ours.predict_proba(X_test).sum(axis=1) == pytest.approx(1.0)


def test_members_draw_their_rows_and_features_from_their_own_seed(client, data):
    X, y = data
    bag = BaggingClassifier(
        n_estimators=4,
        max_samples=100,
        max_features=0.5,
        bootstrap_features=True,
        random_state=7,
        client=client,
    ).fit(X, y)
    assert [f.shape for f in bag.estimators_features_] == [(4,)] * 4
    assert [m.n_features_in_ for m in bag.estimators_] == [4] * 4
    spec = bag._spec()
    for i, (rows, features) in enumerate(
        zip(bag.estimators_samples_, bag.estimators_features_, strict=True)
    ):
        _, f, r = draw_member(member_seed(7, i), spec)
        np.testing.assert_array_equal(r, rows)
        np.testing.assert_array_equal(f, features)
    # Without replacement: distinct rows and features.
    bag.set_params(bootstrap=False, bootstrap_features=False).fit(X, y)
    assert all(len(set(r)) == 100 for r in bag.estimators_samples_)
    assert all(len(set(f)) == 4 for f in bag.estimators_features_)


def test_same_random_state_same_predictions_in_one_batch_and_in_many(client, data):
    X, y = data
    bag = BaggingClassifier(n_estimators=6, max_features=0.7, random_state=3, client=client).fit(
        X, y
    )
    spec = BagSpec(
        estimator=DecisionTreeClassifier(),
        n_samples=len(X),
        n_features=X.shape[1],
        max_samples=len(X),
        max_features=bag._max_features,
        bootstrap=True,
        bootstrap_features=False,
        n_classes=3,
    )
    payloads = [(i, member_seed(3, i)) for i in range(6)]
    shared = MemberData(X, np.unique(y, return_inverse=True)[1])
    one_batch = fit_bag_members(shared, spec, payloads, None, None)
    reversed_singles = [fit_bag_members(shared, spec, [p], None, None)[0] for p in payloads[::-1]]
    by_index = {r.id: r for r in reversed_singles}
    for r in one_batch:
        assert r.error is None
        np.testing.assert_array_equal(r.features, bag.estimators_features_[r.id])
        np.testing.assert_array_equal(
            r.estimator.predict_proba(X[:, r.features]),
            bag.estimators_[r.id].predict_proba(X[:, r.features]),
        )
        np.testing.assert_array_equal(
            by_index[r.id].estimator.predict_proba(X[:, r.features]),
            r.estimator.predict_proba(X[:, r.features]),
        )


@pytest.fixture(scope="module")
def one_worker() -> Iterator[LocalCluster]:
    cl = local_cluster(1)
    yield cl
    cl.close()


@pytest.mark.filterwarnings("ignore:Some inputs do not have OOB scores")
def test_identical_predictions_on_one_and_two_workers(client, one_worker, data):
    X, y = data
    bag = BaggingClassifier(
        GradientBoostingClassifier(n_estimators=5, subsample=0.8),
        n_estimators=8,
        max_features=0.75,
        random_state=11,
        oob_score=True,
    )
    on_two = clone(bag).set_params(client=client).fit(X, y)
    with Client(one_worker, set_as_default=False) as c1:
        on_one = clone(bag).set_params(client=c1).fit(X, y)
    np.testing.assert_array_equal(on_one.predict_proba(X), on_two.predict_proba(X))
    np.testing.assert_array_equal(on_one.oob_decision_function_, on_two.oob_decision_function_)
    assert on_one.oob_score_ == on_two.oob_score_
    # A different random_state gives a different ensemble.
    other = clone(bag).set_params(client=client, random_state=12).fit(X, y)
    assert not np.array_equal(other.predict_proba(X), on_two.predict_proba(X))


@pytest.mark.filterwarnings("ignore:Some inputs do not have OOB scores")
@pytest.mark.filterwarnings("ignore:invalid value encountered in divide")
def test_oob_score_of_classifier_and_regressor(client, data):
    X, y = data
    bag = BaggingClassifier(n_estimators=10, oob_score=True, random_state=0, client=client).fit(
        X, y
    )
    sk = SkBaggingClassifier(n_estimators=10, oob_score=True, random_state=0).fit(X, y)
    assert bag.oob_decision_function_.shape == (len(X), 3)
    assert abs(bag.oob_score_ - sk.oob_score_) < 0.1
    # Recomputed from the members and their out-of-bag rows on the driver.
    mask = np.ones((10, len(X)), dtype=bool)
    for i, rows in enumerate(bag.estimators_samples_):
        mask[i, rows] = False
    votes = sum(
        np.where(mask[i][:, None], m.predict_proba(X[:, f]), 0.0)
        for i, (m, f) in enumerate(zip(bag.estimators_, bag.estimators_features_, strict=True))
    )
    expected = (bag.classes_[np.argmax(votes, axis=1)] == y).mean()
    assert bag.oob_score_ == pytest.approx(expected)

    Xr, yr = load_diabetes(return_X_y=True)
    reg = BaggingRegressor(
        LinearRegression(), n_estimators=10, oob_score=True, random_state=0, client=client
    ).fit(Xr, yr)
    assert reg.oob_prediction_.shape == yr.shape
    assert 0.3 < reg.oob_score_ < 0.6
    assert reg.score(Xr, yr) > 0.4


def test_members_without_predict_proba_vote(client, data):
    X, y = data
    bag = BaggingClassifier(LinearSVC(), n_estimators=3, random_state=0, client=client).fit(X, y)
    proba = bag.predict_proba(X)
    assert set(np.unique(proba * 3)) <= {0.0, 1.0, 2.0, 3.0}
    assert bag.score(X, y) > 0.5


def test_nan_reaches_members_that_impute_as_in_scikit_learn(client, data):
    X, y = data
    X = X.copy()
    X[::5, 0] = np.nan
    imputing = make_pipeline(SimpleImputer(), DecisionTreeClassifier(random_state=0))
    params = {"n_estimators": 4, "bootstrap": False, "max_features": 1.0}
    ours = BaggingClassifier(imputing, client=client, random_state=0, **params).fit(X, y)
    theirs = SkBaggingClassifier(imputing, random_state=0, **params).fit(X, y)
    # Members seed their trees their own way (not as scikit-learn): equal accuracy, not
    # equal trees.
    assert ours.score(X, y) == pytest.approx(theirs.score(X, y), abs=0.02)
    plain = BaggingClassifier(LinearSVC(), client="tcp://127.0.0.1:1", n_estimators=2)
    with pytest.raises(ValueError, match="NaN"):
        plain.fit(X, y)


def test_sample_weight_draws_rows_in_proportion(client, data):
    X, y = data
    sw = np.zeros(len(y))
    sw[:50] = 1.0
    bag = BaggingClassifier(n_estimators=3, random_state=0, client=client).fit(
        X, y, sample_weight=sw
    )
    assert all(rows.max() < 50 for rows in bag.estimators_samples_)


# -- failures --------------------------------------------------------------------------------


def test_a_member_that_raises_is_named(client, data):
    X, y = data
    bag = BaggingClassifier(FailingClassifier(fail=True), n_estimators=4, client=client)
    with pytest.raises(MemberFitError, match=r"BaggingClassifier member \d of 4") as info:
        bag.fit(X, y)
    assert "FailingClassifier asked to fail" in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.member.startswith("BaggingClassifier member")
    with pytest.raises(NotFittedError):  # not an AttributeError on a half-fitted bag
        bag.predict(X)


def test_worker_killed_mid_fit_is_retried_and_changes_nothing(client, fresh_cluster, data):
    X, y = data
    bag = BaggingClassifier(
        GradientBoostingClassifier(n_estimators=20), n_estimators=8, random_state=5
    )
    reference = clone(bag).set_params(client=client).fit(X, y)
    with Client(fresh_cluster, set_as_default=False) as c:
        pids = c.run(os.getpid)
        victim = next(iter(pids))
        busy: list[str] = []

        def killer() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                keys = c.processing([victim]).get(victim, [])
                if any("bagging-member" in str(k) for k in keys):
                    busy.extend(str(k) for k in keys)
                    time.sleep(0.05)  # let it get into a member's fit
                    os.kill(pids[victim], signal.SIGKILL)
                    return
                time.sleep(0.02)

        thread = threading.Thread(target=killer)
        thread.start()
        fitted = clone(bag).set_params(client=c).fit(X, y)
        thread.join()
    assert busy, "the victim worker never ran a member"
    assert len(fitted.estimators_) == 8
    np.testing.assert_array_equal(fitted.predict_proba(X), reference.predict_proba(X))


# -- the registry ----------------------------------------------------------------------------


def test_fitted_bagging_round_trips_through_the_registry(client, data, tmp_path):
    X, y = data
    bag = BaggingClassifier(n_estimators=3, max_features=0.5, random_state=0, client=client).fit(
        X, y
    )
    with Registry(f"sqlite:///{tmp_path / 'reg.db'}", str(tmp_path / "artifacts")) as reg:
        version = reg.register_model("bagged", bag)
        assert version.format == "skops"
        loaded = reg.load_model("bagged")
    assert type(loaded) is BaggingClassifier
    assert loaded.get_params()["client"] is None  # a live Client is never saved
    np.testing.assert_array_equal(loaded.predict_proba(X), bag.predict_proba(X))
    assert [len(r) for r in loaded.estimators_samples_] == [len(X)] * 3


def test_large_inputs_are_predicted_on_the_workers_with_the_same_numbers(client, data):
    import pickle

    import dask

    from dmlsearch.ensemble._predict import ROWS_KEY

    X, y = data
    Xr, yr = load_diabetes(return_X_y=True)
    fitted = [
        BaggingClassifier(
            DecisionTreeClassifier(),
            n_estimators=8,
            max_features=0.7,
            random_state=0,
            client=client,
        ).fit(X, y),
        BaggingRegressor(LinearRegression(), n_estimators=5, random_state=0, client=client).fit(
            Xr, yr
        ),
    ]
    for model, rows in zip(fitted, (X, Xr), strict=True):
        method = "predict_proba" if hasattr(model, "predict_proba") else "predict"
        on_driver = getattr(model, method)(rows)
        assert getattr(model, "_members_future", None) is None
        with dask.config.set({ROWS_KEY: 10}):
            on_workers = getattr(model, method)(rows)
            again = getattr(model, method)(rows)  # the members scattered once, reused
        assert model._members_future[0] is client
        # Trees: the same numbers; a linear model's BLAS may round a block of rows apart.
        np.testing.assert_allclose(on_workers, on_driver, rtol=1e-12, atol=0)
        np.testing.assert_array_equal(again, on_workers)
        if method == "predict_proba":
            np.testing.assert_array_equal(on_workers, on_driver)
        assert "_members_future" not in pickle.loads(pickle.dumps(model)).__dict__


def test_a_refitted_bag_predicts_on_the_workers_with_its_new_members(client, data):
    # Found by a probe: the members scattered for the fit before were used again, so after
    # a refit on flipped labels the workers' predictions were those of the old members.
    import dask

    from dmlsearch.ensemble._predict import ROWS_KEY

    X, y = data
    bag = BaggingClassifier(n_estimators=4, random_state=0, client=client).fit(X, y)
    with dask.config.set({ROWS_KEY: 10}):
        before = bag.predict_proba(X)
        bag.fit(X, y[::-1].copy())
        on_workers = bag.predict_proba(X)
    assert not np.array_equal(on_workers, before)
    with dask.config.set({ROWS_KEY: 10**9}):
        np.testing.assert_array_equal(on_workers, bag.predict_proba(X))


@pytest.mark.filterwarnings("ignore:Some inputs do not have OOB scores")
@pytest.mark.filterwarnings("ignore:invalid value encountered in divide")
def test_multi_output_oob_score_when_a_member_drew_every_row(client):
    # Found by a probe: a member with no out-of-bag row returned an array without the
    # outputs' axis, and the sum failed to broadcast.
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    reg = BaggingRegressor(
        LinearRegression(), n_estimators=8, oob_score=True, random_state=0, client=client
    ).fit(X, Y)
    assert reg.oob_prediction_.shape == Y.shape
