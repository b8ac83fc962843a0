"""The torch estimators' inputs: ``X`` as float32, ``X`` and ``y`` fit to train on.

What scikit-learn's ``check_X_y`` would refuse (and skorch takes, to fail mid-epoch or
train on NaN) is refused here with :class:`InvalidParameterError` naming ``X`` or ``y``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..exceptions import InvalidParameterError
from ._data import check_finite, check_numeric, from_pandas
from ._trial import ONE_D_HINT, describe, in_training_mode

__all__ = ["_float32", "check_rows", "labels_of", "try_first_rows"]


def _float32(X: Any) -> Any:
    """``X`` with numeric arrays as float32 (InvalidParameterError for text); datasets and
    dicts as given."""
    if isinstance(X, torch.Tensor):
        return X.float() if X.dtype != torch.float32 else X
    if hasattr(X, "to_numpy") and hasattr(X, "columns"):  # a pandas DataFrame
        X = from_pandas("X", X)  # non-numeric columns named; nullable ones with NA as NaN
    if hasattr(X, "tocsr") and hasattr(X, "dtype"):  # scipy sparse
        return X.astype(np.float32) if X.dtype != np.float32 else X
    if isinstance(X, (list, tuple, np.ndarray)):
        array = np.asarray(X)
        if array.dtype.kind == "O":  # numbers in an object array, as scikit-learn takes them
            try:
                return array.astype(np.float32)
            except (TypeError, ValueError):
                pass
        check_numeric("X", array.dtype)
        return array.astype(np.float32) if array.dtype != np.float32 else array
    return X


def _n_rows(X: Any) -> int | None:
    """The rows of an array-like ``X`` (None for a dict or a Dataset)."""
    shape = getattr(X, "shape", None)
    return int(shape[0]) if shape is not None and len(shape) else None


def check_rows(X: Any, y: Any) -> None:
    """``X`` (as :func:`_float32` made it) and ``y`` fit to train on, before any epoch."""
    for name, a in (("X", X), ("y", y)):
        if hasattr(a, "dask") and callable(getattr(a, "compute", None)):
            raise InvalidParameterError(
                name,
                f"{name} is a Dask {type(a).__name__}, and this fit trains on rows in "
                f"memory: pass {name}.compute(), or train with DataParallelTrainer, whose "
                "ranks take Dask input where it lies",
            )
    n = _n_rows(X)
    if n is None:
        return
    if y is None:
        raise InvalidParameterError(
            "y", "fit needs y (the targets), got None; only a skorch Dataset X carries its own"
        )
    if n == 0:
        raise InvalidParameterError("X", "X has no rows: pass the training data")
    shape = np.shape(y)
    if not shape:
        raise InvalidParameterError("y", f"y must hold one target per row of X, got {y!r}")
    m = int(shape[0])
    if m != n:
        raise InvalidParameterError("y", f"X has {n} rows but y has {m}: pass one y per row")
    data = X.data if hasattr(X, "tocsr") else X
    if isinstance(data, np.ndarray):
        check_finite("X", data)
    elif isinstance(data, torch.Tensor) and not bool(torch.isfinite(data).all()):
        check_finite("X", data, int((~torch.isfinite(data)).sum()))


def labels_of(y: Any) -> np.ndarray:
    """A classifier's ``y`` as a 1-D array of labels (no missing ones)."""
    labels = np.asarray(y.cpu() if isinstance(y, torch.Tensor) else y)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels.ravel()
    if labels.ndim != 1:
        raise InvalidParameterError(
            "y", f"a classifier takes one label per row (1-D y), got shape {labels.shape}"
        )
    if labels.dtype.kind in "fO":
        import pandas as pd

        missing = int(np.count_nonzero(pd.isna(labels)))
        if missing:
            raise InvalidParameterError(
                "y", f"y has {missing} missing labels (NaN or None): drop those rows"
            )
    return labels


def try_first_rows(net: Any, X: Any, y: Any) -> None:
    """Run ``net``'s module and criterion on the first rows of ``X`` (float32) and the
    encoded ``y``: what would fail mid-epoch or train wrong is refused before training."""
    if not isinstance(X, (np.ndarray, torch.Tensor)) or not isinstance(y, np.ndarray):
        return
    # A copy of a few rows: pandas may hand out read-only arrays, which torch warns of.
    xb = torch.as_tensor(np.array(X[:8]) if isinstance(X, np.ndarray) else X[:8]).to(net.device)
    yb = torch.as_tensor(y[:8]).to(net.device)
    try:
        # In training mode, as the epochs run it (a module may return auxiliary outputs
        # there only), on a copy: BatchNorm's statistics and the generator stay as they were.
        with torch.no_grad(), in_training_mode(net.module_) as module:
            y_pred = module(xb)
    except Exception as exc:
        hint = ONE_D_HINT if X.ndim == 1 else ""
        raise InvalidParameterError(
            "module",
            f"the module fails on the first rows of X ({describe(xb)}): "
            f"{type(exc).__name__}: {exc}{hint}",
        ) from exc
    if isinstance(y_pred, torch.Tensor):
        net._check_output(y_pred, yb)
    try:
        net.get_loss(y_pred, yb, X=xb, training=True)
    except Exception as exc:
        raise InvalidParameterError(
            "criterion",
            f"the criterion fails on the module's output ({describe(y_pred)}) and y "
            f"({describe(yb)}): {type(exc).__name__}: {exc}",
        ) from exc
