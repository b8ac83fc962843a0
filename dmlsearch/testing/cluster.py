"""A LocalCluster configured the way dmlsearch's own tests and benchmarks use it."""

from __future__ import annotations

import logging

import dask
from distributed import LocalCluster

__all__ = ["local_cluster"]


def local_cluster(n_workers: int, threads_per_worker: int = 1) -> LocalCluster:
    """Worker processes on 127.0.0.1, a dashboard on a free port, the profiler off."""
    with dask.config.set({"distributed.worker.profile.enabled": False}):
        return LocalCluster(
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        )
