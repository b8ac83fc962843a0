"""The dashboard state's bounds at scale and how a driver that left ends its experiments
(no cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from dmlsearch.dashboard import PLUGIN_NAME, DashboardPlugin, DashboardState
from dmlsearch.dashboard.state import DISCONNECTED, MAX_HISTORY


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
