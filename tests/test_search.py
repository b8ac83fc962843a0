"""SearchCV on a real LocalCluster of worker processes."""

from __future__ import annotations

import pickle
import time

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from optuna.samplers import RandomSampler
from sklearn.base import clone
from sklearn.datasets import load_iris, make_classification, make_regression
from sklearn.exceptions import FitFailedWarning
from sklearn.linear_model import LogisticRegression, Ridge, SGDClassifier
from sklearn.model_selection import GridSearchCV, GroupKFold, KFold, StratifiedKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from dmlsearch import (
    AllTrialsFailedError,
    Float,
    Int,
    InvalidParameterError,
    SearchCV,
    SearchSpaceError,
)
from dmlsearch.testing import FailingClassifier

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def data():
    return make_classification(n_samples=150, n_features=6, random_state=0)


def assert_same_results(ours, theirs, *, atol=1e-12):
    assert list(ours.cv_results_) == list(theirs.cv_results_)
    for key, value in theirs.cv_results_.items():
        if "time" in key:
            continue
        if key == "params":
            assert ours.cv_results_[key] == value
        elif key.startswith("param_"):
            assert ours.cv_results_[key].tolist() == value.tolist()
            assert (ours.cv_results_[key].mask == value.mask).all()
        else:
            np.testing.assert_allclose(ours.cv_results_[key], value, atol=atol, rtol=0)
    assert ours.best_params_ == theirs.best_params_
    assert ours.best_index_ == theirs.best_index_


def test_grid_parity_with_scikit_learn(client, data):
    X, y = data
    grid = [
        {"C": list(np.logspace(-3, 2, 6)), "kernel": ["rbf"], "gamma": [0.01, 0.1]},
        {"C": [1.0, 10.0], "kernel": ["linear"]},
    ]
    cv = StratifiedKFold(4, shuffle=True, random_state=1)
    ours = SearchCV(SVC(), grid, strategy="grid", cv=cv, client=client, return_train_score=True)
    ours.fit(X, y)
    theirs = GridSearchCV(SVC(), grid, cv=cv, return_train_score=True).fit(X, y)
    assert_same_results(ours, theirs)
    assert ours.best_score_ == pytest.approx(theirs.best_score_, abs=1e-12)
    assert (ours.cv_results_["rank_test_score"] == theirs.cv_results_["rank_test_score"]).all()
    assert ours.n_splits_ == 4
    assert ours.refit_time_ > 0
    np.testing.assert_array_equal(ours.predict(X), theirs.predict(X))
    assert ours.score(X, y) == theirs.score(X, y)
    assert len(ours.trials_) == len(theirs.cv_results_["params"])
    assert {t.state for t in ours.trials_} == {"complete"}


def test_multimetric_parity_and_refit_by_name(client, data):
    X, y = data
    grid = {"C": [0.01, 0.1, 1.0, 10.0]}
    scoring = {"acc": "accuracy", "f1": "f1_macro"}
    kwargs = dict(scoring=scoring, refit="f1", cv=KFold(3))
    ours = SearchCV(LogisticRegression(), grid, strategy="grid", client=client, **kwargs).fit(X, y)
    theirs = GridSearchCV(LogisticRegression(), grid, **kwargs).fit(X, y)
    assert_same_results(ours, theirs)
    assert set(ours.scorer_) == {"acc", "f1"}
    assert ours.multimetric_
    assert ours.score(X, y) == pytest.approx(theirs.score(X, y))


def test_pipeline_pandas_sample_weight_and_groups(client):
    X, y = make_classification(n_samples=120, n_features=5, random_state=2)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(5)])
    groups = np.arange(120) % 6
    weights = np.linspace(0.5, 2.0, 120)
    pipe = Pipeline([("scale", StandardScaler()), ("clf", LogisticRegression())])
    grid = {"clf__C": [0.1, 1.0, 10.0]}
    ours = SearchCV(pipe, grid, strategy="grid", cv=GroupKFold(3), client=client)
    ours.fit(frame, pd.Series(y), groups=groups, clf__sample_weight=weights)
    theirs = GridSearchCV(pipe, grid, cv=GroupKFold(3))
    theirs.fit(frame, pd.Series(y), groups=groups, clf__sample_weight=weights)
    assert_same_results(ours, theirs)
    assert list(ours.feature_names_in_) == list(frame.columns)


def test_sparse_input_and_regression(client):
    X, y = make_regression(n_samples=100, n_features=8, random_state=0)
    Xs = sp.csr_matrix(np.where(np.abs(X) > 0.5, X, 0.0))
    grid = {"alpha": [0.1, 1.0, 10.0]}
    ours = SearchCV(Ridge(), grid, strategy="grid", cv=3, client=client).fit(Xs, y)
    theirs = GridSearchCV(Ridge(), grid, cv=3).fit(Xs, y)
    assert_same_results(ours, theirs)


def test_random_search_on_continuous_space(client, data):
    X, y = data
    space = {"C": Float(1e-3, 1e2, log=True), "max_iter": Int(50, 200)}
    s = SearchCV(LogisticRegression(), space, n_trials=12, client=client, random_state=0).fit(X, y)
    assert len(s.cv_results_["params"]) == 12
    assert all(1e-3 <= p["C"] <= 1e2 for p in s.cv_results_["params"])
    assert s.best_params_ == s.cv_results_["params"][s.best_index_]
    assert s.seed_ == 0


@pytest.mark.parametrize("strategy", ["tpe", "cmaes", "nsga2"])
def test_model_based_strategies_end_to_end(client, data, strategy):
    X, y = data
    space = {"C": Float(1e-3, 1e2, log=True)}
    s = SearchCV(
        LogisticRegression(),
        space,
        strategy=strategy,
        n_trials=10,
        cv=3,
        client=client,
        random_state=0,
    ).fit(X, y)
    assert len(s.trials_) == 10
    assert np.isfinite(s.best_score_)


@pytest.mark.parametrize("strategy", ["tpe", "cmaes", "gp", "nsga2", "random", "grid"])
def test_every_strategy_runs_with_the_default_seed(client, data, strategy):
    X, y = data
    space = {"C": Float(1e-2, 1e2, log=True)} if strategy != "grid" else {"C": [0.1, 1.0]}
    s = SearchCV(LogisticRegression(), space, strategy=strategy, n_trials=2, cv=2, client=client)
    s.fit(X, y)  # no random_state: the drawn seed is 63-bit
    assert len(s.trials_) == 2 and {t.state for t in s.trials_} == {"complete"}
    assert s.seed_ >= 0


@pytest.mark.parametrize("strategy", ["tpe", "cmaes", "nsga2", RandomSampler(seed=1)])
@pytest.mark.parametrize("seed", [5_000_000_000, 2**64 + 7])
def test_large_seeds_work_and_reproduce(client, data, strategy, seed):
    X, y = data

    def run():
        return SearchCV(
            LogisticRegression(),
            {"C": Float(1e-2, 1e2, log=True), "fit_intercept": [True, False]},
            strategy=clone(strategy, safe=False),
            n_trials=3,
            cv=2,
            client=client,
            random_state=seed,
        ).fit(X, y)

    first = run()
    assert first.seed_ == seed and len(first.trials_) == 3
    if isinstance(strategy, str):  # a sampler instance keeps its own seed
        assert run().cv_results_["params"] == first.cv_results_["params"]


def test_gp_strategy_end_to_end(client, data):
    pytest.importorskip("torch", reason="strategy='gp' needs torch (the [torch] extra)")
    X, y = data
    s = SearchCV(
        LogisticRegression(),
        {"C": Float(1e-3, 1e2, log=True)},
        strategy="gp",
        n_trials=6,
        cv=2,
        client=client,
        random_state=0,
    ).fit(X, y)
    assert len(s.trials_) == 6


def test_failing_trials_keep_traceback_and_score_error_score(client, data):
    X, y = data
    space = {"fail": [False, True], "parameter": [1.0, 2.0]}
    s = SearchCV(FailingClassifier(), space, strategy="grid", cv=3, client=client, error_score=-1.0)
    with pytest.warns(FitFailedWarning, match="2 of the 4 trials failed"):
        s.fit(X, y)
    failed = [t for t in s.trials_ if t.state == "failed"]
    assert len(failed) == 2
    assert all("FailingClassifier asked to fail" in t.error for t in failed)
    assert all("Traceback" in t.error for t in failed)
    bad = np.array([p["fail"] for p in s.cv_results_["params"]])
    assert (s.cv_results_["mean_test_score"][bad] == -1.0).all()
    assert s.best_params_["fail"] is False


def test_error_score_raise_reraises_the_original_error(client, data):
    X, y = data
    s = SearchCV(
        FailingClassifier(fail=True),
        {"parameter": [1.0]},
        strategy="grid",
        client=client,
        error_score="raise",
    )
    with pytest.raises(ValueError, match="asked to fail"):
        s.fit(X, y)


def test_some_folds_failing_in_every_trial_is_not_all_failed(client, data):
    X, y = data
    # Fits fail on the fold whose training set holds row 0 (a poisoned label), so every
    # trial has failed and finished folds, as scikit-learn would count them.
    s = SearchCV(
        FailingClassifier(),
        {"parameter": [1.0, 2.0]},
        strategy="grid",
        cv=KFold(2),
        client=client,
        refit=False,
    )
    with pytest.warns(FitFailedWarning, match="2 of the 2 trials failed"):
        s.fit(X, y, fail_on_rows=np.arange(len(y)) == 0)
    assert {t.state for t in s.trials_} == {"failed"}
    assert np.isnan(s.cv_results_["split1_test_score"]).all()
    assert np.isfinite(s.cv_results_["split0_test_score"]).all()


def test_all_trials_failing_is_an_error(client, data):
    X, y = data
    s = SearchCV(
        FailingClassifier(fail=True), {"parameter": [1.0, 2.0]}, strategy="grid", client=client
    )
    with pytest.raises(AllTrialsFailedError, match="all 2 trials failed"):
        s.fit(X, y)


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"strategy": "bayes"}, "strategy"),
        ({"n_trials": 0}, "n_trials"),
        ({"n_trials": 2.5}, "n_trials"),
        ({"scoring": "acuracy"}, "scoring"),
        ({"scoring": ["accuracy", "nope"]}, "scoring['nope']"),
        ({"scoring": ["accuracy", "f1"], "refit": True}, "refit"),
        ({"search_space": {"C": "rbf"}}, "search_space['C']"),
        ({"search_space": [{"C": [1.0]}, {"C": set()}]}, "search_space[1]['C']"),
        ({"search_space": {"C": []}}, "search_space['C']"),
        ({"strategy": "grid", "search_space": {"C": Float(0.1, 1)}}, "search_space['C']"),
        ({"trial_timeout": -1}, "trial_timeout"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_concurrent_trials": 0}, "max_concurrent_trials"),
        ({"error_score": "ignore"}, "error_score"),
        ({"random_state": "seed"}, "random_state"),
        ({"estimator": "not an estimator"}, "estimator"),
        ({"search_space": {"no_such_param": [1, 2]}}, "search_space"),
        ({"search_space": [{"C": [1.0]}, {"tol": [0.1], "Cc": Float(1, 2)}]}, "search_space"),
        (
            {
                "estimator": Pipeline([("scale", StandardScaler()), ("clf", SVC())]),
                "search_space": {"clf": [SVC(), LogisticRegression()], "clf__gamma": [0.1]},
                "strategy": "tpe",
            },
            "search_space",
        ),
    ],
)
def test_bad_input_fails_before_any_dispatch(data, kwargs, param):
    X, y = data
    params = {"estimator": LogisticRegression(), "search_space": {"C": [1.0]}}
    params.update(kwargs)
    estimator = params.pop("estimator")
    space = params.pop("search_space")
    # An unreachable scheduler: reaching it would mean validation came too late.
    s = SearchCV(estimator, space, client="tcp://127.0.0.1:9", **params)
    with pytest.raises(InvalidParameterError) as info:
        s.fit(X, y)
    assert info.value.param == param
    assert isinstance(info.value, ValueError)


def test_unknown_scorer_suggests_the_closest_name(data):
    X, y = data
    s = SearchCV(LogisticRegression(), {"C": [1.0]}, scoring="acuracy", client="tcp://127.0.0.1:9")
    with pytest.raises(InvalidParameterError, match="did you mean 'accuracy'"):
        s.fit(X, y)


def test_unreachable_scheduler_is_a_clear_error(data):
    X, y = data
    s = SearchCV(LogisticRegression(), {"C": [1.0]}, client="tcp://127.0.0.1:9")
    with pytest.raises(InvalidParameterError, match="cannot reach a Dask scheduler"):
        s.fit(X, y)


def test_an_unknown_address_scheme_is_refused_before_any_client_exists(data):
    # A Client that fails on its scheme is left half made, and its close blocks the
    # interpreter's exit for 20 s: no Client may be created for such an address.
    import gc

    from distributed import Client

    X, y = data
    s = SearchCV(LogisticRegression(), {"C": [1.0]}, client="foo://127.0.0.1:9")
    with pytest.raises(InvalidParameterError, match="unknown address scheme 'foo'"):
        s.fit(X, y)
    made = [o for o in gc.get_objects() if isinstance(o, Client) and o.status != "closed"]
    assert not [c for c in made if "foo://" in str(getattr(c, "_start_arg", ""))]


def test_grid_rejects_continuous_space_message():
    with pytest.raises(SearchSpaceError, match="cannot be enumerated"):
        SearchCV(
            LogisticRegression(), {"C": Float(0.1, 1)}, strategy="grid", client="tcp://127.0.0.1:9"
        ).fit(*make_classification(30, random_state=0))


def test_clone_and_pickle_round_trip(client, data):
    X, y = data
    s = SearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, strategy="grid", cv=3, client=client)
    c = clone(s)
    assert c.get_params()["client"] is client
    assert {k: v for k, v in c.get_params().items() if k != "estimator"} == {
        k: v for k, v in s.get_params().items() if k != "estimator"
    }
    s.fit(X, y)
    restored = pickle.loads(pickle.dumps(s))
    assert restored.client is None
    np.testing.assert_array_equal(restored.predict(X), s.predict(X))


@pytest.mark.parametrize("scoring", [None, "balanced_accuracy"])
def test_refit_false_single_metric_parity_with_scikit_learn(client, data, scoring):
    X, y = data
    grid = {"C": [0.01, 0.1, 1.0, 10.0]}
    kwargs = dict(cv=KFold(3), refit=False, scoring=scoring)
    ours = SearchCV(LogisticRegression(), grid, strategy="grid", client=client, **kwargs)
    ours.fit(X, y)
    theirs = GridSearchCV(LogisticRegression(), grid, **kwargs).fit(X, y)
    assert_same_results(ours, theirs)
    assert ours.best_score_ == pytest.approx(theirs.best_score_, abs=1e-12)
    assert not hasattr(ours, "best_estimator_") and not hasattr(theirs, "best_estimator_")


def test_refit_false_multimetric_sets_no_best_like_scikit_learn(client, data):
    X, y = data
    grid = {"C": [0.1, 1.0]}
    kwargs = dict(cv=KFold(2), refit=False, scoring=["accuracy", "f1"])
    ours = SearchCV(LogisticRegression(), grid, strategy="grid", client=client, **kwargs)
    ours.fit(X, y)
    theirs = GridSearchCV(LogisticRegression(), grid, **kwargs).fit(X, y)
    for attr in ("best_index_", "best_score_", "best_params_"):
        assert hasattr(ours, attr) == hasattr(theirs, attr) is False


def test_kwargs_parameters_of_xgboost_are_searched_like_scikit_learn(client, data):
    xgboost = pytest.importorskip("xgboost")
    X, y = data
    # eta is taken by set_params (**kwargs) though get_params() of a fresh model omits it.
    grid = {"eta": [0.05, 0.5], "n_estimators": [5]}
    model = xgboost.XGBClassifier(n_jobs=1)
    ours = SearchCV(model, grid, strategy="grid", cv=KFold(3), client=client).fit(X, y)
    theirs = GridSearchCV(model, grid, cv=KFold(3)).fit(X, y)
    np.testing.assert_allclose(
        ours.cv_results_["mean_test_score"], theirs.cv_results_["mean_test_score"]
    )
    assert ours.best_params_ == theirs.best_params_


def test_refit_false_hides_delegated_methods_like_scikit_learn(client, data):
    X, y = data
    methods = ("predict", "predict_proba", "predict_log_proba", "decision_function")
    ours = SearchCV(LogisticRegression(), {"C": [1.0]}, strategy="grid", refit=False, client=client)
    theirs = GridSearchCV(LogisticRegression(), {"C": [1.0]}, refit=False)
    for fitted in (False, True):
        if fitted:
            ours.fit(X, y)
            theirs.fit(X, y)
        for m in methods:
            assert hasattr(ours, m) is hasattr(theirs, m) is False, (m, fitted)
    # As scikit-learn: the AttributeError names the method; its cause says why.
    with pytest.raises(AttributeError, match="predict_proba") as info:
        ours.predict_proba(X)
    assert "refit=False" in str(info.value.__cause__)
    assert hasattr(SearchCV(LogisticRegression(), {"C": [1.0]}), "predict_proba")


def test_refit_false_and_callable(client, data):
    X, y = data
    s = SearchCV(
        LogisticRegression(), {"C": [0.1, 1.0, 10.0]}, strategy="grid", refit=False, client=client
    ).fit(X, y)
    assert not hasattr(s, "best_estimator_")
    with pytest.raises(AttributeError) as info:
        s.predict(X)
    assert "refit=False" in str(info.value.__cause__)
    with pytest.raises(AttributeError, match="refit=False"):
        s.score(X, y)

    def lowest_c(results):
        return int(np.argmin(results["param_C"]))

    s = SearchCV(
        LogisticRegression(),
        {"C": [10.0, 0.1, 1.0]},
        strategy="grid",
        refit=lowest_c,
        client=client,
    ).fit(X, y)
    assert s.best_params_ == {"C": 0.1}
    assert not hasattr(s, "best_score_")


def test_futures_are_released_and_keys_are_readable(client, data):
    X, y = data
    SearchCV(
        LogisticRegression(),
        {"C": list(np.logspace(-2, 2, 8))},
        strategy="grid",
        cv=3,
        client=client,
    ).fit(X, y)

    def inspect(dask_scheduler):
        keys = [str(k) for k in dask_scheduler.tasks]
        return [k for k in keys if "dmlsearch" in k], list(dask_scheduler.task_prefixes)

    # Releases reach the scheduler through the client's batched stream (every few ms):
    # give the last ones a moment to arrive before reading its state.
    deadline = time.monotonic() + 5.0
    leftover, prefixes = client.run_on_scheduler(inspect)
    while leftover and time.monotonic() < deadline:
        time.sleep(0.05)
        leftover, prefixes = client.run_on_scheduler(inspect)
    assert leftover == []
    assert "dmlsearch-trial" in prefixes


def test_trials_dataframe(client):
    X, y = load_iris(return_X_y=True)
    s = SearchCV(
        LogisticRegression(max_iter=300), {"C": [0.1, 1.0]}, strategy="grid", client=client
    ).fit(X, y)
    frame = s.trials_dataframe()
    assert list(frame["number"]) == [0, 1]
    assert set(frame["state"]) == {"complete"}
    assert frame["worker"].str.startswith("tcp://").all()
    assert "param_C" in frame
    # The objective as Optuna names it, the scores as scikit-learn names them.
    np.testing.assert_array_equal(frame["value"], s.cv_results_["mean_test_score"])
    np.testing.assert_array_equal(frame["mean_test_score"], s.cv_results_["mean_test_score"])
    for column in ("duration", "retries", "seed", "error"):
        assert column in frame


def test_trials_dataframe_value_follows_the_refit_metric(client, data):
    X, y = data
    space = {"fail": [False, True], "parameter": [1.0]}
    s = SearchCV(
        FailingClassifier(),
        space,
        strategy="grid",
        cv=2,
        scoring={"acc": "accuracy", "bal": "balanced_accuracy"},
        refit="bal",
        error_score=0.0,
        client=client,
    )
    with pytest.warns(FitFailedWarning):
        s.fit(X, y)
    frame = s.trials_dataframe().set_index("number")
    assert frame.loc[0, "value"] == s.cv_results_["mean_test_bal"][0]
    assert np.isnan(frame.loc[1, "value"])  # a failed trial has no objective
    assert frame.loc[1, "mean_test_acc"] == 0.0  # scikit-learn's error_score
    np.testing.assert_array_equal(frame["mean_test_acc"], s.cv_results_["mean_test_acc"])


def test_progress_off_a_terminal_is_plain_lines(capsys):
    # A batch job's log (stderr a file) got one garbled bar line at the end, nothing before.
    from dmlsearch.progress import LineProgress, make_progress

    assert isinstance(make_progress(True), LineProgress)  # capsys: stderr is no terminal
    assert type(make_progress(None)).__name__ == "NullProgress"
    lines = LineProgress(interval=0.0)
    lines.start(10, "svc")
    lines.update(4, 1, 2, 0.875)
    lines.close()
    lines.update(5, 1, 2, 0.9)  # after close: nothing
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("dmlsearch: svc started: 0/10 done, 0 running, 0 failed, best -")
    assert err[1].startswith("dmlsearch: svc: 4/10 done, 2 running, 1 failed, best 0.875, 0:00")
    assert err[2].startswith("dmlsearch: svc ended: 4/10 done") and len(err) == 3


def test_progress_bar_reports_best(client, data, capsys):
    X, y = data
    SearchCV(
        SGDClassifier(random_state=0),
        {"alpha": [1e-4, 1e-3]},
        strategy="grid",
        client=client,
        progress=True,
    ).fit(X, y)
    err = capsys.readouterr().err
    assert "2/2" in err and "best" in err
    assert "Dask dashboard: http://127.0.0.1:" in err


@pytest.mark.parametrize("scheduler", [None, "halving"])
def test_a_seeded_search_refits_the_same_model_and_leaves_the_global_generators(
    client, data, scheduler
):
    # Probe: with random_state=None on the estimator, the trials were seeded but the refit
    # drew from the caller's global generator, so best_estimator_ differed run to run.
    import random

    from sklearn.ensemble import ExtraTreesClassifier

    X, y = data
    extra = {} if scheduler is None else {"resource": "n_estimators", "max_resource": 9}
    probas = []
    for outer in (1, 2):
        np.random.seed(outer)
        random.seed(outer)
        before = np.random.get_state()[1].copy()
        search = SearchCV(
            ExtraTreesClassifier(n_estimators=5),
            {"max_features": [0.3, 0.6, 1.0]},
            strategy="grid",
            cv=3,
            random_state=0,
            client=client,
            progress=False,
            scheduler=scheduler,
            **extra,
        ).fit(X, y)
        assert np.array_equal(np.random.get_state()[1], before)  # the caller's, untouched
        probas.append(search.best_estimator_.predict_proba(X))
    np.testing.assert_array_equal(probas[0], probas[1])
