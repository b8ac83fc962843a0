"""The scheduler side: a plugin that keeps the state and serves the page and its JSON."""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from .metrics import DashboardCollector
from .state import DashboardState

__all__ = [
    "EVENTS_HANDLER",
    "NO_PLUGIN",
    "OK",
    "PLUGIN_NAME",
    "DashboardPlugin",
    "events_handler",
    "live_plugin",
]

#: The scheduler side logs apart from the driver's "dmlsearch" (a LocalCluster shares a process).
logger = logging.getLogger("dmlsearch.dashboard")

PLUGIN_NAME = "dmlsearch-dashboard"
#: Drivers send their event batches as RPC calls to this scheduler handler, never over the
#: client's batched stream: an op the scheduler cannot handle there closes the client's
#: connection (and loses its futures), where a failed RPC call only fails itself.
EVENTS_HANDLER = "dmlsearch_events"
#: The handler's answers: events applied, or no dashboard plugin runs (unregistered). A
#: scheduler without the handler answers ``None`` (``Server.handle_comm``: "No handler").
OK = "OK"
NO_PLUGIN = "no-plugin"
#: The page's name in the dashboard's navigation bar (and its path under the dashboard).
PAGE = "dmlsearch"


def live_plugin(scheduler: Any) -> DashboardPlugin | None:
    """The dashboard plugin the scheduler runs now, if any.

    The routes and the metrics collector outlive one plugin object (tornado cannot remove a
    route, and ``unregister_scheduler_plugin`` does not close the plugin), so they look the
    plugin up on every request rather than holding one.
    """
    plugins = getattr(scheduler, "plugins", None) or {}
    plugin = plugins.get(PLUGIN_NAME)
    if isinstance(plugin, DashboardPlugin):
        return plugin
    # Registered under a name of the caller's choosing (``register_plugin(p, name=...)``).
    return next((p for p in plugins.values() if isinstance(p, DashboardPlugin)), None)


@dataclass
class _Installed:
    """What the plugin added to one scheduler, installed once whatever the plugin objects."""

    routes: bool = False
    collector: DashboardCollector | None = None
    handler: Callable[..., Any] | None = None


def events_handler(scheduler: Any) -> Callable[..., Any]:
    """The scheduler's ``dmlsearch_events`` RPC handler: one batch of events from a driver.

    Total: it applies the batch to the live plugin's state and answers :data:`OK`, answers
    :data:`NO_PLUGIN` when none runs, and turns any exception into an answer
    (``{"error": ...}``, logged once per scheduler), so a broken dashboard can never fail
    the call's connection, let alone the client's. Holds the scheduler weakly.
    """
    ref = weakref.ref(scheduler)
    logged = False

    def dmlsearch_events(events: Any = None, **kwargs: Any) -> Any:
        nonlocal logged
        try:
            found = ref()
            plugin = None if found is None else live_plugin(found)
            if plugin is None:
                return NO_PLUGIN
            plugin.apply(events)
            return OK
        except Exception as exc:  # the dashboard must never fail the caller
            if not logged:
                logged = True
                logger.exception("dmlsearch: the dashboard could not apply a batch of events")
            try:
                return {"error": f"{type(exc).__name__}: {exc}"[:500]}
            except Exception:  # an exception whose str() raises
                return {"error": type(exc).__name__}

    return dmlsearch_events


# Weak: bookkeeping must not keep a closed scheduler (tests start many) alive.
_INSTALLED: weakref.WeakKeyDictionary[Any, _Installed] = weakref.WeakKeyDictionary()


def _http_prefix(app: Any) -> str:
    """The dashboard's URL prefix (``--dashboard-prefix``), read off its ``health`` route.

    The scheduler does not keep the prefix it was given; every route of its own starts
    with it. ``/`` when the route is not there (routes changed in the Dask config).
    """
    for rule in getattr(getattr(app, "wildcard_router", None), "rules", []):
        pattern = getattr(getattr(rule.matcher, "regex", None), "pattern", "")
        if pattern.endswith("/health$"):
            return pattern[: -len("health$")]
    return "/"


def _handlers(scheduler: Any, prefix: str) -> list[Any]:
    from tornado import web

    page = resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")

    class Handler(web.RequestHandler):
        # GET only: tornado answers every other method with 405.
        def initialize(self) -> None:
            self.set_header("Cache-Control", "no-store")

        def plugin(self) -> DashboardPlugin:
            plugin = live_plugin(scheduler)
            if plugin is None:  # unregistered: the route stays, the page goes
                raise web.HTTPError(404)
            return plugin

    class PageHandler(Handler):
        def get(self) -> None:
            self.plugin()
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.write(page)

    class StateHandler(Handler):
        def get(self) -> None:
            # ?experiment=<name> (repeated): experiments the page shows in full besides
            # the running and the newest finished ones; the others come as summaries.
            requested = self.get_query_arguments("experiment")
            self.set_header("Content-Type", "application/json")
            self.write(self.plugin().state.to_json(requested))

    return [
        (rf"{prefix}{PAGE}/?", PageHandler),
        (rf"{prefix}{PAGE}/api/state", StateHandler),
    ]


def _navigation_pages(scheduler: Any) -> list[str] | None:
    """The list of pages in the Bokeh dashboard's navigation bar, if it runs.

    ``distributed.dashboard.scheduler.template_variables`` is memoized per scheduler and its
    ``pages`` list is shared with every page the dashboard renders, so a name added there
    shows as a link on the dashboard's pages opened afterwards. Private API: any surprise
    leaves the bar as it is.
    """
    if not getattr(getattr(scheduler, "http_application", None), "applications", None):
        return None  # no Bokeh dashboard (not installed, or the scheduler has none)
    try:
        from distributed.dashboard.scheduler import template_variables

        pages = template_variables(scheduler)["pages"]
    except Exception:
        return None
    return pages if isinstance(pages, list) else None


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
        self.scheduler: Any = None

    def apply(self, events: Any) -> None:
        """A batch of events from a driver; an experiment whose driver's client has left
        already (its events came after its stream closed) ends ``interrupted`` at once."""
        self.state.apply(events)
        clients = getattr(self.scheduler, "clients", None)
        if not isinstance(clients, dict):
            return
        for view in list(self.state.experiments.values()):
            if view.status == "running" and view.client is not None and view.client not in clients:
                self.state.client_gone(view.client)

    def remove_client(self, scheduler: Any, client: str) -> None:
        """A client left the scheduler (closed, or its process died: ``kill -9``, a batch
        system's SIGTERM): the experiments its driver reported and did not end are shown
        ``interrupted``, with nothing in flight, instead of running for ever."""
        names = self.state.client_gone(client)
        if names:
            logger.info(
                "dmlsearch: the driver of %s left the scheduler; shown as interrupted",
                ", ".join(names),
            )

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        installed = _INSTALLED.setdefault(scheduler, _Installed())
        handlers = getattr(scheduler, "handlers", None)
        if isinstance(handlers, dict):
            # One per scheduler, kept when a plugin goes (it then answers NO_PLUGIN); put
            # back if something removed it.
            if installed.handler is None:
                installed.handler = events_handler(scheduler)
            handlers[EVENTS_HANDLER] = installed.handler
        app = getattr(scheduler, "http_application", None)
        if app is not None and not installed.routes:
            # A host rule of our own: tornado tries it when the dashboard's routes do not match.
            app.add_handlers(r".*", _handlers(scheduler, _http_prefix(app)))
            installed.routes = True
        pages = _navigation_pages(scheduler)
        if pages is not None and PAGE not in pages:
            pages.append(PAGE)
        if installed.collector is None:
            try:
                import prometheus_client
            except ImportError:
                return
            collector = DashboardCollector(scheduler)
            prometheus_client.REGISTRY.register(collector)
            installed.collector = collector

    async def close(self) -> None:
        """The scheduler closes (or a newer distributed closes unregistered plugins)."""
        scheduler = self.scheduler
        pages = _navigation_pages(scheduler)
        if pages is not None and PAGE in pages:
            pages.remove(PAGE)
        installed = _INSTALLED.get(scheduler) if scheduler is not None else None
        if installed is not None and installed.collector is not None:
            import prometheus_client

            with contextlib.suppress(KeyError):  # already gone
                prometheus_client.REGISTRY.unregister(installed.collector)
            installed.collector = None
