"""A LocalCluster configured the way dmlsearch's own tests and benchmarks use it."""

from __future__ import annotations

from distributed import LocalCluster

from ..runner import start_local_cluster

__all__ = ["local_cluster"]


def local_cluster(n_workers: int, threads_per_worker: int = 1) -> LocalCluster:
    """The embedded default's cluster (see :func:`dmlsearch.runner.start_local_cluster`)."""
    return start_local_cluster(n_workers, threads_per_worker)
