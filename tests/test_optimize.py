"""dmlsearch.optimize: user objectives on a real process cluster, pruned by median or ASHA."""

from __future__ import annotations

import math
import pickle
import sys
import time
from typing import Any

import numpy as np
import pytest

from dmlsearch import Categorical, Float, InvalidParameterError, Registry, optimize
from dmlsearch._objective import (
    PRUNED,
    AshaPruner,
    HyperbandPruner,
    MedianPruner,
    Pruner,
    Trial,
)
from dmlsearch._pruners import RungReport, make_pruner
from dmlsearch.schedulers import assign_brackets
from dmlsearch.space import as_space

STEPS = 8


def quadratic(params: dict[str, Any], trial: Trial) -> float:
    return -((params["x"] - 2.0) ** 2)


def learning_curve(params: dict[str, Any], trial: Trial) -> float:
    """Approaches ``-(x - 2)**2`` step by step; a poor ``x`` is poor at every step."""
    target = -((params["x"] - 2.0) ** 2)
    value = target
    for step in range(1, STEPS + 1):
        value = target - 1.0 / step
        trial.report(value, step)
        if trial.should_stop():
            return value
        time.sleep(0.1)  # room for the driver to hear a step and answer, even on a busy machine
    return value


class StopAtStep(Pruner):
    """Stops trial ``victim`` once it reports ``step``."""

    def __init__(self, victim: int, step: int) -> None:
        self.victim, self.step = victim, step

    def stop(self, trial: int, curves: Any, running: frozenset[int]) -> str | None:
        if trial == self.victim and max(curves[trial]) >= self.step:
            return "asked to"
        return None


def until_stopped(params: dict[str, Any], trial: Trial) -> float:
    """Reports steps 0, 1, ... until told to stop: at most 20 steps, 500 for ``x == 2``
    (the trial the tests stop: ample time to hear it, whatever the machine's load)."""
    step, limit = 0, 500 if params["x"] == 2 else 20
    while step < limit:
        trial.report(params["x"] * 10 + step, step)
        if trial.should_stop():
            break
        step += 1
        time.sleep(0.02)
    return float(step)


# ------------------------------------------------------------------- pruners as functions


def test_median_pruner_stops_below_the_median_of_the_others() -> None:
    curves = {0: {1: 0.9}, 1: {1: 0.8}, 2: {1: 0.7}, 3: {1: 0.1}}
    pruner = MedianPruner(min_trials=3)
    reason = pruner.stop(3, curves, frozenset({3}))
    assert reason is not None and "median" in reason
    assert pruner.stop(0, curves, frozenset({0})) is None
    assert MedianPruner(min_trials=4).stop(3, curves, frozenset({3})) is None  # too few others
    assert MedianPruner(warmup_steps=2, min_trials=3).stop(3, curves, frozenset({3})) is None


def test_asha_pruner_keeps_the_top_third_of_each_rung() -> None:
    pruner = AshaPruner(min_resource=1, reduction_factor=3)
    curves: dict[int, dict[int, float]] = {}
    decisions = []
    # Trials report at step 1 (rung step 1) in this order.
    for trial, score in enumerate([0.5, 0.4, 0.9, 0.6, 0.3, 0.95]):
        curves[trial] = {1: score}
        decisions.append(pruner.stop(trial, curves, frozenset({trial})) is None)
    # kept: the first (alone), 2 (best of 3), 5 (best of 6 -> top 2); 3 (0.6 < 0.9) is not.
    assert decisions == [True, False, True, False, False, True]
    curves[5][2] = 0.99  # step 2 is below the next rung (3): not judged again
    assert pruner.stop(5, curves, frozenset({5})) is None


def test_asha_pruner_with_max_resource_uses_search_cv_s_rungs() -> None:
    # rung_resources(2, 100, 3) == (3, 11, 33, 100): judged there, never at 100.
    pruner = AshaPruner(min_resource=2, reduction_factor=3, max_resource=100)
    curves: dict[int, dict[int, float]] = {0: {3: 0.9}, 1: {3: 0.1}}
    assert pruner.stop(0, curves, frozenset()) is None
    assert pruner.stop(1, curves, frozenset()) is not None  # 2 at rung 3: top 1
    curves[0][100], curves[2] = 0.1, {3: 0.95, 11: 0.9, 33: 0.9, 100: 0.9}
    assert pruner.stop(0, curves, frozenset()) is None  # the full budget: never pruned
    assert [r.resource for r in pruner.rungs(2, curves[2])] == [3, 11, 33, 100]
    assert make_pruner("halving", 2, 3, 0, 5, max_resource=100) == pruner  # asynchronous


# Hyperband for R = 9, eta = 3: brackets s = 2 (rungs 1, 3, 9), 1 (3, 9), 0 (9), and trials
# 0..8 go to brackets 2, 1, 2, 0, 2, 1, 2, 0, 2 (schedulers.assign_brackets).
BRACKETS = (2, 1, 2, 0, 2, 1, 2, 0, 2)


def test_hyperband_pruner_assigns_brackets_and_their_rungs() -> None:
    pruner = HyperbandPruner(min_resource=1, max_resource=9, reduction_factor=3, n_trials=5)
    assert tuple(pruner.bracket_of(t) for t in range(9)) == BRACKETS
    assert pruner.bracket_of(17 + 3) == 0  # the round robin repeats every 9 + 5 + 3 trials
    assert pruner.bracket_resources == {2: (1, 3, 9), 1: (3, 9), 0: (9,)}
    curve = {1: 0.5, 2: 0.6, 3: 0.7, 5: 0.8, 9: 0.9}
    assert pruner.rungs(4, curve) == [  # bracket 2
        RungReport(0, 1, 0, 1, 0.5, 2),
        RungReport(1, 3, 1, 3, 0.7, 2),
        RungReport(2, 9, 3, 9, 0.9, 2, top=True),
    ]
    assert pruner.rungs(1, curve) == [  # bracket 1: its first rung is 3
        RungReport(0, 3, 0, 3, 0.7, 1),
        RungReport(1, 9, 3, 9, 0.9, 1, top=True),
    ]
    assert pruner.rungs(3, {4: 0.1, 8: 0.2}) == []  # bracket 0, below its only rung


def test_hyperband_pruner_ranks_a_trial_in_its_own_bracket_only() -> None:
    pruner = HyperbandPruner(min_resource=1, max_resource=9, reduction_factor=3)
    curves: dict[int, dict[int, float]] = {}
    before = pickle.dumps(pruner)

    def report(trial: int, step: int, value: float) -> bool:
        """Whether ``trial`` goes on after reporting ``value`` at ``step``."""
        curves.setdefault(trial, {})[step] = value
        frozen = {t: dict(c) for t, c in curves.items()}
        reason = pruner.stop(trial, curves, frozenset(curves))
        assert curves == frozen  # a pure rule: the curves are left as they were
        return reason is None

    # Bracket 2 at rung 1 (step 1), in this order: kept while in the top
    # max(n // 3, 1) of the n values at the rung so far, its own included.
    assert [report(t, 1, v) for t, v in [(0, 0.5), (2, 0.4), (4, 0.9), (6, 0.6)]] == [
        True,  # alone
        False,  # 2 values: top 1 is 0.5
        True,  # 3 values: top 1 is itself
        False,  # 4 values: top 1 is 0.9
    ]
    assert report(0, 2, 0.55)  # step 2 is no rung: not judged
    # Bracket 1's first rung is at step 3: step 1 is not judged, whatever the value.
    assert report(1, 1, -5.0)
    assert report(4, 3, 0.95)  # bracket 2, rung 3: alone there
    # Trial 1 is alone at rung 3 *in bracket 1*: it goes on, though trial 4 (another
    # bracket) has a better value there. Trial 5, the second of bracket 1, does not.
    assert report(1, 3, 0.1) and not report(5, 3, 0.05)
    # Bracket 0 (trials 3, 7) has a single rung, the full budget: never pruned.
    assert all(report(3, step, -100.0) for step in range(1, 10))
    assert report(7, 9, -200.0)
    # Nor is anyone at the top rung of its bracket: trial 0 beats trial 4 at rung 3, and
    # then both are at the full budget with poor values.
    assert report(0, 3, 0.96) and report(4, 9, -1.0) and report(0, 9, -2.0)
    reason = pruner.stop(5, curves, frozenset())
    assert reason is not None and "bracket 1" in reason and "top 1 of 2" in reason
    assert pickle.dumps(pruner) == before  # it never writes into itself


def test_reports_a_stopped_trial_sends_before_it_sees_the_stop_are_no_rung_it_passed() -> None:
    from dmlsearch._objective_source import ObjectiveSource
    from dmlsearch.strategies import make_strategy

    values = [10.0, 1.0, 2.0, 3.0, 4.0, 11.0]  # trial 5: the best at step 1, 7 at step 3
    space = as_space({"q": Categorical(values)})
    stopped: list[int] = []
    source = ObjectiveSource(
        make_strategy("grid", space, len(values), 0), 0, sign=1.0,
        pruner=make_pruner("asha", 1, 3, 0, 5, 9, len(values)), stop=lambda n, w: stopped.append(n),
        stop_event=lambda number: None, on_finish=lambda outcome: None,
    )  # fmt: skip
    units: list[Any] = [source.propose() for _ in values]
    for unit in units[:5]:
        for step in (1, 2, 3):  # trials 1-4 are stopped at step 1 and report on regardless
            source.reported(unit, {"steps": [[step, unit.payload.params["q"]]]})
    assert stopped == [1, 2, 3, 4]
    source.reported(units[5], {"steps": [[1, 11.0], [2, 9.0], [3, 7.0]]})  # one batch
    # At step 3 it is judged against trial 0 alone (10 > 7: not the top 1 of 2). Counting
    # the stopped trials' late values (1-4) would have kept it, in the top 2 of 6.
    assert stopped == [1, 2, 3, 4, 5]


def test_a_trial_outside_a_run_reports_locally_and_never_stops() -> None:
    trial = Trial(0, {"x": 1})
    trial.report(0.5, 3)
    assert trial.intermediate == {3: 0.5} and trial.should_stop() is False
    with pytest.raises(InvalidParameterError, match="step"):
        trial.report(0.5, -1)
    with pytest.raises(InvalidParameterError, match="number"):
        trial.report("high", 1)  # type: ignore[arg-type]
    for text_or_flag in ("7", True):  # float() takes them: a probe's "7" was recorded as 7.0
        with pytest.raises(InvalidParameterError, match="number"):
            trial.report(text_or_flag, 1)  # type: ignore[arg-type]
    trial.report(0.7, np.int64(4))  # NumPy's integers count, as Optuna's do
    assert trial.intermediate[4] == 0.7 and type(next(reversed(trial.intermediate))) is int
    with pytest.raises(InvalidParameterError, match="2\\*\\*63"):
        trial.report(0.5, 2**64)  # would break the worker's messages to the scheduler


def test_resume_checks_the_kind_and_the_objective_of_the_experiment() -> None:
    from dmlsearch._optimize_records import check_same_run, objective_name

    config = {"kind": "optimize", "objective_name": objective_name(quadratic)}
    check_same_run("e", dict(config), config)  # the same run: no error
    check_same_run("e", {"kind": "optimize"}, config)  # recorded before the name was
    with pytest.raises(InvalidParameterError, match="SearchCV"):
        check_same_run("e", {"estimator": "SVC()"}, config)
    with pytest.raises(InvalidParameterError, match=r"test_optimize\.quadratic"):
        check_same_run("e", {**config, "objective_name": "mod.other"}, config)


# ------------------------------------------------------------------- bad input, no work

NOT_A_CLUSTER = "tcp://127.0.0.1:1"  # reaching it would fail otherwise: nothing may try


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"objective": "f"}, "objective"),
        ({"n_trials": 0}, "n_trials"),
        ({"n_trials": 2.5}, "n_trials"),
        ({"scheduler": "hyperband"}, "max_resource"),
        ({"scheduler": "hyperband", "max_resource": 9, "min_resource": 10}, "min_resource"),
        ({"scheduler": "hyperband", "max_resource": 9, "reduction_factor": 1}, "reduction_factor"),
        ({"scheduler": "hyperband", "max_resource": 0}, "max_resource"),
        ({"scheduler": "hyperband", "max_resource": 9.5}, "max_resource"),
        ({"scheduler": "median", "max_resource": 9}, "max_resource"),
        ({"max_resource": 9}, "max_resource"),
        ({"resume": True}, "resume"),
        ({"resume": "yes", "experiment_name": "x"}, "resume"),
        ({"scheduler": "medain"}, "scheduler"),
        ({"strategy": "annealing"}, "strategy"),
        ({"direction": "up"}, "direction"),
        ({"scheduler": "asha", "reduction_factor": 1}, "reduction_factor"),
        ({"min_resource": 0}, "min_resource"),
        ({"trial_timeout": -1}, "trial_timeout"),
        ({"random_state": -3}, "random_state"),
        ({"max_concurrent_trials": 0}, "max_concurrent_trials"),
        ({"max_concurrent_trials": 1.5}, "max_concurrent_trials"),
        # From a probe: each of these ran, or failed every trial on the workers.
        ({"objective": lambda trial: 0.0}, "Optuna objective takes the trial alone"),
        ({"objective": lambda params, trial, extra: 0.0}, "objective"),
        ({"trial_timeout": True}, "trial_timeout"),
        ({"progress": "yes"}, "progress"),
        ({"scheduler": "asha", "min_resource": 1.5}, "min_resource"),
    ],
)
def test_bad_input_raises_before_any_work(kwargs: dict[str, Any], param: str) -> None:
    args: dict[str, Any] = {"objective": quadratic, "n_trials": 3, "client": NOT_A_CLUSTER}
    args.update(kwargs)
    objective = args.pop("objective")
    with pytest.raises(InvalidParameterError, match=param) as info:
        optimize(objective, {"x": Float(-5, 5)}, **args)
    if kwargs.get("scheduler") == "medain":
        assert "did you mean 'median'?" in str(info.value)


def test_counts_take_numpy_integers_and_keep_ints() -> None:
    # A probe: min_resource=np.int64(2) was refused while n_trials=np.int64(2) was taken,
    # and max_resource=9.0 put float rungs in the recorded schedule.
    pruner = make_pruner("asha", np.int64(2), np.int64(3), 0, 5, max_resource=18.0)
    assert isinstance(pruner, AshaPruner)
    assert repr(pruner) == repr(make_pruner("asha", 2, 3, 0, 5, max_resource=18))


# ------------------------------------------------------------------- on the cluster


@pytest.mark.cluster
def test_a_quadratic_objective_finds_its_optimum_region(cluster: Any, client: Any) -> None:
    space = {"x": Float(-5.0, 5.0)}
    result = optimize(quadratic, space, n_trials=40, client=client, random_state=0)
    assert len(result.trials) == 40 and all(t.state == "complete" for t in result.trials)
    assert abs(result.best_params["x"] - 2.0) < 0.5
    assert result.best_value == max(t.value for t in result.trials)  # type: ignore[type-var]
    frame = result.trials_dataframe()
    assert list(frame["number"]) == list(range(40)) and "params_x" in frame
    # Without a pruner, tiny trials are packed several to a task, as SearchCV's are.
    assert sum(result.stats.batch_sizes) == 40 and max(result.stats.batch_sizes) > 1

    def distance(params: dict[str, Any], trial: Trial) -> float:
        return (params["x"] - 2.0) ** 2

    name = f"low-{time.time_ns()}"
    low = optimize(
        distance, space, n_trials=40, client=client, random_state=0, direction="minimize",
        experiment_name=name,
    )  # fmt: skip
    assert low.best_params == result.best_params and low.best_value == -result.best_value
    # The page's best is the least distance too.
    assert _page_state(cluster, name)["best"] == pytest.approx(low.best_value)


def _sleeper(params: dict[str, Any], trial: Trial) -> float:
    end = time.time() + params["t"]
    step = 0
    while time.time() < end:  # pure Python: stopped between bytecodes
        trial.report(1.0, step)
        step += 1
        time.sleep(0.02)
    return float(params["t"])


def test_a_deadline_that_fires_inside_report_or_should_stop_is_not_swallowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The soft timeout raises TrialTimeoutError wherever the trial's thread is; inside
    # trial.report's (or should_stop's) "never fail for a report" guard it was swallowed,
    # the trial ran on until its worker was restarted (1 full-suite run in 3, under load).
    import distributed

    from dmlsearch.exceptions import TrialTimeoutError
    from dmlsearch.runner.reports import reporting_to

    def fires(*args: Any, **kwargs: Any) -> Any:
        raise TrialTimeoutError("trial 0 ran past trial_timeout")

    monkeypatch.setattr(distributed, "get_worker", fires)
    monkeypatch.setattr(distributed, "Event", fires)
    trial = Trial(0, {}, stop_event="stop-0")
    with reporting_to("topic"), pytest.raises(TrialTimeoutError):
        trial.report(1.0, 0)
    with pytest.raises(TrialTimeoutError):
        trial.should_stop()
    monkeypatch.setattr(distributed, "Event", lambda *a, **k: 1 / 0)  # anything else: no
    assert trial.should_stop() is False


@pytest.mark.cluster
def test_trial_timeout_stops_a_trial_in_its_thread_keeping_its_steps(client: Any) -> None:
    result = optimize(
        _sleeper, {"t": Categorical([0.1, 30.0])}, n_trials=2, strategy="grid", client=client,
        trial_timeout=1.0, dashboard=False,
    )  # fmt: skip
    quick, slow = result.trials
    assert quick.state == "complete" and quick.value == 0.1
    assert slow.state == "timeout" and "trial_timeout=1.0" in (slow.error or "")
    assert slow.duration < 10 and len(slow.intermediate) > 5
    assert result.stats.hard_timeouts == 0  # no worker restarted


@pytest.mark.cluster
def test_a_minimised_experiment_ranks_least_first_in_the_registry(
    client: Any, tmp_path: Any, capsys: Any
) -> None:
    def distance(params: dict[str, Any], trial: Trial) -> float:
        return (params["x"] - 2.0) ** 2

    url = f"sqlite:///{tmp_path / 'r.db'}"
    result = optimize(
        distance, {"x": Float(-5.0, 5.0)}, n_trials=np.int64(8), client=client,
        random_state=0, direction="minimize", registry=url, experiment_name="low",
        progress=True,
    )  # fmt: skip
    # The progress line showed the negated value the loop ranks by (a probe: "best -0.0144").
    ended = next(ln for ln in capsys.readouterr().err.splitlines() if " ended: " in ln)
    assert f"best {result.best_value:.4g}," in ended
    values = sorted(t.value for t in result.trials if t.value is not None)
    with Registry(url) as registry:
        assert list(registry.leaderboard("low", k=3)["value"]) == values[:3]
        summary = registry.experiments().set_index("name").loc["low"]
        assert summary["best_value"] == result.best_value == values[0]
        study = registry.to_optuna("low")
        assert study.direction.name == "MINIMIZE" and study.best_value == values[0]


@pytest.mark.cluster
def test_median_stopping_stops_poor_trials(client: Any) -> None:
    # Grid order: two good trials first, then mostly poor ones. The good values tie
    # exactly ((2.5 - 2)**2 == (1.5 - 2)**2), so a good trial is never below the median.
    xs = [2.0, 2.5, 9.0, 8.0, 1.5, 7.0, 9.5, 6.5, 8.5, 7.5]
    result = optimize(
        learning_curve,
        {"x": Categorical(xs)},
        n_trials=len(xs),
        scheduler="median",
        strategy="grid",
        min_trials=3,
        max_concurrent_trials=2,
        client=client,
        random_state=0,
    )
    pruned = [t for t in result.trials if t.state == PRUNED]
    assert result.n_pruned == len(pruned) >= 1
    # Counted: a pruned trial trained fewer steps than the full curve, and only poor x.
    assert all(len(t.intermediate) < STEPS for t in pruned)
    assert all(t.params["x"] > 5 for t in pruned)
    steps = sum(len(t.intermediate) for t in result.trials)
    assert steps < len(xs) * STEPS
    assert result.best_trial.state == "complete" and result.best_params["x"] == 2.0
    # A pruner judges each report as it comes: one trial per task, never one queued
    # in a batch behind another.
    assert set(result.stats.batch_sizes) == {1}


@pytest.mark.cluster
def test_report_and_should_stop_round_trip(client: Any, tmp_path: Any) -> None:
    registry = Registry(f"sqlite:///{tmp_path / 'r.db'}")
    result = optimize(
        until_stopped,
        {"x": Categorical([1, 2, 3])},
        n_trials=3,
        strategy="grid",
        scheduler=StopAtStep(victim=1, step=3),
        client=client,
        registry=registry,
        experiment_name="round-trip",
        random_state=0,
    )
    by_number = {t.number: t for t in result.trials}
    victim = by_number[1]
    # The stop signal (a distributed.Event per stopped trial) is cleared at the end.
    events = client.run_on_scheduler(
        lambda dask_scheduler: list(dask_scheduler.extensions["events"]._events)
    )
    assert not [e for e in events if str(e).startswith("dmlsearch-stop")]
    assert victim.state == PRUNED
    # The driver heard step 3, told the worker, and the worker stopped soon after.
    assert 3 <= victim.value < 500  # type: ignore[operator]
    assert victim.intermediate == {
        s: victim.params["x"] * 10 + s for s in range(int(victim.value) + 1)
    }  # type: ignore[arg-type]
    assert by_number[0].value == by_number[2].value == 20.0
    assert result.experiment_name == "round-trip"
    exp = registry.store.get_experiment("round-trip")
    records = {r.number: r for r in registry.store.get_trials(exp.id)}
    assert sorted(records) == [0, 1, 2] and exp.status == "complete"
    assert records[1].state == PRUNED and records[0].value == 20.0
    assert records[1].intermediate == {str(s): v for s, v in victim.intermediate.items()}
    assert records[0].params == {"x": 1}
    registry.close()


@pytest.mark.cluster
def test_asha_pruning_and_failing_trials_on_the_cluster(client: Any) -> None:
    def objective(params: dict[str, Any], trial: Trial) -> float:
        if params["x"] == 0.0:
            raise RuntimeError("bad x")
        if params["x"] == 1.0:
            return math.nan
        return learning_curve(params, trial)

    xs = [2.0, 0.0, 1.0, 9.0, 2.1, 8.0, 7.5, 1.9]
    result = optimize(
        objective,
        {"x": Categorical(xs)},
        n_trials=len(xs),
        strategy="grid",
        scheduler="asha",
        min_resource=1,
        reduction_factor=2,
        max_concurrent_trials=2,
        client=client,
    )
    states = {t.params["x"]: t.state for t in result.trials}
    errors = {t.params["x"]: t.error or "" for t in result.trials}
    assert states[0.0] == "failed" and "bad x" in errors[0.0]
    assert states[1.0] == "failed" and "finite" in errors[1.0]
    assert states[2.0] == "complete"
    assert any(state == PRUNED for state in states.values())
    assert result.best_params["x"] in (2.0, 2.1, 1.9)


# ------------------------------------------------------------------- asynchronous Hyperband

# 17 trials: one round of the brackets for R = 9, eta = 3 (9, 5 and 3 trials). Grid order
# gives trial t the t-th x. Each bracket's best comes first in it (trial 0: x = 2, the
# optimum; trial 1: x = 2.3), and bracket 0 (trials 3, 7, 13) holds the worst x of all.
HB_XS = [2.0, 2.3, 3.0, 9.0, -1.0, 5.0, 4.5, 9.5, 0.5, 0.0, 6.0, 8.0, 2.6, -4.0, -2.5, 3.5, 7.0]
HB_BRACKETS = assign_brackets(17, 9, 3)


def hb_curve(params: dict[str, Any], trial: Trial) -> float:
    """Steps 1..9 approaching ``-(x - 2)**2``: the order of the x's is the same at every
    step, so a bracket's best is the best at each of its rungs, whatever the timing."""
    target = -((params["x"] - 2.0) ** 2)
    value = target
    for step in range(1, 10):
        value = target - 1.0 / step
        trial.report(value, step)
        if trial.should_stop():
            return value
        time.sleep(0.05)
    return value


def _page_state(cluster: Any, name: str) -> dict[str, Any]:
    """The dashboard page's view of experiment ``name`` once it is complete."""
    import json
    import urllib.request

    url = cluster.dashboard_link.rsplit("/", 1)[0] + "/dmlsearch/api/state"
    deadline = time.monotonic() + 30  # a hang bound: events arrive asynchronously
    while True:
        with urllib.request.urlopen(url, timeout=10) as response:
            shown = {e["name"]: e for e in json.loads(response.read())["experiments"]}
        view = shown.get(name, {})
        if view.get("status") == "complete" or time.monotonic() > deadline:
            return view
        time.sleep(0.05)


@pytest.mark.cluster
def test_hyperband_prunes_within_brackets_on_the_cluster(
    cluster: Any, client: Any, tmp_path: Any
) -> None:
    registry = Registry(f"sqlite:///{tmp_path / 'r.db'}")
    name = f"hb-{time.time_ns()}"
    result = optimize(
        hb_curve,
        {"x": Categorical(HB_XS)},
        n_trials=17,
        strategy="grid",
        scheduler="hyperband",
        min_resource=1,
        max_resource=9,
        reduction_factor=3,
        client=client,
        registry=registry,
        experiment_name=name,
    )
    trials = result.trials
    assert [t.bracket for t in trials] == list(HB_BRACKETS)
    assert [HB_BRACKETS.count(s) for s in (2, 1, 0)] == [9, 5, 3]
    assert isinstance(result.pruner, HyperbandPruner)
    full = list(range(1, 10))
    for s in (2, 1, 0):
        members = [t for t in trials if t.bracket == s]
        best = max(members, key=lambda t: -abs(t.params["x"] - 2.0))
        # A bracket's best is never pruned: it reaches the full budget.
        assert best.state == "complete" and sorted(best.intermediate) == full
    # Bracket 0 starts at the full budget: never pruned, though its x are the worst.
    for t in trials:
        if t.bracket == 0:
            assert t.state == "complete" and sorted(t.intermediate) == full
    pruned = [t for t in trials if t.state == PRUNED]
    assert result.n_pruned == len(pruned) >= 1
    assert all(t.bracket in (1, 2) for t in pruned)
    assert sum(len(t.intermediate) for t in trials) < 17 * 9  # pruning saved steps
    assert result.best_params["x"] == 2.0 and result.best_trial.number == 0
    # Registry: one record per trial, with its bracket beside its curve.
    exp = registry.store.get_experiment(name)
    records = {r.number: r for r in registry.store.get_trials(exp.id)}
    assert sorted(records) == list(range(17)) and exp.status == "complete"
    assert [records[t].intermediate["bracket"] for t in range(17)] == list(HB_BRACKETS)
    assert {t for t, r in records.items() if r.state == PRUNED} == {t.number for t in pruned}
    assert exp.config["schedule"]["pruner"] == repr(result.pruner)
    registry.close()
    # Dashboard: the rung view counts, per rung step, the trials that reached it.
    rungs = {row["resource"]: row for row in _page_state(cluster, name)["rungs"]}
    assert sorted(rungs) == [1, 3, 9]
    assert rungs[1]["trials"] == 9 and rungs[1]["promoted"] == 0  # bracket 2's first rung
    assert rungs[3]["trials"] == 5 + rungs[3]["promoted"]  # bracket 1's first rung
    complete = sum(t.state == "complete" for t in trials)
    assert rungs[9]["trials"] == complete and rungs[9]["promoted"] == complete - 3
    assert all(
        r["complete"] == r["trials"] and r["running"] == r["failed"] == 0 for r in rungs.values()
    )


class InterruptingHyperband(HyperbandPruner):
    """Interrupts the driver, as Ctrl-C would, when trial ``at`` (or a later one) reports."""

    def __init__(self, at: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.at = at

    def stop(self, trial: int, curves: Any, running: frozenset[int]) -> str | None:
        if trial >= self.at:
            raise KeyboardInterrupt
        return super().stop(trial, curves, running)


@pytest.mark.cluster
def test_resume_runs_only_the_trials_never_recorded(client: Any, tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    common: dict[str, Any] = {
        "n_trials": 17, "strategy": "grid", "client": client, "registry": url,
        "experiment_name": "hb-resume", "dashboard": False,
    }  # fmt: skip
    space = {"x": Categorical(HB_XS)}
    with pytest.raises(KeyboardInterrupt):
        optimize(
            hb_curve, space,
            scheduler=InterruptingHyperband(8, min_resource=1, max_resource=9), **common,
        )  # fmt: skip
    registry = Registry(url)
    exp = registry.store.get_experiment("hb-resume")
    first = {r.number: r for r in registry.store.get_trials(exp.id)}
    assert exp.status == "interrupted" and 0 < len(first) < 8
    registry.close()
    resumed_at = time.time()
    result = optimize(hb_curve, space, scheduler="hyperband", max_resource=9, resume=True, **common)
    assert result.n_restored == len(first)
    assert [t.number for t in result.trials] == list(range(17))
    assert [t.bracket for t in result.trials] == list(HB_BRACKETS)
    for t in result.trials:
        if t.number in first:  # restored as recorded, not run again
            record = first[t.number]
            assert t.state == record.state and t.started == record.started < resumed_at
            assert t.intermediate == {
                int(k): v for k, v in record.intermediate.items() if k.isdigit()
            }
        else:
            assert t.started >= resumed_at
    assert result.best_params["x"] == 2.0
    registry = Registry(url)
    exp = registry.store.get_experiment("hb-resume")
    assert exp.status == "complete"
    assert sorted(r.number for r in registry.store.get_trials(exp.id)) == list(range(17))
    registry.close()
    # Refused before any trial runs, the experiment left as it was.
    refusals = [
        ({"scheduler": "asha"}, hb_curve, "scheduler"),
        ({"scheduler": "hyperband", "max_resource": 27}, hb_curve, "scheduler"),
        ({"scheduler": "hyperband", "max_resource": 9}, quadratic, "tuned"),
        (
            {"scheduler": "hyperband", "max_resource": 9, "experiment_name": "nope"},
            hb_curve,
            "no experiment",
        ),
    ]
    for kwargs, objective, words in refusals:
        args = {**common, **kwargs}
        with pytest.raises(InvalidParameterError, match=words) as info:
            optimize(objective, space, resume=True, **args)
        assert info.value.param == "resume"
    registry = Registry(url)
    assert registry.store.get_experiment("hb-resume").status == "complete"
    registry.close()


def _exits(params: dict[str, Any], trial: Trial) -> float:
    if params["x"] == 1:
        raise KeyboardInterrupt  # the objective's own, not a Ctrl-C of the driver
    if params["x"] == 2:
        sys.exit(3)
    if params["x"] == 3:
        return "4.5"  # type: ignore[return-value]
    return float(params["x"])


@pytest.mark.cluster
def test_an_objective_raising_system_exit_or_keyboard_interrupt_fails_its_trial_only(
    client: Any,
) -> None:
    # A probe: they ended the worker, each retry another, and the error blamed a crash.
    result = optimize(
        _exits, {"x": Categorical([0, 1, 2, 3])}, n_trials=4, strategy="grid", client=client,
        max_retries=0, random_state=0,
    )  # fmt: skip
    by_x = {t.params["x"]: t for t in result.trials}
    assert by_x[0].state == "complete"
    assert by_x[1].state == "failed" and "KeyboardInterrupt" in by_x[1].error
    assert by_x[2].state == "failed" and "SystemExit: 3" in by_x[2].error
    assert by_x[3].state == "failed" and "'4.5'; it must return a number" in by_x[3].error
    assert all(t.retries == 0 for t in result.trials)


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"scheduler": "asha", "warmup_steps": 2}, "warmup_steps"),
        ({"scheduler": None, "min_trials": 2}, "min_trials"),
        ({"space": {}}, "space"),
    ],
)
def test_arguments_the_run_would_ignore_are_refused(kwargs: dict[str, Any], param: str) -> None:
    args: dict[str, Any] = {"space": {"x": Float(-5, 5)}, "n_trials": 3, "client": NOT_A_CLUSTER}
    args.update(kwargs)
    with pytest.raises(InvalidParameterError, match=param):
        optimize(quadratic, args.pop("space"), **args)


def _optuna_style(params: dict[str, Any], trial: Trial) -> float:
    import optuna

    for step in range(1, 7):
        trial.report(params["q"], step)
        if trial.should_stop():
            raise optuna.TrialPruned()  # Optuna's idiom
        time.sleep(0.1)
    return float(params["q"])


@pytest.mark.cluster
def test_a_trial_is_stopped_at_the_report_the_pruner_judges_and_may_raise_trial_pruned(
    client: Any,
) -> None:
    # A probe: reports were read at the driver's next poll (0.2 s), so a trial of 0.1 s
    # steps ran 2-3 steps past the rung that stopped it, and one raising Optuna's
    # TrialPruned was recorded failed. Optuna stops both at step 1.
    result = optimize(
        _optuna_style, {"q": Categorical([0.9, 0.5, 0.1])}, n_trials=3, strategy="grid",
        scheduler="asha", min_resource=1, reduction_factor=2, max_concurrent_trials=1,
        client=client, random_state=0,
    )  # fmt: skip
    by_q = {t.params["q"]: t for t in result.trials}
    assert by_q[0.9].state == "complete" and max(by_q[0.9].intermediate) == 6
    for q in (0.5, 0.1):
        assert by_q[q].state == PRUNED and by_q[q].error is None
        assert by_q[q].value == q
        assert max(by_q[q].intermediate) <= 2, by_q[q].intermediate  # judged at step 1
    assert result.n_pruned == 2


@pytest.mark.cluster
def test_a_resume_keeps_every_recorded_trial_and_refuses_another_strategy(
    client: Any, tmp_path: Any
) -> None:
    # A probe: a resume asking for fewer trials returned the first n_trials only (another
    # best than the registry's), silently; one with another strategy ran, and then the
    # recorded strategy could resume it no longer.
    common: dict[str, Any] = {
        "client": client, "registry": f"sqlite:///{tmp_path / 'r.db'}", "random_state": 0,
        "experiment_name": "fewer", "dashboard": False, "strategy": "random",
    }  # fmt: skip
    space = {"x": Float(-5.0, 5.0)}
    first = optimize(quadratic, space, n_trials=6, **common)
    with pytest.warns(UserWarning, match=r"already records 6 trials, more than the 2 .*no new"):
        resumed = optimize(quadratic, space, n_trials=2, resume=True, **common)
    assert [t.params for t in resumed.trials] == [t.params for t in first.trials]
    assert resumed.n_restored == 6 and resumed.best_value == first.best_value
    with pytest.raises(InvalidParameterError, match=r"strategy changed .*'random' -> 'tpe'"):
        optimize(quadratic, space, n_trials=8, resume=True, **{**common, "strategy": "tpe"})
    assert len(optimize(quadratic, space, n_trials=8, resume=True, **common).trials) == 8


def test_a_step_reported_twice_keeps_its_first_value_and_warns() -> None:
    # Optuna's rule: a pruner must not see a step's value change after judging it.
    trial = Trial(0, {"x": 1.0})
    trial.report(1.0, 1)
    with pytest.warns(UserWarning, match="step 1 of trial 0 was already reported"):
        trial.report(2.0, 1)
    assert trial.intermediate == {1: 1.0}
