"""Runners: the only code that talks to Dask."""

from __future__ import annotations

from ._batching import AdaptiveBatcher
from .dask import (
    DaskRunner,
    cluster_shape,
    embedded_cluster,
    resolve_client,
    start_local_cluster,
    trial_seed,
)

__all__ = [
    "AdaptiveBatcher",
    "DaskRunner",
    "cluster_shape",
    "embedded_cluster",
    "resolve_client",
    "start_local_cluster",
    "trial_seed",
]
