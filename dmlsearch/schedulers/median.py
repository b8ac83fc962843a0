"""Median stopping (Golovin et al. 2017, Google Vizier; as Optuna's ``MedianPruner``).

Every trial trains to ``R`` and reports intermediate scores at steps (``Result.rung`` is the
step). A running trial is stopped when its latest score is below the median of the other
trials' scores at the same step, once past the warm-up.
"""

from __future__ import annotations

import math
import statistics

from ._base import DONE, WAIT, Decision, History, Scheduler, Start, Stop, check_int

__all__ = ["MedianStopping", "median_stop"]


def median_stop(score: float, others: list[float], min_trials: int) -> tuple[bool, float | None]:
    """Whether ``score`` is below the median of ``others`` (and that median).

    Never stops with fewer than ``min_trials`` other scores; ``nan`` others are left out,
    and a ``nan`` score is below any median.
    """
    others = [s for s in others if not math.isnan(s)]
    if len(others) < max(1, min_trials):
        return False, None
    median = statistics.median(others)
    return (math.isnan(score) or score < median), median


class MedianStopping(Scheduler):
    """Start trials at ``max_resource``; stop the ones falling below the median.

    ``n_trials``: trials started at most (``None``: no bound). ``warmup_steps``: no trial is
    stopped at a step below this. ``min_trials``: other trials that must have a score at a
    step before any trial is stopped there (Optuna's ``n_startup_trials``).
    """

    name = "median"

    def __init__(
        self,
        max_resource: int = 100,
        n_trials: int | None = None,
        warmup_steps: int = 0,
        min_trials: int = 5,
    ) -> None:
        self.max_resource = check_int("max_resource", max_resource, 1)
        self.n_trials = None if n_trials is None else check_int("n_trials", n_trials, 1)
        self.warmup_steps = check_int("warmup_steps", warmup_steps, 0)
        self.min_trials = check_int("min_trials", min_trials, 1)

    def propose(self, history: History) -> Decision:
        if self.n_trials is None or len(history.results) < self.n_trials:
            return Start(history.next_trial(), self.max_resource)
        return WAIT if history.running else DONE

    def stops(self, history: History) -> tuple[Stop, ...]:
        out = []
        for trial in sorted(history.running):
            if not history.results[trial]:
                continue
            latest = max(history.results[trial], key=lambda r: (r.rung, r.resource))
            if latest.rung < self.warmup_steps:
                continue
            others = [s for t, s in history.at_rung(latest.rung).items() if t != trial]
            stop, median = median_stop(latest.score, others, self.min_trials)
            if stop:
                out.append(
                    Stop(
                        trial,
                        f"score {latest.score:.6g} at step {latest.rung} is below the median "
                        f"{median:.6g} of {len(others)} other trials",
                    )
                )
        return tuple(out)

    def finished(self, history: History) -> frozenset[int]:
        return frozenset(t for t in history.results if t not in history.running)

    def _target(self, history: History, trial: int) -> int:
        if trial in history.running:
            return self.max_resource
        return history.resource_reached(trial)
