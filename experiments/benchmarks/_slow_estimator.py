"""A tiny scikit-learn classifier whose ``fit`` sleeps: trials of a known length.

Used by ``scaling.py``. It lives in its own module (not in ``__main__``) so that Dask
workers import it by name; ``scaling.py`` puts this folder on the workers' PYTHONPATH.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin


class SlowClassifier(ClassifierMixin, BaseEstimator):
    """Nearest shrunken centroid; ``fit`` sleeps ``delay`` seconds, then computes centroids.

    ``C`` sets the shrinkage towards the overall mean, so candidates score differently.
    """

    def __init__(self, C: float = 1.0, delay: float = 0.25) -> None:
        self.C = C
        self.delay = delay

    def fit(self, X: Any, y: Any) -> SlowClassifier:
        X = np.asarray(X, dtype=float)
        y = np.asarray(y)
        time.sleep(self.delay)
        self.classes_ = np.unique(y)
        overall = X.mean(axis=0)
        shrink = self.C / (1.0 + self.C)
        centroids = np.stack([X[y == c].mean(axis=0) for c in self.classes_])
        self.centroids_ = overall + shrink * (centroids - overall)
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X: Any) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        d = ((X[:, None, :] - self.centroids_[None, :, :]) ** 2).sum(axis=2)
        return self.classes_[np.argmin(d, axis=1)]
