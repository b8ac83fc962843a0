"""Ensemble predictions on the workers for large inputs.

Below ``dmlsearch.ensemble.worker-prediction-rows`` rows (default 50,000), or with no
running client to use, the driver predicts. Above it, the members are scattered once to
every worker (kept for later calls) and each task sums every member's votes on one block of
rows; the blocks come back in order. Sums run in member order either way; a member whose
prediction goes through BLAS (a linear model) may round a block of rows differently from
the whole matrix (differences of the order of 1e-16, relative).
"""

from __future__ import annotations

import itertools
from typing import Any

import dask
import numpy as np
from distributed import Client

from ..runner.gang import alive_workers
from ._members import member_sum

__all__ = ["ROWS_KEY", "summed_predictions"]

ROWS_KEY = "dmlsearch.ensemble.worker-prediction-rows"


def _running_client(client: Any) -> Client | None:
    """The client to predict on: the estimator's own Client, else the current default one
    (never a new connection or cluster just to predict)."""
    if isinstance(client, Client):
        return client if client.status == "running" else None
    try:
        current = Client.current()
    except ValueError:
        return None
    return current if current.status == "running" else None


def summed_predictions(
    owner: Any, members: list[tuple[Any, np.ndarray | None]], X: Any, n_classes: int | None
) -> np.ndarray:
    """:func:`member_sum` over every member, on the workers when ``X`` is large (a running
    client: the owner's ``client``, or the current default one)."""
    threshold = int(dask.config.get(ROWS_KEY, 50_000))
    client = _running_client(getattr(owner, "client", None)) if X.shape[0] >= threshold else None
    if client is None:
        return member_sum(members, X, n_classes)
    n_workers = max(1, len(alive_workers(client, running=False)))
    # The members scattered last time, if they are still this fit's: a fit makes a new
    # ``estimators_`` list, and predicting with the members of the fit before was wrong.
    fitted = getattr(owner, "estimators_", None)
    cached = getattr(owner, "_members_future", None)
    if (
        cached is None
        or cached[0] is not client
        or cached[1] is not fitted
        or cached[2].status != "finished"
    ):
        # One object for all members (a list would scatter one future per member).
        [future] = client.scatter([members], broadcast=True, hash=False)
        owner._members_future = (client, fitted, future)
    future = owner._members_future[2]
    bounds = np.linspace(0, X.shape[0], min(4 * n_workers, X.shape[0]) + 1).astype(int)
    blocks = [
        client.submit(member_sum, future, X[lo:hi], n_classes, pure=False)
        for lo, hi in itertools.pairwise(bounds)
        if hi > lo
    ]
    return np.concatenate(client.gather(blocks), axis=0)
