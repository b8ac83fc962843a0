"""SearchCV(scheduler=..., state_store=...): promotions continue from the store's copies."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

import cloudpickle
import fsspec
import numpy as np
import pytest
from distributed import Client
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import StratifiedKFold

from dmlsearch import Float, SearchCV
from dmlsearch import _rungs as rungs
from dmlsearch._rung_store import FOLDER, StateStore
from dmlsearch.exceptions import InvalidParameterError
from dmlsearch.fidelity import train_partial_fit
from dmlsearch.registry import Registry
from dmlsearch.testing import local_cluster

pytestmark = pytest.mark.cluster

# DiesOnce lives in this test module: workers get it by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _forget(*args: Any) -> None:
    """Stands in for the workers' cache: nothing is kept in a worker's memory."""


@pytest.fixture(scope="module")
def forgetful() -> Iterator[Client]:
    """Two one-thread workers that keep no trial state in memory, so every promotion
    needs the state store (or refits), wherever Dask runs it."""
    cluster = local_cluster(2)
    with Client(cluster, set_as_default=False) as client:
        client.run(setattr, rungs, "put", _forget)
        yield client
    cluster.close()


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    """450 rows of 3 classes (a stand-in for digits: small, quick to learn)."""
    data: tuple[np.ndarray, np.ndarray] = make_classification(
        n_samples=450, n_features=20, n_informative=8, n_classes=3, random_state=0
    )
    return data


def _search(client: Client, **kwargs: Any) -> SearchCV:
    params: dict[str, Any] = {
        "scheduler": "asha",
        "resource": "partial_fit",
        "min_resource": 1,
        "max_resource": 9,
        "n_trials": 12,
        "cv": 3,
        "random_state": 0,
        "client": client,
        "progress": False,
        "dashboard": False,
        "refit": False,
    }
    params.update(kwargs)
    return SearchCV(SGDClassifier(random_state=0), {"alpha": Float(1e-5, 1e-1, log=True)}, **params)


def _highest(search: SearchCV) -> dict[int, int]:
    """Each trial's highest resource reached."""
    r = search.cv_results_
    return {int(t): int(r["n_resources"][r["trial"] == t].max()) for t in np.unique(r["trial"])}


def _check_straight(search: SearchCV, X: np.ndarray, y: np.ndarray) -> None:
    """Every promoted step scores as its trial's models trained straight to its resource."""
    r = search.cv_results_
    classes = np.unique(y)
    first = int(r["n_resources"].min())
    promoted = np.flatnonzero(r["n_resources"] > first)
    assert promoted.size
    for i in promoted:
        for k, (train, test) in enumerate(StratifiedKFold(3).split(X, y)):
            model = clone(SGDClassifier(random_state=0)).set_params(**r["params"][i])
            step = train_partial_fit(
                model, X[train], y[train], int(r["n_resources"][i]), 0, classes=classes
            )
            assert step.estimator.score(X[test], y[test]) == r[f"split{k}_test_score"][i]


def _copies_left(url: str) -> list[str]:
    fs, root = fsspec.core.url_to_fs(url)
    return [p for p in fs.find(root) if f"/{FOLDER}/" in p]


@pytest.mark.parametrize("where", ["registry", "path"])
def test_promotions_without_a_cached_state_continue_from_the_store(
    forgetful, digits, tmp_path, where
):
    X, y = digits
    if where == "registry":
        registry = Registry(f"sqlite:///{tmp_path / 'r.db'}", artifacts=str(tmp_path / "art"))
        search = _search(forgetful, registry=registry, experiment_name="store")
    else:
        registry = None
        search = _search(forgetful, state_store=str(tmp_path / "states"))
    search.fit(X, y)
    r = search.cv_results_
    promoted = r["n_resources"] > 1
    assert promoted.any()
    # No worker kept a state: every promotion read the store's copy.
    assert r["continued"][promoted].all() and r["from_store"][promoted].all()
    assert not r["from_store"][~promoted].any()
    # Each trial trained each epoch once: the work is the highest resource each reached.
    assert float(np.sum(r["work"])) == sum(_highest(search).values())
    _check_straight(search, X, y)
    # The copies went: each once its trial moved on or was given up, the rest at the end.
    assert _copies_left(str(tmp_path)) == []
    assert all(t.store_time > 0 for t in search.trials_ if t.resource < 9)
    if registry is not None:
        registry.close()


def test_without_a_store_such_promotions_refit(forgetful, digits):
    X, y = digits
    search = _search(forgetful, state_store=False).fit(X, y)
    r = search.cv_results_
    promoted = r["n_resources"] > 1
    assert not r["continued"].any() and not r["from_store"].any()
    assert np.array_equal(r["work"][promoted], r["n_resources"][promoted].astype(float))
    _check_straight(search, X, y)


class DiesOnce(SGDClassifier):
    """Kills its worker at the first promotion (a fitted model trained on) of a run,
    once: ``marker`` (a path, set per test) says it happened."""

    marker = ""

    def partial_fit(self, X: Any, y: Any, *args: Any, **kwargs: Any) -> DiesOnce:
        if hasattr(self, "coef_") and self.marker and not os.path.exists(self.marker):
            with open(self.marker, "w", encoding="ascii") as f:
                f.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return super().partial_fit(X, y, *args, **kwargs)  # type: ignore[no-any-return]


def test_a_killed_workers_trials_continue_from_the_registry_store(fresh_cluster, tmp_path, digits):
    X, y = digits
    registry = Registry(f"sqlite:///{tmp_path / 'r.db'}")
    dies = type("DiesOnce", (DiesOnce,), {"marker": str(tmp_path / "killed")})
    with Client(fresh_cluster, set_as_default=False) as client:
        search = _search(client, n_trials=18, registry=registry, experiment_name="killed")
        search.set_params(estimator=dies(random_state=0)).fit(X, y)
    assert (tmp_path / "killed").exists(), "no worker was killed"
    r = search.cv_results_
    assert {t.state for t in search.trials_} == {"complete"}
    promoted = r["n_resources"] > 1
    # The killed worker's states died with it: its promotion, retried on a worker without
    # the state, read the store's copy (as any later promotion of its trials).
    assert r["from_store"].any() and r["continued"][promoted].all()
    assert float(np.sum(r["work"])) == sum(_highest(search).values())
    _check_straight(search, X, y)
    assert _copies_left(registry.artifacts.url) == []
    registry.close()


def test_gc_deletes_the_copies_a_crashed_run_left(tmp_path):
    registry = Registry(f"sqlite:///{tmp_path / 'r.db'}")
    namespace = registry.artifacts.namespace

    def run(name: str) -> StateStore:
        return StateStore(registry.artifacts.url, f"{namespace}/{FOLDER}/{name}", top=9)

    crashed, live = run("crashed"), run("live")
    digest = crashed.save("crashed", 3, 1, [SGDClassifier()])
    assert digest is not None and crashed.present() == ["3-1.pkl"]
    assert crashed.load(3, 1, digest) is not None and crashed.load(3, 1, "0" * 64) is None
    assert crashed.save("crashed", 3, 9, [SGDClassifier()]) is None  # the top: not copied
    assert registry.gc() == []  # younger than the grace period: maybe a live run's
    hours_ago = time.time() - 7200
    os.utime(f"{crashed.base}/3-1.pkl", (hours_ago, hours_ago))
    live.save("live", 1, 1, [SGDClassifier()])
    live.save("live", 2, 1, [SGDClassifier()])
    os.utime(f"{live.base}/1-1.pkl", (hours_ago, hours_ago))  # trial 2's copy is new
    removed = registry.gc()
    assert len(removed) == 1 and removed[0].endswith("crashed/3-1.pkl")
    assert crashed.present() == [] and live.present() == ["1-1.pkl", "2-1.pkl"]
    assert len(registry.gc(grace_seconds=0)) == 2 and live.present() == []
    registry.close()


def test_state_store_is_checked_before_any_work():
    X, y = make_classification(n_samples=60, n_features=4, random_state=0)
    with pytest.raises(InvalidParameterError, match="state_store"):
        _search("tcp://127.0.0.1:1", state_store=3).fit(X, y)
    with pytest.raises(InvalidParameterError, match="only apply to a multi-fidelity"):
        SearchCV(
            SGDClassifier(), {"alpha": [1e-4]}, state_store=False, client="tcp://127.0.0.1:1"
        ).fit(X, y)
