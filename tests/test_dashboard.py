"""The dmlsearch dashboard page: state, JSON endpoint, Prometheus metrics, wiring."""

from __future__ import annotations

import json
import logging
import re
import urllib.error
import urllib.request
import uuid
from collections import Counter

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

from dmlsearch import Float, SearchCV
from dmlsearch.dashboard import DashboardReporter, DashboardState, page_link
from dmlsearch.dashboard.state import LEADERBOARD, MAX_EXPERIMENTS, MAX_FINISHED
from dmlsearch.testing import FailingClassifier


def _ended(number: int, value: float | None, state: str = "complete", worker: str = "w1"):
    return [number, state, value, worker, 0.1, None]


# -- state (no cluster) ----------------------------------------------------------------------


def test_state_tracks_running_finished_leaderboard_and_history():
    state = DashboardState()
    state.apply(
        (  # msgpack delivers lists as tuples
            {"kind": "experiment", "experiment": "a", "meta": {"total": 30}},
            {"kind": "submitted", "experiment": "a", "trials": [[i, {"C": i}] for i in range(30)]},
        )
    )
    values = np.random.default_rng(0).uniform(size=25)
    state.apply(
        {
            "kind": "ended",
            "experiment": "a",
            "trials": [_ended(i, float(v), worker=f"w{i % 2}") for i, v in enumerate(values)]
            + [_ended(25, None, "failed")],
        }
    )
    snap = state.snapshot()["experiments"][0]
    assert snap["counts"] == {"complete": 25, "failed": 1}
    assert snap["in_flight"] == 4 and [r["number"] for r in snap["running"]] == [26, 27, 28, 29]
    expected = sorted(range(25), key=lambda i: -values[i])[:LEADERBOARD]
    assert [r["number"] for r in snap["leaderboard"]] == expected
    assert snap["leaderboard"][0]["params"] == {"C": expected[0]}
    assert snap["best"] == pytest.approx(values.max())
    bests = [v for _, v in snap["history"]]
    assert bests == sorted(bests) and bests[-1] == pytest.approx(values.max())
    assert snap["per_worker"] == {"w0": 13, "w1": 13}
    state.apply({"kind": "status", "experiment": "a", "status": "complete"})
    assert state.snapshot()["experiments"][0]["in_flight"] == 0


def test_state_is_bounded_and_keeps_experiments_apart():
    state = DashboardState()
    n = MAX_FINISHED * 3
    state.apply({"kind": "ended", "experiment": "a", "trials": [_ended(i, i) for i in range(n)]})
    state.apply({"kind": "ended", "experiment": "b", "trials": [_ended(0, -1.0)]})
    a, b = (state.experiments[k].snapshot() for k in ("a", "b"))
    assert a["done"] == n and len(a["finished"]) == MAX_FINISHED
    assert a["finished"][0]["number"] == n - 1  # latest first
    assert len(a["leaderboard"]) == LEADERBOARD and a["best"] == n - 1
    assert b["done"] == 1 and b["best"] == -1.0
    for i in range(MAX_EXPERIMENTS + 5):
        state.apply({"kind": "status", "experiment": f"x{i}", "status": "complete"})
    assert len(state.experiments) == MAX_EXPERIMENTS


def test_state_ignores_malformed_events():
    state = DashboardState()
    for bad in (None, 3, "x", {"kind": "ended"}, {"experiment": 1}, [{"experiment": "a"}]):
        state.apply(bad)
    state.apply({"kind": "ended", "experiment": "a", "trials": [["not", "enough"]]})
    state.apply({"kind": "future-kind", "experiment": "a", "rungs": [1, 2]})
    assert state.snapshot()["experiments"][0]["done"] == 0


def test_page_link():
    assert page_link("http://127.0.0.1:8787/status") == "http://127.0.0.1:8787/dmlsearch"
    assert page_link("http://host/proxy/8787/status") == "http://host/proxy/8787/dmlsearch"
    assert page_link(None) is None


def test_a_scheduler_that_refuses_the_plugin_only_warns(caplog):
    class OldScheduler:
        def register_plugin(self, plugin):
            raise ModuleNotFoundError("No module named 'dmlsearch'")

    with caplog.at_level(logging.WARNING, logger="dmlsearch"):
        assert DashboardReporter.attach(OldScheduler(), "e", {}) is None
    assert "dashboard page is off" in caplog.text


def test_events_carry_only_types_distributed_accepts():
    from distributed.client import _is_dumpable

    from dmlsearch._evaluate import TrialOutcome, TrialSpec

    sent = []

    class Recorder:
        def register_plugin(self, plugin):
            pass

        def log_event(self, topic, msg):
            assert _is_dumpable(msg), msg  # what Client.log_event checks
            sent.append(msg)

    params = {"C": np.float64(0.5), "n": np.int64(3), "flag": np.bool_(True), "est": object()}
    reporter = DashboardReporter.attach(Recorder(), "e", {"total": np.int64(4)})
    reporter.trials_submitted([TrialSpec(np.int64(0), params, 1)])
    outcome = TrialOutcome(
        number=0,
        params=params,
        seed=1,
        state="complete",
        test_scores=[{"score": 1.0}],
        train_scores=None,
        fit_times=[np.float64(0.1)],
        score_times=[np.float64(0.1)],
        started=1.0,
        finished=2.0,
        worker="w",
        error=None,
    )
    reporter.trial_ended(outcome, np.float64(0.75))
    reporter.close("complete")
    state = DashboardState()
    for msg in sent:
        state.apply(msg)
    view = state.snapshot()["experiments"][0]
    assert view["best"] == 0.75 and view["status"] == "complete"
    assert view["finished"][0]["params"]["n"] == 3


# -- on a real cluster ---------------------------------------------------------------------


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


@pytest.fixture(scope="module")
def data():
    return make_classification(n_samples=60, n_features=4, random_state=0)


@pytest.mark.cluster
def test_two_searches_show_apart_and_metrics_match(cluster, client, data):
    X, y = data
    base = cluster.dashboard_link.rsplit("/", 1)[0]
    names = [f"lr-{uuid.uuid4().hex[:6]}", f"failing-{uuid.uuid4().hex[:6]}"]
    lr = SearchCV(
        LogisticRegression(),
        {"C": Float(1e-3, 1e2, log=True)},
        n_trials=7,
        cv=2,
        client=client,
        experiment_name=names[0],
        progress=False,
        random_state=0,
    ).fit(X, y)
    with pytest.warns(Warning):
        failing = SearchCV(
            FailingClassifier(),
            {"fail": [False, True], "parameter": np.array([1.0, 2.0])},
            strategy="grid",
            cv=2,
            client=client,
            experiment_name=names[1],
            progress=False,
            refit=False,
        ).fit(X, y)
    quiet = f"quiet-{uuid.uuid4().hex[:6]}"
    SearchCV(
        LogisticRegression(),
        {"C": [1.0]},
        cv=2,
        client=client,
        experiment_name=quiet,
        dashboard=False,
        progress=False,
    ).fit(X, y)

    state = json.loads(_get(base + "/dmlsearch/api/state"))
    shown = {e["name"]: e for e in state["experiments"]}
    assert quiet not in shown
    metrics = _get(base + "/metrics").decode()
    for name, search in zip(names, (lr, failing), strict=True):
        expected = Counter(t.state for t in search.trials_)
        view = shown[name]
        assert view["status"] == "complete" and view["in_flight"] == 0
        assert view["counts"] == dict(expected)
        assert {r["number"] for r in view["finished"]} == {t.number for t in search.trials_}
        for state_name, count in expected.items():
            pattern = (
                rf'dmlsearch_trials_total\{{experiment="{name}",scheduler="[^"]+",'
                rf'state="{state_name}"\}} {count}\.0'
            )
            assert re.search(pattern, metrics), (pattern, metrics)
        assert re.search(
            rf'dmlsearch_trials_in_flight\{{experiment="{name}",[^}}]*\}} 0\.0', metrics
        )
    best = re.search(rf'dmlsearch_best_score\{{experiment="{names[0]}",[^}}]*\}} (\S+)', metrics)
    assert best is not None and float(best.group(1)) == pytest.approx(lr.best_score_)


@pytest.mark.cluster
def test_page_is_served_beside_the_dashboard_and_read_only(cluster):
    base = cluster.dashboard_link.rsplit("/", 1)[0]
    from dmlsearch.dashboard import DashboardPlugin

    with __import__("distributed").Client(cluster, set_as_default=False) as c:
        c.register_plugin(DashboardPlugin())  # idempotent: once per cluster
        page = _get(base + "/dmlsearch").decode()
    assert "<title>dmlsearch" in page and "api/state" in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")  # no CDN
    for method in ("POST", "PUT", "DELETE"):
        request = urllib.request.Request(base + "/dmlsearch/api/state", data=b"{}", method=method)
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=10)
        assert info.value.code == 405
