"""The HTML report: self-contained, escaped, and valid on awkward experiments."""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from typer.testing import CliRunner

from dmlsearch import Float, Registry, SearchCV
from dmlsearch.cli import app
from dmlsearch.registry import NotFoundError, TrialRecord
from dmlsearch.report import (
    FIGURES,
    MAX_LINES,
    OPTIONAL_FIGURES,
    report_figures,
    write_report,
)
from dmlsearch.report._common import _load
from dmlsearch.report._markup import _file_name
from dmlsearch.report._params import _axis, _plot_parallel
from dmlsearch.report._plots import _plot_curves, _plot_history
from dmlsearch.testing.registry_contract import make_trial

PNG = b"\x89PNG\r\n\x1a\n"
HEADINGS = [
    "Summary",
    "Configuration",
    "Package versions",
    "Leaderboard",
    *FIGURES.values(),
    "Failed trials",
]
EVIL = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


class _Page(HTMLParser):
    """Collects images, h2 headings, figure captions, table rows and any script or link."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.headings: list[str] = []
        self.captions: dict[str, str] = {}
        self.rows: list[list[str]] = []
        self.tables: list[list[list[str]]] = []
        self.scripts = 0
        self.external: list[str] = []
        self._tag = ""
        self._heading = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag = tag
        values = dict(attrs)
        if tag == "img":
            self.images.append(values["src"] or "")
        if tag == "table":
            self.tables.append([])
        if tag == "tr":
            self.rows.append([])
            self.tables[-1].append(self.rows[-1])
        self.scripts += tag == "script"
        for key in ("src", "href"):
            if (values.get(key) or "").startswith(("http:", "https:", "//")):
                self.external.append(values[key] or "")

    def handle_data(self, data: str) -> None:
        if self._tag == "h2":
            self.headings.append(data)
            self._heading = data
        elif self._tag == "figcaption":
            self.captions[self._heading] = data
        elif self._tag in ("td", "th") and self.rows:
            self.rows[-1].append(data)
        self._tag = ""


def _check(path: Path) -> tuple[_Page, str]:
    """Parse the report and check what every report must be; return the page and text."""
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    page = _Page()
    page.feed(text)
    page.close()
    assert page.headings == HEADINGS
    assert len(page.images) == len(FIGURES)
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert png.startswith(PNG) and len(png) > 1024
    assert page.scripts == 0
    assert page.external == []  # nothing is fetched from elsewhere
    assert "<link" not in text and "@import" not in text
    return page, text


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    with Registry(f"sqlite:///{tmp_path / 'r.db'}", artifacts=str(tmp_path / "a")) as reg:
        yield reg


def _experiment(
    registry: Registry, trials: Callable[[int], list[TrialRecord]], name: str = "exp", **fields: Any
) -> str:
    exp = registry.store.get_or_create_experiment(
        name,
        config=fields.pop("config", {"strategy": "tpe", "n_trials": 10}),
        cluster=fields.pop("cluster", {"workers": 2, "threads": 4, "memory_bytes": 2**33}),
        package_versions=fields.pop("package_versions", {"dmlsearch": "0.1.0"}),
        data_fingerprint=fields.pop("data_fingerprint", "abc123"),
    )
    records = trials(exp.id)
    if records:
        registry.store.record_trials(exp.id, records)
    return exp.name


def _timed(e: int, i: int, **fields: Any) -> TrialRecord:
    return make_trial(e, i, started=1_700_000_000.0 + i, finished=1_700_000_000.5 + i, **fields)


# A multi-line message: the failed-trial tables show (and group by) its first line.
_BOOM = (
    'Traceback (most recent call last):\n  File "fit.py", line {line}, in fit\n'
    "    raise ValueError(...)\nValueError: boom\n  second line of this trial\n"
)

CASES: dict[str, Callable[[int], list[TrialRecord]]] = {
    "no trials": lambda e: [],
    "one trial": lambda e: [make_trial(e, 0)],
    "all failed": lambda e: [
        make_trial(e, i, state="failed", value=None, error=_BOOM.format(line=10 + i))
        for i in range(3)
    ],
    "categorical only": lambda e: [
        make_trial(e, i, params={"kernel": k, "flag": i % 2 == 0}, value=0.1 * i)
        for i, k in enumerate(["rbf", "linear", "poly", "rbf"])
    ],
    "conditional": lambda e: [
        make_trial(e, 0, params={"C": 1e-3, "kernel": "rbf", "gamma": 0.1}, value=0.5),
        make_trial(e, 1, params={"C": 10.0, "kernel": "linear"}, value=0.7),
        make_trial(e, 2, params={"C": 100.0, "kernel": "rbf", "gamma": 1.0}, value=0.65),
    ],
    "NaN and None": lambda e: [
        make_trial(e, 0, params={"C": float("nan"), "depth": None}, value=0.5),
        make_trial(e, 1, params={"C": 1.0, "depth": 3}, value=None),
        make_trial(e, 2, params={"C": float("inf"), "depth": 5}, value=0.6, duration=None),
        make_trial(e, 3, params={"C": 2.0, "depth": None}, value=0.4, started=None),
    ],
    "lists and None values": lambda e: [
        make_trial(e, 0, params={"layers": [3, 4], "act": None, "w": {"a": 1}}, value=0.5),
        make_trial(e, 1, params={"layers": [8], "act": "relu", "w": None}, value=0.7),
        make_trial(e, 2, params={"layers": None, "act": "tanh", "w": {"a": 2}}, value=0.2),
    ],
    "worker None, timeout, no timings": lambda e: [
        make_trial(e, 0, worker=None, value=0.3),
        make_trial(e, 1, worker=None, state="timeout", value=None, error="TrialTimeout: 5 s"),
        make_trial(e, 2, state="timeout", value=None, started=None, finished=None),
        make_trial(e, 3, state="running", value=None, finished=None),
    ],
    "same objective everywhere": lambda e: [
        make_trial(e, i, params={"C": float(i)}, value=0.5) for i in range(4)
    ],
    "mathtext-like strings": lambda e: [
        make_trial(e, 0, params={"$x$": r"$\foo$", "k": "a$b"}, value=0.5, worker=r"$\bar$"),
        make_trial(e, 1, params={"$x$": "plain", "k": "\n\t"}, value=0.6),
    ],
    "no parameters": lambda e: [make_trial(e, i, params={}, value=0.1 * i) for i in range(3)],
    "concurrent trials on one worker": lambda e: [
        make_trial(e, i, params={"C": float(i)}, value=0.1 * i, started=100.0, finished=101.0 + i)
        for i in range(4)
    ],
}


@pytest.mark.parametrize("case", list(CASES))
def test_report_is_valid_for_awkward_experiments(registry, tmp_path, case):
    name = _experiment(registry, CASES[case])
    path = write_report(registry, name, tmp_path / "out" / "report.html")
    assert path == tmp_path / "out" / "report.html"
    _, text = _check(path)
    states = list(registry.trials(name)["state"])
    assert f"<td>trials</td><td>{len(states)}</td>" in text
    problems = [s for s in states if s not in ("complete", "running")]
    if problems:
        assert "<h2>Failed trials</h2><p>None.</p>" not in text
    else:
        assert "<h2>Failed trials</h2><p>None.</p>" in text
    assert [p.name for p in path.parent.iterdir()] == ["report.html"]  # no temporary left


def test_failed_trials_table_and_importance_panel(registry, tmp_path):
    name = _experiment(registry, CASES["all failed"])
    page, text = _check(write_report(registry, name, tmp_path / "r.html"))
    assert ["0", "failed", "tcp://127.0.0.1:40000", "0", "ValueError: boom"] in page.rows
    assert ["3", "ValueError: boom"] in page.rows  # the by-error summary
    assert "Traceback" not in text and "second line" not in text  # the exception's headline only
    assert "No completed trial yet." in text
    figures = report_figures(registry, name)
    assert set(figures) == set(FIGURES)


def test_summary_holds_the_header_fields(registry, tmp_path):
    name = _experiment(
        registry,
        lambda e: [
            make_trial(e, 0, params={"C": 0.5, "kernel": "rbf"}, value=0.75),
            make_trial(e, 1, params={"C": 2.0, "kernel": "linear"}, value=0.8),
            make_trial(e, 2, state="failed", value=None, error="boom"),
        ],
        data_fingerprint="f" * 16,
        package_versions={"scikit-learn": "1.6.1", "dmlsearch": "0.1.0"},
        config={"strategy": "tpe", "space": {"C": "log-uniform"}},
    )
    page, text = _check(write_report(registry, name, tmp_path / "r.html"))
    assert ["best value", "0.8"] in page.rows
    assert ["best trial", "1"] in page.rows
    assert ["best params", "C=2, kernel=linear"] in page.rows
    assert ["by state", "complete: 2, failed: 1"] in page.rows
    assert ["data fingerprint", "f" * 16] in page.rows
    assert ["cluster memory_bytes", "8 GiB"] in page.rows
    assert ["cluster workers", "2"] in page.rows
    assert ["scikit-learn", "1.6.1"] in page.rows
    assert "log-uniform" in text and re.search(r"created</td><td>\d{4}-\d\d-\d\d ", text)


def test_leaderboard_is_the_top_ten(registry, tmp_path):
    name = _experiment(
        registry,
        lambda e: [make_trial(e, i, params={"C": float(i)}, value=i / 20) for i in range(15)],
    )
    page, _ = _check(write_report(registry, name, tmp_path / "r.html"))
    header, *board = next(t for t in page.tables if t[0][:3] == ["rank", "number", "value"])
    assert header == ["rank", "number", "value", "mean score", "duration (s)", "C"]
    assert [r[:2] for r in board] == [[str(k), str(15 - k)] for k in range(1, 11)]


@pytest.mark.parametrize(
    ("config", "trials", "best"),
    [
        # optimize(direction="minimize"): least first, as Registry.leaderboard ranks.
        (
            {"kind": "optimize", "direction": "minimize", "schedule": {"pruner": None}},
            lambda e: [make_trial(e, i, value=v) for i, v in enumerate([0.4, 0.1, 0.9])],
            ["1", "0", "2"],
        ),
        # A multi-fidelity search: the highest resource reached first (best_index_'s rule);
        # trial 1's lucky 0.95 at 3 of 9 ranks below both trials trained to 9.
        (
            {"strategy": "random", "schedule": {"scheduler": "asha"}},
            lambda e: [
                make_trial(e, 0, value=0.8, intermediate={"1": 0.5, "3": 0.7, "9": 0.8}),
                make_trial(e, 1, value=0.95, intermediate={"1": 0.6, "3": 0.95, "3:rung": 1}),
                make_trial(e, 2, value=0.85, intermediate={"1": 0.7, "3": 0.8, "9": 0.85}),
                make_trial(e, 3, value=0.99, intermediate={"1": 0.99}),
            ],
            ["2", "0", "1", "3"],
        ),
    ],
)
def test_report_and_registry_rank_as_the_experiment_does(registry, tmp_path, config, trials, best):
    name = _experiment(registry, trials, config=config)
    page = _Page()  # not _check: learning curves add a section to this report
    page.feed(write_report(registry, name, tmp_path / "r.html").read_text(encoding="utf-8"))
    page.close()
    _header, *board = next(t for t in page.tables if t[0][:3] == ["rank", "number", "value"])
    assert [r[1] for r in board] == best
    assert ["best trial", best[0]] in page.rows
    assert [t.number for t in registry.best_trials(name)] == [int(b) for b in best]
    assert registry.leaderboard(name)["number"].tolist() == [int(b) for b in best]
    top = registry.experiments().set_index("name").loc[name, "best_value"]
    assert top == registry.best_trials(name, k=1)[0].value


def test_report_escapes_every_value(registry, tmp_path):
    name = _experiment(
        registry,
        lambda e: [
            make_trial(e, 0, params={"kernel": EVIL, EVIL: 1.0}, value=0.9),
            make_trial(e, 1, params={"kernel": "rbf", EVIL: 2.0}, value=0.1, worker=EVIL),
            make_trial(e, 2, state=EVIL, value=None, error=f"Traceback\nValueError: {EVIL}"),
        ],
        name=f"exp {EVIL}",
        config={"note": EVIL},
        cluster={"address": EVIL},
        package_versions={EVIL: EVIL},
        data_fingerprint=EVIL,
    )
    _, text = _check(write_report(registry, name, tmp_path / "r.html"))
    assert EVIL not in text and "<script" not in text.lower()
    assert text.count(ESCAPED) >= 8  # title, params, worker, state, error, config, ...
    assert f"<title>dmlsearch report: exp {ESCAPED}</title>" in text


def test_many_trials_are_downsampled(registry, tmp_path):
    rng = np.random.default_rng(0)
    n = 5000
    name = _experiment(
        registry,
        lambda e: [
            make_trial(
                e,
                i,
                params={"C": float(10 ** rng.uniform(-3, 3)), "kernel": ["a", "b"][i % 2]},
                value=float(rng.uniform()) if i % 50 else None,
                state="complete" if i % 50 else "failed",
                error=None if i % 50 else "MemoryError",
                started=1_700_000_000.0 + i * 0.01,
                finished=1_700_000_000.05 + i * 0.01,
                worker=f"tcp://10.0.0.{i % 4}:4000",
            )
            for i in range(n)
        ],
    )
    # What keeps the report quick at this size (about 2 s on one core) is the sampling.
    page, _ = _check(write_report(registry, name, tmp_path / "r.html"))
    completed = n - n // 50
    caption = page.captions["Parallel coordinates"]
    assert caption.startswith(f"{MAX_LINES:,} of {completed:,} completed trials drawn")
    assert page.captions["Parameter importance"].startswith("fANOVA")
    assert "stacked" in page.captions["Trial durations per worker"]  # 2 at once on each worker
    assert [str(n // 50), "MemoryError"] in page.rows


def _ranked_trials(staged: bool) -> Callable[[int], list[TrialRecord]]:
    """1,200 trials with distinct values, each its last intermediate value. Staged: one in
    ten trained to resource 9, the others stopped at 1 with greater (lucky) values."""

    def trials(e: int) -> list[TrialRecord]:
        out = []
        for i in range(1200):
            value = 1.0 + ((i * 7919) % 1200) / 1200  # a permutation of the numbers
            reached = 9 if staged and i % 10 == 0 else 1
            if staged and reached == 1:
                value += 1.0
            curve = {"1": value} if reached == 1 else {"1": value - 0.5, "9": value}
            out.append(make_trial(e, i, params={"x": float(i)}, value=value, intermediate=curve))
        return out

    return trials


@pytest.mark.parametrize(
    "config",
    [
        {"kind": "optimize", "direction": "minimize", "schedule": {"pruner": None}},
        {"strategy": "random", "schedule": {"scheduler": "asha"}},
    ],
    ids=["minimize", "multi-fidelity"],
)
def test_the_best_trials_drawn_are_the_leaderboards(registry, config):
    """Were the 100 greatest values whatever the experiment ranked: the largest losses
    of a minimize run, lucky low-rung trials of a multi-fidelity search."""
    staged = "scheduler" in config["schedule"]
    name = _experiment(registry, _ranked_trials(staged), config=config)
    best = [t.number for t in registry.best_trials(name, k=100)]
    data = _load(registry, name)
    fig, caption = _plot_parallel(data)
    # Trial i's line starts at x's position i / 1199 (x runs 0..1199, scaled to [0, 1]).
    drawn = [round(s[0][1] * 1199) for s in fig.axes[0].collections[0].get_segments()]
    assert len(drawn) == MAX_LINES and set(best) <= set(drawn)
    assert drawn[-1] == best[0]  # the best is drawn last, on top
    assert caption.startswith(f"{MAX_LINES:,} of 1,200 completed trials drawn: the 100 best")
    if not staged:  # the best drawn is also the brightest (viridis' yellow end)
        top = fig.axes[0].collections[0].get_colors()[-1][:3]
        assert np.allclose(top, matplotlib.colormaps["viridis"](1.0)[:3])
    # The learning curves keep the same trials: each ends at the trial's value (a dot).
    number = {t.value: t.number for t in data.trials}
    curves = _plot_curves(data)
    assert curves is not None
    dots = [number[line.get_ydata()[-1]] for line in curves[0].axes[0].lines[1::2]]
    assert len(dots) == MAX_LINES and set(best) <= set(dots) and dots[-1] == best[0]
    better = "less" if "direction" in config else "greater"
    assert _plot_history(data.trials, data.minimize)[0].axes[0].get_ylabel() == (
        f"objective ({better} is better)"
    )


def test_infinite_objectives_are_drawn_as_the_leaderboard_ranks_them(registry, tmp_path):
    """The summary said "best value: inf" while the history called that trial "no score"."""
    name = _experiment(
        registry,
        lambda e: [
            make_trial(e, 0, value=math.inf, params={"C": 0.0}),
            make_trial(e, 1, value=-math.inf, params={"C": 1.0}),
            make_trial(e, 2, value=0.3, params={"C": 2.0}),
            make_trial(e, 3, value=0.4, params={"C": 3.0}),
            make_trial(e, 4, value=None, state="failed", params={"C": 4.0}),
        ],
    )
    fig, caption = _plot_history(_load(registry, name).trials)
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert "completed, +inf" in labels and "completed, -inf" in labels
    assert "complete (no score)" not in labels and "failed (no score)" in labels
    assert [t.get_text() for t in ax.get_yticklabels(minor=True)] == ["+inf", "-inf"]
    best = next(line for line in ax.lines if line.get_label() == "best so far")
    top = next(line for line in ax.lines if line.get_label() == "completed, +inf")
    assert set(best.get_ydata()) == set(top.get_ydata())  # +inf from trial 0 on
    assert min(top.get_ydata()) > 0.4 and ax.get_ylim()[1] > max(top.get_ydata())
    page, _ = _check(write_report(registry, name, tmp_path / "r.html"))
    assert ["best value", "inf"] in page.rows
    assert page.captions["Optimisation history"] == caption
    assert caption.startswith("2 trials completed with an infinite objective")
    parallel = page.captions["Parallel coordinates"]
    assert parallel == "2 completed trials with an infinite objective are not drawn."


def test_one_objective_for_all_is_one_colour_without_a_colour_bar(registry):
    """The colour bar read 0…10 with an offset of 1e-13+5e-1."""
    flat = _load(registry, _experiment(registry, CASES["same objective everywhere"]))
    fig, caption = _plot_parallel(flat)
    assert len(fig.axes) == 1  # no colour bar
    assert caption == "Every trial drawn has the objective 0.5: one colour, no colour bar."
    assert len({tuple(c) for c in fig.axes[0].collections[0].get_colors()}) == 1
    varied = _load(registry, _experiment(registry, CASES["conditional"], name="varied"))
    fig, caption = _plot_parallel(varied)
    assert len(fig.axes) == 2 and caption == ""


def test_importance_needs_two_varied_completed_trials(registry, tmp_path):
    cases = {
        "one": (CASES["one trial"], "not enough completed trials"),
        "failed": (CASES["all failed"], "not enough completed trials"),
        "flat": (CASES["same objective everywhere"], "same objective"),
        "disjoint": (
            lambda e: [
                make_trial(e, 0, params={"a": 1.0}, value=0.1),
                make_trial(e, 1, params={"b": 1.0}, value=0.2),
            ],
            "no parameter both varies",
        ),
    }
    for name, (trials, message) in cases.items():
        _experiment(registry, trials, name=name)
        path = write_report(registry, name, tmp_path / f"{name}.html")
        page, _ = _check(path)
        assert message in page.captions["Parameter importance"].lower(), name


def test_axis_scaling():
    log = _axis([1e-3, 1e-1, 1e2, None])
    assert log.log and log.positions[0] == 0.2 and log.positions[2] == 1.0
    assert log.positions[3] == 0.0 and "None" in log.labels
    linear = _axis([1.0, 2.0, 3.0])
    assert not linear.log and list(linear.positions) == [0.0, 0.5, 1.0]
    negative = _axis([-10.0, 0.0, 1000.0])
    assert not negative.log
    categorical = _axis(["b", "a", "c", True, [1, 2]])
    assert sorted(categorical.positions) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert len(set(categorical.labels)) == 5
    absent = _axis([1.0, _axis.__globals__["_ABSENT"], 3.0])
    assert math.isnan(absent.positions[1]) and absent.positions[2] == 1.0
    constant = _axis([5, 5])
    assert list(constant.positions) == [0.5, 0.5]


def test_report_leaves_pyplot_alone_and_is_deterministic(registry):
    import matplotlib
    import matplotlib.pyplot as plt

    backend, figures = matplotlib.get_backend(), plt.get_fignums()
    name = _experiment(registry, CASES["conditional"])
    first = report_figures(registry, name)
    assert report_figures(registry, registry.experiment(name).id) == first  # by id, same bytes
    assert matplotlib.get_backend() == backend and plt.get_fignums() == figures


@pytest.mark.cluster
def test_report_of_a_real_search(client, tmp_path, registry):
    X, y = make_classification(n_samples=80, n_features=5, random_state=0)
    SearchCV(
        LogisticRegression(),
        {"C": Float(1e-3, 1e2, log=True)},
        n_trials=4,
        cv=2,
        client=client,
        registry=registry,
        experiment_name="e",
        progress=False,
        random_state=0,
    ).fit(X, y)
    figures = report_figures(registry, "e")
    assert list(figures) == list(FIGURES)
    assert all(png.startswith(PNG) and len(png) > 1024 for png in figures.values())
    page, text = _check(write_report(registry, "e", tmp_path / "real.html"))
    best = registry.leaderboard("e", k=1)["value"].iloc[0]
    assert not math.isnan(best)
    assert ["best value", f"{best:.6g}"] in page.rows
    assert "not enough completed trials" not in text
    assert page.captions["Parameter importance"].startswith("fANOVA")
    assert "4 timed trials on" in page.captions["Trial durations per worker"]
    cluster_rows = [r for r in page.rows if r and r[0].startswith("cluster ")]
    assert ["cluster workers", "2"] in cluster_rows


def test_unknown_experiment_is_an_error(registry, tmp_path):
    with pytest.raises(NotFoundError):
        write_report(registry, "nope", tmp_path / "r.html")
    with pytest.raises(NotFoundError):
        report_figures(registry, 12345)
    assert not (tmp_path / "r.html").exists()


# ---------------------------------------------------------------- output paths


def _report_cli(registry: Registry, *args: str | Path) -> Any:
    """``dmlsearch report ARGS`` on ``registry``; a traceback is re-raised."""
    result = CliRunner().invoke(app, ["report", *map(str, args), "--registry", registry.url])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_file_names_at_the_limit_are_written(registry, tmp_path):
    """Names of 245-255 bytes failed: the temporary name beside them was ~11 bytes longer."""
    name = _experiment(registry, CASES["one trial"])
    for target in ("r" * 250 + ".html", "é" * 125 + ".html"):  # 255 bytes each
        path = write_report(registry, name, tmp_path / "out" / target)
        assert path.name == target and path.read_text(encoding="utf-8").startswith("<!DOCTYPE")
    assert len(list((tmp_path / "out").iterdir())) == 2  # no temporary left


def test_default_file_name_fits_and_stays_distinct():
    assert _file_name("digits svc/v2") == "digits_svc_v2.html"
    assert _file_name("n" * 250) == "n" * 250 + ".html"  # 255 bytes: kept whole
    long, other = _file_name("é" * 200), _file_name("é" * 199 + "è")
    for fitted in (long, other):
        assert len(fitted.encode()) <= 255 and fitted.startswith("é" * 100)
        assert fitted.endswith(".html")
    assert long != other


def test_cli_report_of_a_long_name(registry, tmp_path, monkeypatch):
    """Was a traceback (OSError: File name too long) and exit 1: the default file name was
    the experiment's, 405 bytes for "é" * 200 (a valid name: up to 256 characters)."""
    monkeypatch.chdir(tmp_path)
    for name in ("é" * 200, "é" * 199 + "è"):
        _experiment(registry, CASES["one trial"], name=name)
        result = _report_cli(registry, name)
        assert result.exit_code == 0, result.output
        assert result.stdout == f"wrote {_file_name(name)}\n"
    assert len(list(tmp_path.glob("*.html"))) == 2
    # A name too long given with -o: one line saying what to change, exit 2.
    result = _report_cli(registry, "é" * 200, "-o", "x" * 300 + ".html")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: xxx") and "at most 255 bytes" in result.stderr


def test_a_folder_path_is_refused_and_a_file_parent_named(registry, tmp_path):
    """ "newdir/" wrote a file named newdir; under a file, the error was "afile: File exists"."""
    name = _experiment(registry, CASES["one trial"])
    given = f"{tmp_path / 'newdir'}/"
    with pytest.raises(IsADirectoryError, match="give the report a file name") as folder:
        write_report(registry, name, given)
    assert folder.value.filename == given and "newdir/report.html" in str(folder.value)
    assert not (tmp_path / "newdir").exists()  # neither a file nor a folder
    (tmp_path / "afile").write_text("a file")
    for target in (tmp_path / "afile" / "r.html", tmp_path / "afile" / "sub" / "r.html"):
        with pytest.raises(NotADirectoryError) as under_file:
            write_report(registry, name, target)
        assert under_file.value.filename == str(target)
        assert under_file.value.strerror.startswith(f"{tmp_path / 'afile'} is a file, not a folder")


def test_cli_report_output_paths(registry, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = _experiment(registry, CASES["one trial"])
    (tmp_path / "afile").write_text("a file")
    cases = {
        "newdir/": "error: newdir/: is a folder: give the report a file name",
        "afile/r.html": "error: afile/r.html: afile is a file, not a folder",
    }
    for output, message in cases.items():
        result = _report_cli(registry, name, "-o", output)
        assert result.exit_code == 2 and result.stderr.startswith(message), result.output
        assert result.stderr.count("\n") == 1
    assert not (tmp_path / "newdir").exists() and (tmp_path / "afile").read_text() == "a file"


# ---------------------------------------------------------------- learning curves


def _curves(e: int) -> list[TrialRecord]:
    """A multi-fidelity experiment: 9 trials at 1, 3 promoted to 3, 1 to 9, one pruned."""
    out = []
    for i in range(9):
        reached = 9 if i == 0 else 3 if i < 3 else 1
        curve = {str(r): 0.5 + 0.05 * i - 0.1 / r for r in (1, 3, 9) if r <= reached}
        state = "pruned" if i == 8 else "complete"
        value = None if state == "pruned" else curve[str(reached)]
        out.append(make_trial(e, i, intermediate=curve, value=value, state=state))
    out.append(make_trial(e, 9, intermediate={"odd key": 1.0, "2": math.nan}))  # nothing drawable
    return out


def _png_ok(png: bytes) -> bool:
    """A PNG that decodes (matplotlib's reader) to a non-empty, not uniform image."""
    import io

    import matplotlib.image

    image = matplotlib.image.imread(io.BytesIO(png), format="png")
    return png.startswith(PNG) and image.size > 0 and float(np.ptp(image)) > 0


def test_learning_curves_are_shown_only_when_trials_have_intermediate_values(registry, tmp_path):
    name = _experiment(registry, _curves, name="curves")
    figures = report_figures(registry, name)
    assert list(figures) == ["history", "curves", "parallel", "importance", "timeline"]
    assert all(_png_ok(png) for png in figures.values())
    text = write_report(registry, name, tmp_path / "curves.html").read_text(encoding="utf-8")
    page = _Page()
    page.feed(text)
    assert page.headings == [*HEADINGS[:5], OPTIONAL_FIGURES["curves"], *HEADINGS[5:]]
    assert len(page.images) == len(FIGURES) + 1
    caption = page.captions["Learning curves"]
    assert caption.startswith(
        "9 trials with intermediate values; 1 reached the highest resource, 9"
    )
    # Without intermediate values: no such plot, and the page is as before.
    plain = _experiment(registry, CASES["one trial"], name="plain")
    assert "curves" not in report_figures(registry, plain)
    _check(write_report(registry, plain, tmp_path / "plain.html"))


@pytest.mark.cluster
def test_report_of_an_optimize_run_draws_its_curves(client, tmp_path, registry):
    from dmlsearch import Categorical, optimize

    def objective(params: dict[str, Any], trial: Any) -> float:
        for step in range(1, 6):
            trial.report(params["x"] * step, step)
        return params["x"] * 5

    optimize(
        objective,
        {"x": Categorical([0.1, 0.2, 0.3])},
        n_trials=3,
        strategy="grid",
        client=client,
        registry=registry,
        experiment_name="opt",
    )
    figures = report_figures(registry, "opt")
    assert "curves" in figures and _png_ok(figures["curves"])
