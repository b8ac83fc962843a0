"""The driver side: batches a search's events and publishes them to the scheduler plugin."""

from __future__ import annotations

import logging
import numbers
import time
from typing import Any

import numpy as np

from .._evaluate import TrialOutcome, TrialSpec
from ..runner.dask import RunObserver
from .plugin import TOPIC, DashboardPlugin

__all__ = ["DashboardReporter", "page_link"]

logger = logging.getLogger("dmlsearch")


def page_link(dashboard_link: str | None) -> str | None:
    """The dmlsearch page beside a Dask dashboard link (``.../status`` -> ``.../dmlsearch``)."""
    if not dashboard_link:
        return None
    base = dashboard_link.rstrip("/")
    if base.endswith("/status"):
        base = base[: -len("/status")]
    return base + "/dmlsearch"


def _plain(value: Any) -> Any:
    """Something msgpack and JSON can carry; other objects by a short repr.

    Distributed checks event types exactly, so numpy scalars become Python numbers.
    """
    if value is None or isinstance(value, str):
        return str(value) if value is not None else None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


def _params(params: dict[str, Any]) -> dict[str, Any]:
    return {str(k): _plain(v) for k, v in params.items()}


class DashboardReporter(RunObserver):
    """Publishes one experiment's events, batched, at most every ``interval`` seconds.

    Publishing is best effort: if the scheduler cannot take the events (no plugin there,
    a connection problem), the reporter logs one warning and goes quiet; the search goes on.
    """

    def __init__(self, client: Any, experiment: str, interval: float = 0.5) -> None:
        self.client = client
        self.experiment = experiment
        self.interval = interval
        self._events: list[dict[str, Any]] = []
        self._submitted: list[list[Any]] = []
        self._ended: list[list[Any]] = []
        self._last = 0.0
        self._broken = False

    @classmethod
    def attach(
        cls, client: Any, experiment: str, meta: dict[str, Any]
    ) -> DashboardReporter | None:
        """Register the plugin (once per cluster) and start reporting; None if it cannot."""
        try:
            client.register_plugin(DashboardPlugin())
        except Exception as exc:  # an old or foreign scheduler must never fail a search
            logger.warning(
                "dmlsearch: the dashboard page is off, the scheduler did not take its plugin "
                "(is dmlsearch installed where the scheduler runs?): %s",
                exc,
            )
            return None
        reporter = cls(client, experiment)
        reporter._events.append(
            {"kind": "experiment", "experiment": str(experiment), "meta": _params(meta)}
        )
        reporter.flush()
        return reporter

    def trials_submitted(self, specs: list[TrialSpec]) -> None:
        self._submitted.extend([int(s.number), _params(s.params)] for s in specs)

    def trial_ended(self, outcome: TrialOutcome, value: float | None) -> None:
        self._ended.append(
            [
                int(outcome.number),
                str(outcome.state),
                _plain(value),
                _plain(outcome.worker),
                _plain(outcome.duration),
                None,
            ]
        )

    def tick(self) -> None:
        if time.monotonic() - self._last >= self.interval:
            self.flush()

    def close(self, status: str) -> None:
        self.flush()
        self._events.append({"kind": "status", "experiment": self.experiment, "status": status})
        self.flush()

    def flush(self) -> None:
        self._last = time.monotonic()
        if self._submitted:
            self._events.append(
                {"kind": "submitted", "experiment": self.experiment, "trials": self._submitted}
            )
        if self._ended:
            self._events.append(
                {"kind": "ended", "experiment": self.experiment, "trials": self._ended}
            )
        events, self._events, self._submitted, self._ended = self._events, [], [], []
        if not events or self._broken:
            return
        try:
            self.client.log_event(TOPIC, events)
        except Exception as exc:
            self._broken = True
            logger.warning("dmlsearch: dashboard events could not be sent, stopping: %s", exc)
