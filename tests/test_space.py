from __future__ import annotations

import re

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
        ({1: [1, 2]}, "search_space[1]"),  # the key, not an index
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
    assert [space.grid_subspace(i) for i in range(len(expected))] == [0] * 6 + [1] * 2
    for bad in (len(expected), -1):
        with pytest.raises(IndexError):
            space.grid_point(bad)
        with pytest.raises(IndexError):
            space.grid_subspace(bad)


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


# -- describe and decode (resume) -------------------------------------------------------------


def _json(value):
    from dmlsearch.registry.sql import _dumps, _loads

    return _loads(_dumps(value))


def test_decode_inverts_the_registry_json_form():
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import GaussianNB

    lr, nb = LogisticRegression(max_iter=50), GaussianNB()
    space = as_space(
        {
            "clf": Categorical([lr, nb]),
            "shape": [(8,), (8, 4)],
            "v": Categorical([1, 1.0, True, None]),
            "C": Float(1e-3, 1e2, log=True),
            "k": Int(2, 10, step=2),
            "a": np.array([0.5, 1.5]),
        }
    )
    for candidate in [
        {"clf": nb, "shape": (8, 4), "v": 1.0, "C": 0.25, "k": 4, "a": np.float64(1.5)},
        {"clf": lr, "shape": (8,), "v": True, "C": 1e2, "k": 10, "a": np.float64(0.5)},
        {"clf": lr, "shape": (8,), "v": 1, "C": 1e-3, "k": 2, "a": np.float64(0.5)},
        {"clf": lr, "shape": (8,), "v": None, "C": 1.0, "k": 2, "a": np.float64(0.5)},
    ]:
        stored = _json(candidate)
        assert isinstance(stored["clf"], str) and isinstance(stored["shape"], list)
        decoded = space.decode(stored, _json)
        assert decoded["clf"] is candidate["clf"]
        assert decoded["shape"] == candidate["shape"] and isinstance(decoded["shape"], tuple)
        assert type(decoded["v"]) is type(candidate["v"]) and decoded["v"] == candidate["v"]
        assert decoded["C"] == candidate["C"] and decoded["k"] == candidate["k"]
        assert decoded["a"] == candidate["a"]


@pytest.mark.parametrize(
    ("stored", "match"),
    [
        ({"C": 1e3, "k": 2, "c": "a"}, r"search_space\['C'\].*not a number in"),
        ({"C": 1.0, "k": 3, "c": "a"}, r"search_space\['k'\].*on step 2"),
        ({"C": 1.0, "k": 2.5, "c": "a"}, "not an integer"),
        ({"C": 1.0, "k": 2, "c": "z"}, "not one of the choices"),
        ({"C": "1.0", "k": 2, "c": "a"}, "not a number"),
        ({"C": 1.0, "k": 2}, "exactly the parameters"),
    ],
)
def test_decode_refuses_values_outside_the_space(stored, match):
    space = as_space({"C": Float(1e-3, 1e2), "k": Int(2, 10, step=2), "c": ["a", "b"]})
    with pytest.raises(ValueError, match=match):
        space.decode(stored, _json)


def _relu(v):
    return max(v, 0.0)


def _tanh(v):
    return np.tanh(v)


def _other_process(stored):
    """``stored`` as another process recorded it: its functions at other addresses."""
    return {k: re.sub(r" at 0x[0-9a-f]+", " at 0x7f00deadbeef", v) for k, v in stored.items()}


def test_decode_and_regeneration_take_a_function_recorded_by_another_process():
    from dmlsearch._recording import same_params

    space = as_space({"act": [_relu, _tanh]})
    stored = _other_process(_json({"act": _tanh}))
    assert stored["act"] != _json({"act": _tanh})["act"]
    assert space.decode(stored, _json) == {"act": _tanh}
    assert same_params(stored, {"act": _tanh}) and not same_params(stored, {"act": _relu})


def test_decode_refuses_a_repr_that_several_choices_share_but_for_addresses():
    def make():
        def act(v):
            return v

        return act

    first, second = make(), make()
    space = as_space({"act": [first, second]})
    assert space.decode(_json({"act": second}), _json) == {"act": second}  # this process
    with pytest.raises(ValueError, match="matches 2 of the choices"):
        space.decode(_other_process(_json({"act": second})), _json)


def test_decode_picks_the_subspace_that_holds_the_values():
    space = as_space([{"kernel": ["rbf"], "C": [1.0]}, {"kernel": ["linear"], "C": [2.0]}])
    assert space.decode({"kernel": "linear", "C": 2.0}) == {"kernel": "linear", "C": 2.0}
    with pytest.raises(ValueError, match=r"search_space\[0\]\['C'\].*search_space\[1\]"):
        space.decode({"kernel": "rbf", "C": 2.0})


def test_describe_is_equal_for_equal_spaces_and_names_changes():
    from sklearn.linear_model import LogisticRegression

    same = [
        {"C": np.array([0.1, 1.0]), "m": [LogisticRegression(C=2.0)], "f": Float(1, 10)},
        {"C": [0.1, 1.0], "m": [LogisticRegression(C=2.0)], "f": Float(1.0, 10.0)},
    ]
    a, b = (_json(as_space(s).describe()) for s in same)
    assert a == b
    other = _json(as_space({**same[1], "m": [LogisticRegression(C=3.0)]}).describe())
    assert other != a
    assert other[0]["m"]["choices"][0]["params"]["C"] == 3.0
    dist = as_space({"d": stats.loguniform(1e-3, 1.0)}).describe()
    assert dist == as_space({"d": stats.loguniform(1e-3, 1.0)}).describe()
    assert dist != as_space({"d": stats.loguniform(1e-3, 10.0)}).describe()


def test_int_grid_is_lazy():
    space = as_space({"n": Int(0, 10**15)})
    assert space.grid_size() == 10**15 + 1
    assert space.grid_point(10**15) == {"n": 10**15}


def test_a_parameter_name_that_is_not_a_string_is_named_by_its_key():
    # A probe: "search_space[0]" read as the first entry, not the key 1.
    with pytest.raises(SearchSpaceError, match=r"search_space\[1\]: .*got 1 \(int\)"):
        as_space({"a": [1], 1: [1, 2]})
    with pytest.raises(SearchSpaceError, match=r"search_space\[1\]\[''\]"):
        as_space([{"a": [1]}, {"": [1]}])
