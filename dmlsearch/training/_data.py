"""The training data on the driver: checks, and each rank's shard placed on its worker.

``X`` and ``y`` are NumPy arrays (scattered, one shard to each rank's worker), Dask arrays
or Dask dataframes / series (each shard computed on its rank's worker from the chunks,
wherever they are: the rows never pass through the driver). Either way rank r of w holds
rows ``[r*n//w, (r+1)*n//w)``: of the data as given, or, for rows scattered from the
driver with ``shuffle=True``, of the rows permuted once by the seed (:func:`shard_order`),
so that each rank holds a random sample and not, say, one class of label-sorted rows.
Where the chunks are already in the workers' memory (persisted), :func:`rank_order` gives
each rank the worker that holds most of its rows, so that few rows move at all.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dask
import numpy as np
from distributed import Client, Future

from ..exceptions import InvalidParameterError, NotSupportedError

__all__ = [
    "as_numpy",
    "check_data",
    "check_finite",
    "check_finite_shards",
    "check_numeric",
    "computed_on",
    "from_pandas",
    "head",
    "nonfinite",
    "place_shards",
    "rank_order",
    "shard_order",
]

#: Up to this many ranks every assignment of workers to ranks is tried; above, a greedy one.
_EXACT_UP_TO = 7


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
        check_numeric(name, a.dtype)
        return a
    if hasattr(a, "npartitions"):
        _check_columns(name, a)
        return _check_one(name, _from_dataframe(name, a))
    array = as_numpy(name, a)
    check_numeric(name, array.dtype)
    check_finite(name, array)
    return array


def as_numpy(name: str, a: Any) -> np.ndarray:
    """``a`` (NumPy, pandas, a tensor, a list) as a NumPy array, or InvalidParameterError."""
    if a is None:
        raise InvalidParameterError(name, f"{name} is None: pass the training data's {name}")
    if hasattr(a, "tocsr"):
        raise InvalidParameterError(
            name, f"{name} is a scipy sparse matrix: pass {name}.toarray() (dense rows)"
        )
    if np.ma.is_masked(a):
        raise InvalidParameterError(
            name,
            f"{name} is a masked array with masked values, which would train as the values "
            f"under the mask: fill them ({name}.filled(...)) or drop those rows",
        )
    if hasattr(a, "detach") and hasattr(a, "cpu"):  # a torch tensor (maybe on a GPU)
        return np.asarray(a.detach().cpu().numpy())
    if hasattr(a, "dtypes") and hasattr(a, "to_numpy"):  # pandas
        return from_pandas(name, a)
    return np.asarray(a)


def from_pandas(name: str, frame: Any) -> np.ndarray:
    """A pandas DataFrame or Series as one numeric array (nullable columns: NA as NaN)."""
    _check_columns(name, frame)
    dtypes = frame.dtypes if frame.ndim == 2 else [frame.dtype]
    common = np.result_type(*[_numpy_dtype(d) for d in dtypes])
    if common.kind != "f" and bool(frame.isna().to_numpy().any()):
        common = np.result_type(common, np.float32)  # missing values as NaN (then refused)
    missing = {"na_value": np.nan} if common.kind == "f" else {}
    return np.asarray(frame.to_numpy(dtype=common, **missing))


def _numpy_dtype(dtype: Any) -> np.dtype[Any]:
    """A pandas column's dtype as NumPy's (a categorical's: its categories')."""
    categories = getattr(dtype, "categories", None)
    if categories is not None:
        return _numpy_dtype(categories.dtype)
    return np.dtype(getattr(dtype, "numpy_dtype", dtype))


def _check_columns(name: str, frame: Any) -> None:
    """InvalidParameterError naming a (pandas or Dask) dataframe's non-numeric columns."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    def numeric(dtype: Any) -> bool:
        categories = getattr(dtype, "categories", None)
        dtype = dtype if categories is None else categories.dtype
        return bool(is_numeric_dtype(dtype) or is_bool_dtype(dtype))

    label = getattr(frame, "name", None) or name
    dtypes = frame.dtypes if frame.ndim == 2 else {label: frame.dtype}
    bad = {str(c): str(d) for c, d in dtypes.items() if not numeric(d)}
    if bad:
        shown = ", ".join(f"{c!r} ({d})" for c, d in list(bad.items())[:5])
        what = f"non-numeric columns {shown}" if frame.ndim == 2 else f"dtype {bad.popitem()[1]}"
        raise InvalidParameterError(
            name,
            f"{name} has {what}: torch trains on numbers; encode text or categorical "
            "values as numbers first (or drop those columns)",
        )


#: The largest magnitude a rank's float32 tensors hold; wider floats beyond it become inf.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def nonfinite(a: np.ndarray) -> int:
    """How many values of ``a`` are NaN or infinite, or finite but beyond float32's range
    (a rank trains on float32, where they become infinite); 0 for integer and bool arrays."""
    if a.dtype.kind == "f" and a.dtype.itemsize > 4:
        # NaN compares False, so it is counted with the values out of range.
        return int(a.size - np.count_nonzero(np.abs(a) <= _FLOAT32_MAX))
    if a.dtype.kind not in "fc":
        return 0
    return int(a.size - np.count_nonzero(np.isfinite(a)))


def check_finite(name: str, a: Any, count: int | None = None) -> None:
    """InvalidParameterError if ``a`` holds NaN or infinite values (``count``: known already)."""
    count = nonfinite(a) if count is None else count
    if count:
        raise InvalidParameterError(
            name,
            f"{name} has {count} NaN or infinite values (or values beyond float32's range, "
            f"+-{_FLOAT32_MAX:.3g}, which train as infinite): the loss and then every weight "
            f"would become NaN; impute, scale or drop those rows before fit",
        )


def _from_dataframe(name: str, frame: Any) -> Any:
    """A Dask dataframe or series as a Dask array with known row chunks (a pass on workers)."""
    convert = getattr(frame, "to_dask_array", None)
    if convert is None:
        raise NotSupportedError(
            f"{name} is a Dask collection with partitions but no to_dask_array(); pass a "
            "Dask array, a Dask dataframe or series, or a NumPy array"
        )
    # lengths=True counts each partition's rows where it lives: the shards need them.
    return convert(lengths=True)


def check_numeric(name: str, dtype: Any) -> None:
    if np.dtype(dtype).kind not in "fiub":
        raise InvalidParameterError(
            name,
            f"{name} must be numeric (torch trains on numbers), got dtype {dtype}; encode "
            "text or categorical columns as numbers first",
        )


@contextmanager
def computed_on(client: Client | None) -> Iterator[None]:
    """The checks' Dask computations (a dataframe's row counts, a first batch) on ``client``.

    Without it they run on the default client if there is one, else in the driver's
    threads: wrong for data persisted on a cluster whose client is not the default.
    """
    if client is None:
        yield
        return
    with dask.config.set(scheduler=client):
        yield


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
    # A copy: torch warns about (and must not share) a read-only array, as pandas gives.
    return np.array(part.compute() if _is_dask_array(part) else part)


#: Mixed into the seed of the rows' permutation, apart from the ranks' per-epoch ones
#: (``[seed, rank, epoch]``).
_SHARD_STREAM = 0x5348_4152


def shard_order(X: Any, y: Any, seed: int, shuffle: bool) -> np.ndarray | None:
    """The permutation of the rows that :func:`place_shards` deals out to the ranks, or
    None (contiguous rows as given): with ``shuffle``, for rows the driver holds (NumPy
    ``X`` and ``y``). Dask input stays where its chunks are (its rows are not moved)."""
    if not shuffle or _is_dask_array(X) or _is_dask_array(y):
        return None
    return np.random.default_rng([seed, _SHARD_STREAM]).permutation(int(X.shape[0]))


def place_shards(
    client: Client, workers: list[str], X: Any, y: Any, order: np.ndarray | None = None
) -> list[list[Future]]:
    """``[X_r, y_r]`` futures held by ``workers[r]``: rank r's contiguous rows, of ``X`` as
    given or (``order``: :func:`shard_order`, NumPy ``X`` and ``y``) of ``X[order]``."""
    n, w = int(X.shape[0]), len(workers)
    shards = []
    for r, worker in enumerate(workers):
        bounds = slice(r * n // w, (r + 1) * n // w)
        rows = bounds if order is None else order[bounds]
        futures = []
        for a in (X, y):
            if _is_dask_array(a):
                futures.append(client.compute(a[rows], workers=[worker]))
            else:
                # Once, to the worker that trains on it: never through the driver per epoch.
                futures.append(client.scatter(a[rows], workers=[worker], hash=False))
        shards.append(futures)
    return shards


def check_finite_shards(client: Client, X: Any, y: Any, shards: list[list[Future]]) -> None:
    """InvalidParameterError if a Dask ``X`` or ``y`` holds NaN or inf, counted on the
    workers that hold the ranks' shards (NumPy input is checked on the driver)."""
    for i, (name, a) in enumerate((("X", X), ("y", y))):
        if _is_dask_array(a) and np.dtype(a.dtype).kind in "fc":
            counts = client.gather([client.submit(nonfinite, shard[i]) for shard in shards])
            check_finite(name, a, sum(counts))


def _row_bytes_held(client: Client, X: Any, w: int) -> list[dict[str, float]]:
    """Per rank, the bytes of its rows of ``X`` that each worker holds in memory."""
    n = int(X.shape[0])
    bounds = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(int)
    row_bytes = X.dtype.itemsize * int(np.prod(X.shape[1:], dtype=np.int64))
    keys = X.__dask_keys__()
    who_has = client.who_has(X)
    held: list[dict[str, float]] = [{} for _ in range(w)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        chunk_keys = list(_flatten(keys[i]))
        for r in range(w):
            lo, hi = max(a, r * n // w), min(b, (r + 1) * n // w)
            if hi <= lo:
                continue
            share = (hi - lo) * row_bytes / len(chunk_keys)
            for key in chunk_keys:
                for worker in who_has.get(key, ()):
                    held[r][worker] = held[r].get(worker, 0.0) + share
    return held


def _flatten(keys: Any) -> Any:
    if isinstance(keys, list):
        for k in keys:
            yield from _flatten(k)
    else:
        yield keys


def rank_order(client: Client, workers: list[str], X: Any) -> list[str]:
    """``workers`` ordered so that rank r runs where most of its rows of ``X`` already are.

    Only a Dask ``X`` whose chunks are in the workers' memory has a place; otherwise (and
    on ties) the order is kept. Up to :data:`_EXACT_UP_TO` ranks the best assignment is
    found exactly, above that greedily, rank by rank.
    """
    w = len(workers)
    if w < 2 or not _is_dask_array(X):
        return list(workers)
    held = _row_bytes_held(client, X, w)
    if not any(held):
        return list(workers)

    def local(order: tuple[str, ...]) -> float:
        return sum(held[r].get(worker, 0.0) for r, worker in enumerate(order))

    if w <= _EXACT_UP_TO:
        best = tuple(workers)
        for order in itertools.permutations(workers):
            if local(order) > local(best):
                best = order
        return list(best)
    free, greedy = list(workers), []
    for r in range(w):
        pick = max(free, key=lambda worker: held[r].get(worker, 0.0))
        free.remove(pick)
        greedy.append(pick)
    return greedy
