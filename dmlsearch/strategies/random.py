"""Random search, reproducible whatever the number of workers and the number of trials."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ..space import SearchSpace
from ._base import Strategy, cap_trials, trial_rng

__all__ = ["RandomStrategy", "SeededBijection"]

DEFAULT_N_TRIALS = 10

#: Grids up to this size are shuffled by a true uniform permutation (8 bytes per point);
#: larger ones by a keyed Feistel network that never materialises the grid.
PERMUTATION_LIMIT = 2**20

_FEISTEL_ROUNDS = 8


class SeededBijection:
    """A bijection of ``range(size)`` onto itself, fixed by ``seed``: ``b(k)`` is point k.

    Small domains use ``numpy``'s uniform permutation; large ones a balanced Feistel
    network over the smallest even number of bits that covers ``size``, with cycle
    walking back into ``range(size)`` (at most 4 steps on average). Either way ``b(k)``
    depends on ``(seed, size, k)`` only, so trial k of a random search does not depend
    on how many trials are asked for, and no two trials get the same point.
    """

    def __init__(self, size: int, seed: int) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = int(size)
        sequence = np.random.SeedSequence(seed, spawn_key=(2**32,))
        self._sequence = sequence
        self._perm: np.ndarray | None = None
        if self.size <= PERMUTATION_LIMIT:
            return  # the permutation is drawn on first use
        self._half = max(1, ((self.size - 1).bit_length() + 1) // 2)
        self._mask = (1 << self._half) - 1
        self._nbytes = (self._half + 7) // 8
        self._keys = [
            int(k).to_bytes(8, "little")
            for k in sequence.generate_state(_FEISTEL_ROUNDS, dtype=np.uint64)
        ]

    def _round(self, key: bytes, x: int) -> int:
        digest = hashlib.shake_256(key + x.to_bytes(self._nbytes, "little")).digest(self._nbytes)
        return int.from_bytes(digest, "little") & self._mask

    def _feistel(self, x: int) -> int:
        left, right = x >> self._half, x & self._mask
        for key in self._keys:
            left, right = right, left ^ self._round(key, right)
        return (left << self._half) | right

    def __call__(self, k: int) -> int:
        if not 0 <= k < self.size:
            raise IndexError(f"{k} is not in range({self.size})")
        if self.size <= PERMUTATION_LIMIT:
            if self._perm is None:
                self._perm = np.random.default_rng(self._sequence).permutation(self.size)
            return int(self._perm[k])
        x = self._feistel(k)
        while x >= self.size:  # cycle walking: stays a bijection of range(size)
            x = self._feistel(x)
        return x


class RandomStrategy(Strategy):
    """Independent draws, one random stream per trial.

    When every dimension is finite, draws are made without replacement (as scikit-learn's
    ``ParameterSampler`` does) and ``n_trials`` is capped at the grid size with a warning.
    Trial k takes point ``b(k)`` of a seeded bijection of the whole grid, so its parameters
    are a function of ``(seed, k)`` alone: resuming with a larger ``n_trials`` extends
    the search instead of contradicting it.
    """

    def __init__(self, space: SearchSpace, n_trials: int | None, seed: int) -> None:
        super().__init__(space, n_trials, seed)
        self._n = cap_trials(space, n_trials, DEFAULT_N_TRIALS)
        self._order: SeededBijection | None = None
        if space.is_finite:
            self._order = SeededBijection(space.grid_size(), seed)

    @property
    def total(self) -> int:
        return self._n

    def ask(self, number: int) -> dict[str, Any] | None:
        if number >= self._n:
            return None
        if self._order is not None:
            return self.space.grid_point(self._order(number))
        return self.space.sample(trial_rng(self.seed, number))
