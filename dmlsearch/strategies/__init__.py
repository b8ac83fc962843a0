"""Search strategies: grid, random and Optuna-backed model-based samplers."""

from __future__ import annotations

from typing import Any

from optuna.samplers import BaseSampler

from ..exceptions import InvalidParameterError
from ..space import SearchSpace
from ._base import Strategy, trial_rng
from .grid import GridStrategy
from .optuna import SAMPLERS, OptunaStrategy
from .random import RandomStrategy

__all__ = [
    "STRATEGIES",
    "GridStrategy",
    "OptunaStrategy",
    "RandomStrategy",
    "Strategy",
    "make_strategy",
    "trial_rng",
]

#: Every strategy name ``SearchCV(strategy=...)`` accepts.
STRATEGIES: tuple[str, ...] = ("grid", "random", *SAMPLERS)


def make_strategy(strategy: Any, space: SearchSpace, n_trials: int | None, seed: int) -> Strategy:
    """Build the strategy named by ``strategy`` (a name or an Optuna sampler instance)."""
    if isinstance(strategy, BaseSampler):
        return OptunaStrategy(space, n_trials, seed, sampler=strategy)
    if not isinstance(strategy, str):
        raise InvalidParameterError(
            "strategy",
            f"expected one of {list(STRATEGIES)} or an optuna sampler instance, got {strategy!r}",
        )
    name = strategy.lower()
    if name == "grid":
        return GridStrategy(space, n_trials, seed)
    if name == "random":
        return RandomStrategy(space, n_trials, seed)
    if name in SAMPLERS:
        return OptunaStrategy(space, n_trials, seed, sampler=name)
    raise InvalidParameterError(
        "strategy", f"unknown strategy {strategy!r}; choose one of {list(STRATEGIES)}"
    )
