"""Assemble ``cv_results_`` from trial outcomes, in scikit-learn's layout.

Pure functions: outcomes in, the dict of arrays out. The layout (keys, order, masked
``param_*`` arrays, ranking of NaN scores) matches ``GridSearchCV``'s so that code and
tools written against scikit-learn read our results unchanged.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.ma import MaskedArray
from scipy.stats import rankdata

from ._evaluate import TrialOutcome

__all__ = ["build_cv_results", "param_arrays", "rank_scores"]


def param_arrays(candidate_params: Sequence[dict[str, Any]]) -> dict[str, MaskedArray]:
    """One masked array per parameter; masked where a candidate lacks the parameter."""
    n = len(candidate_params)
    by_name: dict[str, dict[int, Any]] = {}
    for i, params in enumerate(candidate_params):
        for name, value in params.items():
            by_name.setdefault(f"param_{name}", {})[i] = value
    out = {}
    for key, values in by_name.items():
        listed = list(values.values())
        try:
            inferred = np.array(listed)
        except ValueError:  # ragged sequences
            dtype = np.dtype(object)
        else:
            # Strings and multi-dimensional results stay objects, as scikit-learn keeps them.
            dtype = (
                inferred.dtype
                if inferred.dtype.kind != "U" and inferred.ndim == 1
                else np.dtype(object)
            )
        arr = MaskedArray(np.empty(n, dtype=dtype), mask=True)
        for index, value in values.items():
            arr[index] = value
        out[key] = arr
    return out


def rank_scores(means: np.ndarray) -> np.ndarray:
    """Rank 1 is best; NaN means tie with the worst, and all-NaN ranks everyone 1."""
    if np.isnan(means).all():
        return np.ones_like(means, dtype=np.int32)
    filled = np.where(np.isnan(means), np.nanmin(means) - 1, means)
    return rankdata(-filled, method="min").astype(np.int32, copy=False)


def _store(
    results: dict[str, Any],
    key: str,
    array: np.ndarray,
    *,
    splits: bool = False,
    rank: bool = False,
) -> None:
    if splits:
        for k in range(array.shape[1]):
            results[f"split{k}_{key}"] = array[:, k]
    means = np.mean(array, axis=1) if array.shape[1] else np.full(array.shape[0], np.nan)
    results[f"mean_{key}"] = means
    if key.startswith(("train_", "test_")) and np.any(~np.isfinite(means)):
        warnings.warn(
            f"One or more of the {key.split('_')[0]} scores are non-finite: {means}",
            UserWarning,
            stacklevel=4,
        )
    results[f"std_{key}"] = np.sqrt(np.mean((array - means[:, None]) ** 2, axis=1))
    if rank:
        results[f"rank_{key}"] = rank_scores(means)


def _score_matrix(
    per_trial: list[list[dict[str, float]]], name: str, n_splits: int, error_score: float
) -> np.ndarray:
    out = np.full((len(per_trial), n_splits), float(error_score), dtype=np.float64)
    for i, folds in enumerate(per_trial):
        for k, scores in enumerate(folds[:n_splits]):
            if name in scores:
                out[i, k] = scores[name]
    return out


def build_cv_results(
    outcomes: Sequence[TrialOutcome],
    scorer_names: Sequence[str],
    n_splits: int,
    *,
    return_train_score: bool,
    error_score: float,
) -> dict[str, Any]:
    """The ``cv_results_`` dict of a search, rows in trial-number order."""
    results: dict[str, Any] = {}
    fit_times = np.array([o.fit_times[:n_splits] for o in outcomes], dtype=np.float64).reshape(
        len(outcomes), n_splits
    )
    score_times = np.array([o.score_times[:n_splits] for o in outcomes], dtype=np.float64).reshape(
        len(outcomes), n_splits
    )
    _store(results, "fit_time", fit_times)
    _store(results, "score_time", score_times)
    candidate_params = [o.params for o in outcomes]
    results.update(param_arrays(candidate_params))
    results["params"] = candidate_params
    for name in scorer_names:
        test = _score_matrix([o.test_scores for o in outcomes], name, n_splits, error_score)
        _store(results, f"test_{name}", test, splits=True, rank=True)
        if return_train_score:
            train = _score_matrix(
                [o.train_scores or [] for o in outcomes], name, n_splits, error_score
            )
            _store(results, f"train_{name}", train, splits=True)
    return results
