"""Exhaustive grid search, in scikit-learn's ``ParameterGrid`` order."""

from __future__ import annotations

from typing import Any

from ..space import SearchSpace
from ._base import Strategy

__all__ = ["GridStrategy"]


class GridStrategy(Strategy):
    """Every point of the grid (or the first ``n_trials``), in ``ParameterGrid`` order."""

    def __init__(self, space: SearchSpace, n_trials: int | None, seed: int) -> None:
        super().__init__(space, n_trials, seed)
        # Raises SearchSpaceError for a continuous dimension, before any dispatch.
        self._size = space.grid_size()

    @property
    def total(self) -> int:
        return self._size if self.n_trials is None else min(self.n_trials, self._size)

    def ask(self, number: int) -> dict[str, Any] | None:
        if number >= self.total:
            return None
        return self.space.grid_point(number)
