"""Runners: the only code that talks to Dask.

One futures loop (:class:`WorkLoop`) moves units of work of any kind (:class:`UnitKind`)
proposed by a source (:class:`UnitSource`); search trials are one kind among several.
"""

from __future__ import annotations

from ._batching import AdaptiveBatcher
from .cluster import cluster_shape, embedded_cluster, resolve_client, start_local_cluster
from .dask import DaskRunner, RunObserver
from .loop import RunStats, WorkLoop
from .trials import StrategySource, TrialKind, trial_seed
from .units import DONE, WAIT, Unit, UnitKind, UnitPolicy, UnitSource

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
