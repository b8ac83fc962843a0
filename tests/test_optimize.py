"""dmlsearch.optimize: user objectives on a real process cluster, pruned by median or ASHA."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from dmlsearch import Categorical, Float, InvalidParameterError, Registry, optimize
from dmlsearch._objective import PRUNED, AshaPruner, MedianPruner, Pruner, Trial

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


def test_a_trial_outside_a_run_reports_locally_and_never_stops() -> None:
    trial = Trial(0, {"x": 1})
    trial.report(0.5, 3)
    assert trial.intermediate == {3: 0.5} and trial.should_stop() is False
    with pytest.raises(InvalidParameterError, match="step"):
        trial.report(0.5, -1)
    with pytest.raises(InvalidParameterError, match="number"):
        trial.report("high", 1)  # type: ignore[arg-type]


# ------------------------------------------------------------------- bad input, no work

NOT_A_CLUSTER = "tcp://127.0.0.1:1"  # reaching it would fail otherwise: nothing may try


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"objective": "f"}, "objective"),
        ({"n_trials": 0}, "n_trials"),
        ({"n_trials": 2.5}, "n_trials"),
        ({"scheduler": "hyperband"}, "scheduler"),
        ({"scheduler": "medain"}, "scheduler"),
        ({"strategy": "annealing"}, "strategy"),
        ({"direction": "up"}, "direction"),
        ({"scheduler": "asha", "reduction_factor": 1}, "reduction_factor"),
        ({"min_resource": 0}, "min_resource"),
        ({"trial_timeout": -1}, "trial_timeout"),
        ({"random_state": -3}, "random_state"),
    ],
)
def test_bad_input_raises_before_any_work(kwargs: dict[str, Any], param: str) -> None:
    args: dict[str, Any] = {"objective": quadratic, "n_trials": 3, "client": NOT_A_CLUSTER}
    args.update(kwargs)
    objective = args.pop("objective")
    with pytest.raises(InvalidParameterError, match=param):
        optimize(objective, {"x": Float(-5, 5)}, **args)


# ------------------------------------------------------------------- on the cluster


@pytest.mark.cluster
def test_a_quadratic_objective_finds_its_optimum_region(client: Any) -> None:
    space = {"x": Float(-5.0, 5.0)}
    result = optimize(quadratic, space, n_trials=40, client=client, random_state=0)
    assert len(result.trials) == 40 and all(t.state == "complete" for t in result.trials)
    assert abs(result.best_params["x"] - 2.0) < 0.5
    assert result.best_value == max(t.value for t in result.trials)  # type: ignore[type-var]
    frame = result.trials_dataframe()
    assert list(frame["number"]) == list(range(40)) and "params_x" in frame

    def distance(params: dict[str, Any], trial: Trial) -> float:
        return (params["x"] - 2.0) ** 2

    low = optimize(
        distance, space, n_trials=40, client=client, random_state=0, direction="minimize"
    )
    assert low.best_params == result.best_params and low.best_value == -result.best_value


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
