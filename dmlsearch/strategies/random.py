"""Random search, reproducible whatever the number of workers."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..space import SearchSpace
from ._base import Strategy, trial_rng

__all__ = ["RandomStrategy"]

DEFAULT_N_TRIALS = 10


class RandomStrategy(Strategy):
    """Independent draws, one random stream per trial.

    When every dimension is finite, draws are made without replacement (as scikit-learn's
    ``ParameterSampler`` does) and ``n_trials`` is capped at the grid size with a warning.
    """

    def __init__(self, space: SearchSpace, n_trials: int | None, seed: int) -> None:
        super().__init__(space, n_trials, seed)
        n = DEFAULT_N_TRIALS if n_trials is None else n_trials
        self._order: np.ndarray | None = None
        if space.is_finite:
            size = space.grid_size()
            if n > size and n_trials is not None:
                warnings.warn(
                    f"n_trials={n} is greater than the {size} distinct candidates of this "
                    f"finite search space; running {size} trials. Use strategy='grid' to "
                    "enumerate them all.",
                    UserWarning,
                    stacklevel=3,
                )
            n = min(n, size)
            # One permutation, fixed by the seed alone: trial k gets the k-th point.
            perm_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2**32,)))
            self._order = perm_rng.choice(size, size=n, replace=False)
        self._n = n

    @property
    def total(self) -> int:
        return self._n

    def ask(self, number: int) -> dict[str, Any] | None:
        if number >= self._n:
            return None
        if self._order is not None:
            return self.space.grid_point(int(self._order[number]))
        return self.space.sample(trial_rng(self.seed, number))
