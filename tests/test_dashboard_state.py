"""The dashboard state's bounds at scale (no cluster)."""

from __future__ import annotations

import pytest

from dmlsearch.dashboard import DashboardState
from dmlsearch.dashboard.state import MAX_HISTORY


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
