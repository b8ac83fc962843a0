"""A registry outage during a search: real locks on SQLite and PostgreSQL, released later.

SQLite: another connection holds an exclusive transaction past the store's busy timeout.
PostgreSQL: another connection holds ``LOCK TABLE ... ACCESS EXCLUSIVE`` past the
session's ``lock_timeout``. Either way the recorder's writes fail for a while for real.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

from dmlsearch import Registry, SearchCV
from dmlsearch._evaluate import TrialOutcome
from dmlsearch._recording import SearchRecorder
from dmlsearch.registry import (
    ExperimentDeletedError,
    RegistryError,
    RegistryUnavailableError,
    SQLStore,
)
from dmlsearch.testing.registry_contract import POSTGRES_URL, postgres_schema


@dataclass
class Target:
    """A registry whose writes give up quickly, and a way to lock its database."""

    backend: str
    url: str
    registry: Registry

    @contextmanager
    def locked(self, seconds: float) -> Iterator[None]:
        """Hold the database locked (against writers) for ``seconds``, from another thread."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def hold() -> None:
            try:
                if self.backend == "sqlite":
                    conn = sqlite3.connect(sa.make_url(self.url).database, isolation_level=None)
                    conn.execute("BEGIN EXCLUSIVE")
                    ready.set()
                    time.sleep(seconds)
                    conn.execute("COMMIT")
                    conn.close()
                else:
                    engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
                    with engine.begin() as conn:
                        conn.execute(
                            sa.text("LOCK TABLE trials, experiments IN ACCESS EXCLUSIVE MODE")
                        )
                        ready.set()
                        time.sleep(seconds)
                    engine.dispose()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                ready.set()

        thread = threading.Thread(target=hold, daemon=True)
        thread.start()
        assert ready.wait(30)
        assert not errors, errors
        try:
            yield
        finally:
            thread.join(seconds + 30)
            assert not errors, errors


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    artifacts = str(tmp_path / "artifacts")
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'reg.db'}"
        store = SQLStore(url, busy_timeout=0.1)
        with Registry(url, artifacts, store=store) as reg:
            yield Target("sqlite", url, reg)
    else:
        with postgres_schema(os.environ.get("DMLSEARCH_TEST_POSTGRES", POSTGRES_URL)) as url:
            options = sa.make_url(url).query["options"]
            quick = (
                sa.make_url(url)
                .update_query_dict({"options": f"{options} -clock_timeout=100"})
                .render_as_string(hide_password=False)
            )
            with Registry(quick, artifacts, store=SQLStore(quick)) as reg:
                yield Target("postgresql", url, reg)


def _outcome(number: int) -> TrialOutcome:
    return TrialOutcome(
        number=number,
        params={"C": float(number)},
        seed=number,
        state="complete",
        test_scores=[{"score": 0.5}, {"score": 0.7}],
        train_scores=None,
        fit_times=[0.1, 0.1],
        score_times=[0.01, 0.01],
        started=1.0,
        finished=2.0,
        worker="tcp://127.0.0.1:1",
    )


def _recorder(target: Target, **kwargs: float) -> SearchRecorder:
    recorder = SearchRecorder(target.registry, "exp", metric="score", flush_seconds=0, **kwargs)
    recorder.open(resume=False, config={"seed": 0}, fingerprint="f", cluster={})
    return recorder


def test_an_outage_mid_search_loses_nothing(target: Target, caplog: pytest.LogCaptureFixture):
    recorder = _recorder(target)
    recorder.add(_outcome(0))
    recorder.tick()
    assert recorder.pending == 0
    caplog.set_level(logging.WARNING, logger="dmlsearch")
    with target.locked(1.5):
        for number in range(1, 6):
            recorder.add(_outcome(number))  # neither raises nor blocks past the lock timeout
            recorder.tick()
        assert recorder.pending == 5
        assert "unavailable" in caplog.text and "keeping" in caplog.text
    deadline = time.monotonic() + 30
    while recorder.pending and time.monotonic() < deadline:
        time.sleep(0.1)
        recorder.tick()
    assert recorder.pending == 0
    assert "reachable again" in caplog.text
    store = target.registry.store
    exp = store.get_experiment("exp")
    assert [t.number for t in store.get_trials(exp.id)] == list(range(6))
    recorder.close("complete")
    assert store.get_experiment("exp").status == "complete"


def test_close_waits_out_a_short_outage(target: Target):
    recorder = _recorder(target, retry_seconds=30)
    with target.locked(1.0):
        recorder.add(_outcome(0))
        recorder.add(_outcome(1))
        start = time.monotonic()
        recorder.close("complete")
    assert time.monotonic() - start > 0.5
    store = target.registry.store
    exp = store.get_experiment("exp")
    assert exp.status == "complete"
    assert store.count_trials(exp.id) == 2


def test_close_never_hides_the_error_being_raised(target: Target, caplog):
    recorder = _recorder(target, retry_seconds=0.3)
    with target.locked(2.0):
        recorder.add(_outcome(0))
        with pytest.raises(ValueError, match="the original error"):
            try:
                raise ValueError("the original error")
            except ValueError:
                recorder.close("failed")  # cannot write: logs instead of raising
                raise
    assert "could not record 1 trial(s) and the status 'failed'" in caplog.text


def test_close_after_a_completed_search_warns_instead_of_failing(target: Target):
    recorder = _recorder(target, retry_seconds=0.3)
    with target.locked(2.0):
        recorder.add(_outcome(0))
        with pytest.warns(RuntimeWarning, match="resume=True reruns"):
            recorder.close("complete")


def test_an_experiment_deleted_under_its_run_stops_it_with_one_error(target: Target):
    # A probe deleted a running experiment: its driver printed two tracebacks.
    recorder = _recorder(target)
    recorder.add(_outcome(0))
    recorder.tick()
    target.registry.delete_experiment("exp", force=True)
    recorder.add(_outcome(1))
    with pytest.raises(ExperimentDeletedError, match="'exp' was deleted from the registry"):
        recorder.tick()
    recorder.close("failed")  # nothing to say beyond the error: no warning, no raise
    with pytest.warns(RuntimeWarning, match="was deleted"):
        recorder.close("complete")


def test_register_model_retries_an_outage(target: Target):
    X, y = make_classification(n_samples=40, n_features=4, random_state=0)
    model = LogisticRegression().fit(X, y)
    recorder = _recorder(target, retry_seconds=30)
    with target.locked(1.0):
        record = recorder.register_model(model, metrics={"m": 1.0})
    assert record.lineage["experiment"] == "exp"
    np.testing.assert_array_equal(target.registry.load_model("exp").predict(X), model.predict(X))
    impatient = SearchRecorder(target.registry, "exp", metric="score", retry_seconds=0.3)
    impatient.experiment_id = recorder.experiment_id
    with target.locked(2.0), pytest.raises(RegistryUnavailableError) as info:
        impatient.register_model(model)
    assert isinstance(info.value, RegistryError)


@pytest.mark.cluster
def test_search_survives_a_locked_sqlite_registry(client, tmp_path):
    """A SQLite file locked mid-search (past the busy timeout) does not end the search."""
    X, y = make_classification(n_samples=120, n_features=5, random_state=0)
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    registry = Registry(url, store=SQLStore(url, busy_timeout=0.1))
    target = Target("sqlite", url, registry)
    held = threading.Event()

    def lock_once_started() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not registry.experiments().empty:
                with target.locked(2.0):
                    held.set()
                return
            time.sleep(0.01)

    locker = threading.Thread(target=lock_once_started, daemon=True)
    locker.start()
    search = SearchCV(
        LogisticRegression(),
        {"C": [float(c) for c in np.logspace(-3, 2, 20)]},
        strategy="grid",
        cv=2,
        refit=False,
        client=client,
        random_state=0,
        registry=registry,
        experiment_name="locked",
    ).fit(X, y)
    locker.join(60)
    assert held.is_set()
    assert len(search.cv_results_["params"]) == 20
    trials = registry.trials("locked")
    assert list(trials["number"]) == list(range(20))
    assert registry.experiment("locked").status == "complete"
    registry.close()
