"""Assemble ``cv_results_`` from trial outcomes, in scikit-learn's layout.

Pure functions: outcomes in, the dict of arrays out. The layout (keys, order, masked
``param_*`` arrays, ranking of NaN scores) matches ``GridSearchCV``'s so that code and
tools written against scikit-learn read our results unchanged.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.ma import MaskedArray
from scipy.stats import rankdata

from ._evaluate import TrialOutcome
from ._rungs import RungResult
from ._states import COMPLETE

__all__ = [
    "build_cv_results",
    "build_rung_results",
    "param_arrays",
    "rank_by_resource",
    "rank_scores",
    "rung_attributes",
]


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


def rank_by_resource(
    levels: np.ndarray, means: np.ndarray, failed: np.ndarray | None = None
) -> np.ndarray:
    """Rank 1 is best: rows at a higher resource level first, then by score.

    So that rank 1 is the row ``best_index_`` names (the best at the highest rung reached).
    Rows without a score (NaN) and rows of ``failed`` steps (scored ``error_score``) come
    after every scored row, whatever their level: a promotion that failed at the top rung
    must not make its candidate the best, nor be refitted there.
    """
    n = len(means)
    if n == 0:
        return np.ones(0, dtype=np.int32)
    bad = np.isnan(means) if failed is None else (np.isnan(means) | failed)
    score_key = np.where(np.isnan(means), np.inf, -means)
    order = np.lexsort((score_key, -levels, bad))
    ranks = np.empty(n, dtype=np.int32)
    previous: tuple[bool, float, float] | None = None
    for position, i in enumerate(order):
        key = (bool(bad[i]), float(levels[i]), float(score_key[i]))
        if key != previous:
            current = position + 1
            previous = key
        ranks[i] = current
    return ranks


def build_rung_results(
    steps: Sequence[RungResult],
    scorer_names: Sequence[str],
    n_splits: int,
    *,
    return_train_score: bool,
    error_score: float,
    resource: str | None = None,
) -> dict[str, Any]:
    """``cv_results_`` of a multi-fidelity search: one row per (trial, rung) step.

    scikit-learn's Halving layout (``iter``, ``n_resources``; a ``resource`` that is an
    estimator parameter is in each row's ``params`` and a ``param_<resource>`` column, so
    ``best_params_`` sets it too) plus ``trial``, ``bracket``,
    ``work`` (resource units trained in the step), ``continued`` (the step continued
    from the trial's state) and ``from_store`` (that state was the state store's copy,
    not the worker's memory). ``rank_test_*`` orders rows by resource level, then score
    (see :func:`rank_by_resource`).
    """
    if resource is not None and resource not in ("partial_fit", "n_samples"):
        steps = [
            dataclasses.replace(step, params={**step.params, resource: int(step.resource)})
            for step in steps
        ]
    results = build_cv_results(
        steps,
        scorer_names,
        n_splits,
        return_train_score=return_train_score,
        error_score=error_score,
    )
    resources = np.array([s.resource for s in steps], dtype=np.int64)
    levels = np.searchsorted(np.unique(resources), resources).astype(np.int64)
    results["iter"] = levels
    results["n_resources"] = resources
    results["trial"] = np.array([s.number for s in steps], dtype=np.int64)
    results["bracket"] = np.array([s.bracket for s in steps], dtype=np.int64)
    results["work"] = np.array([s.work for s in steps], dtype=np.float64)
    results["continued"] = np.array([s.continued for s in steps], dtype=bool)
    results["from_store"] = np.array([s.from_store for s in steps], dtype=bool)
    failed = np.array([s.state != COMPLETE for s in steps], dtype=bool)
    for name in scorer_names:
        means = results[f"mean_test_{name}"]
        results[f"rank_test_{name}"] = rank_by_resource(levels, means, failed)
    return results


def rung_attributes(
    results: dict[str, Any],
    curves: dict[int, list[tuple[int, float]]],
    ladder: Sequence[int],
    eta: int,
) -> dict[str, Any]:
    """A multi-fidelity search's fitted attributes besides ``cv_results_``.

    ``history_`` (each trial's learning curve), ``n_resources_``/``n_candidates_`` (per
    rung reached: its resource, and how many trials reached it), ``n_iterations_``,
    ``min_resources_``/``max_resources_`` (the schedule's), ``n_possible_iterations_``
    (the schedule's rungs), ``n_required_iterations_`` (scikit-learn's: the halvings by
    ``eta`` that leave fewer than ``eta`` of the trials started) and ``total_work_``
    (every step's ``work``: the training done, in resource units).
    """
    levels = np.unique(results["n_resources"])
    started = len(np.unique(results["trial"]))
    required = 1
    while started >= eta**required:  # integers: no log rounding at exact powers
        required += 1
    return {
        "history_": {t: sorted(c) for t, c in sorted(curves.items())},
        "n_resources_": [int(r) for r in levels],
        "n_candidates_": [
            len(np.unique(results["trial"][results["n_resources"] == r])) for r in levels
        ],
        "n_iterations_": len(levels),
        "min_resources_": int(ladder[0]),
        "max_resources_": int(ladder[-1]),
        "n_possible_iterations_": len(ladder),
        "n_required_iterations_": required,
        "total_work_": float(np.sum(results["work"])),
    }
