from __future__ import annotations

import copy
import importlib.util

import numpy as np
import pytest
from optuna.samplers import RandomSampler
from optuna.trial import TrialState
from scipy import stats

from dmlsearch import Categorical, Float, Int, InvalidParameterError, SearchSpaceError, as_space
from dmlsearch.strategies import (
    GridStrategy,
    OptunaStrategy,
    RandomStrategy,
    make_strategy,
)


def test_grid_strategy_enumerates_then_stops():
    space = as_space({"a": [1, 2, 3], "b": ["x", "y"]})
    s = GridStrategy(space, None, seed=0)
    assert s.total == 6
    got = [s.ask(i) for i in range(7)]
    assert got[-1] is None
    assert got[0] == {"a": 1, "b": "x"} and got[1] == {"a": 1, "b": "y"}
    assert GridStrategy(space, 4, seed=0).total == 4


def test_random_strategy_is_a_function_of_seed_and_number():
    space = as_space({"C": Float(1e-3, 1e3, log=True), "k": Int(1, 50)})
    a = RandomStrategy(space, 20, seed=3)
    b = RandomStrategy(space, 20, seed=3)
    forward = [a.ask(i) for i in range(20)]
    backward = {i: b.ask(i) for i in reversed(range(20))}
    assert forward == [backward[i] for i in range(20)]
    assert a.ask(20) is None
    assert RandomStrategy(space, 20, seed=4).ask(0) != forward[0]


def test_random_strategy_on_finite_space_samples_without_replacement():
    space = as_space({"a": list(range(10)), "b": [0, 1]})
    s = RandomStrategy(space, 20, seed=0)
    draws = [tuple(sorted(s.ask(i).items())) for i in range(20)]
    assert len(set(draws)) == 20
    with pytest.warns(UserWarning, match="20 distinct candidates"):
        capped = RandomStrategy(space, 50, seed=0)
    assert capped.total == 20


def test_unknown_strategy_is_rejected():
    space = as_space({"a": [1]})
    with pytest.raises(InvalidParameterError) as info:
        make_strategy("bayes", space, None, 0)
    assert info.value.param == "strategy"
    with pytest.raises(InvalidParameterError):
        make_strategy(42, space, None, 0)


def test_grid_with_continuous_dimension_is_rejected_before_running():
    with pytest.raises(SearchSpaceError):
        make_strategy("grid", as_space({"C": Float(0.1, 1)}), None, 0)


SAMPLERS = ["tpe", "cmaes", "nsga2"] + (["gp"] if importlib.util.find_spec("torch") else [])


@pytest.mark.parametrize("name", SAMPLERS)
def test_optuna_strategies_optimise_a_simple_function(name):
    space = as_space({"x": Float(-5.0, 5.0), "n": Int(0, 10), "c": Categorical(["a", "b"])})
    # GP fits a model per suggestion (torch): fewer trials keep the test short.
    n = 14 if name == "gp" else 25
    s = make_strategy(name, space, n, seed=1)
    assert isinstance(s, OptunaStrategy) and s.adaptive
    for i in range(n):
        p = s.ask(i)
        assert -5 <= p["x"] <= 5 and 0 <= p["n"] <= 10 and p["c"] in ("a", "b")
        s.tell(i, -((p["x"] - 1.0) ** 2) - (p["c"] == "b"))
    assert s.ask(n) is None
    assert s.study.best_value > -4.0


def test_pending_trials_are_known_to_the_sampler():
    space = as_space({"x": Float(0.0, 1.0)})
    s = make_strategy("tpe", space, 10, seed=0)
    for i in range(4):
        s.ask(i)
    running = s.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    assert len(running) == 4
    s.tell(2, 0.5)
    s.tell(3, None)
    states = [t.state for t in s.study.get_trials(deepcopy=False)]
    assert states.count(TrialState.RUNNING) == 2
    assert states.count(TrialState.FAIL) == 1


def test_optuna_strategy_decodes_object_choices_and_subspaces():
    class Thing:
        pass

    a, b = Thing(), Thing()
    space = as_space([{"obj": [a, b], "k": [1, 2]}, {"x": stats.uniform(0, 2)}])
    s = OptunaStrategy(space, 30, seed=0, sampler=RandomSampler(seed=0))
    seen = set()
    for i in range(30):
        p = s.ask(i)
        seen.add(tuple(sorted(p)))
        if "obj" in p:
            assert p["obj"] is a or p["obj"] is b
        else:
            assert 0 <= p["x"] <= 2
        s.tell(i, float(i))
    assert seen == {("k", "obj"), ("x",)}


def test_model_based_strategies_reject_unsupported_distributions():
    space = as_space({"x": stats.norm(0, 1)})
    with pytest.raises(SearchSpaceError, match="Float"):
        make_strategy("tpe", space, 5, seed=0)


def test_loguniform_and_randint_are_translated():
    space = as_space({"a": stats.loguniform(1e-3, 1.0), "k": stats.randint(1, 4)})
    s = make_strategy("tpe", space, 30, seed=0)
    for i in range(30):
        p = s.ask(i)
        assert 1e-3 <= p["a"] <= 1.0 and p["k"] in (1, 2, 3)
        s.tell(i, np.log(p["a"]))


@pytest.mark.parametrize("name", ["tpe", "nsga2"])
def test_model_based_strategies_run_each_candidate_of_a_finite_space_once(name):
    space = as_space({"C": [0.1, 1.0, 10.0]})
    with pytest.warns(UserWarning, match="3 distinct candidates"):
        s = make_strategy(name, space, 10, seed=0)
    assert s.total == 3
    got = []
    for i in range(3):
        got.append(s.ask(i)["C"])
        s.tell(i, 1.0 if got[-1] == 1.0 else 0.0)
    assert sorted(got) == [0.1, 1.0, 10.0] and s.ask(3) is None
    assert make_strategy(name, space, None, seed=0).total == 3  # the default: no warning


def test_pending_and_restored_candidates_are_not_repeated():
    # Two sub-spaces with the same name: the candidate is told apart by its sub-space.
    space = as_space([{"a": [1, 2]}, {"a": [1], "b": [{0: 1}, [2]]}])
    s = make_strategy("tpe", space, None, seed=0)
    s.restore(0, {"a": 2}, 0.5)
    asked = [s.ask(i) for i in range(1, 4)]  # all pending: the constant liar alone repeats
    assert s.ask(4) is None
    points = [repr(sorted(p.items())) for p in [{"a": 2}, *asked]]
    assert sorted(points) == sorted(repr(sorted(p.items())) for p in space.iter_grid())


def test_equal_but_distinct_choices_are_kept_apart():
    space = as_space({"v": Categorical([1, 1.0, True])})
    s = OptunaStrategy(space, 3, seed=0, sampler=RandomSampler(seed=0))
    seen = set()
    for i in range(3):
        value = s.ask(i)["v"]
        seen.add((type(value).__name__, value))
        s.tell(i, 0.0)
    assert seen == {("int", 1), ("float", 1.0), ("bool", True)}


def test_unhashable_choices_work_in_model_based_strategies():
    # A class_weight dict, a list or an array cannot be hashed; random and grid take them.
    weights, layers, arr = {0: 1, 1: 3}, [8, 4], np.array([1.0, 2.0])
    space = as_space({"w": [weights, "balanced", None], "h": Categorical([layers, arr])})
    s = make_strategy("tpe", space, None, seed=0)
    seen = []
    for i in range(6):
        p = s.ask(i)
        assert any(p["w"] is c for c in (weights, "balanced", None))
        assert p["h"] is layers or p["h"] is arr
        seen.append(p)
        s.tell(i, float(i))
    resumed = make_strategy("tpe", space, None, seed=0)
    for i, p in enumerate(seen):
        # As read back from the registry: copies, object choices as their repr.
        stored = {k: v if v is None or isinstance(v, str) else repr(v) for k, v in p.items()}
        resumed.restore(i, {k: copy.deepcopy(v) for k, v in p.items()}, float(i))
        resumed.restore(i + len(seen), stored, float(i))
    assert len(resumed.study.get_trials(states=(TrialState.COMPLETE,))) == 2 * len(seen)


@pytest.mark.parametrize(
    ("dist", "low", "high", "log", "kind"),
    [
        (stats.uniform(2, 3), 2.0, 5.0, False, float),
        (stats.uniform(loc=-1, scale=2), -1.0, 1.0, False, float),
        (stats.loguniform(1e-3, 1.0), 1e-3, 1.0, True, float),
        (stats.loguniform(1e-3, 1.0, 0, 10), 1e-2, 10.0, True, float),
        (stats.randint(1, 10, loc=5), 6, 14, False, int),
        (stats.randint(low=2, high=4), 2, 3, False, int),
    ],
)
def test_scipy_distributions_translate_exactly(dist, low, high, log, kind):
    from dmlsearch.strategies.optuna import to_optuna_distributions

    (param,) = to_optuna_distributions(as_space({"p": dist}))[0]
    dim = param.dim
    assert (dim.low, dim.high) == pytest.approx((low, high))
    assert dim.log == log
    assert isinstance(dim.low, kind)


def test_shifted_loguniform_is_rejected():
    with pytest.raises(SearchSpaceError):
        make_strategy("tpe", as_space({"p": stats.loguniform(1e-3, 1.0, loc=1.0)}), 5, 0)


def test_single_point_float_works_in_every_strategy():
    space = as_space({"x": Float(0.5, 0.5), "k": [1, 2]})
    assert RandomStrategy(space, None, 0).total == 2
    assert GridStrategy(space, None, 0).ask(0) == {"k": 1, "x": 0.5}


# -- trial k does not depend on n_trials -------------------------------------------------------


@pytest.mark.parametrize(
    "space",
    [
        {"a": list(range(10)), "b": ["x", "y", "z"]},
        {"n": Int(1, 40, step=3), "m": Int(0, 5)},
        {"n": Int(1, 6), "c": [None, "l1", "l2"], "f": Float(0.5, 0.5)},
        [{"kernel": ["rbf"], "gamma": [0.1, 1.0]}, {"kernel": ["poly"], "degree": Int(2, 12)}],
    ],
    ids=["lists", "int", "mixed", "subspaces"],
)
def test_random_trial_k_does_not_depend_on_n_trials(space):
    space = as_space(space)
    short = RandomStrategy(space, 8, seed=5)
    long = RandomStrategy(space, 12, seed=5)
    first = [short.ask(k) for k in range(8)]
    assert first == [long.ask(k) for k in range(8)]
    assert RandomStrategy(space, None, seed=5).ask(3) == first[3]
    assert short.ask(8) is None
    draws = [tuple(sorted(long.ask(k).items(), key=str)) for k in range(12)]
    assert len(set(draws)) == 12  # still without replacement


def test_random_trial_k_on_a_huge_grid_without_materialising_it():
    # 10**12 points: the grid (or a permutation of it) would not fit in memory.
    space = as_space({"a": Int(0, 999_999), "b": Int(0, 999_999)})
    assert space.grid_size() == 10**12
    short = RandomStrategy(space, 8, seed=11)
    long = RandomStrategy(space, 2_000, seed=11)
    first = [short.ask(k) for k in range(8)]
    assert first == [long.ask(k) for k in range(8)]
    draws = {(p["a"], p["b"]) for p in (long.ask(k) for k in range(2_000))}
    assert len(draws) == 2_000
    assert all(0 <= a < 10**6 and 0 <= b < 10**6 for a, b in draws)
    assert RandomStrategy(space, 8, seed=12).ask(0) != first[0]


@pytest.mark.parametrize("size", [1, 2, 3, 17, 1000, 4097])
def test_seeded_bijection_is_a_permutation_on_both_paths(size, monkeypatch):
    from dmlsearch.strategies import random as random_module

    small = random_module.SeededBijection(size, seed=3)
    assert sorted(small(k) for k in range(size)) == list(range(size))
    monkeypatch.setattr(random_module, "PERMUTATION_LIMIT", 0)  # force the Feistel network
    feistel = random_module.SeededBijection(size, seed=3)
    values = [feistel(k) for k in range(size)]
    assert sorted(values) == list(range(size))
    if size > 3:
        assert values != list(range(size))
    with pytest.raises(IndexError):
        feistel(size)


# -- seeds ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SAMPLERS)
@pytest.mark.parametrize("seed", [2**63 - 1, 5_000_000_000, 2**32, 10**30])
def test_model_based_strategies_take_any_non_negative_seed(name, seed):
    from dmlsearch.strategies.optuna import sampler_seed

    space = as_space({"x": Float(0.0, 1.0), "c": ["a", "b"]})
    s = make_strategy(name, space, 2, seed=seed)
    for i in range(2):
        p = s.ask(i)
        assert 0.0 <= p["x"] <= 1.0
        s.tell(i, p["x"])
    assert 0 <= sampler_seed(seed) < 2**32
    assert sampler_seed(seed) == sampler_seed(seed) != sampler_seed(seed + 1)


@pytest.mark.parametrize("name", ["tpe", "cmaes"])
def test_an_int_whose_step_does_not_divide_its_range_is_sampled_without_optuna_s_warning(
    name: str,
) -> None:
    import warnings

    s = make_strategy(name, as_space({"k": Int(0, 100, step=3)}), 12, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a probe: Optuna warned on every trial
        values = set()
        for i in range(12):
            p = s.ask(i)
            assert p is not None
            values.add(p["k"])
            s.tell(i, -float(p["k"]))
    assert values <= set(range(0, 100, 3)) and len(values) > 1
