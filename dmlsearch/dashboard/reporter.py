"""The driver side: batches a search's events and sends them to the scheduler plugin.

Each flush hands its events to the client's event loop, which sends them as one RPC call
to the scheduler's ``dmlsearch_events`` handler (one call in flight, so batches arrive in
order). The runner's loop never waits for the network, and nothing the scheduler does with
the events - no handler, a handler that fails - can touch the client's own connection.
"""

from __future__ import annotations

import asyncio
import logging
import math
import numbers
import threading
import time
from typing import Any

import numpy as np

from .._errors import error_headline
from .._evaluate import TrialOutcome, TrialSpec
from ..runner.dask import RunObserver
from .plugin import EVENTS_HANDLER, NO_PLUGIN, OK, PLUGIN_NAME, DashboardPlugin

__all__ = ["DashboardReporter", "page_link"]

logger = logging.getLogger("dmlsearch")

#: Longest text sent for a parameter value or an error (the page shows a summary only).
MAX_TEXT = 200
#: How long the start and the end of an experiment wait for their events to arrive, and
#: how long one call to the scheduler may take before the reporter gives up (seconds).
DELIVERY_WAIT = 5.0
SEND_TIMEOUT = 30.0


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


def _param(value: Any) -> Any:
    plain = _plain(value)
    # A parameter is a label, not a figure: JSON would carry nan and inf as null ("-",
    # as if unset), so they go as the text Python prints.
    return str(plain) if isinstance(plain, float) and not math.isfinite(plain) else plain


def _params(params: dict[str, Any]) -> dict[str, Any]:
    return {str(k): _param(v) for k, v in params.items()}


def _error_summary(error: str) -> str:
    """The exception line of a traceback (the registry keeps the whole of it)."""
    return _text(error_headline(error))


class DashboardReporter(RunObserver):
    """Sends one experiment's events to the scheduler, batched, at most every ``interval`` s.

    The runner calls :meth:`trials_submitted`, :meth:`trial_finished` and :meth:`tick`; the
    search calls :meth:`experiment_started` and :meth:`experiment_finished`. Events wait in
    lists until :meth:`flush` (called by :meth:`tick` at most every ``interval`` seconds),
    which queues them for the client's event loop and returns at once.

    On the loop, one RPC call at a time carries whatever has queued (batches stay in order
    and merge while a call is out). Sending is best effort and never raises into the
    search: a scheduler that lost its plugin (restarted) gets it registered again once;
    otherwise the reporter logs one warning and goes quiet. A failure inside the plugin is
    reported in one warning and sending goes on.
    """

    def __init__(self, client: Any, interval: float = 0.5) -> None:
        self.client = client
        self.interval = interval
        self.experiment = ""
        self._meta: dict[str, Any] = {}
        self._events: list[dict[str, Any]] = []
        # (kind, rows), in the order they happened: a unit may end and a unit of the same
        # number (a trial's next rung) start within one batch. Kinds: "submitted",
        # "ended", and a multi-fidelity search's "rung_submitted" and "rung_ended".
        self._units: list[tuple[str, list[list[Any]]]] = []
        self._last = 0.0
        # Shared with the client's event loop (the sender), under the lock.
        self._lock = threading.Lock()
        self._delivered_cond = threading.Condition(self._lock)
        self._outbox: list[dict[str, Any]] = []
        self._queued = 0  # batches queued so far
        self._delivered = 0  # batches the sender is done with (sent or dropped)
        self._sending = False  # a sender runs on the loop
        self._broken = False
        self._warned_failure = False
        self._registered_again = False

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
        """A new experiment: every later event carries its ``name``.

        Sent at once; waits (at most :data:`DELIVERY_WAIT` s) until it has arrived, so the
        page shows the experiment when the search starts.
        """
        self.flush()
        self.experiment = str(name)
        self._meta = _params(meta)
        self._events.append(self._experiment_event(self._meta))
        self.wait(self.flush())

    def _experiment_event(self, meta: dict[str, Any]) -> dict[str, Any]:
        """The experiment's first event, with the client's id: when that client leaves the
        scheduler without ending the experiment (its process killed), the page ends it."""
        event = {"kind": "experiment", "experiment": self.experiment, "meta": meta}
        client_id = getattr(self.client, "id", None)
        return event if not isinstance(client_id, str) else {**event, "client": client_id}

    def trials_submitted(self, specs: list[TrialSpec]) -> None:
        self.units_submitted([(s.number, s.params) for s in specs])

    def trial_finished(self, outcome: TrialOutcome, value: float | None) -> None:
        self.unit_finished(
            outcome.number,
            outcome.state,
            value,
            outcome.worker,
            outcome.duration,
            None if outcome.error is None else str(outcome.error),
        )

    def units_submitted(self, units: list[tuple[int, dict[str, Any]]]) -> None:
        """Units of any kind (trials, ensemble members) sent to the cluster, by number."""
        self._add("submitted", [[int(number), _params(params)] for number, params in units])

    def unit_finished(
        self,
        number: int,
        state: str,
        value: Any,
        worker: Any,
        duration: Any,
        error: str | None = None,
        resource: int | None = None,
    ) -> None:
        """A unit ended; ``value`` is its score, if it has one; ``resource``: the budget a
        multi-fidelity search's step trained to (the page ranks steps by it first, as the
        search's ``best_index_`` does)."""
        # [number, state, value, worker, duration, params (None: as submitted), error,
        #  resource]
        row = [
            int(number),
            str(state),
            _plain(value),
            _plain(worker),
            _plain(duration),
            None,
            None if error is None else _error_summary(error),
        ]
        self._add("ended", [row if resource is None else [*row, int(resource)]])

    def rungs_submitted(self, steps: list[tuple[int, int, int, int, int]]) -> None:
        """Rung steps sent: ``(trial, rung, resource, from_resource, bracket)`` each."""
        self._add("rung_submitted", [[int(v) for v in step] for step in steps])

    def rung_finished(
        self, trial: int, resource: int, state: str, value: Any, *, restored: bool = False
    ) -> None:
        """A rung step ended (``restored``: recorded by an earlier run, on resume)."""
        self._add("rung_ended", [[int(trial), int(resource), str(state), _plain(value), restored]])

    def ranks_started(self, workers: list[str], start_epoch: int = 0) -> None:
        """A training job's ranks started: rank r on ``workers[r]``, from ``start_epoch``.

        Sent again when an elastic job resumes on another gang (from its checkpoint's epoch).
        """
        self._add("ranks", [[r, _plain(w), int(start_epoch)] for r, w in enumerate(workers)])

    def epoch_finished(self, figures: dict[str, Any]) -> None:
        """A training job's epoch ended: an entry of ``history_`` (epoch, loss, rows/s...)."""
        self._add(
            "epoch",
            [
                [
                    int(figures["epoch"]),
                    _plain(figures.get("loss")),
                    _plain(figures.get("samples_per_s")),
                    _plain(figures.get("seconds")),
                ]
            ],
        )

    def _add(self, kind: str, rows: list[list[Any]]) -> None:
        if self._units and self._units[-1][0] == kind:
            self._units[-1][1].extend(rows)
        else:
            self._units.append((kind, rows))

    def tick(self) -> None:
        if time.monotonic() - self._last >= self.interval:
            self.flush()

    def experiment_finished(self, status: str) -> None:
        """The experiment ended (``complete``, ``failed``, ``interrupted``).

        Sent at once; waits (at most :data:`DELIVERY_WAIT` s) until it has arrived, so the
        page is current when ``fit`` returns.
        """
        self._events.append(
            {"kind": "status", "experiment": self.experiment, "status": str(status)}
        )
        self.wait(self.flush())

    def flush(self) -> int:
        """Queue what has gathered as one batch for the client's loop; never waits.

        Returns the batch's sequence number for :meth:`wait` (0: nothing queued).
        """
        self._last = time.monotonic()
        # Trials go first (an experiment's status comes after its last trials).
        batch: list[dict[str, Any]] = []
        for kind, rows in self._units:
            batch.append({"kind": kind, "experiment": self.experiment, "trials": rows})
        status = [e for e in self._events if e["kind"] == "status"]
        events = [e for e in self._events if e["kind"] != "status"] + batch + status
        self._events, self._units = [], []
        if not events or self._broken:
            return 0
        with self._lock:
            self._outbox.extend(events)
            self._queued += 1
            seq = self._queued
            start, self._sending = not self._sending, True
        if start:
            try:
                self.client.loop.add_callback(self._drain)
            except Exception as exc:  # the loop is closed: the client is gone
                self._stop("dmlsearch: dashboard events could not be sent, stopping: %r", exc)
        return seq

    def wait(self, seq: int, timeout: float = DELIVERY_WAIT) -> bool:
        """Wait until batch ``seq`` has been sent (or dropped); False if it has not in time.

        Returns at once on the client's own event loop (an asynchronous client), which
        waiting would block. (A notebook's cell runs in the kernel's loop, another one.)
        """
        if seq <= 0:
            return True
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            own = getattr(getattr(self.client, "loop", None), "asyncio_loop", running)
            if own is running:
                return False
        with self._delivered_cond:
            return self._delivered_cond.wait_for(
                lambda: self._delivered >= seq or self._broken, timeout
            )

    # -- on the client's event loop ------------------------------------------------------
    async def _drain(self) -> None:
        """Send what has queued, one call at a time, until nothing is left."""
        try:
            while True:
                with self._lock:
                    events, self._outbox = self._outbox, []
                    upto = self._queued
                    if not events or self._broken:
                        self._delivered = upto
                        self._sending = False
                        self._delivered_cond.notify_all()
                        return
                await self._send(events)
                with self._lock:
                    self._delivered = upto
                    self._delivered_cond.notify_all()
        except BaseException as exc:  # cancelled (the client closes), or a bug here
            self._stop("dmlsearch: dashboard events could not be sent, stopping: %r", exc)
            with self._lock:
                self._sending = False
                self._delivered_cond.notify_all()
            if not isinstance(exc, Exception):
                raise

    async def _call(self, events: list[dict[str, Any]]) -> Any:
        rpc = getattr(self.client.scheduler, EVENTS_HANDLER)
        return await asyncio.wait_for(rpc(events=events), SEND_TIMEOUT)

    async def _send(self, events: list[dict[str, Any]]) -> None:
        """One call to the scheduler's handler; never raises."""
        try:
            reply = await self._call(events)
            if reply is None and not self._registered_again:
                # No handler: a scheduler restarted without the plugin. Register it once
                # more and send again, the experiment first so its panel has its meta.
                self._registered_again = True
                from distributed.protocol.pickle import dumps

                await asyncio.wait_for(
                    self.client.scheduler.register_scheduler_plugin(
                        plugin=dumps(DashboardPlugin()), name=PLUGIN_NAME, idempotent=True
                    ),
                    SEND_TIMEOUT,
                )
                meta = {**self._meta, "resume": True}  # continue the panel, never reset it
                reply = await self._call([self._experiment_event(meta), *events])
                if reply == OK:
                    logger.warning(
                        "dmlsearch: the scheduler had lost the dashboard plugin (restarted?); "
                        "registered it again"
                    )
                    return
            if reply is None:
                self._stop(
                    "dmlsearch: the scheduler has no handler for dashboard events (an older "
                    "dmlsearch where it runs?), stopping them; the search goes on"
                )
            elif reply == NO_PLUGIN:
                self._stop(
                    "dmlsearch: the dashboard plugin was unregistered from the scheduler, "
                    "stopping dashboard events; the search goes on"
                )
            elif isinstance(reply, dict) and "error" in reply and not self._warned_failure:
                self._warned_failure = True
                logger.warning(
                    "dmlsearch: the scheduler's dashboard failed on a batch of events "
                    "(the page may be incomplete): %s",
                    reply["error"],
                )
        except Exception as exc:
            self._stop("dmlsearch: dashboard events could not be sent, stopping: %r", exc)

    def _stop(self, message: str, *args: Any) -> None:
        """Go quiet, with one warning."""
        with self._lock:
            already, self._broken = self._broken, True
            self._outbox = []
            self._delivered_cond.notify_all()
        if not already:
            # A client that lost its scheduler: the run's own error says so, and the
            # events' AttributeError or CancelledError would only be noise before it.
            gone = str(getattr(self.client, "status", "running")) != "running"
            (logger.debug if gone else logger.warning)(message, *args)
