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
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.registry import _registry as fsspec_registry
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import StratifiedKFold

from dmlsearch import Float, SearchCV
from dmlsearch import _rung_store as rung_store
from dmlsearch import _rungs as rungs
from dmlsearch._rung_store import FOLDER, StateStore, state_store_for
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
    # Found by a probe: accepted, then each worker warned at each copy, naming `artifacts`.
    with pytest.raises(InvalidParameterError, match="state_store: unknown fsspec protocol"):
        _search("tcp://127.0.0.1:1", state_store="nosuch://x").fit(X, y)
    with pytest.raises(InvalidParameterError, match="only apply to a multi-fidelity"):
        SearchCV(
            SGDClassifier(), {"alpha": [1e-4]}, state_store=False, client="tcp://127.0.0.1:1"
        ).fit(X, y)


# -- a state store that stops answering --------------------------------------------------------


class DeadStore(MemoryFileSystem):
    """A store whose every write fails as botocore's do for a dead endpoint (not an
    OSError); each attempt is counted in the file its storage option ``attempts`` names,
    from any process (the option travels to the workers as a registry's would)."""

    protocol = "deadstore"

    def __init__(self, *args: Any, attempts: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.attempts = attempts

    def _open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        with open(self.attempts, "a", encoding="ascii") as f:
            f.write(f"{os.getpid()} {mode}\n")
        raise RuntimeError("Could not connect to the endpoint URL")


@pytest.fixture
def dead_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> dict[str, str]:
    """The storage options of a DeadStore that counts its attempts in a file."""
    monkeypatch.setitem(fsspec_registry, "deadstore", DeadStore)
    monkeypatch.setattr(rung_store, "_FAILED", {})
    return {"attempts": str(tmp_path / "attempts")}


def _attempts(options: dict[str, str], mode: str = "w") -> list[str]:
    """The processes' ids of each attempt to open a file in ``mode``."""
    if not os.path.exists(options["attempts"]):
        return []
    with open(options["attempts"], encoding="ascii") as f:
        return [line.split()[0] for line in f if mode in line.split()[1]]


def test_a_failing_state_store_is_left_alone_after_one_warning(dead_store, caplog, monkeypatch):
    """Probe: each copy to an unreachable store blocked its worker ~25 s (botocore's
    retries) and logged a ~125-line traceback: 88 of them, 17 minutes for a 1-minute
    search."""

    def run(name: str) -> StateStore:
        return StateStore("deadstore://states", f"{FOLDER}/{name}", 9, dead_store)

    store = run("run1")
    caplog.set_level("DEBUG", logger="dmlsearch._rung_store")
    assert store.save("run1", 1, 1, [SGDClassifier()]) is None
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].exc_info is None
    line = warnings[0].getMessage()
    assert "\n" not in line and "deadstore://states" in line
    assert "RuntimeError: Could not connect" in line and "refits" in line
    assert any(r.levelname == "DEBUG" and r.exc_info for r in caplog.records)
    # Left alone: no more attempts, warnings or reads for the rest of the run.
    caplog.clear()
    for trial in range(2, 30):
        assert store.save("run1", trial, 1, [SGDClassifier()]) is None
    assert store.load(1, 1, "0" * 64) is None
    assert store.delete([(1, 1)]) == 0 and store.clear() == 0
    assert len(_attempts(dead_store, "")) == 1 and caplog.records == []
    # Another search (run), or the same one past the pause, tries again.
    assert run("run2").save("run2", 1, 1, []) is None and len(_attempts(dead_store)) == 2
    monkeypatch.setattr(rung_store, "PAUSE_SECONDS", 0.0)
    assert store.save("run1", 31, 1, []) is None and len(_attempts(dead_store)) == 3


def test_a_search_whose_state_store_fails_copies_once_per_worker(forgetful, digits, dead_store):
    """The search finishes as without a store (every promotion refits: no worker keeps a
    state here), and each worker process tries the dead store once, not at every step.
    The registry's storage options reach the workers' copies (they count the attempts)."""
    forgetful.run(fsspec.register_implementation, "deadstore", DeadStore, True)
    X, y = digits
    with Registry("sqlite://", "deadstore://team", storage_options=dead_store) as registry:
        search = _search(forgetful, registry=registry, experiment_name="dead-store")
        search.fit(X, y)
    r = search.cv_results_
    assert {t.state for t in search.trials_} == {"complete"}
    assert not r["from_store"].any() and not r["continued"].any()
    _check_straight(search, X, y)
    writers = _attempts(dead_store)
    assert 1 <= len(writers) == len(set(writers)) <= 2  # once per worker process


def test_the_registrys_storage_options_reach_the_state_store(tmp_path):
    """The workers' copies go where the registry's store is, with its options; they are
    pickled with the run's context, never shown."""
    options = {"auto_mkdir": True}
    with Registry(f"sqlite:///{tmp_path / 'r.db'}", storage_options=options) as registry:
        store = state_store_for("auto", registry, "run", 9, "partial_fit")
        assert store is not None and store.storage_options == options
        assert "auto_mkdir" not in repr(store)
        assert cloudpickle.loads(cloudpickle.dumps(store)).storage_options == options
        digest = store.save("run", 1, 1, [SGDClassifier()])
        assert digest is not None and store.load(1, 1, digest) is not None
        assert store._artifacts.storage_options == options
