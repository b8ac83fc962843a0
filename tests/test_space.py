from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn.model_selection import ParameterGrid

from dmlsearch import Categorical, Float, Int, InvalidParameterError, SearchSpaceError, as_space
from dmlsearch.space import Distribution


@pytest.mark.parametrize(
    ("factory", "param"),
    [
        (lambda: Float(2.0, 1.0), "Float.low"),
        (lambda: Float(0.0, 1.0, log=True), "Float.low"),
        (lambda: Float(-1.0, 1.0, log=True), "Float.low"),
        (lambda: Float(0.0, float("inf")), "Float.high"),
        (lambda: Float("a", 1.0), "Float.low"),
        (lambda: Int(5, 1), "Int.low"),
        (lambda: Int(0, 10, log=True), "Int.low"),
        (lambda: Int(1, 10, step=0), "Int.step"),
        (lambda: Int(1.5, 10), "Int.low"),
        (lambda: Categorical([]), "Categorical.choices"),
        (lambda: Categorical("abc"), "Categorical.choices"),
    ],
)
def test_bad_dimensions_name_the_parameter(factory, param):
    with pytest.raises(SearchSpaceError) as info:
        factory()
    assert info.value.param == param
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, InvalidParameterError)


@pytest.mark.parametrize(
    ("space", "where"),
    [
        ({"C": []}, "search_space['C']"),
        ({"C": "rbf"}, "search_space['C']"),
        ({"C": 1.0}, "search_space['C']"),
        ({"C": {1, 2}}, "search_space['C']"),
        ([{"C": [1]}, {"gamma": []}], "search_space[1]['gamma']"),
        ([], "search_space"),
        ("C", "search_space"),
        ([{"C": [1]}, 3], "search_space[1]"),
        ({1: [1, 2]}, "search_space[0]"),
    ],
)
def test_bad_spaces_name_the_entry(space, where):
    with pytest.raises(SearchSpaceError) as info:
        as_space(space)
    assert info.value.param == where


def test_sklearn_grid_order_is_kept():
    grid = [
        {"kernel": ["rbf"], "gamma": [0.1, 1.0], "C": [1, 10, 100]},
        {"kernel": ["poly"], "degree": [2, 3]},
    ]
    space = as_space(grid)
    expected = list(ParameterGrid(grid))
    assert space.grid_size() == len(expected)
    assert list(space.iter_grid()) == expected
    assert [space.grid_point(i) for i in range(len(expected))] == expected
    with pytest.raises(IndexError):
        space.grid_point(len(expected))


def test_int_grid_and_numpy_choices():
    space = as_space({"n": Int(1, 7, step=3), "a": np.array([0.5, 1.5])})
    assert [p["n"] for p in space.iter_grid()] == [1, 4, 7, 1, 4, 7]
    assert space.is_finite


def test_continuous_dimension_cannot_be_gridded():
    space = as_space({"C": Float(0.1, 1.0)})
    with pytest.raises(SearchSpaceError, match="grid"):
        space.grid_size()
    assert not space.is_finite


def test_sampling_is_seeded_and_in_range():
    space = as_space(
        {
            "f": Float(1e-3, 10.0, log=True),
            "i": Int(1, 100, log=True),
            "j": Int(0, 10, step=5),
            "c": Categorical(["a", "b", None]),
            "d": stats.uniform(2, 3),
        }
    )
    draws = [space.sample(np.random.default_rng(7)) for _ in range(3)]
    assert draws[0] == draws[1] == draws[2]
    rng = np.random.default_rng(0)
    for _ in range(300):
        p = space.sample(rng)
        assert 1e-3 <= p["f"] <= 10.0
        assert 1 <= p["i"] <= 100 and isinstance(p["i"], int)
        assert p["j"] in (0, 5, 10)
        assert p["c"] in ("a", "b", None)
        assert 2 <= p["d"] <= 5 and isinstance(p["d"], float)


def test_log_sampling_covers_the_log_scale():
    rng = np.random.default_rng(0)
    dim = Float(1e-4, 1.0, log=True)
    values = np.array([dim.sample(rng) for _ in range(4000)])
    # Each decade gets about a quarter of the draws.
    counts = np.histogram(np.log10(values), bins=[-4, -3, -2, -1, 0])[0]
    assert counts.min() > 800
    ints = Int(1, 1000, log=True)
    small = np.mean([ints.sample(rng) <= 10 for _ in range(3000)])
    assert 0.25 < small < 0.42


def test_scipy_distribution_is_wrapped():
    space = as_space({"alpha": stats.loguniform(1e-4, 1)})
    dim = space.subspaces[0]["alpha"]
    assert isinstance(dim, Distribution)
    with pytest.raises(SearchSpaceError):
        dim.grid_values("alpha")
