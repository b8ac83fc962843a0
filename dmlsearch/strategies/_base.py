"""The strategy contract: what to try next."""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from ..space import SearchSpace

__all__ = ["Strategy", "cap_trials", "trial_rng"]


def trial_rng(seed: int, number: int) -> np.random.Generator:
    """The random generator of trial ``number``: a pure function of (seed, number).

    Deriving one stream per trial (instead of drawing from one shared stream in the order
    trials happen to be asked) is what makes a search identical on 1 or N workers.
    """
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(number,)))


def cap_trials(space: SearchSpace, n_trials: int | None, default: int) -> int:
    """How many trials to run: ``n_trials`` (or ``default``), at most the number of distinct
    candidates of a finite space, with a ``UserWarning`` when the user asked for more."""
    n = default if n_trials is None else n_trials
    if not space.is_finite:
        return n
    size = space.grid_size()
    if n > size and n_trials is not None:
        warnings.warn(
            f"n_trials={n} is greater than the {size} distinct candidates of this "
            f"finite search space; running {size} trials. Use strategy='grid' to "
            "enumerate them all.",
            UserWarning,
            stacklevel=4,  # the caller of make_strategy: SearchCV.fit, optimize
        )
    return min(n, size)


class Strategy(ABC):
    """Decides WHAT to try next; knows nothing of Dask, workers or time.

    Contract:

    * A strategy is driven by one thread, the runner's loop; it is not thread-safe.
    * ``ask(number)`` is called with ``number = 0, 1, 2, ...``, each number once, and
      returns the parameters of that trial, or ``None`` when the strategy has nothing
      more to propose. The returned dict is owned by the caller.
    * ``tell(number, value)`` reports the objective of a finished trial (greater is
      better), or ``None`` when the trial failed. It is called at most once per number,
      in completion order, which is not ask order. Trials asked but not yet told are
      *pending*; adaptive strategies must account for them (constant liar or equivalent)
      so that concurrent trials do not get duplicate suggestions.
    * ``total`` is the number of trials the strategy will propose, when known up front.
    * Strategies raise :class:`~dmlsearch.exceptions.InvalidParameterError` from
      ``__init__`` for a space they cannot handle, before anything is dispatched.
    """

    #: Whether suggestions depend on results told so far (it bounds trials in flight).
    adaptive: ClassVar[bool] = False

    def __init__(self, space: SearchSpace, n_trials: int | None, seed: int) -> None:
        self.space = space
        self.n_trials = n_trials
        self.seed = seed

    @property
    @abstractmethod
    def total(self) -> int | None:
        """How many trials this strategy will propose, if known."""

    @abstractmethod
    def ask(self, number: int) -> dict[str, Any] | None:
        """The parameters of trial ``number``, or ``None`` when exhausted."""

    def tell(self, number: int, value: float | None) -> None:  # noqa: B027 - optional hook
        """Report the objective of a finished trial (``None`` if it failed)."""

    def restore(self, number: int, params: dict[str, Any], value: float | None) -> None:  # noqa: B027
        """Learn from trial ``number`` finished in an earlier run (resume); never re-asked.

        Grid and random strategies derive trial ``number`` from the seed alone, so they
        need nothing; model-based strategies add the trial to their history.
        """
