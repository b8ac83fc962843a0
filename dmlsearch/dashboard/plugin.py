"""The scheduler side: a plugin that keeps the state and serves the page and its JSON."""

from __future__ import annotations

import contextlib
import json
import logging
import math
from importlib import resources
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from .metrics import DashboardCollector
from .state import DashboardState

__all__ = ["PLUGIN_NAME", "STREAM_OP", "TOPIC", "DashboardPlugin"]

logger = logging.getLogger("dmlsearch")

PLUGIN_NAME = "dmlsearch-dashboard"
#: Drivers send their event batches over the client's batched stream with this op: no
#: round trip, ordered, and nothing kept in the scheduler's event log.
STREAM_OP = "dmlsearch-events"
#: The fallback: events published under this topic (``Client.log_event``, a round trip).
TOPIC = "dmlsearch"


def _clean(obj: Any) -> Any:
    """JSON has no NaN or infinity: send them as null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _handlers(state: DashboardState) -> list[Any]:
    from tornado import web

    page = resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")

    class PageHandler(web.RequestHandler):
        # GET only: tornado answers every other method with 405.
        def get(self) -> None:
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.set_header("Cache-Control", "no-store")
            self.write(page)

    class StateHandler(web.RequestHandler):
        def get(self) -> None:
            self.set_header("Content-Type", "application/json")
            self.set_header("Cache-Control", "no-store")
            self.write(json.dumps(_clean(state.snapshot()), default=str))

    return [(r"/dmlsearch/?", PageHandler), (r"/dmlsearch/api/state", StateHandler)]


class DashboardPlugin(SchedulerPlugin):
    """Keeps the live state of every dmlsearch experiment on this scheduler.

    Registered from the client (``Client.register_plugin``), so it works on any cluster
    whose scheduler can import dmlsearch. It reads only the events drivers send; it
    never opens the registry database. Read-only: the page and the JSON accept GET only.
    """

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.state = DashboardState()
        self._collector: DashboardCollector | None = None
        self.scheduler: Any = None

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        handlers = getattr(scheduler, "stream_handlers", None)
        if isinstance(handlers, dict):
            handlers[STREAM_OP] = self._on_events
        app = getattr(scheduler, "http_application", None)
        if app is not None:
            # A host rule of our own: tornado tries it when the dashboard's routes do not match.
            app.add_handlers(r".*", _handlers(self.state))
        try:
            import prometheus_client
        except ImportError:
            return
        self._collector = DashboardCollector(self.state, lambda: str(scheduler.address))
        prometheus_client.REGISTRY.register(self._collector)

    def _on_events(self, events: Any = None, **kwargs: Any) -> None:
        """The stream handler: one batch of events from a driver (``client=`` comes too)."""
        self.state.apply(events)

    def log_event(self, topic: str, msg: Any) -> None:
        if topic == TOPIC:
            self.state.apply(msg)

    async def close(self) -> None:
        handlers = getattr(self.scheduler, "stream_handlers", None)
        if isinstance(handlers, dict) and handlers.get(STREAM_OP) == self._on_events:
            del handlers[STREAM_OP]
        if self._collector is not None:
            import prometheus_client

            with contextlib.suppress(KeyError):  # already gone
                prometheus_client.REGISTRY.unregister(self._collector)
            self._collector = None
