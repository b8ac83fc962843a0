"""Registry facade: artifacts, formats, models and aliases, and SearchCV recording/resume."""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from dmlsearch import Float, InvalidParameterError, Registry, SearchCV
from dmlsearch.registry import ArtifactIntegrityError, ArtifactStore, FormatError, NotFoundError
from dmlsearch.registry.formats import dump_model, load_model
from dmlsearch.testing.registry_contract import POSTGRES_URL, postgres_schema


@pytest.fixture(params=["sqlite", "postgresql"])
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Registry]:
    artifacts = str(tmp_path / "artifacts")
    if request.param == "sqlite":
        with Registry(f"sqlite:///{tmp_path / 'reg.db'}", artifacts) as reg:
            yield reg
    else:
        with (
            postgres_schema(os.environ.get("DMLSEARCH_TEST_POSTGRES", POSTGRES_URL)) as url,
            Registry(url, artifacts) as reg,
        ):
            yield reg


@pytest.fixture(scope="module")
def data():
    return make_classification(n_samples=80, n_features=5, random_state=0)


def test_artifacts_are_content_addressed_and_verified(tmp_path):
    store = ArtifactStore(str(tmp_path / "blobs"))
    uri, digest = store.put(b"hello model")
    assert store.put(b"hello model") == (uri, digest)
    assert store.get(digest) == b"hello model"
    path = Path(uri)
    raw = bytearray(path.read_bytes())
    raw[0] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(ArtifactIntegrityError, match="corrupt"):
        store.get(digest)
    path.write_bytes(b"hello")
    with pytest.raises(ArtifactIntegrityError):
        store.get(digest)
    path.unlink()
    with pytest.raises(ArtifactIntegrityError, match="missing"):
        store.get(digest)


def test_putting_the_same_bytes_again_repairs_a_damaged_blob(tmp_path):
    store = ArtifactStore(str(tmp_path / "blobs"))
    uri, digest = store.put(b"hello model")
    path = Path(uri)
    path.write_bytes(b"hello")  # truncated: a full disk, a bad copy
    assert store.put(b"hello model") == (uri, digest)
    assert store.get(digest) == b"hello model"
    path.write_bytes(b"HELLO MODEL")  # the right size, other bytes
    store.put(b"hello model")
    assert store.get(digest) == b"hello model"
    assert sorted(p.name for p in path.parent.iterdir()) == [digest]  # no temporary left


def test_formats_refuse_pickle_unless_allowed():
    class Opaque:
        pass

    with pytest.raises(FormatError, match="allow_pickle=True"):
        dump_model(Opaque())
    serialized = dump_model({"weights": [1, 2]}, allow_pickle=True)
    assert serialized.format == "pickle"
    with pytest.raises(FormatError, match="runs code on load"):
        load_model(serialized)
    assert load_model(serialized, allow_pickle=True) == {"weights": [1, 2]}


def test_torch_state_dict_round_trip():
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(3, 2)
    serialized = dump_model(model)
    assert serialized.format == "torch-state-dict"
    fresh = torch.nn.Linear(3, 2)
    loaded = load_model(serialized, module=fresh)
    assert torch.equal(loaded.weight, model.weight)


def test_the_formats_docs_call_deterministic_give_the_same_bytes_again(data):
    """docs/registry.md: registering the same model again stores no new blob (and repairs a
    damaged one) for these formats; skops, which is not byte-deterministic, is left out."""
    torch = pytest.importorskip("torch")
    xgboost = pytest.importorskip("xgboost")
    from dmlsearch.training import TorchClassifier

    X, y = data
    clf = xgboost.XGBClassifier(n_estimators=3, max_depth=2, random_state=0).fit(X, y)
    net = TorchClassifier(
        torch.nn.Linear, module__in_features=5, module__out_features=2, max_epochs=1
    ).fit(X.astype("float32"), y)
    models = [{"weights": [1.0, 2.0]}, clf, clf.get_booster(), torch.nn.Linear(3, 2), net]
    first = [dump_model(m, allow_pickle=True) for m in models]
    time.sleep(1.1)  # a format that stamped the time would differ now
    again = [dump_model(m, allow_pickle=True).data for m in models]
    assert [s.format for s in first] == [
        "pickle",
        "xgboost-ubj",
        "xgboost-ubj",
        "torch-state-dict",
        "skorch-net",
    ]
    assert again == [s.data for s in first]


def test_xgboost_models_use_their_native_format(registry, data):
    xgboost = pytest.importorskip("xgboost")
    X, y = data
    clf = xgboost.XGBClassifier(n_estimators=5, max_depth=2, random_state=0).fit(X, y)
    record = registry.register_model("xgb", clf, metrics={"accuracy": float(clf.score(X, y))})
    assert record.format == "xgboost-ubj"
    loaded = registry.load_model("xgb")
    assert type(loaded) is xgboost.XGBClassifier
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))

    booster = xgboost.train({"max_depth": 2}, xgboost.DMatrix(X, label=y), num_boost_round=3)
    serialized = dump_model(booster)
    assert serialized.format == "xgboost-ubj"
    again = load_model(serialized)
    np.testing.assert_array_equal(
        again.predict(xgboost.DMatrix(X)), booster.predict(xgboost.DMatrix(X))
    )


def test_a_loaded_xgboost_estimator_has_the_registered_hyperparameters(registry, data):
    """xgboost's file keeps the trees, not n_estimators or max_depth: a loaded model that
    had xgboost's defaults would refit into another model."""
    xgboost = pytest.importorskip("xgboost")
    from sklearn.base import clone

    X, y = data
    clf = xgboost.XGBClassifier(
        n_estimators=7, max_depth=2, learning_rate=0.05, subsample=0.8, random_state=0
    ).fit(X, y)
    registry.register_model("xgb-params", clf)
    loaded = registry.load_model("xgb-params")
    for name in ("n_estimators", "max_depth", "learning_rate", "subsample", "random_state"):
        assert loaded.get_params()[name] == clf.get_params()[name], name
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))
    refit = clone(loaded).fit(X, y)
    assert refit.get_booster().num_boosted_rounds() == 7
    np.testing.assert_allclose(refit.predict_proba(X), clf.predict_proba(X), rtol=1e-6)


def test_an_xgboost_parameter_that_is_not_plain_data_is_named_on_load(registry, data):
    xgboost = pytest.importorskip("xgboost")
    X, y = data

    def error_rate(y_true, y_score):
        return float(np.mean((y_score > 0.5) != y_true))

    clf = xgboost.XGBClassifier(n_estimators=3, eval_metric=error_rate).fit(X, y)
    registry.register_model("xgb-callable", clf)
    with pytest.warns(UserWarning, match="eval_metric"):
        loaded = registry.load_model("xgb-callable")
    assert loaded.get_params()["n_estimators"] == 3
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))


def test_register_load_alias_delete_gc(registry, data):
    X, y = data
    model = make_pipeline(StandardScaler(), LogisticRegression()).fit(X, y)
    v1 = registry.register_model("clf", model, metrics={"accuracy": 0.9})
    v2 = registry.register_model(
        "clf", LogisticRegression(C=0.1).fit(X, y), metrics={"accuracy": 0.8}
    )
    assert (v1.version, v2.version) == (1, 2)
    assert v1.format == "skops"
    np.testing.assert_array_equal(
        registry.load_model("clf", version=1).predict(X), model.predict(X)
    )
    registry.set_alias("clf", "champion", 1)
    assert registry.model_version("clf@champion").version == 1
    np.testing.assert_array_equal(registry.load_model("clf@champion").predict(X), model.predict(X))
    best = registry.search_models(name="clf", metric="accuracy")
    assert [r.version for r in best] == [1, 2]
    assert registry.verify() == {("clf", 1): True, ("clf", 2): True}
    registry.delete_version("clf", 1)
    with pytest.raises(NotFoundError):
        registry.model_version("clf@champion")
    assert registry.gc() == []  # v1's blob is younger than the grace period
    removed = registry.gc(grace_seconds=0)
    assert [Path(p).name for p in removed] == [v1.sha256]
    assert registry.verify() == {("clf", 2): True}


def test_tampered_model_is_refused(registry, data):
    X, y = data
    record = registry.register_model("m", LogisticRegression().fit(X, y))
    path = Path(record.artifact_uri)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ArtifactIntegrityError):
        registry.load_model("m")
    assert registry.verify() == {("m", 1): False}


def _skops_cannot_load_back() -> Any:
    # skops dumps a compiled pattern but refuses to build one on load; pickle handles it.
    return make_pipeline(
        FunctionTransformer(np.asarray, inv_kw_args={"pattern": re.compile("a")}),
        LogisticRegression(),
    )


def test_a_model_skops_cannot_load_back_is_refused_at_registration(registry, data):
    X, y = data
    lam = make_pipeline(FunctionTransformer(lambda a: a), LogisticRegression()).fit(X, y)
    with pytest.raises(FormatError, match="cannot be loaded back") as info:
        registry.register_model("lam", lam)
    assert "named function defined at module level" in str(info.value)
    assert "allow_pickle" not in str(info.value)  # pickle cannot save a lambda either
    with pytest.raises(FormatError, match="pickle cannot save Pipeline"):
        registry.register_model("lam", lam, allow_pickle=True)
    pattern = _skops_cannot_load_back().fit(X, y)
    with pytest.raises(FormatError, match=r"cannot be loaded back.*pass allow_pickle=True"):
        registry.register_model("pat", pattern)
    assert registry.models() == []
    record = registry.register_model("pat", pattern, allow_pickle=True)
    assert record.format == "pickle"
    loaded = registry.load_model("pat", allow_pickle=True)
    np.testing.assert_array_equal(loaded.predict(X), pattern.predict(X))


class Doubling(FunctionTransformer):
    """A transformer class as a script or notebook defines it (module ``__main__``)."""


def test_a_model_of_types_defined_in_main_warns_that_it_loads_only_there(
    registry, data, monkeypatch
):
    # Found by a probe: such a version registered (its load-back check runs where __main__
    # defines the class), then failed to load in any other process.
    X, y = data
    monkeypatch.setattr(Doubling, "__module__", "__main__")
    monkeypatch.setattr(sys.modules["__main__"], "Doubling", Doubling, raising=False)
    model = make_pipeline(Doubling(), LogisticRegression()).fit(X, y)
    with pytest.warns(UserWarning, match=r"__main__\.Doubling.*loads only in a process"):
        registry.register_model("local", model)
    loaded = registry.load_model("local")  # here it does
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


@pytest.mark.cluster
def test_an_unregistered_best_estimator_warns_with_the_call_that_registers_it(
    registry, client, data
):
    X, y = data
    space = {"logisticregression__C": Float(0.1, 1.0)}
    kwargs = {"n_trials": 2, "cv": 2, "client": client, "registry": registry, "progress": False}
    with pytest.warns(UserWarning, match="best_estimator_ was not registered") as info:
        search = SearchCV(_skops_cannot_load_back(), space, experiment_name="p", **kwargs)
        search.fit(X, y)
    (message,) = [str(w.message) for w in info if "not registered" in str(w.message)]
    trial = search.trials_[search.best_index_].number
    call = (
        "registry.register_model('p', search.best_estimator_, allow_pickle=True, "
        f"experiment='p', trial={trial})"
    )
    assert message.endswith(call), message
    exec(call, {"registry": registry, "search": search})  # the advice works as written
    assert registry.model_version("p").format == "pickle"
    lam = make_pipeline(FunctionTransformer(lambda a: a), LogisticRegression())
    with pytest.warns(UserWarning, match="named function defined at module level") as info:
        SearchCV(lam, space, experiment_name="lam", **kwargs).fit(X, y)
    assert not any("allow_pickle" in str(w.message) for w in info)
    assert registry.models() == ["p"]


@pytest.mark.cluster
def test_a_search_no_trial_of_which_scored_every_fold_registers_nothing(registry, client, data):
    # As scikit-learn, the search ends with best_score_ nan and refits; a model of unknown
    # quality must not become the next version all the same.
    X = data[0][:60]
    y = np.repeat([0, 1], [20, 40])  # KFold(3)'s first training rows hold one class only
    with pytest.warns(UserWarning, match="no trial was scored on every fold"):
        search = SearchCV(
            LogisticRegression(),
            {"C": [0.1, 1.0]},
            strategy="grid",
            cv=KFold(3),
            client=client,
            registry=registry,
            experiment_name="half-failed",
            progress=False,
        ).fit(X, y)
    assert np.isnan(search.best_score_) and hasattr(search, "best_estimator_")
    assert {t.state for t in search.trials_} == {"failed"}
    assert registry.models() == []
    assert registry.experiment("half-failed").status == "complete"


@pytest.mark.cluster
def test_search_records_every_trial_and_registers_the_best(registry, client, data):
    X, y = data
    search = SearchCV(
        LogisticRegression(),
        {"C": Float(1e-3, 1e2, log=True)},
        n_trials=8,
        cv=3,
        client=client,
        random_state=0,
        registry=registry,
        experiment_name="lr",
    ).fit(X, y)
    trials = registry.trials("lr")
    assert list(trials["number"]) == list(range(8))
    assert set(trials["state"]) == {"complete"}
    np.testing.assert_allclose(
        trials["value"].to_numpy(), search.cv_results_["mean_test_score"], rtol=0, atol=1e-12
    )
    experiment = registry.experiment("lr")
    assert experiment.status == "complete"
    # Where it ran: the shared 2-worker, 1-thread cluster.
    assert experiment.cluster["address"] == client.scheduler.address
    assert (experiment.cluster["workers"], experiment.cluster["threads"]) == (2, 2)
    version = search.model_version_
    assert version.lineage["trial"] == search.best_index_
    assert version.lineage["experiment"] == "lr"
    assert version.signature["n_features"] == 5
    np.testing.assert_array_equal(registry.load_model("lr").predict(X), search.predict(X))
    board = registry.leaderboard("lr", k=3)
    assert board["value"].iloc[0] == pytest.approx(search.best_score_)
    with pytest.raises(InvalidParameterError, match="already exists"):
        SearchCV(
            LogisticRegression(),
            {"C": [1.0]},
            client=client,
            registry=registry,
            experiment_name="lr",
        ).fit(X, y)


@pytest.mark.cluster
def test_an_infinite_best_score_is_recorded_as_the_search_reports_it(registry, client, data):
    X, y = data
    search = SearchCV(
        LogisticRegression(),
        {"C": [0.5, 2.0, 4.0]},
        scoring=lambda est, X, y: math.inf if est.C == 2.0 else (-math.inf if est.C > 2 else 0.5),
        cv=2,
        client=client,
        registry=registry,
        experiment_name="inf",
        progress=False,
    ).fit(X, y)
    assert search.best_score_ == math.inf
    trials = registry.trials("inf")
    by_c = trials.set_index("param_C")
    assert list(by_c.loc[[0.5, 2.0, 4.0], "value"]) == [0.5, math.inf, -math.inf]  # not NaN
    assert list(by_c.loc[[0.5, 2.0, 4.0], "mean_test_score"]) == [0.5, math.inf, -math.inf]
    assert registry.experiments()["best_value"].iloc[0] == math.inf
    assert registry.leaderboard("inf", k=1)["value"].iloc[0] == math.inf
    assert search.model_version_.metrics["mean_test_score"] == math.inf


@pytest.mark.cluster
def test_resume_model_based_search_continues_the_sampler(client, data, tmp_path):
    X, y = data
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    kwargs = dict(
        strategy="tpe", cv=2, client=client, random_state=3, registry=url, experiment_name="tpe"
    )
    space = {"C": Float(1e-3, 1e2, log=True)}
    first = SearchCV(LogisticRegression(), space, n_trials=6, **kwargs).fit(X, y)
    resumed = SearchCV(LogisticRegression(), space, n_trials=10, resume=True, **kwargs).fit(X, y)
    assert [t.number for t in resumed.trials_] == list(range(10))
    for old, new in zip(first.trials_, resumed.trials_[:6], strict=True):
        assert new.started == pytest.approx(old.started)  # not rerun
        assert new.params["C"] == pytest.approx(old.params["C"])
    assert len(resumed.cv_results_["params"]) == 10
    with Registry(url) as reg:
        assert reg.store.count_trials(reg.experiment("tpe").id) == 10


@pytest.mark.cluster
def test_resume_with_a_changed_space_is_refused(client, data, tmp_path):
    X, y = data
    url = f"sqlite:///{tmp_path / 'reg.db'}"

    def search(grid, **kwargs):
        return SearchCV(
            LogisticRegression(),
            grid,
            strategy="grid",
            cv=2,
            client=client,
            registry=url,
            experiment_name="g",
            progress=False,
            **kwargs,
        )

    search({"C": np.array([0.1, 1.0, 10.0])}).fit(X, y)
    # The same grid, given as a list of Python floats, continues (nothing to rerun).
    again = search({"C": [0.1, 1.0, 10.0]}, resume=True).fit(X, y)
    assert len(again.trials_) == 3
    with pytest.raises(InvalidParameterError, match="same search_space") as info:
        search({"C": [0.5, 1.0, 10.0]}, resume=True).fit(X, y)
    assert info.value.param == "resume"
    with Registry(url) as registry:
        # A refused resume leaves the experiment as it was.
        assert registry.experiment("g").status == "complete"
        assert len(registry.trials("g")) == 3


def test_resume_needs_registry_and_name(data):
    X, y = data
    with pytest.raises(InvalidParameterError) as info:
        SearchCV(LogisticRegression(), {"C": [1.0]}, resume=True, client="tcp://127.0.0.1:9").fit(
            X, y
        )
    assert info.value.param == "resume"


@pytest.mark.cluster
def test_driver_killed_mid_search_resumes_exactly(cluster, tmp_path):
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    script = tmp_path / "search.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from distributed import Client
            from sklearn.datasets import make_classification
            from dmlsearch import SearchCV
            from dmlsearch.testing import SleepyClassifier

            if __name__ == "__main__":
                X, y = make_classification(n_samples=60, n_features=4, random_state=0)
                with Client({cluster.scheduler_address!r}, set_as_default=False) as client:
                    SearchCV(SleepyClassifier(seconds=0.1), {{"parameter": list(range(30))}},
                             strategy="grid", cv=2, client=client, registry={url!r},
                             experiment_name="killed").fit(X, y)
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path)
    done_before = 0
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.3)
            try:
                with Registry(url) as reg:
                    done_before = reg.store.count_trials(reg.experiment("killed").id)
            except (NotFoundError, Exception):  # the database may not exist yet
                continue
            if done_before >= 6:
                break
        assert proc.poll() is None, "the search finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    with Registry(url) as reg:
        before = {t.number: t.started for t in reg.store.get_trials(reg.experiment("killed").id)}
    assert 6 <= len(before) < 30
    from distributed import Client

    from dmlsearch.testing import SleepyClassifier

    X, y = make_classification(n_samples=60, n_features=4, random_state=0)
    with Client(cluster, set_as_default=False) as client:
        resumed = SearchCV(
            SleepyClassifier(seconds=0.1),
            {"parameter": list(range(30))},
            strategy="grid",
            cv=2,
            client=client,
            registry=url,
            experiment_name="killed",
            resume=True,
        ).fit(X, y)
    assert [t.number for t in resumed.trials_] == list(range(30))
    for number, started in before.items():
        assert resumed.trials_[number].started == pytest.approx(started)  # not rerun
    assert resumed.runner_stats_.batch_sizes and sum(resumed.runner_stats_.batch_sizes) == 30 - len(
        before
    )
    with Registry(url) as reg:
        exp = reg.experiment("killed")
        assert reg.store.count_trials(exp.id) == 30
        assert exp.status == "complete"


def test_export_to_optuna(registry):
    from dmlsearch.registry import TrialRecord

    exp = registry.store.create_experiment("exported")
    records = [
        TrialRecord(
            exp.id,
            i,
            "complete",
            {"C": 10.0 ** (i - 3), "kernel": ["rbf", "linear"][i % 2]},
            {"score": [0.5 + i / 100]},
            value=0.5 + i / 100,
        )
        for i in range(6)
    ]
    records.append(TrialRecord(exp.id, 6, "failed", {"C": 1.0, "kernel": "rbf"}, {}, error="boom"))
    # An optimize trial its pruner stopped, with its curve (a probe found it exported as a
    # failure without one: plot_intermediate_values had nothing to draw).
    records.append(
        TrialRecord(
            exp.id, 7, "pruned", {"C": 1.0, "kernel": "rbf"}, {"score": [0.2]}, value=0.2,
            intermediate={"1": 0.1, "2": 0.2, "bracket": 0.0},
        )
    )  # fmt: skip
    registry.store.record_trials(exp.id, records)
    study = registry.to_optuna("exported")
    assert len(study.trials) == 8
    assert study.best_value == pytest.approx(0.55)
    assert study.best_params["kernel"] == "linear"
    assert study.trials[6].state.name == "FAIL"
    assert study.trials[7].state.name == "PRUNED"
    assert study.trials[7].intermediate_values == {1: 0.1, 2: 0.2}
    assert study.trials[0].distributions["C"].log
