"""SearchCV(workers_per_trial=k): each trial a gang of k workers training with xgboost.dask."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
from distributed import Client
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold, cross_val_score

from dmlsearch import InvalidParameterError, SearchCV
from dmlsearch.testing import local_cluster

xgboost = pytest.importorskip("xgboost")

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return make_classification(n_samples=600, n_features=8, random_state=0)


def test_each_trial_trains_on_a_gang_and_scores_as_xgboost_does(client, data):
    X, y = data
    cv = KFold(3, shuffle=True, random_state=0)
    search = SearchCV(
        xgboost.XGBClassifier(n_estimators=20, tree_method="hist", random_state=0),
        {"max_depth": [2, 4], "learning_rate": [0.1, 0.3]},
        strategy="grid",
        cv=cv,
        workers_per_trial=2,
        client=client,
        progress=False,
    ).fit(X, y)
    workers = set(client.scheduler_info()["workers"])
    assert [t.state for t in search.trials_] == ["complete"] * 4
    for trial in search.trials_:
        assert set(trial.worker.split("+")) == workers  # both workers, one rank each
        single = cross_val_score(
            xgboost.XGBClassifier(
                n_estimators=20, tree_method="hist", random_state=0, **trial.params
            ),
            X,
            y,
            cv=cv,
        )
        got = [fold["score"] for fold in trial.test_scores]
        # Histograms built from two workers' quantile sketches: close, not bit-equal.
        assert np.mean(got) == pytest.approx(np.mean(single), abs=0.03)
    assert isinstance(search.best_estimator_, xgboost.XGBClassifier)
    assert search.score(X, y) > 0.8


def test_bad_gang_settings_fail_before_any_work(client, data):
    X, y = data
    xgb = xgboost.XGBClassifier(n_estimators=5)
    space = {"max_depth": [2, 3]}
    cases = [
        (dict(estimator=xgb, workers_per_trial=3), "the cluster has 2 workers"),
        (dict(estimator=xgb, workers_per_trial=0), "must be an int >= 1"),
        (dict(estimator=LogisticRegression(), workers_per_trial=2), "XGBClassifier"),
        (dict(estimator=xgb, workers_per_trial=2, keep_oof=True), "keep no out-of-fold"),
        (dict(estimator=xgb, workers_per_trial=2, trial_timeout=5.0), "trial_timeout"),
        (
            dict(
                estimator=xgb,
                workers_per_trial=2,
                scheduler="asha",
                max_resource=9,
                resource="max_depth",
            ),
            "boosting rounds, resource='n_estimators'",
        ),
    ]
    for kwargs, text in cases:
        estimator = kwargs.pop("estimator")
        space_ = {"C": [1.0]} if isinstance(estimator, LogisticRegression) else space
        search = SearchCV(estimator, space_, cv=2, client=client, progress=False, **kwargs)
        with pytest.raises(InvalidParameterError, match=text):
            search.fit(X, y)
        assert not hasattr(search, "trials_")


def test_a_refusal_before_any_trial_leaves_no_experiment_behind(client, data, tmp_path):
    # A probe's refused run left a 'failed' experiment of 0 trials: the fixed run then met
    # "already exists".
    from dmlsearch import Registry

    X, y = data
    url = f"sqlite:///{tmp_path / 'reg.db'}"

    def search(k: int) -> SearchCV:
        return SearchCV(
            xgboost.XGBClassifier(n_estimators=3), {"max_depth": [2]}, cv=2, client=client,
            workers_per_trial=k, registry=url, experiment_name="gang", progress=False,
        )  # fmt: skip

    with pytest.raises(InvalidParameterError, match="the cluster has 2 workers"):
        search(3).fit(X, y)
    with pytest.raises(InvalidParameterError, match="LabelEncoder"):
        search(2).fit(X, y + 1)
    with Registry(url) as registry:
        assert registry.experiments().empty
    assert len(search(2).fit(X, y).trials_) == 1
    with Registry(url) as registry:  # the report shows it (a probe missed it there)
        assert registry.experiment("gang").config["workers_per_trial"] == 2


def test_early_stopping_is_refused_as_not_available_with_gangs(client, data):
    # It said only "takes no fit parameters, got ['eval_set']", after the check of
    # early_stopping_rounds had asked for that eval_set.
    X, y = data
    search = SearchCV(
        xgboost.XGBClassifier(n_estimators=5, early_stopping_rounds=2), {"max_depth": [2]},
        cv=2, client=client, workers_per_trial=2, progress=False,
    )  # fmt: skip
    with pytest.raises(
        InvalidParameterError, match=r"early stopping .*is not available with workers_per_trial"
    ):
        search.fit(X, y, eval_set=[(X[:50], y[:50])])
    assert not hasattr(search, "trials_")
    # Without an eval_set it asked for one, which gang trials then refused.
    with pytest.raises(InvalidParameterError) as caught:
        search.fit(X, y)
    assert "not available with workers_per_trial=2" in str(caught.value)
    assert "eval_set=[(X_val" not in str(caught.value)


def test_inputs_a_gang_cannot_split_as_they_are_are_refused_before_any_work(client, data):
    import pandas as pd
    import scipy.sparse

    X, y = data
    frame = pd.DataFrame(X).assign(city=pd.Categorical(np.where(y > 0, "r", "s")))
    words = np.where(y > 0, "yes", "no")
    cases = [
        (scipy.sparse.csr_matrix(X), y, "X", r"sparse matrix: pass X.toarray\(\)"),
        (frame, y, "X", r"columns 'city' \(category\)"),
        (X.astype(str), y, "X", "dtype <U"),
        # Text labels failed on a worker, in each fold ("Unicode-3 is not supported").
        (X, words, "y", r"y has dtype <U3: .*LabelEncoder"),
        (X, pd.Series(words, dtype="category"), "y", "y has dtype category: .*LabelEncoder"),
        # Numbers other than 0 .. n - 1 failed on the workers after the search began.
        (X, y + 1, "y", r"0 \.\. n_classes - 1, and y has 1, 2: .*LabelEncoder"),
        (X, np.where(y > 0, 1, -1), "y", r"y has -1, 1: .*LabelEncoder"),
    ]
    for X_bad, y_bad, param, text in cases:
        xgb = xgboost.XGBClassifier(n_estimators=2, enable_categorical=True)
        search = SearchCV(xgb, {"max_depth": [2]}, cv=2, client=client, workers_per_trial=2)
        with pytest.raises(InvalidParameterError, match=text) as info:
            search.fit(X_bad, y_bad)
        assert info.value.param == param
        assert not hasattr(search, "trials_")


def _pid(dask_worker=None) -> int:  # run on a worker by client.run
    return os.getpid()


def test_a_worker_killed_mid_training_fails_that_trial_fast_and_the_search_goes_on():
    X, y = make_classification(n_samples=20_000, n_features=20, random_state=0)
    cluster = local_cluster(2)
    try:
        with Client(cluster, set_as_default=False) as client:
            search = SearchCV(
                xgboost.XGBClassifier(max_depth=8, tree_method="hist", random_state=0),
                # Trial 0 trains long enough to be killed; the others are quick.
                {"n_estimators": [5000, 5, 10]},
                strategy="grid",
                cv=2,
                workers_per_trial=2,
                client=client,
                progress=False,
                refit=False,
            )
            box: dict[str, object] = {}

            def fit() -> None:
                try:
                    box["done"] = search.fit(X, y)
                except Exception as exc:
                    box["error"] = exc

            runner = threading.Thread(target=fit)
            runner.start()
            deadline = time.monotonic() + 60
            victim = None
            while victim is None and time.monotonic() < deadline:
                # A private cluster: a task processing there is trial 0's training.
                for worker, keys in client.processing().items():
                    if keys:
                        victim = worker
                time.sleep(0.1)
            assert victim is not None, "no xgboost training task seen"
            time.sleep(0.5)  # inside the boosting rounds
            killed_at = time.time()
            os.kill(client.run(_pid, workers=[victim])[victim], signal.SIGKILL)
            runner.join(120)
            assert not runner.is_alive()
            assert "done" in box, [(t.state, t.error) for t in search.trials_]
    finally:
        cluster.close()
    lost = search.trials_[0]
    assert lost.state == "failed" and "GangWorkerLostError" in (lost.error or "")
    assert victim in lost.error
    assert lost.finished - killed_at < 60
    assert [t.state for t in search.trials_[1:]] == ["complete", "complete"]


def test_a_scheduler_boosts_promoted_trials_on_from_their_fold_boosters(client, data):
    X, y = data
    cv = KFold(2, shuffle=True, random_state=0)
    base = xgboost.XGBClassifier(tree_method="hist", random_state=0)
    search = SearchCV(
        base, {"max_depth": [2, 3, 4]}, strategy="grid", scheduler="halving",
        resource="n_estimators", min_resource=3, max_resource=9, reduction_factor=3,
        n_trials=3, cv=cv, workers_per_trial=2, client=client, progress=False,
    ).fit(X, y)  # fmt: skip
    r = search.cv_results_
    assert sorted(r["n_resources"]) == [3, 3, 3, 9]
    (top,) = [i for i, n in enumerate(r["n_resources"]) if n == 9]
    assert r["continued"][top] and r["work"][top] == 6  # 6 more rounds, not 9 from zero
    assert all("+" in step.worker for step in search.trials_)
    # The continued folds score as gang trials boosted 9 rounds at once.
    once = SearchCV(
        base.set_params(n_estimators=9), {"max_depth": [r["params"][top]["max_depth"]]},
        strategy="grid", cv=cv, workers_per_trial=2, client=client, progress=False,
        refit=False,
    ).fit(X, y)  # fmt: skip
    for f in range(2):
        assert r[f"split{f}_test_score"][top] == pytest.approx(
            once.cv_results_[f"split{f}_test_score"][0], abs=1e-9
        )
    assert search.best_estimator_.n_estimators == 9


def test_a_random_forest_is_refitted_at_each_rung_not_boosted_on(client, data):
    # xgboost's forests have one round of n_estimators trees: boosting on from one would
    # add a second forest to the first, not grow it.
    X, y = data
    cv = KFold(2, shuffle=True, random_state=0)
    # No row or column sampling: xgboost's per-thread generators are not restarted
    # between fits, so a sampled forest would depend on what its thread trained before.
    forest = xgboost.XGBRFClassifier(subsample=1.0, colsample_bynode=1.0, random_state=0)
    for k in (1, 2):
        search = SearchCV(
            forest, {"max_depth": [2, 3, 4]}, strategy="grid",
            scheduler="halving", resource="n_estimators", min_resource=2, max_resource=6,
            reduction_factor=3, cv=cv, scoring="neg_log_loss", workers_per_trial=k,
            client=client, progress=False, refit=False,
        ).fit(X, y)  # fmt: skip
        r = search.cv_results_
        (top,) = [i for i, n in enumerate(r["n_resources"]) if n == 6]
        assert not r["continued"][top] and r["work"][top] == 6
        once = SearchCV(
            forest.set_params(n_estimators=6),
            {"max_depth": [r["params"][top]["max_depth"]]}, strategy="grid",
            cv=cv, scoring="neg_log_loss", workers_per_trial=k, client=client,
            progress=False, refit=False,
        ).fit(X, y)  # fmt: skip
        got, want = r["mean_test_score"][top], once.cv_results_["mean_test_score"][0]
        assert got == pytest.approx(want, abs=1e-6 if k == 1 else 1e-3)


def test_a_searched_resource_is_refused(client, data):
    X, y = data
    search = SearchCV(
        xgboost.XGBClassifier(), {"n_estimators": [10, 20]}, scheduler="asha",
        resource="n_estimators", max_resource=9, cv=2, client=client, progress=False,
    )  # fmt: skip
    with pytest.raises(InvalidParameterError, match="'n_estimators' is the resource"):
        search.fit(X, y)
