"""Hyperband (Li et al. 2018): successive-halving brackets run together.

Each bracket ``s = s_max .. 0`` is a :class:`SuccessiveHalving` of
``n = ceil((s_max + 1) / (s + 1) * eta**s)`` trials starting at ``r = R * eta**-s``.
Hyperband composes them: it asks each bracket and picks one answer. It is not a second
loop, and keeps no state of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..exceptions import InvalidParameterError
from ._base import DONE, WAIT, Decision, History, Promote, Scheduler, Start, check_int
from .halving import SuccessiveHalving, check_schedule, s_max

__all__ = [
    "Bracket",
    "Hyperband",
    "assign_brackets",
    "hyperband_brackets",
    "weighted_round_robin",
]


@dataclass(frozen=True)
class Bracket:
    """Bracket ``s``: ``n`` trials starting at resource ``r``, halved ``s`` times."""

    s: int
    n: int
    r: int


def hyperband_brackets(R: int, eta: int, r_min: int = 1) -> tuple[Bracket, ...]:
    """Li et al.'s brackets, most exploratory first.

    ``s_max = floor(log_eta(R / r_min))``; bracket ``s`` has
    ``n = ceil((s_max + 1) / (s + 1) * eta**s)`` trials at ``r = R * eta**-s`` (rounded
    down). For ``R = 81, eta = 3``: ``n = 81, 34, 15, 8, 5`` at ``r = 1, 3, 9, 27, 81``.
    """
    r_min, R, eta = check_schedule(r_min, R, eta)
    top = s_max(r_min, R, eta)
    return tuple(
        Bracket(s, -(-(top + 1) * eta**s // (s + 1)), R // eta**s) for s in range(top, -1, -1)
    )


def weighted_round_robin(weights: Sequence[int], n: int) -> tuple[int, ...]:
    """The first ``n`` picks of a smooth weighted round robin over ``weights`` (indices).

    Every index's credit grows by its weight; the index with the most credit is picked
    (ties: the smaller index) and its credit drops by the total weight. The picks repeat
    every ``sum(weights)``, each index ``weights[i]`` times per cycle, spread out rather
    than in runs (``(3, 2, 1)`` gives ``0, 1, 0, 2, 1, 0``).
    """
    weights = [check_int("weights", w, 1) for w in weights]
    n = check_int("n", n, 0)
    if not weights:
        raise InvalidParameterError("weights", "needs at least one weight, got none")
    total = sum(weights)
    credit = [0] * len(weights)
    out = []
    for _ in range(n):
        for i, w in enumerate(weights):
            credit[i] += w
        pick = max(range(len(weights)), key=lambda i: (credit[i], -i))
        credit[pick] -= total
        out.append(pick)
    return tuple(out)


def assign_brackets(n_trials: int, R: int, eta: int, r_min: int = 1) -> tuple[int, ...]:
    """The Hyperband bracket ``s`` of trials ``0 .. n_trials - 1``, for asynchronous Hyperband.

    The brackets are :func:`hyperband_brackets`'s, and trials go to them by
    :func:`weighted_round_robin` weighted by each bracket's ``n`` (most exploratory first):
    every ``sum(n)`` trials hold bracket ``s`` exactly ``n_s`` times, as one round of Li
    et al.'s Hyperband does, and a shorter run holds them in about those proportions.
    (Optuna's ``HyperbandPruner`` uses the same weights with a hash of the study's name
    and the trial number; this rule is deterministic.) For ``R = 9, eta = 3`` (``n = 9,
    5, 3``) the first nine trials get ``s = 2, 1, 2, 0, 2, 1, 2, 0, 2``.
    """
    brackets = hyperband_brackets(R, eta, r_min)
    picks = weighted_round_robin([b.n for b in brackets], n_trials)
    return tuple(brackets[i].s for i in picks)


class Hyperband(Scheduler):
    """Hyperband: every bracket of :func:`hyperband_brackets` runs at once.

    Trial ids are given out bracket by bracket (bracket ``s_max`` holds ids
    ``0 .. n - 1``, the next bracket the ids after), so a trial's bracket follows from its
    id (:meth:`bracket_of`). On a free worker, Hyperband first promotes (any bracket, most
    exploratory first), else starts a trial in the first bracket that has one to start,
    else WAITs while any bracket waits, else is DONE. A bracket waiting for a rung to fill
    never holds a worker back from another bracket.
    """

    name = "hyperband"

    def __init__(
        self,
        min_resource: int = 1,
        max_resource: int = 81,
        reduction_factor: int = 3,
        rounds: int = 1,
    ) -> None:
        r_min, R, eta = check_schedule(min_resource, max_resource, reduction_factor)
        self.min_resource = r_min
        self.max_resource = R
        self.reduction_factor = eta
        #: How many times the brackets run (Li et al.'s outer loop), all at once: more
        #: trials than one round holds (a large grid, a large n_trials) get brackets too.
        self.rounds = check_int("rounds", rounds, 1)
        brackets = []
        first = 0
        for _ in range(self.rounds):
            for b in hyperband_brackets(R, eta, r_min):
                brackets.append(SuccessiveHalving(b.r, R, eta, b.n, bracket=b.s, first_trial=first))
                first += b.n
        self.brackets: tuple[SuccessiveHalving, ...] = tuple(brackets)
        self.n_trials = first

    def bracket_of(self, trial: int) -> SuccessiveHalving:
        """The bracket that owns ``trial``; ``KeyError`` for an id beyond the last bracket."""
        for bracket in self.brackets:
            if trial in bracket.trial_ids:
                return bracket
        raise KeyError(f"trial {trial} is in no bracket (ids 0..{self.n_trials - 1})")

    def propose(self, history: History) -> Decision:
        answers = [b.propose(history) for b in self.brackets]
        for wanted in (Promote, Start):
            for answer in answers:
                if isinstance(answer, wanted):
                    return answer
        return WAIT if any(a is WAIT for a in answers) else DONE

    def finished(self, history: History) -> frozenset[int]:
        out: set[int] = set()
        for bracket in self.brackets:
            out |= bracket.finished(history)
        return frozenset(out)

    def _target(self, history: History, trial: int) -> int:
        return self.bracket_of(trial)._target(history, trial)
