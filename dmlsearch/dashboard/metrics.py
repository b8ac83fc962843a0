"""Prometheus metrics of the dmlsearch plugin, one collector per scheduler.

Distributed serves ``/metrics`` from prometheus_client's process-wide registry; the plugin
registers a collector there when it first starts on a scheduler and removes it when the
scheduler closes, so nothing module-level outlives a scheduler, and a ``scheduler`` label
keeps two schedulers in one process apart.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

__all__ = ["STATUSES", "DashboardCollector"]

#: An experiment's statuses, each a series of ``dmlsearch_experiment_status`` (the current
#: one 1, the others 0, so an alert on ``status="running"`` clears when it ends).
STATUSES = ("running", "complete", "failed", "interrupted")


class DashboardCollector:
    """Trials by state, rung steps by state, best value, trials in flight and status, per
    experiment.

    It reads the scheduler's dashboard plugin of the moment: a plugin unregistered and
    registered again must leave neither stale nor duplicate series (Prometheus refuses a
    whole scrape with a duplicate). The scheduler is held weakly: the process-wide registry
    must not keep a closed scheduler alive.
    """

    def __init__(self, scheduler: Any) -> None:
        self._scheduler = weakref.ref(scheduler)

    def describe(self) -> list[Any]:
        # Empty: prometheus_client then skips its duplicate-name check, which would refuse
        # a second scheduler (and its collector) in the same process.
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from .plugin import live_plugin

        scheduler = self._scheduler()
        if scheduler is None:
            return
        plugin = live_plugin(scheduler)
        if plugin is None:
            return
        labels = ["scheduler", "experiment"]
        trials = CounterMetricFamily(
            "dmlsearch_trials",
            "Trials ended, each once with its final state (a multi-fidelity search's trial: "
            "when a step fails, or when the search ends without promoting it)",
            labels=[*labels, "state"],
        )
        steps = CounterMetricFamily(
            "dmlsearch_rung_steps",
            "Rung steps of a multi-fidelity SearchCV ended, by state",
            labels=[*labels, "state"],
        )
        best = GaugeMetricFamily(
            "dmlsearch_best_score",
            "Best objective so far (the least for direction=minimize)",
            labels=labels,
        )
        in_flight = GaugeMetricFamily(
            "dmlsearch_trials_in_flight", "Trials submitted and not yet ended", labels=labels
        )
        status = GaugeMetricFamily(
            "dmlsearch_experiment_status",
            "1 for the experiment's status, 0 for the others",
            labels=[*labels, "status"],
        )
        address = str(scheduler.address)
        for name, view in list(plugin.state.experiments.items()):
            for state, count in view.trial_states.items():
                trials.add_metric([address, name, state], count)
            if view.stepped:
                for state, count in view.states.items():
                    steps.add_metric([address, name, state], count)
            if view.best is not None:
                best.add_metric([address, name], view.best)
            in_flight.add_metric([address, name], len(view.running))
            for value in dict.fromkeys([*STATUSES, view.status]):
                status.add_metric([address, name, value], float(value == view.status))
        yield trials
        yield steps
        yield best
        yield in_flight
        yield status
