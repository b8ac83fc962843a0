"""The driver side: batches a search's events and sends them to the scheduler plugin.

Events travel over the client's batched stream to the scheduler (one message per flush,
ordered, no round trip): sending never waits on the network, so it cannot slow a search.
"""

from __future__ import annotations

import logging
import numbers
import time
from typing import Any

import msgpack  # type: ignore[import-untyped]
import numpy as np

from .._evaluate import TrialOutcome, TrialSpec
from ..runner.dask import RunObserver
from .plugin import STREAM_OP, TOPIC, DashboardPlugin

__all__ = ["DashboardReporter", "page_link"]

logger = logging.getLogger("dmlsearch")

#: Longest text sent for a parameter value or an error (the page shows a summary only).
MAX_TEXT = 200


def page_link(dashboard_link: str | None) -> str | None:
    """The dmlsearch page beside a Dask dashboard link (``.../status`` -> ``.../dmlsearch``)."""
    if not dashboard_link:
        return None
    base = dashboard_link.rstrip("/")
    if base.endswith("/status"):
        base = base[: -len("/status")]
    return base + "/dmlsearch"


def _text(value: str, limit: int = MAX_TEXT) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _plain(value: Any) -> Any:
    """Something msgpack and JSON can carry; other objects by a short repr.

    Only exact builtin types go on the wire (msgpack refuses numpy scalars), so numpy
    scalars become Python numbers.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return _text(str(value))
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return _text(repr(value), 80)


def _params(params: dict[str, Any]) -> dict[str, Any]:
    return {str(k): _plain(v) for k, v in params.items()}


def _error_summary(error: str) -> str:
    """The exception line of a traceback (the registry keeps the whole of it)."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback"):
        return _text(lines[-1].strip())
    return _text(error.strip())


class DashboardReporter(RunObserver):
    """Sends one experiment's events to the scheduler, batched, at most every ``interval`` s.

    The runner calls :meth:`trials_submitted`, :meth:`trial_finished` and :meth:`tick`; the
    search calls :meth:`experiment_started` and :meth:`experiment_finished`. Events wait in
    lists until :meth:`flush` (called by :meth:`tick` at most every ``interval`` seconds),
    which sends them all as one message.

    Sending is best effort: if the scheduler cannot take the events, the reporter logs one
    warning and goes quiet; the search goes on.
    """

    def __init__(self, client: Any, interval: float = 0.5) -> None:
        self.client = client
        self.interval = interval
        self.experiment = ""
        self._events: list[dict[str, Any]] = []
        self._submitted: list[list[Any]] = []
        self._finished: list[list[Any]] = []
        self._last = 0.0
        self._broken = False

    @classmethod
    def attach(cls, client: Any, experiment: str, meta: dict[str, Any]) -> DashboardReporter | None:
        """Register the plugin (once per cluster) and start the experiment; None if it cannot."""
        reporter = cls(client)
        if not reporter.register():
            return None
        reporter.experiment_started(experiment, meta)
        return reporter

    def register(self) -> bool:
        """Register :class:`DashboardPlugin` on the scheduler (idempotent); False if refused."""
        try:
            self.client.register_plugin(DashboardPlugin())
        except Exception as exc:  # an old or foreign scheduler must never fail a search
            logger.warning(
                "dmlsearch: the dashboard page is off, the scheduler did not take its plugin "
                "(is dmlsearch installed where the scheduler runs?): %s",
                exc,
            )
            self._broken = True
            return False
        return True

    # -- events --------------------------------------------------------------------------
    def experiment_started(self, name: str, meta: dict[str, Any]) -> None:
        """A new experiment: every later event carries its ``name``. Sent at once."""
        self.flush()
        self.experiment = str(name)
        self._events.append(
            {"kind": "experiment", "experiment": self.experiment, "meta": _params(meta)}
        )
        self.flush()

    def trials_submitted(self, specs: list[TrialSpec]) -> None:
        self._submitted.extend([int(s.number), _params(s.params)] for s in specs)

    def trial_finished(self, outcome: TrialOutcome, value: float | None) -> None:
        # [number, state, value, worker, duration, params (None: as submitted), error]
        self._finished.append(
            [
                int(outcome.number),
                str(outcome.state),
                _plain(value),
                _plain(outcome.worker),
                _plain(outcome.duration),
                None,
                None if outcome.error is None else _error_summary(str(outcome.error)),
            ]
        )

    def tick(self) -> None:
        if time.monotonic() - self._last >= self.interval:
            self.flush()

    def experiment_finished(self, status: str) -> None:
        """The experiment ended (``complete``, ``failed``, ``interrupted``). Sent at once."""
        self._events.append(
            {"kind": "status", "experiment": self.experiment, "status": str(status)}
        )
        self.flush()

    def flush(self) -> None:
        """Send what has gathered as one message, without waiting for the scheduler."""
        self._last = time.monotonic()
        # Trials go first (an experiment's status comes after its last trials).
        batch: list[dict[str, Any]] = []
        if self._submitted:
            batch.append(
                {"kind": "submitted", "experiment": self.experiment, "trials": self._submitted}
            )
        if self._finished:
            batch.append({"kind": "ended", "experiment": self.experiment, "trials": self._finished})
        status = [e for e in self._events if e["kind"] == "status"]
        events = [e for e in self._events if e["kind"] != "status"] + batch + status
        self._events, self._submitted, self._finished = [], [], []
        if not events or self._broken:
            return
        try:
            # Checked here: an unserializable message would break the client's stream.
            msgpack.packb(events, use_bin_type=True)
            send = getattr(self.client, "_send_to_scheduler", None)
            if callable(send):
                send({"op": STREAM_OP, "events": events})
            else:  # not a distributed.Client we know: the public API, one round trip
                self.client.log_event(TOPIC, events)
        except Exception as exc:
            self._broken = True
            logger.warning("dmlsearch: dashboard events could not be sent, stopping: %s", exc)
