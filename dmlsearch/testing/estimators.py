"""Small estimators with controlled behaviour: failing, slow, noisy.

They live in the package (not in tests/) so that worker processes can unpickle them.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted


class _MajorityBase(ClassifierMixin, BaseEstimator):
    def _fit_majority(self, y: Any) -> None:
        values, counts = np.unique(np.asarray(y), return_counts=True)
        self.classes_ = values
        self.majority_ = values[int(np.argmax(counts))]

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "majority_")
        return np.full(len(X), self.majority_)


class FailingClassifier(_MajorityBase):
    """Raises ``ValueError`` in ``fit`` when ``fail`` is true; else predicts the majority."""

    def __init__(self, fail: bool = False, parameter: float = 1.0) -> None:
        self.fail = fail
        self.parameter = parameter

    def fit(self, X: Any, y: Any, fail_on_rows: Any = None) -> FailingClassifier:
        """Fail if ``fail`` is set, or if any training row is flagged in ``fail_on_rows``."""
        if fail_on_rows is not None and np.asarray(fail_on_rows).any():
            raise ValueError("FailingClassifier got a flagged training row")
        if self.fail:
            raise ValueError(f"FailingClassifier asked to fail (parameter={self.parameter})")
        self._fit_majority(y)
        return self


class CrashingClassifier(_MajorityBase):
    """Kills its own process in ``fit`` when ``crash`` is true (a native crash, an OOM kill)."""

    def __init__(self, crash: bool = False, parameter: float = 1.0) -> None:
        self.crash = crash
        self.parameter = parameter

    def fit(self, X: Any, y: Any) -> CrashingClassifier:
        if self.crash:
            os._exit(13)
        self._fit_majority(y)
        return self


class SleepyClassifier(_MajorityBase):
    """Sleeps ``seconds`` in ``fit``.

    ``mode="python"`` sleeps in small steps (a Python loop a timeout can interrupt);
    ``mode="native"`` sleeps in one call, as a long native routine would.
    """

    def __init__(self, seconds: float = 0.0, mode: str = "python", parameter: float = 1.0) -> None:
        self.seconds = seconds
        self.mode = mode
        self.parameter = parameter

    def fit(self, X: Any, y: Any) -> SleepyClassifier:
        if self.mode == "native":
            time.sleep(self.seconds)
        else:
            end = time.monotonic() + self.seconds
            while time.monotonic() < end:
                time.sleep(0.005)
        self._fit_majority(y)
        return self


class NoisyClassifier(_MajorityBase):
    """Scores depend on ``numpy.random`` global state (``random_state=None`` semantics).

    Its accuracy is the fraction of test rows it labels right by guessing with the global
    generator, so results are reproducible only if the search seeds each trial.
    """

    def __init__(self, parameter: float = 1.0) -> None:
        self.parameter = parameter

    def fit(self, X: Any, y: Any) -> NoisyClassifier:
        self._fit_majority(y)
        self.offset_ = float(np.random.random_sample())
        return self

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "offset_")
        draws = np.random.random_sample(len(X)) + self.offset_ * 0.0
        return np.where(draws < 0.5, self.classes_[0], self.classes_[-1])
