"""The training data on the driver: checks, and each rank's shard placed on its worker.

``X`` and ``y`` are NumPy arrays (scattered, one shard to each rank's worker) or Dask
arrays (each shard computed on its rank's worker from the chunks, wherever they are: the
rows never pass through the driver). Either way rank r of w holds rows
``[r*n//w, (r+1)*n//w)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from distributed import Client, Future

from ..exceptions import InvalidParameterError, NotSupportedError

__all__ = ["check_data", "head", "place_shards"]


def _is_dask_array(a: Any) -> bool:
    return hasattr(a, "dask") and hasattr(a, "chunks") and hasattr(a, "compute")


def _check_one(name: str, a: Any) -> Any:
    if _is_dask_array(a):
        if a.ndim < 1 or any(math.isnan(c) for c in a.chunks[0]):
            raise InvalidParameterError(
                name,
                f"a Dask array needs known row chunks, got {a.chunks[0][:3]}...; "
                f"call {name}.compute_chunk_sizes() first",
            )
        return a
    if hasattr(a, "npartitions"):
        raise NotSupportedError(
            f"{name} is a Dask dataframe or series; pass a Dask array "
            f"({name}.to_dask_array(lengths=True)) or a NumPy array"
        )
    return np.asarray(a)


def check_data(X: Any, y: Any, rows_needed: int) -> tuple[Any, Any]:
    """``X`` and ``y`` as NumPy or Dask arrays with as many rows, at least ``rows_needed``."""
    Xa, ya = _check_one("X", X), _check_one("y", y)
    if Xa.ndim < 1 or ya.ndim < 1 or Xa.shape[0] != ya.shape[0]:
        raise InvalidParameterError(
            "X",
            f"X and y must be arrays with the same number of rows, got {Xa.shape} and {ya.shape}",
        )
    n = int(Xa.shape[0])
    if n < rows_needed:
        raise InvalidParameterError(
            "batch_size",
            f"{n} rows cannot give every rank a batch: n_workers x batch_size = "
            f"{rows_needed}; lower batch_size or n_workers",
        )
    return Xa, ya


def head(a: Any, rows: int) -> np.ndarray:
    """The first ``rows`` rows on the driver (a small batch, to try the model on)."""
    part = a[:rows]
    return np.asarray(part.compute() if _is_dask_array(part) else part)


def place_shards(client: Client, workers: list[str], X: Any, y: Any) -> list[list[Future]]:
    """``[X_r, y_r]`` futures held by ``workers[r]``, rank r's contiguous rows."""
    n, w = int(X.shape[0]), len(workers)
    shards = []
    for r, worker in enumerate(workers):
        rows = slice(r * n // w, (r + 1) * n // w)
        futures = []
        for a in (X, y):
            if _is_dask_array(a):
                futures.append(client.compute(a[rows], workers=[worker]))
            else:
                # Once, to the worker that trains on it: never through the driver per epoch.
                futures.append(client.scatter(a[rows], workers=[worker], hash=False))
        shards.append(futures)
    return shards
