"""Runners: the only code that talks to Dask.

One futures loop (:class:`WorkLoop`) moves units of work of any kind (:class:`UnitKind`)
proposed by a source (:class:`UnitSource`); search trials are one kind among several.

Names load lazily: a worker that unpickles a task function from ``dmlsearch.runner._task``
or a kind from ``dmlsearch.runner.units`` must not import the loop, the strategies and
Optuna with it (0.13 s on every fresh worker, measured in docs/benchmarks.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "AdaptiveBatcher": "._batching",
    "cluster_shape": ".cluster",
    "embedded_cluster": ".cluster",
    "resolve_client": ".cluster",
    "start_local_cluster": ".cluster",
    "DaskRunner": ".dask",
    "RunObserver": ".dask",
    "RunStats": ".loop",
    "WorkLoop": ".loop",
    "StrategySource": ".trials",
    "TrialKind": ".trials",
    "trial_seed": ".trials",
    "DONE": ".units",
    "WAIT": ".units",
    "Unit": ".units",
    "UnitKind": ".units",
    "UnitPolicy": ".units",
    "UnitSource": ".units",
}

__all__ = [
    "DONE",
    "WAIT",
    "AdaptiveBatcher",
    "DaskRunner",
    "RunObserver",
    "RunStats",
    "StrategySource",
    "TrialKind",
    "Unit",
    "UnitKind",
    "UnitPolicy",
    "UnitSource",
    "WorkLoop",
    "cluster_shape",
    "embedded_cluster",
    "resolve_client",
    "start_local_cluster",
    "trial_seed",
]

if TYPE_CHECKING:
    from ._batching import AdaptiveBatcher
    from .cluster import cluster_shape, embedded_cluster, resolve_client, start_local_cluster
    from .dask import DaskRunner, RunObserver
    from .loop import RunStats, WorkLoop
    from .trials import StrategySource, TrialKind, trial_seed
    from .units import DONE, WAIT, Unit, UnitKind, UnitPolicy, UnitSource


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
