"""Data loaders for experiment files (``data.loader: loaders:function``).

An experiment file's folder is put on ``sys.path``, so ``loaders:breast_cancer`` in
experiments/loader.yaml imports this module. A loader returns ``(X, y)``; it runs on the
machine that runs ``dmlsearch run``, and the data is sent to the workers once.
"""

from __future__ import annotations

from typing import Any


def breast_cancer(max_rows: int | None = None, scale_units: bool = False) -> tuple[Any, Any]:
    """scikit-learn's breast cancer data as a DataFrame (feature names kept)."""
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    if scale_units:
        # Some features are in the thousands, others below 0.01: put them on one scale.
        X = (X - X.mean()) / X.std()
    if max_rows is not None:
        X, y = X.iloc[:max_rows], y.iloc[:max_rows]
    return X, y
