"""Synchronous successive halving (Jamieson & Talwalkar 2016; Li et al. 2018's inner loop).

``n`` trials train at the smallest resource; when a rung is complete, its top
``floor(n_k / eta)`` trials are promoted to ``eta`` times the resource, until one rung
trains at ``R``. Symbols are the papers': ``r_min`` (smallest resource), ``R`` (largest),
``eta`` (reduction factor), ``s_max`` (number of halvings), rung ``k``.
"""

from __future__ import annotations

import math
from typing import Any

from ..exceptions import InvalidParameterError
from ._base import (
    DONE,
    WAIT,
    Decision,
    History,
    Promote,
    Scheduler,
    Start,
    check_int,
    rank,
)

__all__ = [
    "SuccessiveHalving",
    "check_schedule",
    "promotion_quota",
    "rung_resources",
    "rung_sizes",
    "s_max",
]


def check_schedule(r_min: Any, R: Any, eta: Any) -> tuple[int, int, int]:
    """``(r_min, R, eta)`` as ints, or :class:`InvalidParameterError` naming the bad one.

    ``R >= 1`` (``max_resource``), ``1 <= r_min <= R`` (``min_resource``), ``eta >= 2``
    (``reduction_factor``).
    """
    R = check_int("max_resource", R, 1)
    eta = check_int("reduction_factor", eta, 2)
    if isinstance(r_min, int | float) and not isinstance(r_min, bool) and r_min > R:
        raise InvalidParameterError(
            "min_resource",
            f"must be <= max_resource (R = {R}), got {r_min}; lower min_resource or raise "
            "max_resource",
        )
    r_min = check_int("min_resource", r_min, 1, R)
    return r_min, R, eta


def s_max(r_min: int, R: int, eta: int) -> int:
    """The number of halvings: the largest ``s`` with ``r_min * eta**s <= R``."""
    r_min, R, eta = check_schedule(r_min, R, eta)
    s = 0
    while r_min * eta ** (s + 1) <= R:
        s += 1
    return s


def rung_resources(r_min: int, R: int, eta: int) -> tuple[int, ...]:
    """The resource of each rung ``k = 0..s_max``: ``R * eta**(k - s_max)``, rounded down.

    Counted down from ``R`` so that the top rung trains at exactly ``R``; rung 0 is at
    least ``r_min``. ``rung_resources(1, 81, 3) == (1, 3, 9, 27, 81)``.
    """
    s = s_max(r_min, R, eta)
    return tuple(R // eta ** (s - k) for k in range(s + 1))


def rung_sizes(n: int, eta: int, s: int) -> tuple[int, ...]:
    """Trials at each rung of a bracket of ``n`` trials and ``s`` halvings: ``floor(n * eta**-k)``.

    ``rung_sizes(81, 3, 4) == (81, 27, 9, 3, 1)``. (With failures a rung may hold fewer.)
    """
    n = check_int("n_trials", n, 1)
    eta = check_int("reduction_factor", eta, 2)
    s = check_int("s", s, 0)
    return tuple(n // eta**k for k in range(s + 1))


def promotion_quota(n_k: int, eta: int) -> int:
    """How many of the ``n_k`` scored trials of a rung are promoted: ``floor(n_k / eta)``."""
    n_k = check_int("n_k", n_k, 0)
    eta = check_int("reduction_factor", eta, 2)
    return n_k // eta


def _promoted(history: History, trial: int, rung: int) -> bool:
    """Whether ``trial`` has gone on from ``rung`` (a result above it, or a step under way)."""
    last = history.last_rung(trial)
    if last > rung:
        return True
    return last == rung and (trial in history.running or trial in history.failed)


def _scored(history: History, rung: int) -> dict[int, float]:
    """Scores at ``rung`` that may be promoted (``nan`` never is)."""
    return {t: s for t, s in history.at_rung(rung).items() if not math.isnan(s)}


def _rung_target(resources: tuple[int, ...], history: History, trial: int) -> int:
    """Resource ``trial`` has reached, or is being trained to if running."""
    reached = history.resource_reached(trial)
    if trial in history.running:
        k = min(history.last_rung(trial) + 1, len(resources) - 1)
        return max(reached, resources[k])
    return reached


class SuccessiveHalving(Scheduler):
    """Synchronous successive halving over ``n_trials`` trials.

    Starts ``n_trials`` trials at ``rung_resources(...)[0]``; when every trial of rung ``k``
    has ended, promotes the best ``rung_sizes(n_trials, eta, s)[k + 1]`` of them (best
    first, ties by trial id) to rung ``k + 1``; answers WAIT while a rung is incomplete and
    DONE after the top rung. The quotas are the schedule's, as scikit-learn's halving
    counts failed candidates: trials that failed, scored NaN, or that the strategy could
    not start (a grid smaller than ``n_trials``) never shrink the rungs above them, so a
    small grid still takes its best trial to the top.

    ``n_trials`` defaults to ``eta**s_max``, so that one trial reaches ``R``. ``bracket``
    and ``first_trial`` place this run inside a :class:`~dmlsearch.schedulers.Hyperband`:
    its trials are ids ``first_trial .. first_trial + n_trials - 1``; other ids in a
    history are not its own and are ignored.
    """

    name = "halving"

    def __init__(
        self,
        min_resource: int = 1,
        max_resource: int = 81,
        reduction_factor: int = 3,
        n_trials: int | None = None,
        *,
        bracket: int = 0,
        first_trial: int = 0,
    ) -> None:
        r_min, R, eta = check_schedule(min_resource, max_resource, reduction_factor)
        self.min_resource = r_min
        self.max_resource = R
        self.reduction_factor = eta
        self.resources = rung_resources(r_min, R, eta)
        s = len(self.resources) - 1
        self.n_trials = eta**s if n_trials is None else check_int("n_trials", n_trials, 1)
        self.sizes = rung_sizes(self.n_trials, eta, s)
        self.bracket = check_int("bracket", bracket, 0)
        self.first_trial = check_int("first_trial", first_trial, 0)

    @property
    def trial_ids(self) -> range:
        """The ids of this run's trials."""
        return range(self.first_trial, self.first_trial + self.n_trials)

    def own(self, history: History) -> History:
        """The part of ``history`` about this run's trials."""
        ids = self.trial_ids
        if all(t in ids for t in history.results):
            return history
        return history.restrict(t for t in history.results if t in ids)

    def propose(self, history: History) -> Decision:
        h = self.own(history)
        if len(h.results) < self.n_trials:
            trial = next(t for t in self.trial_ids if t not in h.results)
            return Start(trial, self.resources[0], 0, self.bracket)
        for k in range(len(self.resources) - 1):
            if any(h.last_rung(t) == k - 1 for t in h.running):
                return WAIT  # rung k is incomplete: nothing above it can move
            scores = _scored(h, k)
            for trial in rank(scores)[: self.sizes[k + 1]]:
                if not _promoted(h, trial, k):
                    return Promote(
                        trial, k + 1, self.resources[k + 1], self.resources[k], self.bracket
                    )
        return WAIT if h.running else DONE

    def finished(self, history: History) -> frozenset[int]:
        """Trials never to be continued: their trained state may be released.

        Failed trials, trials at the top rung, and trials of a complete rung outside the
        rung above's quota. A rung is complete once every trial promoted into it has a
        result there: its first arrivals are not judged on a partial rung.
        """
        h = self.own(history)
        top = len(self.resources) - 1
        out = set(h.failed)
        out.update(t for t in h.results if h.last_rung(t) == top and t not in h.running)
        if len(h.results) < self.n_trials:
            return frozenset(out)
        keep: set[int] = set()  # the trials the rung below promotes into rung k
        for k in range(top):
            if any(h.last_rung(t) == k - 1 for t in h.running):
                break
            if any(not _promoted(h, t, k - 1) for t in keep):
                break  # promotions into rung k are still to come
            scores = _scored(h, k)
            keep = set(rank(scores)[: self.sizes[k + 1]])
            out.update(
                t
                for t in h.at_rung(k)
                if t not in keep and h.last_rung(t) == k and t not in h.running
            )
        return frozenset(out)

    def _target(self, history: History, trial: int) -> int:
        return _rung_target(self.resources, history, trial)
