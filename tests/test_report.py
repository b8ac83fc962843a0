"""The HTML report: self-contained, escaped, and valid on awkward experiments."""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

from dmlsearch import Float, Registry, SearchCV
from dmlsearch.registry import NotFoundError
from dmlsearch.report import report_figures, write_report
from dmlsearch.testing.registry_contract import make_trial

PNG = b"\x89PNG\r\n\x1a\n"
HEADINGS = [
    "Summary",
    "Leaderboard",
    "Optimisation history",
    "Parallel coordinates",
    "Parameter importance",
    "Trial durations per worker",
    "Failed trials",
    "Configuration",
    "Package versions",
]


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.headings: list[str] = []
        self.scripts = 0
        self._in_h2 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images.append(dict(attrs)["src"] or "")
        self._in_h2 = tag == "h2"
        self.scripts += tag == "script"

    def handle_data(self, data: str) -> None:
        if self._in_h2:
            self.headings.append(data)
            self._in_h2 = False


def _check(path: Path) -> tuple[_Page, str]:
    text = path.read_text(encoding="utf-8")
    page = _Page()
    page.feed(text)
    assert page.headings == HEADINGS
    assert len(page.images) == 4
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert png.startswith(PNG) and len(png) > 1024
    assert page.scripts == 0
    assert not re.search(r"(src|href)=['\"]?(https?:|//)", text)  # nothing fetched from outside
    return page, text


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    with Registry(f"sqlite:///{tmp_path / 'r.db'}", artifacts=str(tmp_path / "a")) as reg:
        yield reg


def _experiment(registry: Registry, trials: Callable[[int], list[Any]]) -> str:
    exp = registry.store.get_or_create_experiment(
        "exp", config={"strategy": "tpe"}, cluster={"workers": 2}
    )
    records = trials(exp.id)
    if records:
        registry.store.record_trials(exp.id, records)
    return exp.name


CASES: dict[str, Callable[[int], list[Any]]] = {
    "no trials": lambda e: [],
    "one trial": lambda e: [make_trial(e, 0)],
    "all failed": lambda e: [
        make_trial(e, i, state="failed", value=None, error="Traceback\nValueError: boom")
        for i in range(3)
    ],
    "categorical only": lambda e: [
        make_trial(e, i, params={"kernel": k, "flag": i % 2 == 0}, value=0.1 * i)
        for i, k in enumerate(["rbf", "linear", "poly", "rbf"])
    ],
    "conditional, odd values": lambda e: [
        make_trial(e, 0, params={"C": 1e-3, "kernel": "rbf", "gamma": 0.1}, value=0.5),
        make_trial(e, 1, params={"C": 10.0, "kernel": "linear"}, value=0.7),
        make_trial(e, 2, params={"C": 100.0, "kernel": None, "layers": [3, 4]}, value=None),
        make_trial(e, 3, params={"C": float("nan"), "kernel": "rbf"}, value=0.6, worker=None),
        make_trial(e, 4, state="timeout", value=None, started=None, finished=None),
    ],
}


@pytest.mark.parametrize("case", list(CASES))
def test_report_is_valid_for_awkward_experiments(registry, tmp_path, case):
    name = _experiment(registry, CASES[case])
    path = write_report(registry, name, tmp_path / "out" / "report.html")
    _, text = _check(path)
    failed = [t for t in registry.trials(name)["state"] if t != "complete"]
    if failed:
        assert "ValueError: boom" in text or "timeout" in text or "failed" in text


def test_report_escapes_every_value(registry, tmp_path):
    evil = "<script>alert(1)</script>"
    name = _experiment(
        registry,
        lambda e: [
            make_trial(e, 0, params={"kernel": evil}, value=0.9),
            make_trial(e, 1, params={"kernel": "rbf"}, value=0.1, worker=evil),
            make_trial(e, 2, state="failed", value=None, error=f"Traceback\nValueError: {evil}"),
        ],
    )
    _, text = _check(write_report(registry, name, tmp_path / "r.html"))
    assert evil not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_many_trials_are_downsampled_in_parallel_coordinates(registry, tmp_path):
    rng = np.random.default_rng(0)
    name = _experiment(
        registry,
        lambda e: [
            make_trial(
                e,
                i,
                params={"C": float(10 ** rng.uniform(-3, 3)), "kernel": ["a", "b"][i % 2]},
                value=float(rng.uniform()),
                started=1_700_000_000.0 + i * 0.01,
                finished=1_700_000_000.02 + i * 0.01,
                worker=f"w{i % 4}",
            )
            for i in range(5000)
        ],
    )
    _, text = _check(write_report(registry, name, tmp_path / "r.html"))
    assert "1000 of 5000 completed trials drawn" in text


def test_figures_and_importance_on_a_real_search(client, tmp_path, registry):
    X, y = make_classification(n_samples=80, n_features=5, random_state=0)
    SearchCV(
        LogisticRegression(),
        {"C": Float(1e-3, 1e2, log=True), "fit_intercept": [True, False]},
        n_trials=6,
        cv=2,
        client=client,
        registry=registry,
        experiment_name="real",
        progress=False,
        random_state=0,
    ).fit(X, y)
    figures = report_figures(registry, "real")
    assert set(figures) == {"history", "parallel", "importance", "timeline"}
    assert all(png.startswith(PNG) for png in figures.values())
    _, text = _check(write_report(registry, "real", tmp_path / "real.html"))
    leaderboard = registry.leaderboard("real", k=1)
    best = leaderboard["value"].iloc[0]
    assert re.search(rf"best value</td><td>{best:.6g}<", text)
    assert "not enough completed trials" not in text
    assert not math.isnan(best)


def test_unknown_experiment_is_an_error(registry, tmp_path):
    with pytest.raises(NotFoundError):
        write_report(registry, "nope", tmp_path / "r.html")
