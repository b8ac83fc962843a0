"""Small pieces every search front shares: its seed, the names it logs, its phase clock,
and the verdict on failed trials."""

from __future__ import annotations

import numbers
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from sklearn.exceptions import FitFailedWarning

from ._errors import error_headline
from ._evaluate import TrialOutcome
from .exceptions import AllTrialsFailedError, InvalidParameterError

__all__ = [
    "PhaseClock",
    "check_failures",
    "ending",
    "page_told",
    "refit_index",
    "resolve_seed",
    "seeded_globals",
    "strategy_name",
]


def refit_index(refit: Any, results: dict[str, Any], n_rows: int) -> int:
    """The row a ``refit`` callable picks in ``results``; InvalidParameterError unless it
    is an index in ``[0, n_rows)`` (-1 would pick the last row without saying so)."""
    index = refit(results)
    if (
        isinstance(index, bool)
        or not isinstance(index, numbers.Integral)
        or not 0 <= int(index) < n_rows
    ):
        raise InvalidParameterError(
            "refit", f"the refit callable must return an index in [0, {n_rows}), got {index!r}"
        )
    return int(index)


@contextmanager
def seeded_globals(seed: int) -> Iterator[None]:
    """NumPy's and ``random``'s global generators seeded with ``seed`` inside the block,
    as a trial's are on its worker, and given back as they were after it (they are the
    caller's)."""
    import random

    saved = np.random.get_state(), random.getstate()
    np.random.seed(int(seed) % (2**32))
    random.seed(int(seed))
    try:
        yield
    finally:
        np.random.set_state(saved[0])
        random.setstate(saved[1])


def resolve_seed(random_state: Any) -> int:
    """The search's seed from ``random_state`` (drawn at random for None)."""
    if random_state is None:
        return int(np.random.SeedSequence().generate_state(1, dtype=np.uint64)[0] >> 1)
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise InvalidParameterError("random_state", f"must be >= 0, got {random_state}")
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63 - 1))
    raise InvalidParameterError(
        "random_state",
        f"expected None, an int, a RandomState or a Generator, got {random_state!r}",
    )


def check_failures(
    outcomes: Sequence[TrialOutcome],
    bad: Sequence[TrialOutcome],
    what: str,
    error_score: Any,
    *,
    stacklevel: int,
) -> None:
    """AllTrialsFailedError when no outcome has a score; a FitFailedWarning naming the
    first error when some (``bad``) failed. ``what``: "trials" or "rung steps"."""
    if all(not fold for t in outcomes for fold in t.test_scores):
        first = (bad or outcomes)[0]
        raise AllTrialsFailedError(
            f"all {len(outcomes)} {what} failed. The first error was:\n{first.error}"
        )
    if bad:
        warnings.warn(
            f"{len(bad)} of the {len(outcomes)} {what} failed and scored "
            f"error_score={error_score!r}. The first error was:\n{bad[0].error}",
            FitFailedWarning,
            stacklevel=stacklevel,
        )


def warn_lost_oof(outcomes: Sequence[TrialOutcome], *, stacklevel: int) -> None:
    """A UserWarning when completed trials kept no out-of-fold predictions (``keep_oof``):
    how many, and the first one's reason. Their scores stand."""
    lost = [(t.number, t.oof_error) for t in outcomes if t.oof_error is not None]
    if lost:
        number, error = lost[0]
        reason = error_headline(error)
        warnings.warn(
            f"keep_oof: {len(lost)} of the {len(outcomes)} trials kept no out-of-fold "
            f"predictions (their scores stand; ensemble selection leaves them out). "
            f"Trial {number}: {reason}",
            UserWarning,
            stacklevel=stacklevel,
        )


class PhaseClock:
    """Seconds per phase of ``fit``, measured back to back."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self._last = self.start
        self.laps: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self.laps[phase] = self.laps.get(phase, 0.0) + now - self._last
        self._last = now

    def summary(self) -> str:
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in self.laps.items())
        return f"fit took {self._last - self.start:.1f} s ({parts})"


def strategy_name(strategy: Any) -> str:
    """A strategy as the logs and the dashboard name it."""
    return strategy if isinstance(strategy, str) else type(strategy).__name__


def ending(exc: BaseException) -> str:
    """The status a fit that raised ``exc`` ends with (``interrupted`` can be resumed)."""
    return "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"


@contextmanager
def page_told(reporter: Any) -> Iterator[None]:
    """Tell the ``/dmlsearch`` page (``reporter``; None: no page) how the block ended."""
    try:
        yield
    except BaseException as exc:
        if reporter is not None:
            reporter.experiment_finished(ending(exc))
        raise
    if reporter is not None:
        reporter.experiment_finished("complete")
