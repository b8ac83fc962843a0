"""Caruana et al. (2004), "Ensemble selection from libraries of models": the pure arithmetic.

Greedy forward selection **with replacement** over a library of ``M`` models, each given by
its out-of-fold predictions ``P[m]`` (rows x columns: class probabilities or votes, or a
regressor's predictions), the ensemble's prediction being the mean of its members'
(a member chosen ``c`` times counts ``c`` times):

1. *Sorted initialisation*: the ``N`` individually best models, ``N <= n_init`` chosen as
   the one whose ensemble scores best (so ``N = 1``, the best single model, is a candidate).
2. *Hill climbing*: add the model whose addition scores best, until ``ensemble_size``.
3. Return the best-scoring ensemble met on the way (ties: the smallest).

So the score returned is never below the best single model's. No Dask, no scikit-learn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["Selection", "diversity", "ensemble_selection"]


@dataclass(frozen=True)
class Selection:
    """The outcome of :func:`ensemble_selection`.

    ``counts[m]``: how often model ``m`` is in the ensemble (weights are ``counts /
    counts.sum()``). ``path[t]``: the score of the ensemble of ``n_init + t`` members met
    while climbing. ``single``: each model's own score.
    """

    counts: np.ndarray
    score: float
    path: list[float]
    n_init: int
    single: np.ndarray


def _finite(value: float) -> float:
    return float(value) if np.isfinite(value) else -np.inf


def ensemble_selection(
    P: np.ndarray,
    score: Callable[[np.ndarray], float],
    ensemble_size: int,
    n_init: int = 1,
) -> Selection:
    """Select an ensemble from the predictions ``P`` (shape ``(M, n, ...)``).

    ``score(prediction) -> float`` scores a mean prediction, greater is better (NaN counts
    as the worst). ``1 <= n_init <= ensemble_size``; ``n_init`` above ``M`` means ``M``.
    """
    if P.ndim < 2 or P.shape[0] < 1:
        raise ValueError(f"P must hold at least one model's predictions, got shape {P.shape}")
    if not 1 <= n_init <= ensemble_size:
        raise ValueError(f"need 1 <= n_init <= ensemble_size, got {n_init} and {ensemble_size}")
    M = P.shape[0]
    single = np.array([_finite(score(P[m])) for m in range(M)])
    # Stable: equal scores keep the library's order (callers pass it best first).
    ranked = np.argsort(-single, kind="stable")
    total = np.zeros(P.shape[1:])
    init_scores = []
    for k in range(min(n_init, M)):
        total += P[ranked[k]]
        init_scores.append(_finite(score(total / (k + 1))))
    N = int(np.argmax(init_scores)) + 1
    order = [int(m) for m in ranked[:N]]
    total = P[ranked[:N]].sum(axis=0)
    path = [init_scores[N - 1]]
    while len(order) < ensemble_size:
        size = len(order) + 1
        trials = [_finite(score((total + P[m]) / size)) for m in range(M)]
        best = int(np.argmax(trials))  # first of the best: the better-ranked model
        order.append(best)
        total += P[best]
        path.append(trials[best])
    stop = int(np.argmax(path))  # first of the best: the smallest ensemble
    counts = np.bincount(order[: N + stop], minlength=M)
    return Selection(counts, path[stop], path, N, single)


def diversity(P: np.ndarray, classifier: bool) -> tuple[np.ndarray, np.ndarray]:
    """Pairwise ``(disagreement, correlation)`` of models ``P`` (shape ``(M, n, ...)``).

    Classifier (``P`` of shape ``(M, n, classes)``): the share of rows whose predicted
    classes (argmax) differ. Regressor: the mean absolute difference of predictions.
    Correlation: Pearson's, of the flattened predictions (NaN where one is constant).
    """
    M = P.shape[0]
    flat = P.reshape(M, -1).astype(np.float64)
    # Row by row of the matrix: an (M, M, n) temporary would not fit for large n.
    if classifier:
        labels = P.argmax(axis=-1)
        disagreement = np.array([(labels[i] != labels).mean(axis=1) for i in range(M)])
    else:
        disagreement = np.array([np.abs(flat[i] - flat).mean(axis=1) for i in range(M)])
    centred = flat - flat.mean(axis=1, keepdims=True)
    norms = np.sqrt((centred**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        correlation = (centred @ centred.T) / np.outer(norms, norms)
    correlation[np.outer(norms, norms) == 0] = np.nan
    return disagreement, correlation
