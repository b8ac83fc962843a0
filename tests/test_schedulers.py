"""Schedulers as plain functions: hand-built histories, the published schedules, invariants."""

from __future__ import annotations

import copy
import math
import pickle
import random
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmlsearch.exceptions import InvalidParameterError
from dmlsearch.schedulers import (
    ASHA,
    DONE,
    WAIT,
    History,
    Hyperband,
    MedianStopping,
    Promote,
    Result,
    Scheduler,
    Start,
    Stop,
    SuccessiveHalving,
    asha_keeps,
    asha_last_promotion,
    assign_brackets,
    hyperband_brackets,
    make_scheduler,
    promotion_quota,
    rank,
    rung_resources,
    rung_sizes,
    s_max,
    weighted_round_robin,
)

# ---------------------------------------------------------------- a tiny simulated cluster


class Sim:
    """Runs a scheduler against fake workers, checking the contract at every call."""

    def __init__(self, scheduler: Scheduler, workers: int, rng: random.Random) -> None:
        self.scheduler = scheduler
        self.workers = workers
        self.rng = rng
        self.results: dict[int, list[tuple[int, int, float]]] = {}
        self.running: dict[int, tuple[int, int]] = {}
        self.failed: set[int] = set()
        self.decisions: list[Any] = []
        #: Trials the scheduler said it will never continue (their state is released).
        self.given_up: set[int] = set()

    def history(self) -> History:
        return History.of(self.results, self.running, self.failed)

    def propose(self) -> Any:
        raw = (copy.deepcopy(self.results), dict(self.running), set(self.failed))
        history = self.history()
        frozen = pickle.dumps(history)
        before = pickle.dumps(self.scheduler)
        decision = self.scheduler.propose(history)
        self.scheduler.stops(history)
        self.given_up |= self.scheduler.finished(history)
        self.scheduler.spent(history)
        # Never mutates its input, never writes into itself while deciding.
        assert pickle.dumps(history) == frozen
        assert pickle.dumps(self.scheduler) == before
        assert (self.results, self.running, self.failed) == raw
        # Same snapshot, same answer.
        assert self.scheduler.propose(History.of(*raw)) == decision
        self.decisions.append((history, decision))
        return decision

    def apply(self, decision: Any) -> None:
        if isinstance(decision, Start):
            assert decision.trial not in self.results, "a trial id is given out twice"
            self.results[decision.trial] = []
            self.running[decision.trial] = (decision.rung, decision.resource)
        else:
            assert isinstance(decision, Promote)
            assert decision.trial not in self.running and decision.trial not in self.failed
            assert decision.trial not in self.given_up, "promoted after being called finished"
            self.running[decision.trial] = (decision.rung, decision.resource)

    def fill(self) -> Any:
        while len(self.running) < self.workers:
            decision = self.propose()
            if decision is WAIT or decision is DONE:
                return decision
            self.apply(decision)
        return None

    def complete(self, trial: int, score: float | None) -> None:
        rung, resource = self.running.pop(trial)
        if score is None:
            self.failed.add(trial)
        else:
            self.results[trial].append((rung, resource, score))

    def run(self, score: Any, p_fail: float = 0.0, limit: int = 5000) -> Any:
        for _ in range(limit):
            signal = self.fill()
            if not self.running:
                assert signal is DONE
                return signal
            trial = self.rng.choice(sorted(self.running))
            rung = self.running[trial][0]
            failed = self.rng.random() < p_fail
            self.complete(trial, None if failed else score(trial, rung))
        raise AssertionError("the scheduler did not finish")


def _scores(rng: random.Random, nan: bool = True) -> Any:
    """Scores from a small set (ties happen), sometimes nan; fixed per (trial, rung)."""
    table: dict[tuple[int, int], float] = {}
    choices = [0.1, 0.2, 0.3, 0.4, 0.5] + ([math.nan] if nan else [])

    def score(trial: int, rung: int) -> float:
        return table.setdefault((trial, rung), rng.choice(choices))

    return score


def _check_promotion_from(history: History, decision: Promote) -> None:
    """A promotion takes a trial from the rung below, where it stopped."""
    assert history.last_rung(decision.trial) == decision.rung - 1


def _check_promotion(history: History, decision: Promote, sizes: Sequence[int]) -> None:
    """A (synchronous) promotion comes from the top ``sizes[rung]`` (the schedule's quota,
    whatever failed) of the scored trials of the rung below at that moment."""
    k = decision.rung - 1
    _check_promotion_from(history, decision)
    scores = {t: s for t, s in history.at_rung(k).items() if not math.isnan(s)}
    assert decision.trial in rank(scores)[: sizes[decision.rung]]


# ---------------------------------------------------------------- arithmetic


def test_hyperband_brackets_match_the_paper_for_R81_eta3() -> None:
    brackets = hyperband_brackets(81, 3)
    assert [b.s for b in brackets] == [4, 3, 2, 1, 0]
    assert [b.n for b in brackets] == [81, 34, 15, 8, 5]
    assert [b.r for b in brackets] == [1, 3, 9, 27, 81]
    assert sum(b.n for b in brackets) == 143


def test_hyperband_rungs_match_the_published_schedule() -> None:
    hb = Hyperband(1, 81, 3)
    table = [list(zip(b.sizes, b.resources, strict=True)) for b in hb.brackets]
    assert table == [
        [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)],
        [(34, 3), (11, 9), (3, 27), (1, 81)],
        [(15, 9), (5, 27), (1, 81)],
        [(8, 27), (2, 81)],
        [(5, 81)],
    ]
    assert hb.n_trials == 143
    assert [b.first_trial for b in hb.brackets] == [0, 81, 115, 130, 138]
    assert hb.bracket_of(115).bracket == 2 and hb.bracket_of(114).bracket == 3


def test_rung_arithmetic() -> None:
    assert s_max(1, 81, 3) == 4 and s_max(1, 80, 3) == 3 and s_max(5, 5, 2) == 0
    assert rung_resources(1, 81, 3) == (1, 3, 9, 27, 81)
    # Counted down from R: the top rung trains at exactly R, rung 0 at >= r_min.
    assert rung_resources(2, 100, 3) == (3, 11, 33, 100)
    assert rung_resources(1, 16, 2) == (1, 2, 4, 8, 16)
    assert rung_sizes(34, 3, 3) == (34, 11, 3, 1)
    assert promotion_quota(8, 3) == 2 and promotion_quota(2, 3) == 0


def test_weighted_round_robin_by_hand() -> None:
    # Credits after adding the weights (3, 2, 1), the pick, then the credits less 6:
    # [3,2,1]->0 [0,4,2]->1 [3,0,3]->0 (tie: smaller) [0,2,4]->2 [3,4,-1]->1 [6,0,0]->0
    assert weighted_round_robin((3, 2, 1), 6) == (0, 1, 0, 2, 1, 0)
    assert weighted_round_robin((3, 2, 1), 12) == (0, 1, 0, 2, 1, 0) * 2  # repeats
    assert weighted_round_robin((4,), 3) == (0, 0, 0) and weighted_round_robin((1, 1), 0) == ()


def test_assign_brackets_interleaves_li_et_al_s_brackets_by_their_sizes() -> None:
    # R = 9, eta = 3: brackets s = 2, 1, 0 with n = 9, 5, 3 (17 trials per round).
    assert [b.n for b in hyperband_brackets(9, 3)] == [9, 5, 3]
    first = assign_brackets(17, 9, 3)
    assert first[:9] == (2, 1, 2, 0, 2, 1, 2, 0, 2)  # worked out in its docstring
    assert [first.count(s) for s in (2, 1, 0)] == [9, 5, 3]
    assert assign_brackets(34, 9, 3) == first * 2
    # R = 4, eta = 2: n = 4, 3, 3, so a plain rotation with bracket 2 once more.
    assert assign_brackets(10, 4, 2) == (2, 1, 0, 2, 1, 0, 2, 1, 0, 2)
    # Li et al.'s R = 81, eta = 3: one round holds each bracket n times, and every prefix
    # stays within one trial of the brackets' shares.
    brackets = hyperband_brackets(81, 3)
    seq = assign_brackets(143, 81, 3)
    assert [seq.count(b.s) for b in brackets] == [81, 34, 15, 8, 5]
    for t in range(1, 144):
        for b in brackets:
            assert abs(seq[:t].count(b.s) - t * b.n / 143) < 1
    with pytest.raises(InvalidParameterError, match="weights"):
        weighted_round_robin((), 3)
    with pytest.raises(InvalidParameterError, match="weights"):
        weighted_round_robin((2, 0), 3)


def test_asha_keeps_is_asha_s_rule_decided_at_once() -> None:
    assert asha_keeps(0.5, [], 3)  # alone: the best so far goes on
    assert not asha_keeps(0.4, [0.5], 3)  # 2 results, eta 3: only the best goes on
    assert asha_keeps(0.9, [0.5, 0.4], 3)
    assert not asha_keeps(0.6, [0.5, 0.4, 0.9], 3)  # 4 results: top 1
    assert not asha_keeps(0.6, [0.5, 0.4, 0.9, 0.3, 0.95], 3)  # 6 results: top 2 (0.95, 0.9)
    assert asha_keeps(0.9, [0.5, 0.4, 0.6, 0.3, 0.95], 3)
    assert asha_keeps(0.5, [0.9, 0.1, 0.2], 2)  # 4 results, eta 2: top 2
    assert asha_keeps(0.9, [0.9, 0.1], 3)  # a tie goes on
    assert not asha_keeps(math.nan, [], 3)  # nan never goes on ...
    assert asha_keeps(0.1, [math.nan, math.nan], 3)  # ... and ranks last


@pytest.mark.parametrize(
    ("call", "param", "words"),
    [
        (lambda: rung_resources(1, 81, 1), "reduction_factor", [">= 2", "got 1"]),
        (lambda: rung_resources(1, 81, 2.5), "reduction_factor", ["integer", "2.5"]),
        (lambda: rung_resources(100, 81, 3), "min_resource", ["<= max_resource", "81", "100"]),
        (lambda: rung_resources(0, 81, 3), "min_resource", ["[1, 81]", "got 0"]),
        (lambda: hyperband_brackets(0, 3), "max_resource", [">= 1", "got 0"]),
        (lambda: hyperband_brackets(True, 3), "max_resource", ["True"]),
        (lambda: hyperband_brackets(2**70, 3), "max_resource", ["below 2**63", str(2**70)]),
        (lambda: hyperband_brackets(float("inf"), 3), "max_resource", ["inf"]),
        (lambda: hyperband_brackets(np.bool_(True), 3), "max_resource", ["True"]),
        (lambda: ASHA(1, 27, 2**63), "reduction_factor", ["below 2**63"]),
        (lambda: SuccessiveHalving(1, 27, 3, n_trials=0), "n_trials", [">= 1", "got 0"]),
        (lambda: ASHA(3, 27, 3, max_total_resource=2), "max_total_resource", [">= 3"]),
        (lambda: MedianStopping(10, min_trials=0), "min_trials", [">= 1"]),
        (lambda: make_scheduler("bohb"), "scheduler", ["'bohb'", "asha", "hyperband"]),
        (lambda: make_scheduler("asha", n_trials=3), "scheduler", ["n_trials"]),
    ],
)
def test_bad_arguments_name_the_value_and_the_range(
    call: Any, param: str, words: list[str]
) -> None:
    with pytest.raises(InvalidParameterError) as info:
        call()
    assert info.value.param == param
    for word in words:
        assert word in str(info.value)


def test_make_scheduler_builds_each_name() -> None:
    assert isinstance(make_scheduler("ASHA", max_resource=27), ASHA)
    assert isinstance(make_scheduler("hyperband", max_resource=27), Hyperband)
    assert isinstance(make_scheduler("halving", max_resource=27), SuccessiveHalving)
    median = MedianStopping(10)
    assert make_scheduler(median) is median


def test_history_copies_and_checks_its_input() -> None:
    raw = {0: [(0, 1, 0.5)], 1: []}
    history = History.of(raw, running=[1, 2])
    raw[0].append((1, 3, 0.9))
    assert history.results[0] == (Result(0, 1, 0.5),)
    assert history.trials == (0, 1, 2) and history.next_trial() == 3
    assert not hasattr(history.results, "__setitem__")
    with pytest.raises(InvalidParameterError, match="both running and failed"):
        History.of({0: []}, running=[0], failed=[0])
    with pytest.raises(InvalidParameterError, match=r"\(rung, resource, score\)"):
        History.of({0: [(0, 0.5)]})


# ---------------------------------------------------------------- successive halving


def _drive(scheduler: Scheduler, results: dict[int, list[Any]], running: set[int] = frozenset()):  # type: ignore[assignment]
    """Propose until WAIT/DONE, marking each promoted or started trial running."""
    running = set(running)
    out = []
    while True:
        decision = scheduler.propose(History.of(results, running))
        out.append(decision)
        if decision is WAIT or decision is DONE:
            return out
        running.add(decision.trial)
        results.setdefault(decision.trial, [])


def test_halving_starts_n_trials_then_waits_for_the_rung() -> None:
    sh = SuccessiveHalving(1, 9, 3, n_trials=9)
    out = _drive(sh, {})
    assert out[:-1] == [Start(t, 1) for t in range(9)] and out[-1] is WAIT
    # Eight of nine done: still WAIT, even though the leaders are known.
    results = {t: [(0, 1, t / 10)] for t in range(8)}
    assert sh.propose(History.of(results, running=[8])) is WAIT


def test_halving_never_calls_a_trial_finished_before_its_rung_is_full() -> None:
    # Rung 1 will hold trials 0, 1 and 2 (the top 3 of 9); 0 got there first. Its quota
    # for rung 2 is not known until 1 and 2 are promoted and scored: 0 may still go on.
    sh = SuccessiveHalving(1, 27, 3, n_trials=9)
    results = {t: [(0, 1, 1.0 - t / 10)] for t in range(9)}
    results[0].append((1, 3, 0.5))
    assert 0 not in sh.finished(History.of(results))
    assert 0 not in sh.finished(History.of(results, running=[1]))
    results[1].append((1, 3, 0.4))
    results[2].append((1, 3, 0.3))
    assert sh.finished(History.of(results)) == frozenset({1, 2, *range(3, 9)})


def test_halving_promotes_exactly_the_top_floor_n_over_eta_in_order() -> None:
    sh = SuccessiveHalving(1, 9, 3, n_trials=9)
    scores = [0.3, 0.9, 0.5, 0.9, 0.1, math.nan, 0.8, 0.2, 0.7]
    results = {t: [(0, 1, s)] for t, s in enumerate(scores)}
    out = _drive(sh, results)
    # floor(9 / 3) = 3 (the nan counts, as scikit-learn counts a failed candidate, and is
    # never promoted), best first, the 0.9 tie broken by trial id.
    assert out == [Promote(1, 1, 3, 1), Promote(3, 1, 3, 1), Promote(6, 1, 3, 1), WAIT]
    results = {t: [(0, 1, s)] for t, s in enumerate(scores)}
    results[1].append((1, 3, 0.6))
    results[3].append((1, 3, 0.95))
    results[6].append((1, 3, 0.7))
    assert _drive(sh, results) == [Promote(3, 2, 9, 3), WAIT]  # floor(3 / 3) = 1
    results[3].append((2, 9, 0.97))
    assert _drive(sh, results) == [DONE]
    assert sh.finished(History.of(results)) == frozenset(range(9))


def test_halving_keeps_the_schedules_quotas_when_trials_fail_or_never_start() -> None:
    # A grid of 2 under a 9-trial schedule: 7 starts failed (the strategy had nothing to
    # start). Rung 1 keeps its 3 places (both go on), rung 2 its 1 (the best goes on).
    sh = SuccessiveHalving(1, 9, 3, n_trials=9)
    results: dict[int, list[Any]] = {0: [(0, 1, 0.4)], 1: [(0, 1, 0.6)]}
    failed = range(2, 9)
    assert sh.propose(History.of(results, failed=failed)) == Promote(1, 1, 3, 1)
    results[1].append((1, 3, 0.7))
    assert sh.propose(History.of(results, failed=failed)) == Promote(0, 1, 3, 1)
    results[0].append((1, 3, 0.8))
    assert sh.propose(History.of(results, failed=failed)) == Promote(0, 2, 9, 3)
    assert sh.finished(History.of(results, failed=failed)) == frozenset({1, *failed})
    results[0].append((2, 9, 0.9))
    assert sh.propose(History.of(results, failed=failed)) is DONE
    # An explicit n_trials below eta**s_max keeps its literal schedule: rungs of 4, 1, 0.
    short = SuccessiveHalving(1, 9, 3, n_trials=4)
    four = {t: [(0, 1, t / 10)] for t in range(4)}
    assert _drive(short, four) == [Promote(3, 1, 3, 1), WAIT]
    four[3].append((1, 3, 0.5))
    assert _drive(short, four) == [DONE]


def test_numpy_numbers_are_taken_as_python_ones() -> None:
    # scikit-learn takes any numbers.Integral: so do the schedules.
    assert rung_resources(np.int64(1), np.int32(9), np.int64(3)) == (1, 3, 9)
    assert SuccessiveHalving(1, np.float64(9.0), 3, n_trials=np.uint8(9)).n_trials == 9


def test_hyperband_rounds_repeat_the_brackets_with_ids_after_the_first_round() -> None:
    one, two = Hyperband(1, 9, 3), Hyperband(1, 9, 3, rounds=2)
    assert (one.n_trials, two.n_trials) == (17, 34)
    assert [b.bracket for b in two.brackets] == [2, 1, 0, 2, 1, 0]
    assert two.bracket_of(17).trial_ids == range(17, 26)
    sim = Sim(two, workers=3, rng=random.Random(0))
    assert sim.run(lambda t, k: (t * 7 % 34) / 40 + k) is DONE
    # Per round: 1 of bracket 2, 1 of bracket 1 and all 3 of bracket 0 reach 9.
    assert sum(1 for t in range(34) if sim.history().resource_reached(t) == 9) == 2 * 5
    with pytest.raises(InvalidParameterError, match="rounds"):
        Hyperband(1, 9, 3, rounds=0)


def test_halving_runs_to_the_top_rung_and_is_done() -> None:
    sh = SuccessiveHalving(1, 9, 3)  # n_trials = eta**s_max = 9
    sim = Sim(sh, workers=4, rng=random.Random(0))
    assert sim.run(lambda t, k: (t * 7 % 9) / 10 + k) is DONE
    reached = [sim.history().last_rung(t) for t in range(9)]
    assert sorted(reached) == [0, 0, 0, 0, 0, 0, 1, 1, 2]
    assert sh.spent(sim.history()) == 9 * 1 + 3 * (3 - 1) + 1 * (9 - 3)


def test_halving_ignores_ids_outside_its_range() -> None:
    sh = SuccessiveHalving(3, 9, 3, n_trials=3, first_trial=10, bracket=1)
    history = History.of({0: [(0, 1, 0.9)], 10: [(0, 3, 0.5)]}, running=[1])
    assert sh.propose(history) == Start(11, 3, 0, 1)


# ---------------------------------------------------------------- Hyperband


def test_hyperband_runs_brackets_concurrently() -> None:
    hb = Hyperband(1, 81, 3)
    out = _drive(hb, {}, set())
    starts = out[:-1]
    # All 143 start before any result: a bracket waiting on its rung never holds others back.
    assert [d.trial for d in starts] == list(range(143))
    assert {(d.bracket, d.resource) for d in starts} == {(4, 1), (3, 3), (2, 9), (1, 27), (0, 81)}
    assert out[-1] is WAIT


def test_hyperband_reaches_the_published_rung_sizes() -> None:
    hb = Hyperband(1, 81, 3)
    sim = Sim(hb, workers=10**6, rng=random.Random(1))
    assert sim.run(_scores(random.Random(2), nan=False)) is DONE
    history = sim.history()
    for bracket in hb.brackets:
        own = bracket.own(history)
        counts = [len(own.at_rung(k)) for k in range(len(bracket.resources))]
        assert tuple(counts) == bracket.sizes
    for history, decision in sim.decisions:
        if isinstance(decision, Promote):
            owner = hb.bracket_of(decision.trial)
            _check_promotion(owner.own(history), decision, owner.sizes)


# ---------------------------------------------------------------- ASHA


def test_asha_promotion_order_on_a_fixed_sequence_of_results() -> None:
    scores = {
        (0, 0): 0.5, (1, 0): 0.9, (2, 0): 0.7, (1, 1): 0.6, (3, 0): 0.8, (4, 0): 0.95,
        (4, 1): 0.7, (5, 0): 0.1, (6, 0): 0.3, (7, 0): 0.92, (7, 1): 0.8, (7, 2): 0.99,
    }  # fmt: skip
    sim = Sim(ASHA(1, 9, 3, max_trials=8), workers=1, rng=random.Random(0))
    sim.run(lambda t, k: scores[(t, k)])
    decisions = [d for _, d in sim.decisions if d is not DONE]
    assert decisions == [
        Start(0, 1), Start(1, 1), Start(2, 1),
        Promote(1, 1, 3, 1),  # 1 is the top third of {0, 1, 2}
        Start(3, 1), Start(4, 1),
        Promote(4, 1, 3, 1),  # 4 leads five results
        Start(5, 1), Start(6, 1), Start(7, 1),
        Promote(7, 1, 3, 1),  # eight results: the top two are 4 and 7
        Promote(7, 2, 9, 3),  # three results at rung 1: 7 leads; highest rung first
    ]  # fmt: skip


def test_asha_promotes_at_once_while_others_still_run() -> None:
    asha = ASHA(1, 9, 3)
    results = {0: [(0, 1, 0.2)], 1: [(0, 1, 0.8)], 2: [(0, 1, 0.4)], 3: [], 4: []}
    assert asha.propose(History.of(results, running=[3, 4])) == Promote(1, 1, 3, 1)
    # Promoted already (running rung 1): a new trial starts instead of a WAIT.
    assert asha.propose(History.of(results, running=[1, 3, 4])) == Start(5, 1)


def test_asha_waits_only_when_it_cannot_start() -> None:
    asha = ASHA(1, 9, 3, max_trials=2)
    assert asha.propose(History.of({0: [(0, 1, 0.5)]}, running=[1])) is WAIT
    # Two results cannot fill a top third, and no trial can start: the best goes on
    # alone, to the top, then the search is done.
    two = {0: [(0, 1, 0.5)], 1: [(0, 1, 0.1)]}
    assert asha.propose(History.of(two)) == Promote(0, 1, 3, 1)
    assert asha.propose(History.of(two, running=[0])) is WAIT
    two[0].append((1, 3, 0.6))
    assert asha.propose(History.of(two)) == Promote(0, 2, 9, 3)
    two[0].append((2, 9, 0.7))
    assert asha.propose(History.of(two)) is DONE
    budget = ASHA(1, 9, 3, max_total_resource=4)
    # 3 trials at 1, one promoted to 3 would need 2 more: only a start (1) fits.
    history = History.of({t: [(0, 1, t)] for t in range(3)})
    assert budget.spent(history) == 3
    assert budget.propose(history) == Start(3, 1)


def test_asha_takes_its_best_trial_to_the_top_once_no_trial_can_start() -> None:
    asha = ASHA(1, 27, 3)  # no trial bound: only a closed history stops the starts
    results = {t: [(0, 1, s)] for t, s in enumerate((0.3, 0.9, 0.5, 0.7, 0.2))}
    results[1].append((1, 3, 0.8))  # promoted as the top third of five
    assert asha.propose(History.of(results)) == Start(5, 1)
    closed = History.of(results, closed=True)
    # Rung 1 holds one score (quota 0): trial 1 goes on from there, not another trial.
    assert asha.propose(closed) == Promote(1, 2, 9, 3)
    failed = History.of(results, failed=[1], closed=True)
    # Trial 1 failed at rung 1: the best of rung 0 not yet gone on is next.
    assert asha.propose(failed) == Promote(3, 1, 3, 1)
    results[1].append((2, 9, 0.85))
    results[1].append((3, 27, 0.88))
    assert asha.propose(History.of(results, closed=True)) is DONE  # a trial at the top
    # The budget left must pay for it.
    tight = ASHA(1, 27, 3, max_total_resource=6)
    few = {0: [(0, 1, 0.4)], 1: [(0, 1, 0.6)]}
    assert tight.propose(History.of(few, closed=True)) == Promote(1, 1, 3, 1)
    few[1].append((1, 3, 0.7))  # 2 + 2 spent of 6: 6 more rounds would pass it
    assert tight.propose(History.of(few, closed=True)) is DONE
    # A snapshot of part of a history keeps it closed.
    assert History.of(results, closed=True).restrict([0, 1]).closed


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    workers=st.integers(1, 6),
    eta=st.integers(2, 4),
    R=st.integers(1, 40),
    max_trials=st.one_of(st.none(), st.integers(1, 30)),
    budget=st.integers(40, 300),
)
def test_asha_invariants(
    seed: int, workers: int, eta: int, R: int, max_trials: int | None, budget: int
) -> None:
    asha = ASHA(1, R, eta, max_trials=max_trials, max_total_resource=budget)
    rng = random.Random(seed)
    sim = Sim(asha, workers, rng)
    assert sim.run(_scores(rng), p_fail=0.05) is DONE
    starts = [d.trial for _, d in sim.decisions if isinstance(d, Start)]
    assert len(starts) == len(set(starts))
    assert max_trials is None or len(starts) <= max_trials
    for history, decision in sim.decisions:
        assert asha.spent(history) <= budget
        full = max_trials is not None and len(history.results) >= max_trials
        cannot_start = full or budget - asha.spent(history) < asha.resources[0]
        if isinstance(decision, Promote):
            k = decision.rung - 1
            scores = {t: v for t, v in history.at_rung(k).items() if not math.isnan(v)}
            if decision.trial not in rank(scores)[: len(scores) // eta]:
                # Outside the top third only as the last promotion: nothing runs, nothing
                # can start, no trial at the top rung, the best of the highest rung left.
                assert cannot_start and not history.running
                left = budget - asha.spent(history)
                assert decision == asha_last_promotion(history, asha.resources, left)
            _check_promotion_from(history, decision)
        if decision is WAIT or decision is DONE:
            # It never idles a worker while a trial could start.
            assert cannot_start
        if decision is DONE:
            # It ends with a trial at the top rung unless nothing more could go there.
            left = budget - asha.spent(history)
            assert asha_last_promotion(history, asha.resources, left) is None
    assert asha.spent(sim.history()) <= budget


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    workers=st.integers(1, 50),
    eta=st.integers(2, 4),
    R=st.integers(1, 81),
)
def test_hyperband_and_halving_invariants(seed: int, workers: int, eta: int, R: int) -> None:
    rng = random.Random(seed)
    for scheduler in (Hyperband(1, R, eta), SuccessiveHalving(1, R, eta)):
        sim = Sim(scheduler, workers, rng)
        assert sim.run(_scores(rng), p_fail=0.05) is DONE
        starts = [d.trial for _, d in sim.decisions if isinstance(d, Start)]
        assert len(starts) == len(set(starts)) == scheduler.n_trials
        brackets = scheduler.brackets if isinstance(scheduler, Hyperband) else (scheduler,)
        # Continued training counts once: at most n_k * (r_k - r_{k-1}) per rung.
        planned = sum(
            n * (r - prev)
            for b in brackets
            for n, r, prev in zip(b.sizes, b.resources, (0, *b.resources), strict=False)
        )
        assert scheduler.spent(sim.history()) <= planned
        for history, decision in sim.decisions:
            if isinstance(decision, Promote):
                owner = brackets[0] if len(brackets) == 1 else scheduler.bracket_of(decision.trial)  # type: ignore[attr-defined]
                _check_promotion(owner.own(history), decision, owner.sizes)


# ---------------------------------------------------------------- median stopping


def test_median_stops_below_the_median_after_warmup() -> None:
    med = MedianStopping(10, warmup_steps=2, min_trials=3)
    done = {
        t: [(k, k + 1, s + k / 100) for k in range(5)]
        for t, s in enumerate([0.5, 0.6, 0.7, 0.8, 0.9])
    }
    results = {
        **done,
        5: [(0, 1, 0.1), (1, 2, 0.1), (2, 3, 0.55)],
        6: [(2, 3, 0.75)],
        7: [(0, 1, 0.0)],
    }
    history = History.of(results, running=[5, 6, 7])
    stops = med.stops(history)
    # 5 is below the median at step 2; 6 is above; 7 is still warming up.
    assert [s.trial for s in stops] == [5]
    assert "median" in stops[0].reason and "step 2" in stops[0].reason
    assert isinstance(stops[0], Stop)
    # Too few others at the step: nobody is stopped.
    assert MedianStopping(10, min_trials=10).stops(history) == ()


def test_median_starts_full_budget_trials_up_to_n_trials() -> None:
    med = MedianStopping(10, n_trials=2)
    assert med.propose(History.of({})) == Start(0, 10)
    assert med.propose(History.of({0: []}, running=[0])) == Start(1, 10)
    assert med.propose(History.of({0: [], 1: []}, running=[1])) is WAIT
    assert med.propose(History.of({0: [], 1: []})) is DONE
    assert med.finished(History.of({0: [], 1: []}, running=[1])) == {0}


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), workers=st.integers(1, 5))
def test_median_never_stops_a_trial_at_or_above_the_median(seed: int, workers: int) -> None:
    rng = random.Random(seed)
    med = MedianStopping(8, n_trials=12, min_trials=2)
    results: dict[int, list[tuple[int, int, float]]] = {}
    running: set[int] = set()
    for _ in range(200):
        history = History.of(results, running)
        before = copy.deepcopy(results)
        stops = med.stops(history)
        assert results == before
        for stop in stops:
            latest = history.results[stop.trial][-1]
            others = [s for t, s in history.at_rung(latest.rung).items() if t != stop.trial]
            others = [s for s in others if not math.isnan(s)]
            assert len(others) >= 2
            assert math.isnan(latest.score) or latest.score < statistics.median(others)
            assert stop.trial in running
            running.discard(stop.trial)
        decision = med.propose(History.of(results, running))
        if isinstance(decision, Start) and len(running) < workers:
            results[decision.trial] = []
            running.add(decision.trial)
            continue
        if not running:
            assert decision is DONE and len(results) == 12
            break
        trial = rng.choice(sorted(running))
        step = len(results[trial])
        results[trial].append((step, step + 1, rng.choice([0.1, 0.2, 0.3, math.nan])))
        if step + 1 == 8:
            running.discard(trial)
    else:
        raise AssertionError("median stopping did not finish")
