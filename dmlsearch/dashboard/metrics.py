"""Prometheus metrics of the dmlsearch plugin, one collector per scheduler plugin.

Distributed serves ``/metrics`` from prometheus_client's process-wide registry; each plugin
registers its own collector there on start and removes it on close, so nothing module-level
outlives a scheduler, and a ``scheduler`` label keeps two schedulers in one process apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .state import DashboardState

__all__ = ["DashboardCollector"]


class DashboardCollector:
    """Trials by state, best value and trials in flight, per experiment."""

    def __init__(self, state: DashboardState, scheduler: Callable[[], str]) -> None:
        self.state = state
        self.scheduler = scheduler

    def describe(self) -> list[Any]:
        # Empty: prometheus_client then skips its duplicate-name check, which would refuse
        # a second scheduler (and its collector) in the same process.
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = ["scheduler", "experiment"]
        trials = CounterMetricFamily(
            "dmlsearch_trials", "Trials ended, by experiment and state", labels=[*labels, "state"]
        )
        best = GaugeMetricFamily(
            "dmlsearch_best_score", "Best objective so far (greater is better)", labels=labels
        )
        in_flight = GaugeMetricFamily(
            "dmlsearch_trials_in_flight", "Trials submitted and not yet ended", labels=labels
        )
        address = self.scheduler()
        for name, view in list(self.state.experiments.items()):
            for state, count in view.states.items():
                trials.add_metric([address, name, state], count)
            if view.best is not None:
                best.add_metric([address, name], view.best)
            in_flight.add_metric([address, name], len(view.running))
        yield trials
        yield best
        yield in_flight
