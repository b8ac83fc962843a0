"""The dmlsearch dashboard page: state, JSON endpoint, Prometheus metrics, wiring."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

from dmlsearch import Float, SearchCV
from dmlsearch.dashboard import DashboardPlugin, DashboardReporter, DashboardState, page_link
from dmlsearch.dashboard.plugin import OK
from dmlsearch.dashboard.state import (
    LEADERBOARD,
    MAX_EPOCHS,
    MAX_EXPERIMENTS,
    MAX_FINISHED,
    MAX_PROMOTIONS,
    MAX_RUNGS,
    MAX_WORKERS,
)
from dmlsearch.exceptions import AllTrialsFailedError
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


def test_state_counts_rung_steps_and_promotions_per_resource():
    state = DashboardState()
    state.apply({"kind": "experiment", "experiment": "mf", "meta": {}})
    # [trial, rung, resource, from_resource, bracket]: three trials at 1, one promoted to 3.
    state.apply(
        {
            "kind": "rung_submitted",
            "experiment": "mf",
            "trials": [[t, 0, 1, 0, 0] for t in range(3)],
        }
    )
    state.apply(
        [
            {  # [trial, resource, state, value, restored]
                "kind": "rung_ended",
                "experiment": "mf",
                "trials": [[0, 1, "complete", 0.5, False], [1, 1, "complete", 0.7, False]],
            },
            {"kind": "rung_submitted", "experiment": "mf", "trials": [[1, 1, 3, 1, 0]]},
            {"kind": "rung_submitted", "experiment": "mf", "trials": [[1, 1, 3, 1, 0]]},  # retry
            {"kind": "rung_ended", "experiment": "mf", "trials": [[2, 1, "failed", None, False]]},
        ]
    )
    snap = state.snapshot()["experiments"][0]
    by_resource = {r["resource"]: r for r in snap["rungs"]}
    assert [r["resource"] for r in snap["rungs"]] == [1, 3]
    assert by_resource[1] == {
        "resource": 1, "rung": 0, "trials": 3, "running": 0, "complete": 2, "failed": 1,
        "promoted": 0, "restored": 0, "best": 0.7,
    }  # fmt: skip
    assert (by_resource[3]["trials"], by_resource[3]["running"]) == (1, 1)
    assert by_resource[3]["promoted"] == 1
    assert [(p["trial"], p["from"], p["to"]) for p in snap["promotions"]] == [(1, 1, 3)]
    # Steps an earlier run recorded (resume) count at their rung, never as running.
    state.apply(
        {"kind": "rung_ended", "experiment": "mf", "trials": [[7, 9, "complete", 0.9, True]]}
    )
    state.apply({"kind": "status", "experiment": "mf", "status": "interrupted"})
    snap = state.snapshot()["experiments"][0]
    by_resource = {r["resource"]: r for r in snap["rungs"]}
    assert by_resource[9]["restored"] == by_resource[9]["trials"] == 1
    assert by_resource[9]["best"] == 0.9
    assert by_resource[3]["running"] == 0  # the experiment ended


def test_a_minimized_objective_shows_its_least_values_as_best():
    # dmlsearch.optimize(..., direction="minimize") sends its direction with the experiment.
    state = DashboardState()
    meta = {"total": 20, "direction": "minimize"}
    state.apply({"kind": "experiment", "experiment": "low", "meta": meta})
    values = np.random.default_rng(1).uniform(size=20)
    state.apply(
        {
            "kind": "ended",
            "experiment": "low",
            "trials": [_ended(i, float(v)) for i, v in enumerate(values)],
        }
    )
    state.apply(
        {  # [trial, resource, state, value, restored]: the rung's best is its least loss
            "kind": "rung_ended",
            "experiment": "low",
            "trials": [
                [0, 1, "complete", 0.5, False],
                [1, 1, "complete", 0.2, False],
                [2, 1, "complete", 0.7, False],
            ],
        }
    )
    snap = state.snapshot()["experiments"][0]
    assert snap["best"] == pytest.approx(values.min())
    expected = sorted(range(20), key=lambda i: values[i])[:LEADERBOARD]
    assert [r["number"] for r in snap["leaderboard"]] == expected
    bests = [v for _, v in snap["history"]]
    assert bests == sorted(bests, reverse=True) and bests[-1] == pytest.approx(values.min())
    assert snap["rungs"][0]["best"] == 0.2


def test_a_multi_fidelity_searchs_steps_rank_by_resource_first_as_best_index_does():
    # A trial stopped at a low rung with a lucky score is not the search's best.
    state = DashboardState()
    state.apply({"kind": "experiment", "experiment": "mf", "meta": {"total": None}})
    steps = [(0, 1, 0.90), (1, 1, 0.60), (2, 1, 0.70), (1, 3, 0.80), (2, 3, 0.75), (1, 9, 0.82)]
    rows = [[*_ended(trial, value), None, resource] for trial, resource, value in steps]
    state.apply({"kind": "ended", "experiment": "mf", "trials": rows})
    snap = state.snapshot()["experiments"][0]
    assert snap["best"] == 0.82
    board = [(r["number"], r["resource"], r["value"]) for r in snap["leaderboard"]]
    ranked = [(1, 9, 0.82), (1, 3, 0.80), (2, 3, 0.75), (0, 1, 0.90), (2, 1, 0.70), (1, 1, 0.60)]
    assert board == ranked[:LEADERBOARD]
    assert [v for _, v in snap["history"]] == [0.90, 0.80, 0.82]
    # A driver of the first release sends no resource: rows rank by value alone.
    state.apply({"kind": "experiment", "experiment": "old", "meta": {}})
    state.apply({"kind": "ended", "experiment": "old", "trials": [_ended(0, 0.3), _ended(1, 0.9)]})
    old = state.snapshot()["experiments"][0]  # newest first
    assert old["best"] == 0.9 and old["leaderboard"][0]["resource"] is None


def test_the_reporter_sends_non_finite_parameters_as_text_and_a_steps_resource():
    client = _RPCClient()
    reporter = DashboardReporter(client, interval=3600)
    assert reporter.register()
    reporter.experiment_started("e", {})
    params = {"gamma": float("inf"), "tol": np.float64("nan"), "w": None, "C": 1.0}
    reporter.units_submitted([(0, params)])
    reporter.unit_finished(0, "complete", 0.5, "tcp://w:1", 1.0, resource=27)
    reporter.experiment_finished("complete")
    state = DashboardState()
    for msg in client.sent:
        state.apply(msg)
    (row,) = state.snapshot()["experiments"][0]["finished"]
    # JSON carries nan and inf as null, shown "-" as if unset: as text they keep apart.
    assert row["params"] == {"gamma": "inf", "tol": "nan", "w": None, "C": 1.0}
    assert row["resource"] == 27


def test_rung_view_is_bounded():
    state = DashboardState()
    steps = [[t, 0, 1 + t, 1, 0] for t in range(MAX_RUNGS + 10)]
    state.apply({"kind": "rung_submitted", "experiment": "mf", "trials": steps})
    snap = state.snapshot()["experiments"][0]
    assert len(snap["rungs"]) == MAX_RUNGS
    assert len(snap["promotions"]) == MAX_PROMOTIONS
    assert snap["promotions"][0]["trial"] == MAX_RUNGS - 1  # latest first, counted ones


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
    # Workers that come and go on a long-lived cluster are counted, in bounded space.
    churn = [_ended(i, 0.5, worker=f"tcp://w{i}") for i in range(MAX_WORKERS + 40)]
    state.apply({"kind": "ended", "experiment": "c", "trials": churn})
    per_worker = state.experiments["c"].snapshot()["per_worker"]
    assert len(per_worker) == MAX_WORKERS + 1 and sum(per_worker.values()) == len(churn)
    assert per_worker["(other workers)"] == 40


def test_state_keeps_errors_and_ignores_fields_it_does_not_know():
    state = DashboardState()
    state.apply({"kind": "submitted", "experiment": "a", "trials": [[0, {"C": 1.0}]]})
    # Field 8 is the resource: a malformed one shows as none; fields after it are ignored.
    row = [0, "failed", None, "w", 0.1, None, "ValueError: bad C", {"rung": 3}, "later"]
    state.apply({"kind": "ended", "experiment": "a", "trials": [row]})
    finished = state.snapshot()["experiments"][0]["finished"]
    assert finished == [
        {
            "number": 0,
            "state": "failed",
            "value": None,
            "worker": "w",
            "duration": 0.1,
            "params": {"C": 1.0},
            "error": "ValueError: bad C",
            "resource": None,
        }
    ]


def test_a_name_used_again_starts_afresh_unless_resumed():
    state = DashboardState()
    state.apply({"kind": "experiment", "experiment": "a", "meta": {}})
    state.apply({"kind": "ended", "experiment": "a", "trials": [_ended(0, 0.9)]})
    state.apply({"kind": "experiment", "experiment": "a", "meta": {"resume": True}})
    state.apply({"kind": "ended", "experiment": "a", "trials": [_ended(1, 0.5)]})
    assert state.experiments["a"].snapshot()["done"] == 2
    state.apply({"kind": "experiment", "experiment": "a", "meta": {"resume": False}})
    view = state.experiments["a"].snapshot()
    assert view["done"] == 0 and view["best"] is None and view["status"] == "running"
    state.apply({"kind": "experiment", "experiment": "b", "meta": {}})
    state.apply({"kind": "experiment", "experiment": "a", "meta": {"resume": True}})
    assert [e["name"] for e in state.snapshot()["experiments"]] == ["a", "b"]  # newest first


def test_state_ignores_malformed_events():
    state = DashboardState()
    for bad in (None, 3, "x", {"kind": "ended"}, {"experiment": 1}, [{"experiment": "a"}]):
        state.apply(bad)
    state.apply({"kind": "ended", "experiment": "a", "trials": [["not", "enough"]]})
    state.apply({"kind": "future-kind", "experiment": "a", "rungs": [1, 2]})
    assert state.snapshot()["experiments"][0]["done"] == 0


def test_state_follows_a_training_job_through_a_resume():
    state = DashboardState()
    meta = {"kind": "train", "sync": "allreduce", "total": 5, "n_workers": 2}
    state.apply({"kind": "experiment", "experiment": "job", "meta": meta})
    state.apply(
        {"kind": "ranks", "experiment": "job", "trials": [[0, "tcp://a", 0], [1, "tcp://b", 0]]}
    )
    epochs = [[e, 1.0 / e, 1000.0 * e, 0.1] for e in (1, 2, 3)]
    state.apply({"kind": "epoch", "experiment": "job", "trials": epochs})
    job = state.snapshot()["experiments"][0]["training"]
    assert job["ranks"] == [{"rank": 0, "worker": "tcp://a"}, {"rank": 1, "worker": "tcp://b"}]
    assert (job["epoch"], job["loss"], job["samples_per_s"]) == (3, 1 / 3, 3000.0)
    assert [tuple(p) for p in job["curve"]] == [(1, 1.0), (2, 0.5), (3, 1 / 3)]
    # An elastic resume from the checkpoint of epoch 2 on one worker: epoch 3 runs again.
    state.apply({"kind": "ranks", "experiment": "job", "trials": [[0, "tcp://b", 2]]})
    job = state.snapshot()["experiments"][0]["training"]
    assert job["ranks"] == [{"rank": 0, "worker": "tcp://b"}] and job["runs"] == 2
    assert job["epoch"] == 2 and [p[0] for p in job["curve"]] == [1, 2]
    state.apply({"kind": "epoch", "experiment": "job", "trials": [[3, 0.3, 900.0, 0.1]]})
    state.apply({"kind": "epoch", "experiment": "job", "trials": [[3, 0.3, 900.0, 0.1]]})  # again
    state.apply({"kind": "status", "experiment": "job", "status": "complete"})
    view = state.snapshot()["experiments"][0]
    assert view["status"] == "complete" and view["training"]["epoch"] == 3
    assert [p[0] for p in view["training"]["curve"]] == [1, 2, 3]
    # Malformed rows are skipped; the curve is bounded; a search has no training view.
    state.apply({"kind": "epoch", "experiment": "job", "trials": [["x"], None]})
    many = [[e, 0.1, 1.0, 0.1] for e in range(4, MAX_EPOCHS + 10)]
    state.apply({"kind": "epoch", "experiment": "job", "trials": many})
    assert len(state.experiments["job"].snapshot()["training"]["curve"]) == MAX_EPOCHS
    state.apply({"kind": "experiment", "experiment": "search", "meta": {}})
    assert state.experiments["search"].snapshot()["training"] is None
    # The name used again for a new job starts its panel afresh.
    state.apply({"kind": "experiment", "experiment": "job", "meta": meta})
    assert state.experiments["job"].snapshot()["training"] is None


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


def _outcome(number: int, state: str = "complete", error: str | None = None) -> Any:
    from dmlsearch._evaluate import TrialOutcome

    return TrialOutcome(
        number=np.int64(number),
        params={},
        seed=1,
        state=state,
        test_scores=[{"score": 1.0}],
        train_scores=None,
        fit_times=[np.float64(0.1)],
        score_times=[np.float64(0.1)],
        started=np.float64(1.0),
        finished=np.float64(2.0),
        worker="w",
        error=error,
    )


class _InlineLoop:
    """Runs each callback's coroutine to its end at once (a Client's loop runs in a thread)."""

    def add_callback(self, callback: Callable[[], Any]) -> None:
        asyncio.run(callback())


class _RPCClient:
    """What the reporter uses of a distributed.Client: its loop and the scheduler's RPC."""

    def __init__(self, loop: Any = None) -> None:
        self.sent: list[Any] = []
        self.loop = loop or _InlineLoop()
        self.scheduler = self

    def register_plugin(self, plugin: Any) -> None:
        pass

    async def dmlsearch_events(self, events: Any) -> Any:
        msgpack.packb(events)  # what the comm does: builtin types only
        self.sent.append(events)
        return OK


def test_reporter_batches_events_of_builtin_types():
    from dmlsearch._evaluate import TrialSpec

    client = _RPCClient()
    params = {"C": np.float64(0.5), "n": np.int64(3), "flag": np.bool_(True), "est": object()}
    reporter = DashboardReporter(client, interval=3600)
    assert reporter.register()
    reporter.experiment_started("e", {"total": np.int64(40)})
    assert len(client.sent) == 1  # the experiment shows at once
    reporter.trials_submitted([TrialSpec(np.int64(i), params, 1) for i in range(40)])
    for i in range(39):
        reporter.trial_finished(_outcome(i), np.float64(i / 100))
        reporter.tick()  # within the interval: nothing is sent
    reporter.trial_finished(_outcome(39, "failed", "ValueError: " + "x" * 1000), None)
    assert len(client.sent) == 1
    reporter.experiment_finished("complete")
    assert len(client.sent) == 2  # 40 trials and the end, in one message
    kinds = [e["kind"] for e in client.sent[1]]
    assert kinds == ["submitted", "ended", "status"]
    state = DashboardState()
    for msg in client.sent:
        state.apply(msg)
    view = state.snapshot()["experiments"][0]
    assert view["best"] == 0.38 and view["status"] == "complete" and view["done"] == 40
    shown = view["finished"][1]["params"]
    assert shown.pop("est").startswith("<object object")
    assert shown == {"C": 0.5, "n": 3, "flag": True}
    assert (
        view["finished"][0]["error"].startswith("ValueError")
        and len(view["finished"][0]["error"]) == 200
    )


def test_flush_never_waits_and_batches_arrive_in_order_one_call_at_a_time():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    release = threading.Event()
    calls: list[list[int]] = []
    in_flight = []

    class Loop:
        def add_callback(self, callback: Callable[[], Any]) -> None:
            asyncio.run_coroutine_threadsafe(callback(), loop)

    class Slow(_RPCClient):
        async def dmlsearch_events(self, events: Any) -> Any:
            in_flight.append(1)
            assert len(in_flight) == 1  # one call at a time
            await asyncio.to_thread(release.wait)
            calls.append([t[0] for e in events if e["kind"] == "ended" for t in e["trials"]])
            in_flight.pop()
            return OK

    client = Slow(Loop())
    reporter = DashboardReporter(client, interval=0)
    try:
        for i in range(20):
            reporter.trial_finished(_outcome(i), 0.5)
            reporter.tick()  # queues, while the first call waits on the scheduler
        assert calls == []
        release.set()
        reporter.experiment_finished("complete")  # waits for the last batch
        assert [n for call in calls for n in call] == list(range(20))
        assert len(calls) < 20  # batches queued behind a call went out together
        assert not in_flight
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_the_start_and_end_never_wait_on_the_clients_own_loop():
    """An asynchronous client's loop is the caller's: waiting there would block the send."""
    from dmlsearch.dashboard.reporter import DELIVERY_WAIT

    async def main() -> tuple[float, list[Any], list[Any]]:
        running = asyncio.get_running_loop()
        tasks = []

        class Loop:
            asyncio_loop = running

            def add_callback(self, callback: Callable[[], Any]) -> None:
                tasks.append(running.create_task(callback()))

        client = _RPCClient(Loop())
        reporter = DashboardReporter(client)
        start = time.monotonic()
        reporter.experiment_started("e", {})
        reporter.experiment_finished("complete")
        took = time.monotonic() - start
        before = list(client.sent)
        await asyncio.gather(*tasks)  # the loop is free again: the sender runs
        return took, before, client.sent

    took, before, sent = asyncio.run(main())
    assert took < DELIVERY_WAIT / 2 and before == []
    assert [e["kind"] for msg in sent for e in msg] == ["experiment", "status"]


def test_reporter_goes_quiet_when_sending_fails(caplog):
    class Broken(_RPCClient):
        async def dmlsearch_events(self, events: Any) -> Any:
            raise OSError("Client is closed")

    reporter = DashboardReporter(Broken())
    with caplog.at_level(logging.WARNING, logger="dmlsearch"):
        reporter.experiment_started("e", {})
        reporter.trial_finished(_outcome(0), 1.0)
        reporter.experiment_finished("complete")
    assert caplog.text.count("could not be sent") == 1


def test_the_scheduler_handler_is_total():
    from dmlsearch.dashboard.plugin import NO_PLUGIN, events_handler

    class Scheduler:
        def __init__(self) -> None:
            self.plugins: dict[str, Any] = {}

    scheduler = Scheduler()
    handler = events_handler(scheduler)
    assert handler(events=[{"kind": "status", "experiment": "e"}]) == NO_PLUGIN
    plugin = DashboardPlugin()
    scheduler.plugins = {"dmlsearch-dashboard": plugin}
    assert handler(events=[{"kind": "status", "experiment": "e", "status": "complete"}]) == OK
    assert plugin.state.experiments["e"].status == "complete"

    class Weird(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text either")

    def apply(events: Any) -> None:
        raise Weird

    plugin.state.apply = apply
    assert handler(events=[]) == {"error": "Weird"}
    plugin.state.apply = lambda events: {}["k"]
    assert handler(events=[]) == {"error": "KeyError: 'k'"}


# -- on a real cluster ---------------------------------------------------------------------


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def _wait_for(
    base: str,
    done: Callable[[dict[str, Any]], bool],
    timeout: float = 15,
    names: Iterable[str] = (),
) -> dict[str, dict[str, Any]]:
    """The page's experiments by name, once ``done`` holds (events arrive asynchronously);
    ``names``: asked for in full, as the page asks for the panels opened there."""
    query = urllib.parse.urlencode([("experiment", n) for n in names])
    deadline = time.monotonic() + timeout
    while True:
        shown = {
            e["name"]: e
            for e in json.loads(_get(f"{base}/dmlsearch/api/state?{query}"))["experiments"]
        }
        if done(shown) or time.monotonic() > deadline:
            return shown
        time.sleep(0.05)


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

    shown = _wait_for(
        base, lambda v: all(v.get(n, {}).get("status") == "complete" for n in names), names=names
    )
    assert quiet not in shown
    errors = [r["error"] for r in shown[names[1]]["finished"] if r["state"] == "failed"]
    assert errors and all("ValueError" in e for e in errors), shown[names[1]]["finished"]
    metrics = _get(base + "/metrics").decode()
    assert {f.name for f in text_string_to_metric_families(metrics)} >= {
        "dmlsearch_trials",
        "dmlsearch_best_score",
        "dmlsearch_trials_in_flight",
        "dmlsearch_experiment_status",
    }  # an exposition Prometheus parses
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
@pytest.mark.parametrize("scheduler", [None, "asha"])
def test_a_search_whose_every_trial_failed_ends_failed_on_the_page(
    cluster, client, data, scheduler
):
    # The page's status is the fit's, which raises after the trials ran (and would after
    # a failed refit or registration), not the trial loop's.
    X, y = data
    base = cluster.dashboard_link.rsplit("/", 1)[0]
    name = f"all-failed-{uuid.uuid4().hex[:6]}"
    extra: dict[str, Any] = {}
    if scheduler is not None:
        extra = {"scheduler": scheduler, "resource": "n_samples", "max_resource": 30}
    with pytest.raises(AllTrialsFailedError):
        SearchCV(
            FailingClassifier(fail=True),
            {"parameter": [1.0, 2.0, 3.0]},
            strategy="grid",
            cv=2,
            client=client,
            experiment_name=name,
            progress=False,
            **extra,
        ).fit(X, y)
    shown = _wait_for(base, lambda v: v.get(name, {}).get("status") != "running", names=[name])
    assert shown[name]["status"] == "failed"


@pytest.mark.cluster
def test_ensemble_fits_show_members_done_per_worker(cluster, client, data):
    from sklearn.tree import DecisionTreeClassifier

    from dmlsearch.ensemble import BaggingClassifier, StackingClassifier

    X, y = data
    base = cluster.dashboard_link.rsplit("/", 1)[0]
    # The cluster is shared: earlier tests' ensemble fits have panels of their own.
    before = set(_wait_for(base, lambda v: True))
    BaggingClassifier(DecisionTreeClassifier(), n_estimators=6, random_state=0, client=client).fit(
        X, y
    )
    StackingClassifier(
        [("lr", LogisticRegression()), ("tree", DecisionTreeClassifier())], cv=3, client=client
    ).fit(X, y)

    def ensembles(shown: dict[str, Any]) -> dict[str, Any]:
        return {
            n.split()[0]: v
            for n, v in shown.items()
            if n.split()[0].endswith(".fit") and n not in before
        }

    ended = _wait_for(
        base,
        lambda v: (
            {k: e["status"] for k, e in ensembles(v).items() if e["status"] == "complete"}.keys()
            >= {"BaggingClassifier.fit", "StackingClassifier.fit"}
        ),
    )
    # Finished: in full when asked for (the newest few are sent in full anyway).
    new = [n for n in ended if n.split()[0].endswith(".fit") and n not in before]
    shown = ensembles(_wait_for(base, lambda v: True, names=new))
    bagging, stacking = shown["BaggingClassifier.fit"], shown["StackingClassifier.fit"]
    assert bagging["meta"]["total"] == 6 and bagging["done"] == 6
    assert bagging["meta"]["strategy"] == "bagging"
    assert bagging["meta"]["estimator"] == "DecisionTreeClassifier"
    assert bagging["counts"] == {"complete": 6} and bagging["in_flight"] == 0
    assert sum(bagging["per_worker"].values()) == 6
    assert set(bagging["per_worker"]) <= set(client.scheduler_info()["workers"])
    assert all("member" in r["params"] for r in bagging["finished"])
    # 2 estimators x (3 folds + 1 refit on all rows)
    assert stacking["meta"]["total"] == 8 and stacking["done"] == 8
    assert stacking["meta"]["estimator"] == "lr, tree"


@pytest.mark.cluster
def test_a_training_job_shows_live_with_its_ranks_epoch_and_loss(cluster, client):
    import functools

    torch = pytest.importorskip("torch")
    from distributed import Event

    from dmlsearch.training import DataParallelTrainer

    base = cluster.dashboard_link.rsplit("/", 1)[0]
    gate, name = f"gate-{uuid.uuid4().hex[:8]}", f"job-{uuid.uuid4().hex[:6]}"
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    steps = (80 // 2) // 10  # per rank and epoch

    def gated_loss(out, target, _steps=[]):  # noqa: B006 - a per-process step count
        # Epoch 2 waits until the test has seen epoch 1 on the page: the job is running.
        # Only the ranks' steps count: the driver's try of the first batch (also with
        # autograd on) must leave the list empty, as it travels to the workers.
        from distributed import get_worker

        try:
            get_worker()
        except ValueError:
            return torch.nn.functional.cross_entropy(out, target)
        _steps.append(1)
        if len(_steps) == steps + 1:
            Event(gate).wait(timeout=60)
        return torch.nn.functional.cross_entropy(out, target)

    trainer = DataParallelTrainer(
        functools.partial(torch.nn.Linear, 4, 2),
        gated_loss,
        functools.partial(torch.optim.SGD, lr=0.1),
        epochs=3,
        batch_size=10,
        random_state=0,
        client=client,
        experiment_name=name,
    )
    client.register_plugin(DashboardPlugin())  # the page exists before the fit starts
    fitting = threading.Thread(target=trainer.fit, args=(X, y))
    fitting.start()
    try:
        # The ranks import torch and reserve their gang first: seconds on a loaded machine.
        live = _wait_for(
            base,
            lambda v: ((v.get(name) or {}).get("training") or {}).get("epoch", 0) >= 1,
            timeout=60,
        )[name]
    finally:
        Event(gate, client=client).set()
        fitting.join(timeout=120)
    assert live["status"] == "running" and live["training"]["epoch"] == 1
    assert live["meta"]["kind"] == "train" and live["meta"]["sync"] == "allreduce"
    assert live["meta"]["total"] == 3 and live["meta"]["estimator"] == "Linear"
    workers = set(client.scheduler_info()["workers"])
    ranks = live["training"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and {r["worker"] for r in ranks} == workers
    done = _wait_for(base, lambda v: v[name]["status"] == "complete", names=[name])[name]
    assert not fitting.is_alive() and done["status"] == "complete"
    job = done["training"]
    assert job["epoch"] == 3 and [p[0] for p in job["curve"]] == [1, 2, 3]
    assert job["loss"] == pytest.approx(trainer.history_[-1]["loss"])
    assert job["samples_per_s"] == pytest.approx(trainer.history_[-1]["samples_per_s"])


@pytest.mark.cluster
def test_a_multi_fidelity_search_shows_each_rung_step(cluster, client):
    from sklearn.datasets import load_digits
    from sklearn.linear_model import SGDClassifier

    X, y = load_digits(return_X_y=True)
    base = cluster.dashboard_link.rsplit("/", 1)[0]
    name = f"asha-{uuid.uuid4().hex[:6]}"
    search = SearchCV(
        SGDClassifier(random_state=0),
        {"alpha": Float(1e-5, 1e-1, log=True)},
        scheduler="asha",
        resource="partial_fit",
        max_resource=9,
        n_trials=6,
        cv=2,
        client=client,
        experiment_name=name,
        progress=False,
        random_state=0,
    ).fit(X, y)
    view = _wait_for(base, lambda v: v.get(name, {}).get("status") == "complete", names=[name])[
        name
    ]
    steps = len(search.cv_results_["trial"])
    assert view["done"] == steps and view["counts"] == {"complete": steps}
    assert view["meta"]["strategy"] == "random + asha"
    assert {
        (r["number"], r["params"]["rung"], r["params"]["resource"]) for r in view["finished"]
    } == {
        (int(t), int(i), int(n))
        for t, i, n in zip(
            search.cv_results_["trial"],
            search.cv_results_["iter"],
            search.cv_results_["n_resources"],
            strict=True,
        )
    }
    assert view["best"] == pytest.approx(max(search.cv_results_["mean_test_score"]))
    # The rung view: per resource, the trials that reached it and the promotions into it.
    r = search.cv_results_
    rungs = {row["resource"]: row for row in view["rungs"]}
    assert sorted(rungs) == search.n_resources_
    for resource, candidates in zip(search.n_resources_, search.n_candidates_, strict=True):
        row = rungs[resource]
        assert row["trials"] == row["complete"] == candidates
        assert row["running"] == row["failed"] == row["restored"] == 0
        promoted = int(np.sum(r["n_resources"][r["n_resources"] == resource] > min(rungs)))
        assert row["promoted"] == promoted
        best = r["mean_test_score"][r["n_resources"] == resource].max()
        assert row["best"] == pytest.approx(best)
    assert len(view["promotions"]) == sum(row["promoted"] for row in rungs.values())
    assert {(p["trial"], p["to"]) for p in view["promotions"]} == {
        (int(t), int(n))
        for t, n in zip(r["trial"], r["n_resources"], strict=True)
        if n > min(rungs)
    }
    # The metrics count each trial once, with its final state, and the steps apart.
    metrics = _get(base + "/metrics").decode()
    at_top = {int(t) for t, n in zip(r["trial"], r["n_resources"], strict=True) if n == max(rungs)}
    below = {int(t) for t in r["trial"]} - at_top
    expected = {"complete": len(at_top), **({"pruned": len(below)} if below else {})}
    assert _by_state(metrics, "dmlsearch_trials_total", name) == expected
    assert _by_state(metrics, "dmlsearch_rung_steps_total", name) == {"complete": steps}


def _by_state(metrics: str, sample: str, experiment: str) -> dict[str, float]:
    """The ``sample``'s values of ``experiment`` by their ``state`` label, parsed."""
    return {
        s.labels["state"]: s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
        if s.name == sample and s.labels.get("experiment") == experiment
    }


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


@pytest.mark.cluster
def test_dashboard_prefix_navigation_link_and_unregistering_the_plugin():
    from distributed import Client, LocalCluster

    from dmlsearch._evaluate import TrialSpec
    from dmlsearch.dashboard import PLUGIN_NAME

    with (
        LocalCluster(
            n_workers=0,
            processes=True,
            dashboard_address="127.0.0.1:0",
            scheduler_kwargs={"http_prefix": "/dask"},
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        base = f"http://127.0.0.1:{cluster.scheduler.http_server.port}/dask"
        reporter = DashboardReporter.attach(client, "first", {"total": 2})
        assert reporter is not None
        reporter.trials_submitted([TrialSpec(i, {"C": 1.0}, 1) for i in range(2)])
        reporter.trial_finished(_outcome(0), 0.5)
        reporter.flush()
        assert _wait_for(base, lambda v: v.get("first", {}).get("done") == 1)["first"]["done"] == 1
        assert "api/state" in _get(base + "/dmlsearch/").decode()  # under the prefix
        # The dashboard's navigation bar links to the page.
        assert '<a href="dmlsearch">' in _get(base + "/status").decode()
        assert 'dmlsearch_trials_total{experiment="first"' in _get(base + "/metrics").decode()

        client.unregister_scheduler_plugin(PLUGIN_NAME)
        for path in ("/dmlsearch", "/dmlsearch/api/state"):
            with pytest.raises(urllib.error.HTTPError) as info:
                _get(base + path)
            assert info.value.code == 404
        # (Other schedulers in this test process have series of their own.)
        ours = f'scheduler="{cluster.scheduler.address}"'
        assert ours not in _get(base + "/metrics").decode()

        # Registered again: a fresh state, one set of series (a duplicate fails a scrape).
        again = DashboardReporter.attach(client, "second", {})
        assert again is not None
        assert list(_wait_for(base, lambda v: "second" in v)) == ["second"]
        metrics = _get(base + "/metrics").decode()
        assert len(re.findall(rf"dmlsearch_trials_in_flight\{{[^}}]*{ours}", metrics)) == 1


# -- a scheduler in a process of its own, like a remote cluster's -------------------------

_BLOCK_DASHBOARD = "import sys; sys.modules['dmlsearch.dashboard'] = None; "


@pytest.fixture
def remote_scheduler(request, tmp_path: Path) -> Iterator[Any]:
    """A ``dask scheduler`` process and one ``dask worker`` process; yields a Client to them.

    With ``request.param == "no-dashboard"`` the scheduler cannot import
    ``dmlsearch.dashboard``, as where an older dmlsearch is installed on the scheduler.
    """
    from distributed import Client

    prelude = _BLOCK_DASHBOARD if getattr(request, "param", "") == "no-dashboard" else ""
    scheduler_file = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen(
        [
            sys.executable,
            "-c",
            prelude + "from distributed.cli.dask_scheduler import main; main()",
            "--host=127.0.0.1",
            "--port=0",
            "--dashboard-address=127.0.0.1:0",
            f"--scheduler-file={scheduler_file}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    processes = [scheduler]
    try:
        deadline = time.monotonic() + 30
        while not scheduler_file.exists():
            assert scheduler.poll() is None and time.monotonic() < deadline, "no scheduler"
            time.sleep(0.05)
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    f"--scheduler-file={scheduler_file}",
                    "--host=127.0.0.1",
                    "--nthreads=2",
                    "--no-nanny",
                    "--no-dashboard",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        with Client(scheduler_file=str(scheduler_file), set_as_default=False) as client:
            client.wait_for_workers(1, timeout=30)
            yield client
    finally:
        for process in reversed(processes):
            process.kill()  # throwaway processes: no need for a graceful close
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.mark.cluster
def test_a_scheduler_in_another_process_serves_the_page_and_metrics(remote_scheduler, data):
    X, y = data
    name = f"remote-{uuid.uuid4().hex[:6]}"
    search = SearchCV(
        LogisticRegression(),
        {"C": Float(1e-3, 1e2, log=True)},
        n_trials=5,
        cv=2,
        client=remote_scheduler,
        experiment_name=name,
        progress=False,
        random_state=0,
    ).fit(X, y)
    base = remote_scheduler.dashboard_link.rsplit("/", 1)[0]
    shown = _wait_for(base, lambda v: v.get(name, {}).get("status") == "complete")
    assert shown[name]["counts"] == {"complete": 5}
    assert shown[name]["best"] == pytest.approx(search.best_score_)
    metrics = _get(base + "/metrics").decode()
    assert re.search(rf'dmlsearch_trials_total\{{experiment="{name}",[^}}]*\}} 5\.0', metrics)


@pytest.mark.cluster
@pytest.mark.parametrize("remote_scheduler", ["no-dashboard"], indirect=True)
def test_a_scheduler_without_the_dashboard_only_costs_the_page(remote_scheduler, data, caplog):
    X, y = data
    with caplog.at_level(logging.WARNING, logger="dmlsearch"):
        search = SearchCV(
            LogisticRegression(),
            {"C": [0.1, 1.0, 10.0]},
            cv=2,
            client=remote_scheduler,
            progress=False,
        ).fit(X, y)
    assert len(search.trials_) == 3
    assert "dashboard page is off" in caplog.text
    base = remote_scheduler.dashboard_link.rsplit("/", 1)[0]
    with pytest.raises(urllib.error.HTTPError) as info:
        _get(base + "/dmlsearch/api/state")
    assert info.value.code == 404


# -- the dashboard can never cut the client's connection --------------------------------------


@pytest.fixture(scope="module")
def breakable() -> Iterator[Any]:
    """A client on a private cluster whose scheduler these tests break on purpose."""
    from distributed import Client

    from dmlsearch.testing import local_cluster

    cl = local_cluster(2)
    with Client(cl, set_as_default=False) as c:
        yield c
    cl.close()


def _forget_dashboard(dask_scheduler: Any, keep_plugin: bool = False) -> None:
    """The scheduler as a restart without the plugin leaves it: no plugin, no handler."""
    from dmlsearch.dashboard import PLUGIN_NAME

    if not keep_plugin:
        dask_scheduler.plugins.pop(PLUGIN_NAME, None)
    for table in (dask_scheduler.handlers, dask_scheduler.stream_handlers):
        for op in [op for op in table if str(op).startswith("dmlsearch")]:
            del table[op]


def _break_apply(dask_scheduler: Any) -> None:
    """The plugin's state raises on every batch of events."""
    from dmlsearch.dashboard.plugin import live_plugin

    def apply(events: Any) -> None:
        raise RuntimeError("the dashboard broke")

    plugin = live_plugin(dask_scheduler)
    assert plugin is not None
    plugin.state.apply = apply


def _search_breaking_after_first_trial(
    client: Any, monkeypatch: pytest.MonkeyPatch, breaker: Callable[[], None], name: str
) -> SearchCV:
    """Run an 8-trial search; ``breaker`` runs (and events are sent) after its first trial.

    Then check that the client kept its connection all along.
    """
    import operator

    from dmlsearch.testing import SleepyClassifier

    client.run_on_scheduler(_forget_dashboard)  # every test starts from a bare scheduler
    held = client.submit(operator.add, 1, 1, pure=False)  # lost if the connection is cut
    original = DashboardReporter.trial_finished
    calls = []

    def trial_finished(self: DashboardReporter, outcome: Any, value: float | None) -> None:
        original(self, outcome, value)
        calls.append(outcome.number)
        if len(calls) == 1:
            breaker()
            self.flush()  # while trials are in flight

    monkeypatch.setattr(DashboardReporter, "trial_finished", trial_finished)
    X, y = np.random.default_rng(0).normal(size=(40, 3)), np.arange(40) % 2
    search = SearchCV(
        SleepyClassifier(seconds=0.05),
        {"parameter": [float(i) for i in range(8)]},
        strategy="grid",
        cv=2,
        client=client,
        experiment_name=name,
        progress=False,
        max_concurrent_trials=2,
    ).fit(X, y)
    assert len(calls) == 8
    _assert_connected(client, held)
    return search


def _assert_connected(client: Any, held: Any) -> None:
    """The client kept its connection: ``held`` (a future from before the search) is still
    there, the client is running and new work goes through."""
    import operator

    assert held.status == "finished" and held.result(timeout=30) == 2
    assert client.status == "running"
    assert client.submit(operator.add, 1, 2, pure=False).result(timeout=30) == 3


def _dashboard_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "dmlsearch" and r.levelno >= logging.WARNING and "dashboard" in r.getMessage()
    ]


@pytest.mark.cluster
def test_a_handler_that_raises_never_fails_the_search(breakable, monkeypatch, caplog):
    name = f"raising-{uuid.uuid4().hex[:6]}"
    with caplog.at_level(logging.WARNING, logger="dmlsearch"):
        search = _search_breaking_after_first_trial(
            breakable, monkeypatch, lambda: breakable.run_on_scheduler(_break_apply), name
        )
    assert sorted(t.number for t in search.trials_) == list(range(8))
    assert all(t.state == "complete" for t in search.trials_)
    warnings = _dashboard_warnings(caplog)
    assert len(warnings) == 1 and "the dashboard broke" in warnings[0], warnings


@pytest.mark.cluster
def test_a_scheduler_that_lost_the_plugin_mid_search_gets_it_back(breakable, monkeypatch, caplog):
    name = f"restarted-{uuid.uuid4().hex[:6]}"
    with caplog.at_level(logging.WARNING, logger="dmlsearch"):
        search = _search_breaking_after_first_trial(
            breakable, monkeypatch, lambda: breakable.run_on_scheduler(_forget_dashboard), name
        )
    assert sorted(t.number for t in search.trials_) == list(range(8))
    warnings = _dashboard_warnings(caplog)
    assert len(warnings) == 1 and "registered it again" in warnings[0], warnings
    # The page came back with the rest of the search (the panel's meta resent).
    base = breakable.dashboard_link.rsplit("/", 1)[0]
    shown = _wait_for(base, lambda v: v.get(name, {}).get("status") == "complete")[name]
    assert shown["status"] == "complete" and shown["meta"]["total"] == 8
    assert 1 <= shown["done"] <= 8


@pytest.mark.cluster
def test_a_scheduler_without_the_handler_mid_search_only_costs_the_page(
    breakable, monkeypatch, caplog
):
    name = f"no-handler-{uuid.uuid4().hex[:6]}"

    def lose_handler() -> None:
        # The plugin stays registered, so registering it again cannot bring the handler back.
        breakable.run_on_scheduler(_forget_dashboard, keep_plugin=True)

    with caplog.at_level(logging.WARNING, logger="dmlsearch"):
        search = _search_breaking_after_first_trial(breakable, monkeypatch, lose_handler, name)
    assert sorted(t.number for t in search.trials_) == list(range(8))
    warnings = _dashboard_warnings(caplog)
    assert len(warnings) == 1 and "stopping" in warnings[0], warnings
