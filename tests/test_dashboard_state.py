"""The dashboard state's bounds and counts at scale: what a poll costs, what the metrics mean,
how a driver that left ends its experiments (no cluster)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dmlsearch.dashboard import PLUGIN_NAME, DashboardPlugin, DashboardState
from dmlsearch.dashboard.metrics import DashboardCollector
from dmlsearch.dashboard.state import (
    DETAIL_NEWEST,
    DISCONNECTED,
    MAX_EXPERIMENTS,
    MAX_HISTORY,
    MAX_REQUESTED,
)


def _search(state: DashboardState, name: str, trials: int, *, status: str | None = "complete"):
    """An experiment of ``trials`` trials, each better than the last; ended with ``status``."""
    state.apply({"kind": "experiment", "experiment": name, "meta": {"total": trials}})
    for start in range(0, trials, 100):
        numbers = range(start, min(start + 100, trials))
        rows = [[i, {"C": 0.1 * i, "penalty": "l2"}] for i in numbers]
        state.apply({"kind": "submitted", "experiment": name, "trials": rows})
        ended = [[i, "complete", i / trials, f"tcp://10.0.0.{i % 8}:1", 0.1, None] for i in numbers]
        state.apply({"kind": "ended", "experiment": name, "trials": ended})
    if status is not None:
        state.apply({"kind": "status", "experiment": name, "status": status})


def _steps(name: str, kind: str, rows: list[list[Any]]) -> dict[str, Any]:
    return {"kind": kind, "experiment": name, "trials": rows}


class _Scheduler:
    """What the collector and the plugin read of a scheduler."""

    def __init__(self, plugin: DashboardPlugin) -> None:
        self.address = "tcp://127.0.0.1:1"
        self.plugins = {PLUGIN_NAME: plugin}
        self.clients: dict[str, Any] = {}


# -- the best-so-far line ---------------------------------------------------------------------


def test_best_so_far_keeps_the_latest_improvement_past_its_bound():
    state = DashboardState()
    _search(state, "a", 3 * MAX_HISTORY + 7)
    view = state.experiments["a"]
    values = [v for _, v in view.history]
    assert len(values) <= MAX_HISTORY
    assert values[-1] == view.best == pytest.approx((3 * MAX_HISTORY + 6) / (3 * MAX_HISTORY + 7))
    assert values[0] == 0.0 and values == sorted(values)  # thinned, still a step line
    times = [t for t, _ in view.history]
    assert times == sorted(times)


# -- a driver that left -----------------------------------------------------------------------


def test_a_client_that_left_ends_its_running_experiments_interrupted():
    plugin = DashboardPlugin()
    scheduler = _Scheduler(plugin)
    plugin.scheduler = scheduler
    scheduler.clients = {"Client-a": object(), "Client-b": object()}
    state = plugin.state
    for name, client in (("a1", "Client-a"), ("a2", "Client-a"), ("b", "Client-b")):
        meta = {"kind": "experiment", "experiment": name, "meta": {}, "client": client}
        plugin.apply(
            [
                meta,
                _steps(name, "submitted", [[0, {}], [1, {}]]),
                _steps(name, "rung_submitted", [[0, 0, 1, 0, 0]]),
            ]
        )
    plugin.apply({"kind": "status", "experiment": "a2", "status": "complete"})
    del scheduler.clients["Client-a"]
    plugin.remove_client(scheduler, "Client-a")
    a1, a2, b = (state.experiments[n].snapshot() for n in ("a1", "a2", "b"))
    assert a1["status"] == "interrupted" and a1["reason"] == DISCONNECTED
    assert a1["in_flight"] == 0 and a1["running"] == [] and a1["rungs"][0]["running"] == 0
    assert a2["status"] == "complete" and a2["reason"] is None  # it had ended
    assert b["status"] == "running" and b["in_flight"] == 2  # another driver's
    # Events that arrive after their client left (sent just before it died) end it again.
    plugin.apply({"kind": "experiment", "experiment": "late", "meta": {}, "client": "Client-a"})
    assert state.experiments["late"].status == "interrupted"
    # An older driver sends no client: its experiment stays as it reported.
    plugin.apply({"kind": "experiment", "experiment": "old", "meta": {}})
    assert state.experiments["old"].status == "running"


def test_the_reporter_names_its_client_with_the_experiment():
    from dmlsearch.dashboard import DashboardReporter
    from dmlsearch.dashboard.plugin import OK

    class Loop:
        def add_callback(self, callback: Any) -> None:
            import asyncio

            asyncio.run(callback())

    class Client:
        id = "Client-1234"
        loop = Loop()

        def __init__(self) -> None:
            self.scheduler = self
            self.sent: list[Any] = []

        async def dmlsearch_events(self, events: Any) -> Any:
            self.sent.append(events)
            return OK

    client = Client()
    DashboardReporter(client).experiment_started("e", {})
    assert client.sent == [
        [{"kind": "experiment", "experiment": "e", "meta": {}, "client": "Client-1234"}]
    ]


# -- what the metrics count -------------------------------------------------------------------


def _metrics(plugin: DashboardPlugin) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The collector's exposition, parsed as Prometheus does: (sample, labels) -> value."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    scheduler = _Scheduler(plugin)
    plugin.scheduler = scheduler
    registry = CollectorRegistry()
    registry.register(DashboardCollector(scheduler))
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "scheduler"))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _counts(metrics: dict[Any, float], sample: str, experiment: str) -> dict[str, float]:
    return {
        dict(labels)["state"]: value
        for (name, labels), value in metrics.items()
        if name == sample and dict(labels)["experiment"] == experiment
    }


def test_trials_total_counts_each_trial_of_a_multi_fidelity_search_once_when_it_ends():
    # As a SearchCV(scheduler="asha") reports: each rung step a row with its resource.
    plugin = DashboardPlugin()
    state = plugin.state
    name = "asha"

    def step(trial: int, rung: int, resource: int, start: int, end: str, value: float) -> None:
        state.apply(
            [
                _steps(name, "rung_submitted", [[trial, rung, resource, start, 0]]),
                _steps(name, "submitted", [[trial, {"x": trial, "resource": resource}]]),
                _steps(name, "ended", [[trial, end, value, "w", 0.1, None, None, resource]]),
                _steps(name, "rung_ended", [[trial, resource, end, value, False]]),
            ]
        )

    state.apply({"kind": "experiment", "experiment": name, "meta": {}})
    for trial in range(4):  # trial 2 fails at the first rung
        step(trial, 0, 1, 0, "failed" if trial == 2 else "complete", 0.1 * trial)
    step(0, 1, 3, 1, "complete", 0.5)  # 0 and 1 promoted; 3 is not
    step(1, 1, 3, 1, "complete", 0.4)
    step(0, 2, 9, 3, "complete", 0.9)  # 0 reaches the full budget; 1 is not promoted
    running = _metrics(plugin)
    assert _counts(running, "dmlsearch_trials_total", name) == {"failed": 1}
    assert _counts(running, "dmlsearch_rung_steps_total", name) == {"complete": 6, "failed": 1}
    state.apply({"kind": "status", "experiment": name, "status": "complete"})
    ended = _metrics(plugin)
    # Four trials, each once: the page's rows stay one per step.
    assert _counts(ended, "dmlsearch_trials_total", name) == {
        "complete": 1,
        "pruned": 2,
        "failed": 1,
    }
    assert _counts(ended, "dmlsearch_rung_steps_total", name) == {"complete": 6, "failed": 1}
    assert state.experiments[name].snapshot()["counts"] == {"complete": 6, "failed": 1}


def test_trials_total_counts_trials_as_ended_without_a_step_metric():
    # dmlsearch.optimize with a rung pruner reports trials (pruned among them); rung events
    # only feed the rung view.
    plugin = DashboardPlugin()
    rows = [[0, "complete", 1.0, "w", 0.1, None], [1, "pruned", 0.2, "w", 0.1, None]]
    plugin.state.apply(
        [
            {"kind": "experiment", "experiment": "opt", "meta": {"kind": "optimize"}},
            _steps("opt", "submitted", [[0, {}], [1, {}]]),
            _steps("opt", "rung_submitted", [[0, 0, 1, 0, 0], [1, 0, 1, 0, 0]]),
            _steps("opt", "rung_ended", [[0, 1, "complete", 0.5, False]]),
            _steps("opt", "ended", rows),
        ]
    )
    metrics = _metrics(plugin)
    assert _counts(metrics, "dmlsearch_trials_total", "opt") == {"complete": 1, "pruned": 1}
    assert _counts(metrics, "dmlsearch_rung_steps_total", "opt") == {}


def test_experiment_status_is_a_state_set_that_clears():
    plugin = DashboardPlugin()
    plugin.state.apply({"kind": "experiment", "experiment": "e", "meta": {}})

    def status() -> dict[str, float]:
        return {
            dict(labels)["status"]: value
            for (name, labels), value in _metrics(plugin).items()
            if name == "dmlsearch_experiment_status"
        }

    assert status() == {"running": 1.0, "complete": 0.0, "failed": 0.0, "interrupted": 0.0}
    plugin.state.apply({"kind": "status", "experiment": "e", "status": "complete"})
    assert status() == {"running": 0.0, "complete": 1.0, "failed": 0.0, "interrupted": 0.0}


# -- a poll's cost -----------------------------------------------------------------------------


def test_a_finished_experiments_summary_does_not_grow_with_its_trials():
    state = DashboardState()
    _search(state, "small", 10)
    _search(state, "large", 2000)
    small, large = (
        json.loads(state.experiments[n].to_json(detail=False)) for n in ("small", "large")
    )
    assert small.keys() == large.keys() and large["detail"] is False
    assert large["done"] == 2000 and large["best"] == pytest.approx(1999 / 2000)
    assert abs(len(json.dumps(large)) - len(json.dumps(small))) < 40
    assert "finished" not in large and "history" not in large
    full = json.loads(state.experiments["large"].to_json())
    assert full["detail"] is True and len(full["finished"]) == 200


def test_a_poll_gets_the_running_the_newest_finished_and_the_requested_in_full():
    state = DashboardState()
    for i in range(MAX_EXPERIMENTS - 2):
        _search(state, f"done-{i:02d}", 300)
    _search(state, "live-a", 300, status=None)
    _search(state, "live-b", 300, status=None)
    requested = [f"done-{i:02d}" for i in range(MAX_REQUESTED + 5)]
    for asked in ([], requested):
        shown = json.loads(state.to_json(asked))["experiments"]
        assert len(shown) == MAX_EXPERIMENTS
        full = [e["name"] for e in shown if e["detail"]]
        newest = [
            f"done-{i:02d}"
            for i in range(MAX_EXPERIMENTS - 3, MAX_EXPERIMENTS - 3 - DETAIL_NEWEST, -1)
        ]
        assert full[:2] == ["live-b", "live-a"] and full[2 : 2 + DETAIL_NEWEST] == newest
        assert sorted(full[2 + DETAIL_NEWEST :]) == sorted(asked[:MAX_REQUESTED])
    # The bound: however many finished experiments are kept, their summaries are small.
    summaries = [e for e in json.loads(state.to_json())["experiments"] if not e["detail"]]
    assert max(len(json.dumps(e)) for e in summaries) < 400
    # The Python snapshot keeps every experiment in full unless asked as a poll.
    assert all(e["detail"] for e in state.snapshot()["experiments"])
    assert state.snapshot([])["experiments"][0]["detail"]  # live-b: running


def test_an_unchanged_experiment_is_not_serialized_again(monkeypatch):
    state = DashboardState()
    _search(state, "a", 500)
    _search(state, "b", 5, status=None)
    views = state.experiments
    built: list[str] = []
    for name, view in views.items():
        snapshot = view.snapshot

        def counted(detail: bool = True, _name: str = name, _snapshot: Any = snapshot) -> Any:
            built.append(_name)
            return _snapshot(detail)

        monkeypatch.setattr(view, "snapshot", counted)
    first = state.to_json()
    assert sorted(built) == ["a", "b"]
    assert json.loads(state.to_json())["experiments"] == json.loads(first)["experiments"]
    assert views["a"].to_json() is views["a"].to_json()
    assert sorted(built) == ["a", "b"]  # polls without events build nothing again
    state.apply(
        {"kind": "ended", "experiment": "b", "trials": [[0, "complete", 0.5, "w", 0.1, None]]}
    )
    state.to_json()
    assert sorted(built) == ["a", "b", "b"]  # only the experiment that changed
