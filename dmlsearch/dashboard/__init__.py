"""A live dmlsearch page on the Dask dashboard (``/dmlsearch``) and Prometheus metrics.

The scheduler keeps the state in a plugin (:class:`DashboardPlugin`) fed by events that
each driver sends over its batched stream (:class:`DashboardReporter`); the page polls
``/dmlsearch/api/state``.
"""

from __future__ import annotations

from .plugin import PLUGIN_NAME, STREAM_OP, TOPIC, DashboardPlugin
from .reporter import DashboardReporter, page_link
from .state import DashboardState

__all__ = [
    "PLUGIN_NAME",
    "STREAM_OP",
    "TOPIC",
    "DashboardPlugin",
    "DashboardReporter",
    "DashboardState",
    "page_link",
]
