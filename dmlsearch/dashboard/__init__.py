"""A live dmlsearch page on the Dask dashboard (``/dmlsearch``) and Prometheus metrics.

The scheduler keeps the state in a plugin (:class:`DashboardPlugin`) fed by events that
each driver sends as RPC calls from its client's event loop (:class:`DashboardReporter`),
never over the client's own stream; the page polls ``/dmlsearch/api/state``.
"""

from __future__ import annotations

from .plugin import EVENTS_HANDLER, PLUGIN_NAME, DashboardPlugin
from .reporter import DashboardReporter, page_link
from .state import DashboardState

__all__ = [
    "EVENTS_HANDLER",
    "PLUGIN_NAME",
    "DashboardPlugin",
    "DashboardReporter",
    "DashboardState",
    "page_link",
]
