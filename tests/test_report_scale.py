"""The report's shortcuts for experiments of thousands of trials draw and compute what the
plain ways did: lanes, bars, per-trial numbers, and the study fANOVA looks at."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dmlsearch import Registry
from dmlsearch.report import write_report
from dmlsearch.report._common import _ABSENT, _figure, _floats, _load, _objectives, _scores
from dmlsearch.report._params import _importance
from dmlsearch.report._plots import _bars, _lanes, _merged
from dmlsearch.testing.registry_contract import make_trial


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    with Registry(f"sqlite:///{tmp_path / 'r.db'}", artifacts=str(tmp_path / "a")) as reg:
        yield reg


def _greedy_lanes(spans: list[tuple[float, float]]) -> list[int]:
    """The plain greedy partitioning: each trial, by start, takes the first lane free."""
    ends: list[float] = []
    out = [0] * len(spans)
    for i in sorted(range(len(spans)), key=lambda j: spans[j][0]):
        start, end = spans[i]
        lane = next((k for k, e in enumerate(ends) if e <= start), len(ends))
        if lane == len(ends):
            ends.append(end)
        else:
            ends[lane] = end
        out[i] = lane
    return out


def test_lanes_are_the_greedy_partitioning():
    rng = np.random.default_rng(0)
    for n in (0, 1, 5, 200):
        # Whole numbers: ties of starts, and ends equal to later starts, are common.
        starts = rng.integers(0, 50, n).astype(float).tolist()
        ends = [s + float(w) for s, w in zip(starts, rng.integers(0, 8, n), strict=True)]
        assert _lanes(starts, ends) == _greedy_lanes(list(zip(starts, ends, strict=True)))


def test_bars_are_broken_barhs_patches():
    xs, widths = np.array([0.0, 2.5, 7.0]), np.array([1.0, 0.25, 3.0])
    style: dict[str, Any] = {"facecolors": "#2b7bba", "edgecolor": "white", "linewidth": 0.5}
    ours, theirs = _figure().add_subplot(), _figure().add_subplot()
    _bars(ours, xs, widths, 1.6, 0.36, **style)
    theirs.broken_barh(list(zip(xs, widths, strict=True)), (1.6, 0.36), **style)
    (mine,), (reference,) = ours.collections, theirs.collections
    for a, b in zip(mine.get_paths(), reference.get_paths(), strict=True):
        assert np.array_equal(a.vertices, b.vertices)
    assert np.array_equal(mine.get_facecolor(), reference.get_facecolor())
    assert np.array_equal(mine.get_edgecolor(), reference.get_edgecolor())
    assert ours.dataLim.bounds == theirs.dataLim.bounds


def test_merged_bars_paint_what_the_bars_did():
    rng = np.random.default_rng(0)
    xs, widths = rng.integers(0, 400, 300).astype(float), rng.integers(1, 4, 300).astype(float)
    starts, lengths = _merged(xs, widths)
    assert len(starts) < len(xs)
    grid = np.arange(0.0, 410.0, 0.25) + 0.125  # between any two whole numbers
    painted = ((grid[:, None] >= xs) & (grid[:, None] <= xs + widths)).any(axis=1)
    merged = ((grid[:, None] >= starts) & (grid[:, None] <= starts + lengths)).any(axis=1)
    assert np.array_equal(painted, merged)
    assert np.all(starts[1:] > starts[:-1] + lengths[:-1])  # apart, in order
    assert (starts.min(), (starts + lengths).max()) == (xs.min(), (xs + widths).max())


def test_per_trial_numbers_treat_odd_values_as_before():
    values = [1, 2.5, None, math.inf, -math.inf, math.nan, True, "3", np.float32(0.5), _ABSENT]
    expected = [1.0, 2.5, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, 0.5]
    assert np.array_equal(_floats(values), [*expected, math.nan], equal_nan=True)
    with_inf = _floats(values, infinite=True)
    assert with_inf[3] == math.inf and with_inf[4] == -math.inf
    trials = [
        make_trial(1, 0, value=0.3),
        make_trial(1, 1, value=math.inf),
        make_trial(1, 2, value=0.9, state="failed"),
        make_trial(1, 3, value=None),
    ]
    assert np.array_equal(_objectives(trials), [0.3, math.inf, math.nan, math.nan], equal_nan=True)
    assert np.array_equal(_scores(trials), [0.3, math.nan, math.nan, math.nan], equal_nan=True)
    assert _objectives([]).shape == (0,)


def _varied(e: int) -> list[Any]:
    rng = np.random.default_rng(1)
    out = []
    for i in range(40):
        x, kind = float(rng.uniform(0, 1)), ["a", "b", "c"][i % 3]
        failed = i % 7 == 0
        out.append(
            make_trial(
                e,
                i,
                params={"x": x, "C": float(10 ** rng.uniform(-2, 2)), "kind": kind},
                value=None if failed else x + 0.1 * (kind == "a") + 0.01 * float(rng.normal()),
                state="failed" if failed else "complete",
            )
        )
    return out


def test_importance_is_that_of_the_registrys_optuna_study(registry, monkeypatch, tmp_path):
    """fANOVA sees the same trials, parameters and distributions as when the study came from
    ``Registry.to_optuna``, which the report no longer calls (it read every trial again)."""
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    exp = registry.store.create_experiment("exp")
    registry.store.record_trials(exp.id, _varied(exp.id))
    data = _load(registry, "exp")
    reference = get_param_importances(
        registry.to_optuna("exp"),
        evaluator=FanovaImportanceEvaluator(n_trees=32, max_depth=6, seed=0),
        params=["C", "kind", "x"],
    )

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the report converted every trial again")

    monkeypatch.setattr(Registry, "to_optuna", refuse)
    importances, caption = _importance(data)
    assert isinstance(importances, dict)
    assert importances == pytest.approx(dict(reference))
    assert list(importances) == list(reference)
    assert caption.startswith("fANOVA (32 trees of depth 6, seed 0) over 34 completed trials")
    text = write_report(registry, "exp", tmp_path / "r.html").read_text(encoding="utf-8")
    assert "over 34 completed trials" in text
