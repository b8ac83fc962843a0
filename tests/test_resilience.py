"""Worker loss, timeouts, reproducibility across cluster sizes, the embedded cluster."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
from distributed import Client
from sklearn.datasets import make_classification
from sklearn.exceptions import FitFailedWarning
from sklearn.linear_model import LogisticRegression

from dmlsearch import AllTrialsFailedError, Float, SearchCV
from dmlsearch.testing import NoisyClassifier, SleepyClassifier, local_cluster

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def data():
    return make_classification(n_samples=60, n_features=4, random_state=0)


def test_worker_killed_mid_search_reports_every_trial_once(fresh_cluster, data):
    X, y = data
    n_trials = 24
    with Client(fresh_cluster, set_as_default=False) as client:
        pids = client.run(os.getpid)
        victim = next(iter(pids))
        # Warm both workers so that each has run trials when the kill comes.
        client.run(lambda: __import__("sklearn.model_selection"))
        search = SearchCV(
            SleepyClassifier(seconds=0.15),
            {"parameter": list(range(n_trials))},
            strategy="grid",
            cv=2,
            client=client,
        )
        busy: list[str] = []

        def killer() -> None:
            # Kill the worker only while it runs trials, so some work really is lost.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                keys = client.processing([victim]).get(victim, [])
                if keys:
                    busy.extend(str(k) for k in keys)
                    os.kill(pids[victim], signal.SIGKILL)
                    return
                time.sleep(0.05)

        time.sleep(1.0)
        thread = threading.Thread(target=killer)
        thread.start()
        search.fit(X, y)
        thread.join()
    assert busy, "the victim worker never ran a trial task"
    numbers = [t.number for t in search.trials_]
    assert numbers == list(range(n_trials))
    assert {t.state for t in search.trials_} == {"complete"}
    # Every trial was recorded exactly once: a duplicate would show as an extra call.
    assert search.runner_stats_.recorded == n_trials
    assert [p["parameter"] for p in search.cv_results_["params"]] == list(range(n_trials))
    assert all(t.retries <= search.max_retries for t in search.trials_)


def test_python_level_trial_times_out(client, data):
    X, y = data
    space = {"seconds": [0.0, 30.0]}
    s = SearchCV(
        SleepyClassifier(),
        space,
        strategy="grid",
        cv=2,
        client=client,
        trial_timeout=1.0,
        error_score=-1.0,
    )
    t0 = time.monotonic()
    with pytest.warns(FitFailedWarning, match="1 of the 2 trials failed"):
        s.fit(X, y)
    assert time.monotonic() - t0 < 20
    states = {t.params["seconds"]: t.state for t in s.trials_}
    assert states == {0.0: "complete", 30.0: "timeout"}
    slow = next(t for t in s.trials_ if t.state == "timeout")
    assert "trial_timeout=1.0" in slow.error
    assert s.cv_results_["mean_test_score"][1] == -1.0
    assert s.best_params_ == {"seconds": 0.0}


def test_trial_stuck_in_native_code_gets_its_worker_restarted(fresh_cluster, data):
    X, y = data
    with Client(fresh_cluster, set_as_default=False) as client:
        s = SearchCV(
            SleepyClassifier(mode="native"),
            {"seconds": [0.0, 60.0]},
            strategy="grid",
            cv=2,
            client=client,
            trial_timeout=0.5,
        )
        t0 = time.monotonic()
        with pytest.warns(FitFailedWarning, match="1 of the 2 trials failed"):
            s.fit(X, y)
        elapsed = time.monotonic() - t0
        client.wait_for_workers(2, timeout=30)
    assert elapsed < 40
    stuck = next(t for t in s.trials_ if t.params["seconds"] == 60.0)
    assert stuck.state == "timeout"
    assert "restarted" in stuck.error
    assert s.runner_stats_.hard_timeouts == 1


def test_random_search_identical_on_one_and_two_workers(client, data):
    X, y = data
    space = {"parameter": Float(0.0, 1.0)}

    def run(c: Client) -> SearchCV:
        return SearchCV(NoisyClassifier(), space, n_trials=16, cv=3, client=c, random_state=11).fit(
            X, y
        )

    two = run(client)
    one_cluster = local_cluster(1)
    try:
        with Client(one_cluster, set_as_default=False) as one_client:
            one = run(one_client)
    finally:
        one_cluster.close()
    assert one.cv_results_["params"] == two.cv_results_["params"]
    np.testing.assert_array_equal(
        one.cv_results_["mean_test_score"], two.cv_results_["mean_test_score"]
    )
    assert one.best_params_ == two.best_params_
    # The noisy estimator really is noisy: scores differ between trials.
    assert len(set(two.cv_results_["mean_test_score"])) > 1


def test_embedded_cluster_is_started_and_closed(data):
    X, y = data
    import distributed

    with pytest.raises(ValueError):
        distributed.default_client()
    s = SearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, strategy="grid", cv=2).fit(X, y)
    assert len(s.trials_) == 2
    assert s.trials_[0].worker.startswith("tcp://127.0.0.1:")
    with pytest.raises(ValueError):
        distributed.default_client()


def test_time_budget_finish_policy_lets_running_trials_end(client, data):
    X, y = data
    search = SearchCV(
        SleepyClassifier(seconds=0.3),
        {"parameter": Float(0.0, 1.0)},
        n_trials=200,
        cv=2,
        time_budget=1.5,
        time_budget_policy="finish",
        random_state=0,
        client=client,
        progress=False,
    )
    search.fit(X, y)
    n = len(search.trials_)
    # Two single-thread workers, two 0.3 s folds per trial: a handful of trials fit.
    assert 1 <= n < 50
    assert search.runner_stats_.stopped_by_budget
    assert len(search.cv_results_["params"]) == n
    assert all(t.state == "complete" for t in search.trials_)
    # Trials in flight when the budget ends finish (none lost): numbers are contiguous.
    assert sorted(t.number for t in search.trials_) == list(range(n))
    assert set(search.phase_times_) == {"setup", "search", "refit"}


def test_time_budget_stop_policy_stops_running_trials_and_starts_no_queued_one(client, data):
    X, y = data
    budget = 2.0
    search = SearchCV(
        SleepyClassifier(),
        # Slow trials: every one still runs when the budget ends.
        {"seconds": [20.0, 20.5, 21.0, 21.5, 22.0, 22.5]},
        strategy="grid",
        cv=2,
        time_budget=budget,
        client=client,
        progress=False,
        refit=False,
    )
    wall_start = time.time()
    with pytest.raises(AllTrialsFailedError, match="time_budget"):
        search.fit(X, y)
    elapsed = time.time() - wall_start
    # Stopped at the budget, not after the 20 s trials.
    assert elapsed < 15


def test_time_budget_stop_policy_records_stopped_trials(client, data):
    X, y = data
    budget = 2.5
    search = SearchCV(
        SleepyClassifier(),
        {"seconds": [0.1, 0.1, 30.0, 0.1, 30.0, 0.1, 0.1, 0.1]},
        strategy="grid",
        cv=2,
        time_budget=budget,
        client=client,
        progress=False,
    )
    wall_start = time.time()
    search.fit(X, y)
    states = {t.number: t.state for t in search.trials_}
    assert set(states.values()) <= {"complete", "stopped"}
    assert "stopped" in states.values()
    stopped = [t for t in search.trials_ if t.state == "stopped"]
    assert all(t.params["seconds"] == 30.0 for t in stopped)
    assert all("time budget" in (t.error or "") for t in stopped)
    # No trial started after the budget ended (queued ones never start).
    assert max(t.started for t in search.trials_) <= wall_start + budget + 0.5
    assert search.best_params_ == {"seconds": 0.1}
    assert np.isnan(search.cv_results_["mean_test_score"][2])


def test_time_budget_is_validated():
    from dmlsearch.exceptions import InvalidParameterError

    for bad in (0, -1.0, float("inf"), "10", True):
        with pytest.raises(InvalidParameterError, match="time_budget"):
            SearchCV(SleepyClassifier(), {"parameter": [1.0]}, time_budget=bad).fit(
                np.zeros((4, 1)), [0, 1, 0, 1]
            )


def test_trial_that_kills_its_worker_is_recorded_failed_and_the_search_completes(
    fresh_cluster, data
):
    from dmlsearch.testing import CrashingClassifier

    X, y = data
    space = [
        {"crash": [True], "parameter": [0.0]},
        {"crash": [False], "parameter": [1.0, 2.0, 3.0, 4.0]},
    ]
    with Client(fresh_cluster, set_as_default=False) as c:
        search = SearchCV(
            CrashingClassifier(),
            space,
            strategy="grid",
            cv=2,
            client=c,
            progress=False,
            refit=False,
        )
        with pytest.warns(FitFailedWarning):
            search.fit(X, y)
    states = {t.number: t.state for t in search.trials_}
    assert sorted(states) == [0, 1, 2, 3, 4]
    assert states[0] == "failed"
    # Dask reports the loss as KilledWorker or, when the data went with the worker, as a
    # cancellation; either way the trial ran alone and is named as the culprit.
    error = search.trials_[0].error or ""
    assert "crashes its worker" in error, error
    harmed = {t.number: (t.state, t.error) for t in search.trials_[1:] if t.state != "complete"}
    assert not harmed, f"healthy trials harmed: {harmed}; stats {search.runner_stats_}"
    assert np.isnan(search.cv_results_["mean_test_score"][0])
