"""Ensembles as registry objects: member versions plus weights, re-weighted without retraining."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_iris
from sklearn.linear_model import Ridge
from sklearn.model_selection import StratifiedKFold
from sklearn.tree import DecisionTreeClassifier

from dmlsearch import InvalidParameterError, Registry, SearchCV
from dmlsearch.ensemble import (
    EnsembleSelection,
    WeightedEnsemble,
    register_ensemble,
    reweight_ensemble,
)
from dmlsearch.registry import FormatError

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def selected(client, tmp_path_factory):
    X, y = load_iris(return_X_y=True)
    registry = Registry(f"sqlite:///{tmp_path_factory.mktemp('reg') / 'r.db'}")
    search = SearchCV(
        DecisionTreeClassifier(random_state=0),
        {"max_depth": [1, 2, 3, None], "min_samples_leaf": [1, 10]},
        strategy="grid",
        cv=StratifiedKFold(3, shuffle=True, random_state=0),
        client=client,
        keep_oof=True,
        registry=registry,
        experiment_name="trees",
        progress=False,
    ).fit(X, y)
    selection = EnsembleSelection(search, ensemble_size=8, n_init=2, client=client).fit(X, y)
    yield registry, selection, X, y
    registry.close()


def test_an_ensemble_version_names_its_member_versions_and_loads_back(selected):
    registry, selection, X, _ = selected
    record = register_ensemble(registry, "iris-ens", selection)
    assert record.format == "dmlsearch-ensemble"
    n = len(selection.members_)
    assert record.lineage["kind"] == "ensemble"
    assert record.lineage["experiment"] == "trees"
    assert record.lineage["trials"] == selection.members_
    assert record.lineage["weights"] == pytest.approx(list(selection.weights_))
    members = registry.versions("iris-ens-members")
    assert len(members) == n
    assert [m.lineage["trial"] for m in members] == selection.members_
    assert record.lineage["members"] == [f"iris-ens-members:{m.version}" for m in members]

    loaded = registry.load_model("iris-ens")
    assert isinstance(loaded, WeightedEnsemble)
    assert loaded.model_version_ == ("iris-ens", record.version)
    assert loaded.members_ == selection.members_
    np.testing.assert_allclose(loaded.predict_proba(X), selection.predict_proba(X))
    np.testing.assert_array_equal(loaded.predict(X), selection.predict(X))
    assert registry.verify() == {k: True for k in registry.verify()}


def test_reweighting_makes_a_new_version_without_storing_members_again(selected):
    registry, selection, X, _ = selected
    first = register_ensemble(registry, "reweighted", selection, member_model="rw-members")
    n = len(selection.members_)
    weights = [0.0] * n
    weights[0] = 2.0
    second = reweight_ensemble(registry, "reweighted", weights)
    assert second.version == first.version + 1
    assert second.lineage["reweighted_from"] == first.version
    assert second.lineage["members"] == first.lineage["members"][:1]
    assert second.lineage["weights"] == [1.0]
    assert len(registry.versions("rw-members")) == n  # nothing trained or stored again

    only_first = registry.load_model("reweighted", version=second.version)
    member = registry.load_model("rw-members", version=1)
    np.testing.assert_allclose(only_first.predict_proba(X), member.predict_proba(X))
    again = registry.load_model("reweighted", version=first.version)
    np.testing.assert_allclose(again.predict_proba(X), selection.predict_proba(X))

    # A loaded ensemble registered again reuses its member versions.
    third = register_ensemble(registry, "reweighted", again)
    assert third.lineage["members"] == first.lineage["members"]
    assert len(registry.versions("rw-members")) == n


def test_bad_weights_and_non_ensembles_are_refused(selected):
    registry, selection, X, y = selected
    register_ensemble(registry, "checked", selection)
    n = len(selection.members_)
    for weights, text in (
        ([1.0] * (n + 1), f"expected {n} weights"),
        ([0.0] * n, "at least one weight"),
        ([-1.0] + [1.0] * (n - 1), ">= 0"),
        ([float("nan")] * n, ">= 0"),
        ("heavy", "sequence of numbers"),
    ):
        with pytest.raises(InvalidParameterError, match=text):
            reweight_ensemble(registry, "checked", weights)
    with pytest.raises(InvalidParameterError, match="name"):
        register_ensemble(registry, "", selection)  # checked as register_model checks it
    registry.register_model("plain", DecisionTreeClassifier().fit(X, y))
    with pytest.raises(FormatError, match="not an ensemble"):
        reweight_ensemble(registry, "plain", [1.0])


def test_a_hand_built_regression_ensemble_round_trips(tmp_path: Path):
    X, y = load_diabetes(return_X_y=True)
    members = [Ridge(alpha=a).fit(X, y) for a in (0.1, 10.0)]
    ensemble = WeightedEnsemble(members, [3, 1]).fit()
    np.testing.assert_allclose(
        ensemble.predict(X), 0.75 * members[0].predict(X) + 0.25 * members[1].predict(X)
    )
    assert not hasattr(ensemble, "predict_proba")
    with Registry(f"sqlite:///{tmp_path / 'r.db'}") as registry:
        record = register_ensemble(registry, "ridge-pair", ensemble)
        assert record.lineage["trials"] == [None, None]
        loaded = registry.load_model("ridge-pair")
        np.testing.assert_allclose(loaded.predict(X), ensemble.predict(X))


def test_a_member_version_an_ensemble_loads_is_not_deleted_without_force(tmp_path: Path):
    from dmlsearch.registry import InUseError

    X, y = load_diabetes(return_X_y=True)
    registry = Registry(f"sqlite:///{tmp_path / 'r.db'}")
    members = [Ridge(alpha=a).fit(X, y) for a in (0.1, 10.0)]
    versions = [registry.register_model("ridge", m).version for m in members]
    spare = registry.register_model("ridge", Ridge().fit(X, y)).version
    ensemble = WeightedEnsemble(members, [0.5, 0.5]).fit()
    ensemble.member_versions_ = [("ridge", v) for v in versions]
    ensemble.members_ = [None, None]
    record = register_ensemble(registry, "ridge-ens", ensemble)
    assert registry.ensembles_using("ridge", versions[0]) == [f"ridge-ens:{record.version}"]
    assert registry.ensembles_using("ridge", spare) == []

    with pytest.raises(InUseError, match=rf"ridge-ens:{record.version}.*force=True"):
        registry.delete_version("ridge", versions[0])
    assert isinstance(registry.load_model("ridge-ens"), WeightedEnsemble)  # still whole
    registry.delete_version("ridge", spare)  # not a member: deleted as before

    # Once the ensemble is gone its members may go; force deletes a member at once.
    registry.delete_version("ridge-ens", record.version)
    registry.delete_version("ridge", versions[0])
    registry.delete_version("ridge", versions[1], force=True)
    assert registry.versions("ridge") == []
    with pytest.raises(InvalidParameterError, match="force"):
        registry.delete_version("ridge", 1, force="yes")  # type: ignore[arg-type]
    registry.close()
