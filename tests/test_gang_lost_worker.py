"""Gang trials on a cluster that has fewer than k workers for a while mid-search (a worker
lost, its nanny restarting it): the trials wait for it, on one clock, and do not fail."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import dask
import pytest
from distributed import Client, LocalCluster
from sklearn.datasets import make_classification

from dmlsearch import NoWorkersError, SearchCV
from dmlsearch.runner import gang
from dmlsearch.runner.gang import alive_workers

xgboost = pytest.importorskip("xgboost")

pytestmark = pytest.mark.cluster


@pytest.fixture
def threaded() -> Iterator[tuple[LocalCluster, Client]]:
    """A private in-process 2-worker cluster: quick to scale down and up."""
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield cluster, client


def _lose_a_worker_at_first_admission(
    monkeypatch: pytest.MonkeyPatch, cluster: LocalCluster, client: Client, back_after: float | None
) -> None:
    """The first gang admission finds one worker fewer than the search's check before its
    first trial saw, as after a SIGKILL, but with no race: the worker is removed as the
    admission takes the cluster's lock; it comes back ``back_after`` seconds later."""
    real = gang._admission
    first = [True]

    @contextlib.contextmanager
    def admission(c: Client) -> Iterator[None]:
        if first[0]:
            first[0] = False
            cluster.scale(1)
            deadline = time.monotonic() + 30
            while len(alive_workers(client, running=False)) > 1:
                assert time.monotonic() < deadline, "the worker did not leave"
                time.sleep(0.05)
            if back_after is not None:
                threading.Timer(back_after, cluster.scale, (2,)).start()
        with real(c):
            yield

    monkeypatch.setattr(gang, "_admission", admission)


def _search(client: Client, **kwargs: Any) -> SearchCV:
    return SearchCV(
        xgboost.XGBClassifier(n_estimators=4, max_depth=2, tree_method="hist", random_state=0),
        cv=2, workers_per_trial=2, client=client, progress=False, refit=False, **kwargs,
    )  # fmt: skip


def test_a_worker_missing_at_admission_is_waited_for_and_the_trial_completes(
    threaded: tuple[LocalCluster, Client],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # It failed the trial with InvalidParameterError('n_workers': "ask for at most 1"), a
    # setting the user had right; the probe's search was a multi-fidelity one.
    cluster, client = threaded
    X, y = make_classification(n_samples=200, n_features=5, random_state=0)
    _lose_a_worker_at_first_admission(monkeypatch, cluster, client, back_after=1.0)
    with caplog.at_level(logging.WARNING, logger="dmlsearch"):
        search = _search(
            client, search_space={"learning_rate": [0.1, 0.3]}, strategy="grid",
            scheduler="halving", resource="n_estimators", min_resource=2, max_resource=4,
            reduction_factor=2,
        ).fit(X, y)  # fmt: skip
    assert [(t.state, t.error) for t in search.trials_] == [("complete", None)] * 3
    assert "the cluster has fewer workers (1) than the 2" in caplog.text  # it did wait
    assert all(len(t.worker.split("+")) == 2 for t in search.trials_)


def test_too_few_workers_for_too_long_ends_the_search_once(
    threaded: tuple[LocalCluster, Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each trial failed in turn after its own full wait (NoWorkersError recorded per
    # trial, the first InvalidParameterError), then AllTrialsFailedError; now the trials
    # share one wait and the search ends with NoWorkersError, as one with no worker does.
    cluster, client = threaded
    X, y = make_classification(n_samples=200, n_features=5, random_state=0)
    _lose_a_worker_at_first_admission(monkeypatch, cluster, client, back_after=None)
    search = _search(client, search_space={"max_depth": [2, 3, 4]}, strategy="grid")
    started = time.monotonic()
    with (
        dask.config.set({"dmlsearch.no-workers-timeout": 1.0}),
        pytest.raises(NoWorkersError, match=r"fewer \(1\) for 1 s .*finished trials stay"),
    ):
        search.fit(X, y)
    assert time.monotonic() - started < 2.5 * 1.0 + 2.0  # one wait, not one per trial
    assert not hasattr(search, "trials_")
