"""Resume: restored trials decoded through the space, and resumes that must be refused."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold, StratifiedKFold
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
        "scale__with_std": [True, False],  # 8 candidates: tpe runs each at most once
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
        ({"cv": 3}, r"the cv changed \(cv: 2 -> 3\)"),
        ({"scoring": "neg_log_loss"}, r"the scoring changed \(scoring: None -> 'neg_log_loss'"),
    ],
    ids=["estimator", "bounds", "new-parameter", "folds", "scoring"],
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
    with pytest.raises(
        InvalidParameterError, match=r"trial 1 .*does not hold .*C.* not a number in"
    ):
        search.fit(X, y)
    with Registry(url) as registry:
        assert registry.experiment("old").status == "failed"
    # Inside the space, the same records are restored (and decoded) and the search goes on.
    search.set_params(search_space={"C": Float(1e-3, 1e2, log=True)}).fit(X, y)
    assert [t.number for t in search.trials_] == [0, 1, 2, 3]
    assert search.trials_[1].params == {"C": 50.0}
    assert np.isclose(search.cv_results_["mean_test_score"][0], 0.85)


# -- resuming a multi-fidelity search -----------------------------------------------------


class DriverKilled(Exception):
    """Stands for the driver dying: raised on the driver after N rung results."""


def _kill_driver_after(monkeypatch, n: int) -> dict[tuple[int, int], float]:
    """Rung results past the ``n``-th raise DriverKilled before they are recorded.

    Returns ``{(trial, resource): started}`` of the ``n`` recorded ones, filled as they come.
    """
    from dmlsearch.runner.rungs import RungSource

    original = RungSource.record
    seen: dict[tuple[int, int], float] = {}

    def record(self, unit, result, retries):
        if len(seen) >= n:
            raise DriverKilled(f"driver killed after {n} rung results")
        seen[result.id] = result.started
        return original(self, unit, result, retries)

    monkeypatch.setattr(RungSource, "record", record)
    return seen


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X[:450] / 16.0, y[:450]


def _rung_search(client, **kwargs):
    from sklearn.linear_model import SGDClassifier

    params = dict(
        scheduler="halving",
        resource="partial_fit",
        min_resource=1,
        max_resource=9,
        cv=3,
        random_state=0,
        client=client,
        progress=False,
        dashboard=False,
    )
    params.update(kwargs)
    return SearchCV(SGDClassifier(random_state=0), {"alpha": Float(1e-5, 1e-1, log=True)}, **params)


def _rows(search):
    r = search.cv_results_
    columns = ["trial", "n_resources", "param_alpha", "mean_test_score", "split0_test_score"]
    columns += ["split2_test_score", "iter", "bracket"]
    return sorted(zip(*(r[c].tolist() for c in columns), strict=True))


@pytest.mark.parametrize(
    ("kwargs", "killed_after"),
    [({"scheduler": "halving"}, 10), ({"scheduler": "asha", "n_trials": 8}, 5)],
    ids=["halving", "asha"],
)
def test_a_killed_multifidelity_search_resumes_without_retraining_finished_steps(
    client, digits, tmp_path, monkeypatch, kwargs, killed_after
):
    X, y = digits
    # One step at a time: ASHA's decisions then follow a fixed order, run after run.
    kwargs = {**kwargs, "max_concurrent_trials": 1}
    reference = _rung_search(client, **kwargs).fit(X, y)
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    recorded = _kill_driver_after(monkeypatch, killed_after)
    with pytest.raises(DriverKilled):
        _rung_search(client, registry=url, experiment_name="mf", **kwargs).fit(X, y)
    monkeypatch.undo()
    assert len(recorded) == killed_after
    with Registry(url) as registry:
        assert registry.experiment("mf").status == "failed"

    resumed = _rung_search(client, registry=url, experiment_name="mf", resume=True, **kwargs)
    resumed.fit(X, y)
    r = resumed.cv_results_
    ids = list(zip(r["trial"].tolist(), r["n_resources"].tolist(), strict=True))
    assert len(ids) == len(set(ids))  # each (trial, rung) once
    # The same rows as a search never interrupted: scores, folds, rungs, brackets.
    assert _rows(resumed) == _rows(reference)
    started = dict(zip(ids, (t.started for t in resumed.trials_), strict=True))
    for key, when in recorded.items():
        assert started[key] == pytest.approx(when)  # restored, not trained again
    assert sum(started[k] != recorded.get(k) for k in ids) == len(ids) - killed_after
    # A promotion of a trial trained by the killed run: its state went with that run,
    # so the step trains it from zero, and counts all of it.
    restored_trials = {trial for trial, _ in recorded}
    retrained = [
        row
        for row, (trial, resource) in enumerate(ids)
        if (trial, resource) not in recorded and trial in restored_trials
    ]
    assert retrained
    for row in retrained:
        assert not r["continued"][row]
        assert r["work"][row] == r["n_resources"][row]
    assert resumed.total_work_ == pytest.approx(float(np.sum(r["work"])))
    assert resumed.best_params_ == reference.best_params_
    with Registry(url) as registry:
        assert registry.experiment("mf").status == "complete"
        assert len(registry.trials("mf")) == len(set(r["trial"].tolist()))


def test_a_resumed_multifidelity_search_with_tpe_tells_restored_trials(
    client, digits, tmp_path, monkeypatch
):
    X, y = digits
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    kwargs = dict(strategy="tpe", registry=url, experiment_name="tpe")
    recorded = _kill_driver_after(monkeypatch, 6)
    with pytest.raises(DriverKilled):
        _rung_search(client, **kwargs).fit(X, y)
    monkeypatch.undo()
    resumed = _rung_search(client, resume=True, **kwargs).fit(X, y)
    r = resumed.cv_results_
    ids = list(zip(r["trial"].tolist(), r["n_resources"].tolist(), strict=True))
    assert len(ids) == len(set(ids)) == 13  # 9 at 1, 3 at 3, 1 at 9
    assert set(recorded) <= set(ids)
    # Every trial reached the strategy once, restored or told: TPE's study holds all 9.
    assert len(resumed.trials_) == 13
    assert sorted(set(r["trial"].tolist())) == list(range(9))


_PLAIN = {"scheduler": None, "resource": None, "min_resource": None, "max_resource": None}


@pytest.mark.parametrize(
    ("first", "then", "match"),
    [
        ({}, {"scheduler": "asha"}, r"the scheduler changed \(scheduler\.scheduler: 'halving' -> 'asha'\)"),
        ({}, {"max_resource": 9}, r"scheduler\.max_resource: 3 -> 9"),
        ({}, _PLAIN, "the scheduler changed"),
        ({**_PLAIN, "n_trials": 2}, {"scheduler": "halving", "resource": "partial_fit",
         "min_resource": 1, "max_resource": 3, "n_trials": None}, "ran without a scheduler"),
    ],
    ids=["another-scheduler", "another-budget", "without-scheduler", "plain-experiment"],
)  # fmt: skip
def test_resuming_with_another_schedule_is_refused_and_keeps_status(
    client, digits, tmp_path, first, then, match
):
    X, y = digits[0][:150], digits[1][:150]
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    first = {"registry": url, "experiment_name": "s", "max_resource": 3, **first}
    _rung_search(client, **first).fit(X, y)
    with pytest.raises(InvalidParameterError, match=match) as info:
        _rung_search(client, **{**first, **then, "resume": True}).fit(X, y)
    assert info.value.param == "resume"
    with Registry(url) as registry:
        assert registry.experiment("s").status == "complete"


def _restored_source(scheduler, strategy, steps):
    from dmlsearch._rungs import RungResult
    from dmlsearch.runner.rungs import RungSource

    def step(trial, rung, resource, score):
        return RungResult(
            number=trial, params=strategy.ask(trial), seed=0, state="complete",
            test_scores=[{"score": score}], train_scores=None, fit_times=[0.0],
            score_times=[0.0], started=0.0, finished=0.0, worker="", rung=rung,
            resource=resource,
        )  # fmt: skip

    source = RungSource(
        scheduler,
        strategy,
        0,
        lambda result: result.test_scores[0]["score"],
        lambda result, retries: None,
        steps=(1, 3, 9) if scheduler.name == "median" else None,
    )
    source.restore([step(*s) for s in steps])
    return source


def test_a_restored_asha_source_gives_a_lost_trial_id_to_the_next_new_trial():
    from dmlsearch.schedulers import ASHA
    from dmlsearch.space import as_space
    from dmlsearch.strategies import make_strategy

    strategy = make_strategy("random", as_space({"x": Float(0.0, 1.0)}), 6, 0)
    # Trial 1 was running its first step when the driver died: nothing recorded.
    source = _restored_source(
        ASHA(1, 9, 3, max_trials=6), strategy, [(0, 0, 1, 0.5), (2, 0, 1, 0.7)]
    )
    first, second = source.propose(), source.propose()
    assert (first.payload.trial, first.payload.resource) == (1, 1)
    assert first.payload.params == strategy.ask(1)  # the lost trial's own parameters
    assert second.payload.trial == 3


def test_a_restored_median_source_goes_on_with_trials_between_steps():
    from dmlsearch.schedulers import MedianStopping
    from dmlsearch.space import as_space
    from dmlsearch.strategies import make_strategy

    strategy = make_strategy("random", as_space({"x": Float(0.0, 1.0)}), 2, 0)
    source = _restored_source(
        MedianStopping(9, n_trials=2, min_trials=1), strategy, [(0, 0, 1, 0.9), (1, 0, 1, 0.1)]
    )
    assert source.failed == {1}  # below the median of the restored history: stopped
    unit = source.propose()
    assert (unit.payload.trial, unit.payload.resource, unit.payload.from_resource) == (0, 3, 1)


# -- the folds, a complete search, fewer trials, a driver still running ------------------


def _lr_search(client, url, **kwargs):
    params = dict(
        strategy="tpe", n_trials=3, cv=3, client=client, random_state=0, registry=url,
        experiment_name="lr", progress=False, dashboard=False,
    )  # fmt: skip
    params.update(kwargs)
    return SearchCV(LogisticRegression(), {"C": Float(1e-3, 1e2, log=True)}, **params)


@pytest.mark.parametrize(
    ("cv", "match"),
    [
        (KFold(3, shuffle=True, random_state=1), r"the cv folds changed \(3 as before, but"),
        (KFold(3, shuffle=True), "KFold shuffles without a fixed random_state"),
    ],
    ids=["seeded-shuffle", "unseeded-shuffle"],
)
def test_resume_on_other_folds_of_the_same_count_is_refused_and_keeps_status(
    client, data, tmp_path, cv, match
):
    X, y = data
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    _lr_search(client, url).fit(X, y)  # cv=3: StratifiedKFold, no shuffle
    with pytest.raises(InvalidParameterError, match=match) as info:
        _lr_search(client, url, cv=cv, n_trials=5, resume=True).fit(X, y)
    assert "same cv (splitter and random_state)" in str(info.value)
    with Registry(url) as registry:
        assert registry.experiment("lr").status == "complete"
        assert len(registry.trials("lr")) == 3
        # An experiment recorded before the folds were (no cv_folds): resumed as before.
        exp = registry.experiment("lr")
        registry.store.set_experiment_config(
            exp.id, {k: v for k, v in exp.config.items() if k != "cv_folds"}
        )
    resumed = _lr_search(client, url, cv=cv, n_trials=4, resume=True).fit(X, y)
    assert len(resumed.trials_) == 4


def _either_search(client, url, multifidelity, cv=3, **kwargs):
    """Experiment ``lr``: a plain search of 3 trials, or a halving search up to 3 epochs."""
    if multifidelity:
        return _rung_search(client, cv=cv, registry=url, experiment_name="lr", max_resource=3,
                            **kwargs)  # fmt: skip
    return _lr_search(client, url, cv=cv, **kwargs)


@pytest.mark.parametrize("multifidelity", [False, True], ids=["plain", "multifidelity"])
def test_resume_with_a_splitter_giving_the_same_folds_is_accepted(
    client, digits, tmp_path, multifidelity
):
    X, y = digits[0][:150], digits[1][:150]
    url = f"sqlite:///{tmp_path / 'reg.db'}"

    def search(cv, **kwargs):
        return _either_search(client, url, multifidelity, cv, **kwargs)

    first = search(3).fit(X, y)
    # StratifiedKFold(3) is what cv=3 means for a classifier: the same folds.
    resumed = search(StratifiedKFold(3), resume=True).fit(X, y)
    assert resumed.best_params_ == first.best_params_
    with Registry(url) as registry:
        assert registry.experiment("lr").config["cv_folds"] == resumed._cv_folds
    # Other folds are refused, multi-fidelity or not.
    with pytest.raises(InvalidParameterError, match="the cv folds changed"):
        search(KFold(3, shuffle=True, random_state=0), resume=True).fit(X, y)


def test_resuming_a_complete_search_does_not_register_its_model_again(client, data, tmp_path):
    X, y = data
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    first = _lr_search(client, url).fit(X, y)
    assert first.model_version_.version == 1
    again = _lr_search(client, url, resume=True).fit(X, y)
    # The refit gives best_estimator_; the best trial's model is v1 already.
    assert again.predict(X).shape == y.shape
    assert again.model_version_.version == 1
    with Registry(url) as registry:
        assert [v.version for v in registry.versions("lr")] == [1]
        # Once the latest version is another (registered by hand), the best trial's
        # refit becomes the latest again.
        registry.register_model("lr", first.best_estimator_)
    third = _lr_search(client, url, resume=True).fit(X, y)
    assert third.model_version_.version == 3
    assert third.model_version_.lineage["trial"] == third.trials_[third.best_index_].number


@pytest.mark.parametrize("multifidelity", [False, True], ids=["plain", "multifidelity"])
def test_a_complete_experiment_has_nothing_to_resume_only_for_what_it_ran(
    client, digits, tmp_path, multifidelity
):
    from dmlsearch._experiment import already_complete

    X, y = digits[0][:150], digits[1][:150]
    url = f"sqlite:///{tmp_path / 'reg.db'}"

    def search(**kwargs):
        return _either_search(client, url, multifidelity, resume=True, **kwargs)

    first = _either_search(client, url, multifidelity).fit(X, y)
    with Registry(url) as registry:
        done = already_complete(registry, search())
        assert done is not None and done.recorded == len({t.number for t in first.trials_})
        assert done.version.version == 1 and done.best is not None
        assert done.version.lineage["trial"] == first.trials_[first.best_index_].number
        if not multifidelity:
            assert (done.asked, already_complete(registry, search(n_trials=2)).asked) == (3, 2)
        assert already_complete(registry, search(n_trials=20)) is None  # more to run
        assert already_complete(registry, search(error_score=0.0)) is not None
        if multifidelity:
            assert (
                already_complete(registry, search().set_params(max_resource=9)) is None
            )  # refused later
        else:
            assert already_complete(registry, search().set_params(estimator=GaussianNB())) is None
        exp = registry.experiment("lr")
        registry.store.set_experiment_status(exp.id, "interrupted")
        assert already_complete(registry, search()) is None


def test_resume_with_fewer_trials_than_recorded_warns_that_none_starts(client, data, tmp_path):
    X, y = data
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    _lr_search(client, url, n_trials=4).fit(X, y)
    with pytest.warns(UserWarning, match=r"already records 4 trials, more than the 2 .*no new"):
        resumed = _lr_search(client, url, n_trials=2, resume=True).fit(X, y)
    assert [t.number for t in resumed.trials_] == [0, 1, 2, 3]  # restored, none new


def _mark_running(url: str, **driver) -> None:
    """Make experiment ``lr`` look as another driver left it: ``running``, that driver
    recorded in its config."""
    with Registry(url) as registry:
        exp = registry.experiment("lr")
        registry.store.set_experiment_config(exp.id, {**exp.config, "driver": driver})
        registry.store.set_experiment_status(exp.id, "running")


def test_resume_while_a_driver_on_this_host_still_runs_it_is_refused(
    client, data, tmp_path, monkeypatch
):
    import socket
    import subprocess
    import sys

    from dmlsearch._experiment import FORCE_RESUME

    X, y = data
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    _lr_search(client, url).fit(X, y)
    host = socket.gethostname()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _mark_running(url, host=host, pid=other.pid, opened=0.0)
        with pytest.raises(InvalidParameterError, match=rf"process {other.pid} on this host"):
            _lr_search(client, url, n_trials=5, resume=True).fit(X, y)
        with Registry(url) as registry:
            assert registry.experiment("lr").status == "running"
            assert len(registry.trials("lr")) == 3  # nothing ran
        monkeypatch.setenv(FORCE_RESUME, "1")  # the message's way round it
        assert len(_lr_search(client, url, resume=True).fit(X, y).trials_) == 3
        monkeypatch.delenv(FORCE_RESUME)
    finally:
        other.kill()
        other.wait()
    # That driver is gone (as after a SIGKILL): resumed at once.
    _mark_running(url, host=host, pid=other.pid, opened=time.time())
    assert len(_lr_search(client, url, n_trials=4, resume=True).fit(X, y).trials_) == 4


def test_resume_of_an_experiment_recently_active_on_another_host_is_refused(client, data, tmp_path):
    X, y = data
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    _lr_search(client, url).fit(X, y)
    _mark_running(url, host="elsewhere", pid=1, opened=time.time() - 3600)
    # Its trials were recorded seconds ago: another driver may be running it.
    with pytest.raises(InvalidParameterError, match=r"on elsewhere is \d+ s old.*resume again"):
        _lr_search(client, url, resume=True).fit(X, y)
    with Registry(url) as registry:
        exp = registry.experiment("lr")
        old = [
            dataclasses.replace(t, started=t.started - 3600, finished=t.finished - 3600)
            for t in registry.store.get_trials(exp.id)
        ]
        registry.store.record_trials(exp.id, old)
    # Nothing recorded for an hour: that driver is taken to be gone.
    assert len(_lr_search(client, url, n_trials=4, resume=True).fit(X, y).trials_) == 4


def test_an_estimator_holding_a_set_is_described_alike_in_every_process():
    # skorch keeps parameter names in a set, whose order follows string hashing: a resume
    # in a new process was refused, "the estimator changed".
    import json
    import os
    import subprocess
    import sys

    code = (
        "import json; from dmlsearch._space_values import describe_value; "
        "print(json.dumps(describe_value({'names': {'module__hidden', 'lr', 'iterator_train'}})))"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3", "4")
    }
    assert len(seen) == 1
    assert json.loads(seen.pop()) == {"names": ["iterator_train", "lr", "module__hidden"]}


def test_a_resumed_search_counts_its_restored_trials_as_done_in_its_progress(
    client, data, tmp_path, capsys
):
    # The progress line of a resume of 4 recorded trials to 6 began at "0/6 done".
    X, y = data
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    _lr_search(client, url, n_trials=4).fit(X, y)
    capsys.readouterr()
    _lr_search(client, url, n_trials=6, resume=True, progress=True).fit(X, y)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("dmlsearch: ")]
    assert ": 4/6 done" in next(ln for ln in lines if " started: " in ln)
    assert ": 6/6 done" in next(ln for ln in lines if " ended: " in ln)
