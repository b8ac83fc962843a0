"""Ensemble selection over a search: out-of-fold predictions kept by the workers, Caruana's
greedy selection, members refitted on the cluster, from a fitted search or a registry."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_diabetes, load_iris, make_classification
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import log_loss
from sklearn.model_selection import KFold, ShuffleSplit, StratifiedKFold, cross_val_predict
from sklearn.pipeline import Pipeline
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from dmlsearch import AllTrialsFailedError, InvalidParameterError, Registry, SearchCV
from dmlsearch.ensemble import EnsembleSelection, release_oof
from dmlsearch.ensemble._selection_algo import diversity, ensemble_selection
from dmlsearch.testing import FailingClassifier

pytestmark = pytest.mark.cluster

CV = StratifiedKFold(3, shuffle=True, random_state=0)
TREES = {"max_depth": [1, 2, 3, 5, None], "min_samples_leaf": [1, 5, 20]}


def oof_grid(estimator, space, client) -> SearchCV:
    """A grid search over ``space`` on CV that keeps its out-of-fold predictions."""
    return SearchCV(estimator, space, strategy="grid", cv=CV, client=client, keep_oof=True)


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
    # Freed from the workers' memory on request; reading them then says why they are gone.
    assert release_oof(search) == 2
    with pytest.raises(LookupError, match="released with release_oof"):
        search.oof_predictions(1)


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
        # They go with their experiment.
        deleted = registry.delete_experiment("lr")["artifacts"]
        assert {r.key for r in refs} <= {str(p) for p in deleted}
        assert not any(Path(r.key).exists() for r in refs)


# -- the greedy algorithm alone --------------------------------------------------------------


def accuracy_of(y: np.ndarray):
    return lambda p: float(np.mean(p.argmax(axis=1) == y))


def test_greedy_selection_finds_the_complementary_pair():
    # Four rows, two classes. Model 0 is right on rows 0-2, model 1 on rows 1-3 with more
    # confidence on row 3; alone each scores 3/4, averaged they get all 4 right. Model 2 is
    # always wrong. Starting from the best single model (0), the climb adds 1 and stops.
    y = np.array([0, 1, 0, 1])
    P = np.array(
        [
            [[0.9, 0.1], [0.4, 0.6], [0.8, 0.2], [0.6, 0.4]],
            [[0.4, 0.6], [0.3, 0.7], [0.7, 0.3], [0.1, 0.9]],
            [[0.1, 0.9], [0.9, 0.1], [0.2, 0.8], [0.9, 0.1]],
        ]
    )
    sel = ensemble_selection(P, accuracy_of(y), ensemble_size=5, n_init=1)
    assert sel.single.tolist() == [0.75, 0.75, 0.0]
    assert sel.counts.tolist() == [1, 1, 0] and sel.score == 1.0
    assert sel.path[:2] == [0.75, 1.0]
    # n_init=3 would start from all three (score 0.5 < 1.0 for the pair): N=2 is chosen.
    sel = ensemble_selection(P, accuracy_of(y), ensemble_size=5, n_init=3)
    assert sel.n_init == 2 and sel.counts.tolist() == [1, 1, 0]


def test_greedy_selection_weights_by_replacement():
    # Regression: the target is 0.75*a + 0.25*b of two models; with replacement and
    # ensemble_size=4 the best mix is a, a, a, b (weights 3/4 and 1/4).
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=50), rng.normal(size=50)
    y = 0.75 * a + 0.25 * b
    P = np.stack([a, b, rng.normal(size=50)])
    sel = ensemble_selection(P, lambda p: -float(np.mean((p - y) ** 2)), 4, n_init=1)
    assert sel.counts.tolist() == [3, 1, 0]
    assert sel.score == pytest.approx(0.0)
    disagreement, correlation = diversity(P, classifier=False)
    assert disagreement[0, 0] == 0 and disagreement[0, 1] == pytest.approx(np.abs(a - b).mean())
    assert correlation[0, 1] == pytest.approx(np.corrcoef(a, b)[0, 1])


# -- EnsembleSelection -----------------------------------------------------------------------


def test_selection_over_a_classifier_search(tree_search, iris):
    X, y = iris
    ens = EnsembleSelection(tree_search, ensemble_size=10, n_init=3, random_state=0).fit(X, y)
    numbers = {t.number for t in tree_search.trials_}
    assert set(ens.members_) <= numbers and len(ens.members_) == len(ens.estimators_)
    assert ens.weights_.sum() == pytest.approx(1.0) and (ens.weights_ > 0).all()
    # Accuracy of each trial's out-of-fold predictions, computed here from the OOF.
    single = {
        n: float(np.mean(np.unique(y)[tree_search.oof_predictions(n).argmax(axis=1)] == y))
        for n in numbers
    }
    assert ens.single_scores_ == pytest.approx({n: single[n] for n in ens.single_scores_})
    assert ens.oof_score_ >= max(single.values())
    assert ens.oof_score_ == pytest.approx(max(ens.score_path_))
    proba = ens.predict_proba(X)
    assert proba.shape == (len(X), 3) and np.allclose(proba.sum(axis=1), 1.0)
    assert set(ens.predict(X)) <= set(y) and ens.score(X, y) > 0.9
    k = len(ens.members_)
    assert ens.diversity_["members"] == ens.members_
    assert ens.diversity_["disagreement"].shape == (k, k) == ens.diversity_["correlation"].shape
    # The same refits with the same random_state: the same ensemble.
    again = EnsembleSelection(tree_search, ensemble_size=10, n_init=3, random_state=0).fit(X, y)
    assert again.members_ == ens.members_
    np.testing.assert_array_equal(again.predict_proba(X), proba)
    assert clone(ens).get_params()["search"] is tree_search


def test_fitted_selection_records_the_features_as_scikit_learn_does(client, iris, tree_search):
    import pandas as pd

    X, y = iris
    unfitted = EnsembleSelection(tree_search, ensemble_size=3, n_init=1)
    assert not hasattr(unfitted, "n_features_in_")
    fitted = clone(unfitted).fit(X, y)
    assert fitted.n_features_in_ == 4 and not hasattr(fitted, "feature_names_in_")

    frame = pd.DataFrame(X, columns=["sepal_l", "sepal_w", "petal_l", "petal_w"])
    search = oof_grid(DecisionTreeClassifier(random_state=0), {"max_depth": [1, 3]}, client)
    search.fit(frame, y)
    fitted = EnsembleSelection(search, ensemble_size=2, n_init=1).fit(frame, y)
    assert fitted.n_features_in_ == 4
    np.testing.assert_array_equal(fitted.feature_names_in_, search.feature_names_in_)


def test_selection_over_a_regressor_search(client):
    X, y = load_diabetes(return_X_y=True)
    search = SearchCV(
        DecisionTreeRegressor(random_state=0),
        {"max_depth": [2, 3, 4, 6], "min_samples_leaf": [1, 10, 30]},
        strategy="grid",
        cv=KFold(3, shuffle=True, random_state=0),
        client=client,
        keep_oof=True,
    ).fit(X, y)
    ens = EnsembleSelection(search, ensemble_size=20, scoring="neg_mean_squared_error").fit(X, y)
    best = max(-float(np.mean((search.oof_predictions(t.number) - y) ** 2)) for t in search.trials_)
    assert ens.oof_score_ >= best - 1e-6
    assert not hasattr(ens, "predict_proba")
    assert not hasattr(ens, "classes_")  # as a scikit-learn regressor (it was None)
    by_hand = sum(w * m.predict(X) for w, m in zip(ens.weights_, ens.estimators_, strict=True))
    np.testing.assert_allclose(ens.predict(X), by_hand)


def test_bad_inputs_fail_before_any_work(client, iris, tree_search):
    X, y = iris
    with pytest.raises(InvalidParameterError, match="ensemble_size"):
        EnsembleSelection(tree_search, ensemble_size=0).fit(X, y)
    with pytest.raises(InvalidParameterError, match="n_init"):
        EnsembleSelection(tree_search, ensemble_size=3, n_init=4).fit(X, y)
    unfitted = SearchCV(LogisticRegression(), {"C": [1.0]}, keep_oof=True)
    with pytest.raises(InvalidParameterError, match="not fitted"):
        EnsembleSelection(unfitted).fit(X, y)
    plain = SearchCV(LogisticRegression(max_iter=1000), {"C": [1.0]}, cv=CV, client=client)
    plain.fit(X, y)
    with pytest.raises(InvalidParameterError, match=r"keep_oof=True\)"):
        EnsembleSelection(plain).fit(X, y)
    with pytest.raises(InvalidParameterError, match="rows"):
        EnsembleSelection(tree_search).fit(X[:100], y[:100])
    with pytest.raises(InvalidParameterError, match=r"\['versicolor', 'virginica'\] but the"):
        EnsembleSelection(tree_search).fit(X, np.where(y == "setosa", "versicolor", y))
    # Other labels for the same three classes: the members would learn the wrong ones.
    relabelled = np.array(["cat", "dog", "emu"])[np.unique(y, return_inverse=True)[1]]
    with pytest.raises(InvalidParameterError, match=r"has classes \['cat'"):
        EnsembleSelection(tree_search).fit(X, relabelled)
    with pytest.raises(InvalidParameterError, match="sample_weight"):
        EnsembleSelection(tree_search).fit(X, y, sample_weight=np.ones(len(y) - 1))
    with pytest.raises(InvalidParameterError, match="registry"):
        EnsembleSelection("some-experiment").fit(X, y)


def test_a_search_whose_trials_all_failed(client, iris, tmp_path):
    X, y = iris
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    with pytest.raises(AllTrialsFailedError):
        SearchCV(
            FailingClassifier(fail=True),
            {"parameter": [1.0, 2.0]},
            cv=CV,
            client=client,
            keep_oof=True,
            registry=url,
            experiment_name="bad",
        ).fit(X, y)
    with pytest.raises(AllTrialsFailedError, match="no completed trial"):
        EnsembleSelection("bad", registry=url).fit(X, y)


def test_selection_from_a_registry_experiment(client, iris, tmp_path):
    X, y = iris
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    search = SearchCV(
        DecisionTreeClassifier(random_state=0),
        TREES,
        strategy="grid",
        cv=CV,
        client=client,
        keep_oof=True,
        registry=url,
        experiment_name="trees",
        random_state=0,
    ).fit(X, y)
    from_search = EnsembleSelection(search, ensemble_size=10, random_state=0).fit(X, y)
    by_name = EnsembleSelection(
        "trees", ensemble_size=10, registry=url, client=client, random_state=0
    ).fit(X, y)
    assert by_name.members_ == from_search.members_
    np.testing.assert_array_equal(by_name.weights_, from_search.weights_)
    assert by_name.oof_score_ == from_search.oof_score_
    np.testing.assert_array_equal(by_name.predict_proba(X), from_search.predict_proba(X))
    with pytest.raises(InvalidParameterError, match="classes"):
        EnsembleSelection("trees", registry=url, client=client).fit(
            X, np.where(y == "setosa", "a", y)
        )


def test_a_resume_with_keep_oof_of_an_experiment_run_without_it_says_so(client, iris, tmp_path):
    X, y = iris
    url = f"sqlite:///{tmp_path / 'reg.db'}"

    def search(**kwargs):
        return SearchCV(
            DecisionTreeClassifier(random_state=0), TREES, strategy="grid", cv=CV,
            client=client, registry=url, experiment_name="trees", progress=False, **kwargs,
        )  # fmt: skip

    search().fit(X, y)
    resumed = search(keep_oof=True, resume=True).fit(X, y)  # every trial restored
    with pytest.raises(InvalidParameterError, match="trials a resume restored have them only"):
        EnsembleSelection(resumed, ensemble_size=3, n_init=1).fit(X, y)


def test_selection_from_a_registry_rebuilds_each_sub_spaces_trial_as_it_ran(client, iris, tmp_path):
    # Found by a probe: members were refitted from the registered best model, so a trial
    # of another sub-space kept the best trial's max_depth and criterion.
    X, y = make_classification(300, 8, n_informative=5, random_state=0)
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    space = [
        {"max_depth": [1, 2]},
        {"min_samples_leaf": [5, 40]},
        {"max_depth": [6], "criterion": ["entropy"]},
    ]
    base = DecisionTreeClassifier(random_state=0, max_depth=3)
    search = SearchCV(
        base, space, strategy="grid", cv=CV, client=client, keep_oof=True, registry=url,
        experiment_name="subspaces", random_state=0,
    ).fit(X, y)  # fmt: skip
    assert search.best_params_ == {"max_depth": 6, "criterion": "entropy"}
    from_search = EnsembleSelection(search, ensemble_size=10, random_state=0).fit(X, y)
    by_name = EnsembleSelection(
        "subspaces", ensemble_size=10, registry=url, client=client, random_state=0
    ).fit(X, y)
    assert by_name.members_ == from_search.members_
    for a, b in zip(from_search.estimators_, by_name.estimators_, strict=True):
        assert a.get_params() == b.get_params()
    leaf = [e for e in by_name.estimators_ if e.min_samples_leaf != 1]
    assert leaf and all((e.max_depth, e.criterion) == (3, "gini") for e in leaf)  # the base's
    np.testing.assert_array_equal(by_name.predict_proba(X), from_search.predict_proba(X))

    # Where the base's value is not recorded (an experiment of before), refused up front.
    with Registry(url) as registry:
        exp = registry.experiment("subspaces")
        config = {k: v for k, v in exp.config.items() if k != "base_params"}
        registry.store.set_experiment_config(exp.id, config)
    with pytest.raises(InvalidParameterError, match="pass the fitted SearchCV") as caught:
        EnsembleSelection("subspaces", registry=url, client=client).fit(X, y)
    assert "criterion" in str(caught.value) and "max_depth" in str(caught.value)


def test_selection_from_a_registry_refuses_searched_estimators_up_front(client, iris, tmp_path):
    X, y = iris
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    pipe = Pipeline([("clf", LogisticRegression(max_iter=500))])
    SearchCV(
        pipe, {"clf": [LogisticRegression(max_iter=500), DecisionTreeClassifier(max_depth=2)]},
        strategy="grid", cv=CV, client=client, keep_oof=True, registry=url,
        experiment_name="estimators",
    ).fit(X, y)  # fmt: skip
    with pytest.raises(InvalidParameterError, match=r"estimators as values of \['clf'\]"):
        EnsembleSelection("estimators", registry=url, client=client).fit(X, y)


def test_a_regressor_swapped_into_a_classifier_search_keeps_its_scores_not_its_oof(client, iris):
    # keep_oof only keeps predictions: the trials score as with keep_oof=False (Ridge's
    # own R^2, as GridSearchCV scores it); their votes would be nonsense, so none are kept.
    X, y = iris
    target = (y == "setosa").astype(int)
    space = {"model": [Ridge()]}
    plain = SearchCV(Pipeline([("model", LogisticRegression())]), space, cv=CV, client=client)
    search = clone(plain).set_params(keep_oof=True)
    with pytest.warns(
        UserWarning, match="1 of the 1 trials kept no out-of-fold.*classifiers and regressors"
    ):
        search.fit(X, target)
    plain.fit(X, target)
    assert [t.state for t in search.trials_] == ["complete"]
    assert search.best_score_ == plain.best_score_
    with pytest.raises(InvalidParameterError, match="trial 0 kept no out-of-fold predictions"):
        search.oof_predictions(0)


def test_a_trial_whose_oof_cannot_be_kept_scores_as_without_keep_oof(client):
    # Sorted labels and KFold: a fold's training rows lack a class, and LinearSVC's
    # decision_function then has one column that names no class of the three.
    rng = np.random.RandomState(0)
    X = rng.randn(60, 3)
    y = np.array(["a"] * 30 + ["b"] * 20 + ["c"] * 10)
    space = {"C": [0.1, 1.0]}
    plain = SearchCV(LinearSVC(), space, strategy="grid", cv=KFold(3), client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LinearSVC's convergence
        plain.fit(X, y)
        kept = clone(plain).set_params(keep_oof=True)
        with pytest.warns(
            UserWarning, match="2 of the 2 trials kept no out-of-fold.*StratifiedKFold"
        ):
            kept.fit(X, y)
    assert np.array_equal(kept.cv_results_["mean_test_score"], plain.cv_results_["mean_test_score"])
    assert all(t.state == "complete" for t in kept.trials_)


def test_keep_oof_refuses_a_multilabel_target_before_any_trial(client):
    X = np.random.RandomState(0).randn(40, 4)
    Y = (X[:, :3] > 0).astype(int)
    search = SearchCV(
        DecisionTreeClassifier(), {"max_depth": [2]}, cv=KFold(2), client=client, keep_oof=True
    )
    with pytest.raises(InvalidParameterError, match="y has 3 columns"):
        search.fit(X, Y)
    assert not hasattr(search, "trials_")


def test_a_pipeline_search_s_members_take_the_weights_at_its_final_step(client, iris):
    # A Pipeline takes no sample_weight itself: they were refused, and without them the
    # members of a search fitted with clf__sample_weight were refitted unweighted.
    X, y = iris
    weights = np.where(y == "virginica", 10.0, 0.1)
    pipe = Pipeline([("clf", LogisticRegression(max_iter=1000))])
    search = oof_grid(pipe, {"clf__C": [0.01, 1.0]}, client)
    search.fit(X, y, clf__sample_weight=weights)
    ens = EnsembleSelection(search, ensemble_size=3, n_init=1, random_state=0)
    ens.fit(X, y, sample_weight=weights)
    for number, member in zip(ens.members_, ens.estimators_, strict=True):
        weighted = clone(pipe).set_params(**search.trials_[number].params)
        weighted.fit(X, y, clf__sample_weight=weights)
        np.testing.assert_allclose(member[-1].coef_, weighted[-1].coef_, rtol=1e-6)


def test_the_ensemble_predicts_labels_of_the_search_s_dtype(client, iris):
    # A nullable Int64 target: the search's classes_ are floats, as scikit-learn's are;
    # the ensemble's were int64, so the two predicted different dtypes.
    import pandas as pd

    X, y = iris
    target = pd.Series(np.unique(y, return_inverse=True)[1], dtype="Int64")
    search = oof_grid(DecisionTreeClassifier(random_state=0), {"max_depth": [2, 3]}, client)
    search.fit(X, target)
    ens = EnsembleSelection(search, ensemble_size=2, n_init=1).fit(X, target)
    assert ens.classes_.dtype == search.classes_.dtype
    assert ens.predict(X[:5]).dtype == search.predict(X[:5]).dtype


def test_a_probability_scoring_over_voting_trials_warns(client):
    # LinearSVC has no predict_proba: its trials vote one-hot, and ROC AUC of votes ranked
    # them far below the search's own ROC AUC of their decision functions, silently.
    X, y = make_classification(n_samples=200, random_state=0)
    search = SearchCV(
        LinearSVC(), {"C": [0.01, 1.0]}, strategy="grid", cv=KFold(3), client=client,
        scoring="roc_auc", keep_oof=True,
    ).fit(X, y)  # fmt: skip
    with pytest.warns(UserWarning, match=r"trials \[0, 1\] have no predict_proba.*one-hot votes"):
        EnsembleSelection(search, ensemble_size=2, n_init=1).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a label scoring reads votes rightly
        EnsembleSelection(search, ensemble_size=2, n_init=1, scoring="accuracy").fit(X, y)


def test_selection_on_log_loss_scores_exact_probabilities(tree_search, iris):
    # float32 out-of-fold rows sum to 1 only to float32 precision: scored as probabilities
    # they are renormalised, so scikit-learn's log loss does not warn (an error here).
    X, y = iris
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        ens = EnsembleSelection(tree_search, ensemble_size=5, scoring="neg_log_loss")
        ens.fit(X, y)
    assert ens.oof_score_ >= max(ens.single_scores_.values())
    assert ens.score(X, y) == pytest.approx(-log_loss(y, ens.predict_proba(X)))


def test_members_are_refitted_with_the_searchs_sample_weight(client, iris):
    X, y = iris
    weights = np.where(y == "virginica", 10.0, 0.1)
    search = oof_grid(LogisticRegression(max_iter=1000), {"C": [0.01, 1.0]}, client)
    search.fit(X, y, sample_weight=weights)
    ens = EnsembleSelection(search, ensemble_size=3, n_init=1, random_state=0)
    ens.fit(X, y, sample_weight=weights)
    for number, member in zip(ens.members_, ens.estimators_, strict=True):
        params = search.trials_[number].params
        weighted = LogisticRegression(max_iter=1000, **params).fit(X, y, sample_weight=weights)
        np.testing.assert_allclose(member.coef_, weighted.coef_, rtol=1e-6)
    unweighted = LogisticRegression(max_iter=1000, **search.trials_[ens.members_[0]].params)
    assert not np.allclose(ens.estimators_[0].coef_, unweighted.fit(X, y).coef_, rtol=1e-3)
