"""Resume: restored trials decoded through the space, and resumes that must be refused."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import GaussianNB
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from dmlsearch import Categorical, Float, InvalidParameterError, Registry, SearchCV
from dmlsearch.registry import TrialRecord

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def data():
    return make_classification(n_samples=120, n_features=5, random_state=0)


def pipeline() -> Pipeline:
    return Pipeline([("scale", StandardScaler()), ("clf", LogisticRegression())])


def test_resumed_tpe_search_over_a_pipeline_step_refits_a_restored_choice(client, data, tmp_path):
    X, y = data
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    space = {
        "clf": Categorical([LogisticRegression(max_iter=200), GaussianNB()]),
        "scale__with_mean": [True, False],
    }
    kwargs = dict(
        strategy="tpe", cv=2, client=client, random_state=0, registry=url, experiment_name="pipe"
    )
    first = SearchCV(pipeline(), space, n_trials=3, **kwargs).fit(X, y)
    # refit=callable picking trial 0: the refit must use a trial restored from the registry.
    resumed = SearchCV(
        pipeline(), space, n_trials=6, resume=True, refit=lambda results: 0, **kwargs
    ).fit(X, y)
    assert [t.number for t in resumed.trials_] == list(range(6))
    for old, new in zip(first.trials_, resumed.trials_[:3], strict=True):
        assert new.started == pytest.approx(old.started)  # not rerun
        assert type(new.params["clf"]) is type(old.params["clf"])  # an estimator, not its repr
        assert new.params["scale__with_mean"] is old.params["scale__with_mean"]
    assert all(hasattr(p["clf"], "fit") for p in resumed.cv_results_["params"])
    assert resumed.best_index_ == 0
    fitted = resumed.best_estimator_.named_steps["clf"]
    assert type(fitted) is type(first.trials_[0].params["clf"])
    assert fitted.classes_.tolist() == [0, 1]
    assert resumed.predict(X).shape == y.shape


def test_resume_of_an_experiment_that_never_ran_is_refused(client, data, tmp_path):
    X, y = data
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    with Registry(url) as registry:
        registry.store.create_experiment("other")
    search = SearchCV(
        LogisticRegression(),
        {"C": [1.0]},
        client=client,
        registry=url,
        experiment_name="never",
        resume=True,
    )
    with pytest.raises(InvalidParameterError, match="run it first, or drop resume") as info:
        search.fit(X, y)
    assert info.value.param == "resume"
    with Registry(url) as registry:
        assert [e.name for e in registry.store.list_experiments()] == ["other"]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (
            {"estimator": LogisticRegression(max_iter=500)},
            r"the estimator changed \(estimator\.params\.max_iter: 100 -> 500\)",
        ),
        (
            {"search_space": {"C": Float(1e-2, 1e2, log=True)}},
            r"the search_space changed \(search_space\[0\]\.C\.low: 0\.001 -> 0\.01\)",
        ),
        (
            {"search_space": {"C": Float(1e-3, 1e2, log=True), "tol": [1e-4, 1e-3]}},
            r"search_space\[0\]\.tol added.*same search_space",
        ),
    ],
    ids=["estimator", "bounds", "new-parameter"],
)
def test_resume_after_changing_estimator_or_space_is_refused_and_keeps_status(
    client, data, tmp_path, change, match
):
    X, y = data
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    params = dict(
        estimator=LogisticRegression(),
        search_space={"C": Float(1e-3, 1e2, log=True)},
        strategy="tpe",
        n_trials=3,
        cv=2,
        client=client,
        random_state=0,
        registry=url,
        experiment_name="lr",
    )
    SearchCV(**params).fit(X, y)
    with pytest.raises(InvalidParameterError, match=match) as info:
        SearchCV(**{**params, **change, "n_trials": 5, "resume": True}).fit(X, y)
    assert info.value.param == "resume"
    with Registry(url) as registry:
        assert registry.experiment("lr").status == "complete"  # as it was
        assert len(registry.trials("lr")) == 3
    # Unchanged (a different n_trials is allowed), it continues.
    resumed = SearchCV(**{**params, "n_trials": 5, "resume": True}).fit(X, y)
    assert len(resumed.trials_) == 5


def test_model_based_resume_refuses_records_outside_the_space_and_keeps_status(
    client, data, tmp_path
):
    # An experiment recorded without the estimator/space description (an older version):
    # its trials are checked one by one against the current space.
    X, y = data
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    with Registry(url) as registry:
        exp = registry.store.create_experiment("old", config={"seed": 0})
        registry.store.record_trials(
            exp.id,
            [
                TrialRecord(exp.id, 0, "complete", {"C": 0.5}, {"score": [0.8, 0.9]}, value=0.85),
                TrialRecord(exp.id, 1, "complete", {"C": 50.0}, {"score": [0.7, 0.8]}, value=0.75),
            ],
        )
        registry.store.set_experiment_status(exp.id, "failed")
    search = SearchCV(
        LogisticRegression(),
        {"C": Float(1e-3, 1.0, log=True)},
        strategy="tpe",
        n_trials=4,
        cv=2,
        client=client,
        registry=url,
        experiment_name="old",
        resume=True,
    )
    with pytest.raises(InvalidParameterError, match=r"trial 1 .*does not hold .*C.* not a number in"):
        search.fit(X, y)
    with Registry(url) as registry:
        assert registry.experiment("old").status == "failed"
    # Inside the space, the same records are restored (and decoded) and the search goes on.
    search.set_params(search_space={"C": Float(1e-3, 1e2, log=True)}).fit(X, y)
    assert [t.number for t in search.trials_] == [0, 1, 2, 3]
    assert search.trials_[1].params == {"C": 50.0}
    assert np.isclose(search.cv_results_["mean_test_score"][0], 0.85)
