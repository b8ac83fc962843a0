"""Asynchronous successive halving, ASHA (Li et al. 2020, "A System for Massively Parallel
Hyperparameter Tuning", Algorithm 2).

On a free worker: promote a trial as soon as it is in the top ``1 / eta`` of its rung among
the results so far (highest rung first); otherwise start a new trial at the smallest
resource. A worker never idles waiting for a rung to fill. When no trial can start and
none runs, a search whose trials all stopped below the top rung takes its best one up
until one reaches it (:func:`asha_last_promotion`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ._base import DONE, WAIT, Decision, History, Promote, Scheduler, Start, check_int, rank
from .halving import (
    _promoted,
    _rung_target,
    _scored,
    check_schedule,
    promotion_quota,
    rung_resources,
)

__all__ = ["ASHA", "asha_keeps", "asha_last_promotion", "asha_promotable"]


def asha_promotable(history: History, rung: int, eta: int) -> list[int]:
    """Trials of ``rung`` that may be promoted now, best first.

    Those among the top ``floor(n_k / eta)`` of the ``n_k`` scores at ``rung`` so far that
    have not gone on from it (no higher result, no step running, not failed).
    """
    scores = _scored(history, rung)
    top = rank(scores)[: promotion_quota(len(scores), eta)]
    return [t for t in top if not _promoted(history, t, rung)]


def asha_last_promotion(
    history: History, resources: tuple[int, ...], left: float = math.inf
) -> Promote | None:
    """The promotion that ends a search no trial of which reached the top rung, or None.

    ASHA promotes the top ``floor(n_k / eta)`` of a rung, none while it holds fewer than
    ``eta`` scores: a search that can start no more trials (its ``max_trials``, a grid
    smaller than the schedule, the budget for a new trial spent) could end with its best
    trial at a low resource. Once nothing runs, the best trial not yet gone on from the
    highest rung that has one goes up a rung, until a trial reaches the top (within
    ``left``, the budget left). None where a trial has a top-rung result, or nothing can go.
    """
    top = len(resources) - 1
    if history.at_rung(top):
        return None
    for k in range(top - 1, -1, -1):
        for trial in rank(_scored(history, k)):
            if _promoted(history, trial, k):
                continue
            if resources[k + 1] - resources[k] > left:
                return None
            return Promote(trial, k + 1, resources[k + 1], resources[k])
    return None


def asha_keeps(score: float, others: Iterable[float], eta: int) -> bool:
    """Whether a pruner lets a result at a rung go on: ASHA's rule, decided at once.

    ``others``: the other results at the same rung so far. The result goes on if it is
    among the top ``max(floor(n / eta), 1)`` of the ``n`` results, its own included
    (ties go on; ``nan`` never does and ranks last). A scheduler could wait for more
    results before promoting; a pruner must answer now, so, as Optuna's
    ``SuccessiveHalvingPruner``, it lets the best go on while fewer than ``eta`` are in.
    """
    eta = check_int("reduction_factor", eta, 2)
    if math.isnan(score):
        return False
    ranked = sorted([s for s in others if not math.isnan(s)] + [score], reverse=True)
    keep = max(len(ranked) // eta, 1)
    return score >= ranked[keep - 1]


class ASHA(Scheduler):
    """Asynchronous successive halving, bounded by trials and by total resource.

    ``max_trials``: trials started at most (``None``: no bound). ``max_total_resource``:
    budget of every step together, counting continued training once (see
    :meth:`~dmlsearch.schedulers.Scheduler.spent`); a step that would pass it is not
    issued. With neither bound ASHA starts trials for as long as it is asked (the runner's
    time budget ends it).
    """

    name = "asha"

    def __init__(
        self,
        min_resource: int = 1,
        max_resource: int = 81,
        reduction_factor: int = 3,
        max_trials: int | None = None,
        max_total_resource: int | None = None,
    ) -> None:
        r_min, R, eta = check_schedule(min_resource, max_resource, reduction_factor)
        self.min_resource = r_min
        self.max_resource = R
        self.reduction_factor = eta
        self.resources = rung_resources(r_min, R, eta)
        self.max_trials = None if max_trials is None else check_int("max_trials", max_trials, 1)
        self.max_total_resource = (
            None
            if max_total_resource is None
            else check_int("max_total_resource", max_total_resource, self.resources[0])
        )

    def propose(self, history: History) -> Decision:
        left = (
            math.inf
            if self.max_total_resource is None
            else self.max_total_resource - self.spent(history)
        )
        res = self.resources
        for k in range(len(res) - 2, -1, -1):
            for trial in asha_promotable(history, k, self.reduction_factor):
                if res[k + 1] - res[k] <= left:
                    return Promote(trial, k + 1, res[k + 1], res[k])
        more = self.max_trials is None or len(history.results) < self.max_trials
        if res[0] <= left and more and not history.closed:
            return Start(history.next_trial(), res[0])
        if history.running:
            return WAIT
        last = asha_last_promotion(history, res, left)
        return DONE if last is None else last

    def finished(self, history: History) -> frozenset[int]:
        top = len(self.resources) - 1
        done = (t for t in history.results if history.last_rung(t) == top)
        return frozenset(history.failed).union(t for t in done if t not in history.running)

    def _target(self, history: History, trial: int) -> int:
        return _rung_target(self.resources, history, trial)
