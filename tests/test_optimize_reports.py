"""optimize's reports and stops: what a trial sends at once, what waits, and local stops."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from dmlsearch import Float, optimize
from dmlsearch._objective import SEND_EVERY, Trial
from dmlsearch._objective_source import ObjectiveSource
from dmlsearch._pruners import (
    AshaPruner,
    HyperbandPruner,
    JudgedSteps,
    MedianPruner,
    Pruner,
)
from dmlsearch.runner import stop_flags

STEPS = 27


def test_judged_steps_are_the_first_report_at_or_past_each_rung() -> None:
    rungs = JudgedSteps(rungs=(1, 3, 9, 27))
    sent = [s for s, prev in zip(range(1, 28), [None, *range(1, 27)], strict=True)
            if rungs.judged(prev, s)]  # fmt: skip
    assert sent == [1, 3, 9, 27]
    # Steps that skip a rung: the first past it is the one the pruner judges there.
    assert rungs.judged(2, 4) and not rungs.judged(4, 8) and rungs.judged(8, 10)
    assert rungs.judged(5, 5) and rungs.judged(7, 3)  # repeated or out of order: at once
    geometric = JudgedSteps(geometric=(2, 3))  # 2, 6, 18, 54, ... without end
    assert [s for s in range(1, 60) if geometric.judged(s - 1, s)] == [2, 6, 18, 54]
    median = JudgedSteps(every_from=4)
    assert [s for s in range(1, 8) if median.judged(s - 1, s)] == [4, 5, 6, 7]
    assert not JudgedSteps().judged(None, 1)


def test_each_pruner_names_the_steps_it_decides_on() -> None:
    assert MedianPruner(warmup_steps=3).judged_steps(0) == JudgedSteps(every_from=3)
    # The last rung of a bounded schedule is the full budget: nobody is stopped there.
    assert AshaPruner(1, 3, 27).judged_steps(5) == JudgedSteps(rungs=(1, 3, 9), wait=True)
    assert AshaPruner(2, 3).judged_steps(5) == JudgedSteps(geometric=(2, 3), wait=True)
    hyperband = HyperbandPruner(1, 27, 3)
    for trial in range(60):
        bracket = hyperband.bracket_of(trial)
        judged = hyperband.judged_steps(trial)
        assert judged.rungs == hyperband.bracket_resources[bracket][:-1] and judged.wait

    class Custom(Pruner):
        def stop(self, trial: int, curves: Any, running: frozenset[int]) -> str | None:
            return None

    assert Custom().judged_steps(0).judged(1, 2)  # says nothing of its steps: every one


def test_a_trial_sends_judged_reports_at_once_and_holds_the_others(monkeypatch) -> None:
    import dmlsearch._objective as objective_module

    sent: list[list[list[float]]] = []
    monkeypatch.setattr(
        objective_module, "report_progress", lambda unit, steps: sent.append(list(steps))
    )
    trial = Trial(0, {}, judged=JudgedSteps(rungs=(1, 3, 9)))
    for step in range(1, 10):
        trial.report(step / 10, step)
    assert sent == [[[1, 0.1]], [[2, 0.2], [3, 0.3]], [[s, s / 10] for s in range(4, 10)]]
    sent.clear()
    trial = Trial(1, {}, judged=JudgedSteps())  # no pruner: now and then, for the page
    trial.report(0.5, 1)
    assert sent == []
    monkeypatch.setattr(trial, "_sent_at", time.monotonic() - SEND_EVERY)
    trial.report(0.6, 2)
    assert sent == [[[1, 0.5], [2, 0.6]]]
    assert trial.intermediate == {1: 0.5, 2: 0.6}
    sent.clear()
    Trial(2, {}).report(1.0, 7)  # no rule given (a trial outside optimize): at once
    assert sent == [[[7, 1.0]]]


def test_a_stop_check_asks_the_scheduler_once_a_recheck_unless_a_flag_came(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import distributed

    asked: list[str] = []

    class Event:
        def __init__(self, name: str) -> None:
            asked.append(name)

        def is_set(self) -> bool:
            return False

    monkeypatch.setattr(distributed, "Event", Event)
    check = stop_flags.StopCheck("run-7", recheck=60.0)
    assert check.is_set() is False and check.is_set() is False
    assert asked == ["run-7"]  # the first call asks; the next within a minute does not
    stop_flags.mark_stopped("run-7")
    try:
        assert check.is_set() is True and asked == ["run-7"]
    finally:
        stop_flags.forget("run-7")
    assert stop_flags.StopCheck(None).is_set() is False


def rungs_then_end(params: dict[str, Any], trial: Trial) -> float:
    for step in range(1, STEPS + 1):
        trial.report(params["x"] * step, step)
        if trial.should_stop():
            break
        time.sleep(0.002)
    return params["x"] * STEPS


@pytest.mark.cluster
def test_the_driver_hears_judged_reports_and_records_every_step(client, monkeypatch) -> None:
    heard: dict[int, list[int]] = {}
    original = ObjectiveSource.reported

    def counting(self: ObjectiveSource, unit: Any, message: dict[str, Any]) -> None:
        heard.setdefault(unit.payload.number, []).append(len(message["steps"]))
        original(self, unit, message)

    monkeypatch.setattr(ObjectiveSource, "reported", counting)
    n = 12
    result = optimize(
        rungs_then_end, {"x": Float(0, 1)}, n_trials=n, scheduler="asha", min_resource=1,
        max_resource=STEPS, client=client, random_state=0, dashboard=False,
    )  # fmt: skip
    # Rungs 1, 3, 9, 27 are sent at once, the steps between them together (a trial's 27
    # steps take ~0.1 s, below SEND_EVERY; a slower one may send once more in between).
    full = [t for t in result.trials if max(t.intermediate) == STEPS]
    assert full  # the first trial at each rung goes on
    for t in result.trials:
        rungs = sum(r <= max(t.intermediate) for r in (1, 3, 9, 27))
        messages = heard.get(t.number, [])
        assert len(messages) <= rungs + 1 and sum(messages) <= len(t.intermediate)
    for t in result.trials:
        assert sorted(t.intermediate) == list(range(1, max(t.intermediate) + 1))
    assert any(t.state == "pruned" for t in result.trials)


@pytest.mark.cluster
def test_a_stop_reaches_the_trials_worker_as_a_flag(client) -> None:
    worker = next(iter(client.scheduler_info()["workers"]))
    name = "dmlsearch-test-flag"
    try:
        stop_flags.push_stop(client, name, worker)
        deadline = time.monotonic() + 10
        while not client.run(lambda: name in stop_flags._flags, workers=[worker])[worker]:
            assert time.monotonic() < deadline, "the flag never reached the worker"
            time.sleep(0.02)
        from distributed import Event

        assert Event(name, client=client).is_set()  # the Event stays the authority
    finally:
        client.run(stop_flags.forget, name)
        from distributed import Event

        Event(name, client=client).clear()


def test_the_median_pruner_decides_as_median_stopping_reading_one_step() -> None:
    from dmlsearch.schedulers import History, MedianStopping

    rng = np.random.default_rng(0)
    for case in range(300):
        warmup, min_trials = int(rng.integers(0, 4)), int(rng.integers(1, 6))
        curves: dict[int, dict[int, float]] = {}
        for t in range(int(rng.integers(1, 12))):
            steps = rng.choice(np.arange(0, 8), size=int(rng.integers(1, 8)), replace=False)
            values = rng.normal(size=len(steps)).round(1)  # ties, too
            values[rng.random(len(steps)) < 0.05] = np.nan
            curves[t] = {int(s): float(v) for s, v in zip(steps, values, strict=True)}
        running = frozenset(t for t in curves if rng.random() < 0.6)
        pruner = MedianPruner(warmup_steps=warmup, min_trials=min_trials)
        rule = MedianStopping(1, warmup_steps=warmup, min_trials=min_trials)
        for trial in curves:
            results = {t: [(s, s, v) for s, v in sorted(c.items())] for t, c in curves.items()}
            history = History.of(results, running=[*(t for t in running if t in curves), trial])
            want = next((s.reason for s in rule.stops(history) if s.trial == trial), None)
            assert pruner.stop(trial, curves, running) == want, (case, trial)


def quick_steps(params: dict[str, Any], trial: Trial) -> float:
    for step in range(1, STEPS + 1):  # steps far quicker than a round trip to the driver
        trial.report(params["x"] + step / 1000, step)
        if trial.should_stop():
            break
    return params["x"]


@pytest.mark.cluster
@pytest.mark.parametrize("scheduler", ["asha", "hyperband"])
def test_a_trial_of_quick_steps_stops_at_the_rung_that_judged_it(client, scheduler) -> None:
    # Optuna's should_prune answers on the spot; a trial here ran past its rung (or
    # ended first) while the driver judged it, until should_stop waited for the answer.
    result = optimize(
        quick_steps, {"x": Float(0, 1)}, n_trials=30, scheduler=scheduler, min_resource=1,
        max_resource=STEPS, client=client, random_state=0, dashboard=False,
    )  # fmt: skip
    pruned = [t for t in result.trials if t.state == "pruned"]
    assert len(pruned) >= 10
    for t in pruned:
        assert max(t.intermediate) in (1, 3, 9), (t.number, sorted(t.intermediate))


def test_the_steps_the_driver_heard_are_kept_when_the_result_lacks_them() -> None:
    from dmlsearch._objective import ObjectiveOutcome
    from dmlsearch._pruners import make_pruner
    from dmlsearch.space import as_space
    from dmlsearch.strategies import make_strategy

    space = as_space({"x": Float(0, 1)})
    recorded: list[ObjectiveOutcome] = []
    source = ObjectiveSource(
        make_strategy("random", space, 2, 0), 0, sign=-1.0,
        pruner=make_pruner("median", 1, 3, 0, 5, None, 2), stop=lambda n, w: None,
        stop_event=lambda number: None, on_finish=recorded.append,
    )  # fmt: skip
    lost, retried = source.propose(), source.propose()
    source.reported(lost, {"steps": [[1, 0.5], [2, 0.4]]})
    source.reported(retried, {"steps": [[1, 0.9], [2, 0.8], [3, 0.7]]})
    # Lost with its worker (the loop's failed outcome has no curve) ...
    source.record(lost, ObjectiveOutcome(0, {}, 0, "failed", None, {}, 0.0, 0.0, "", "lost"), 1)
    # ... and a retry that reported once more before it ended.
    source.record(
        retried, ObjectiveOutcome(1, {}, 0, "complete", 0.6, {1: 0.95}, 0.0, 0.0, "w", None), 1
    )
    assert recorded[0].intermediate == {1: 0.5, 2: 0.4}  # as reported (minimised: unsigned)
    assert recorded[1].intermediate == {1: 0.95, 2: 0.8, 3: 0.7}  # the result's own first


@pytest.mark.cluster
def test_a_report_after_its_run_closed_is_dropped_quietly(client, caplog, monkeypatch) -> None:
    # The client called unsubscribe_topic again for a message of a closed run's topic,
    # which raised: an ERROR and a traceback in the user's console (seen in a suite run).
    from dmlsearch.runner import reports
    from dmlsearch.runner.reports import ReportStream

    monkeypatch.setattr(reports, "LATE_SECONDS", 0.5)
    stream = ReportStream(client, "dmlsearch-test-late")
    stream.subscribe()
    stream.close()
    with caplog.at_level("ERROR", logger="distributed.client"):
        client.sync(client._handle_event, "dmlsearch-test-late", (0.0, {"kind": "done"}))
    assert not [r for r in caplog.records if "No event handler" in r.getMessage()]
    assert stream.drain() == []
    deadline = time.monotonic() + 10
    while "dmlsearch-test-late" in client._event_handlers:  # then the entry goes
        assert time.monotonic() < deadline
        time.sleep(0.05)
