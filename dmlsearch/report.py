"""A self-contained HTML report of one experiment: summary, leaderboard and PNG plots.

The plots are drawn on :class:`matplotlib.figure.Figure` objects with the Agg canvas, never
through ``pyplot``, so making a report leaves the caller's matplotlib state alone. Images
are embedded as ``data:`` URIs: the file can be mailed or archived on its own.

Trials are read as records (``registry.store.get_trials``) rather than as the flattened
DataFrame, because only the records tell a parameter a trial did not set (conditional
spaces) from one set to ``None``.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import json
import math
import os
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .registry._base import COMPLETE, FAILED, RUNNING, TIMEOUT, TrialRecord

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .registry import Registry
    from .registry._base import ExperimentRecord

__all__ = ["FIGURES", "MAX_LINES", "OPTIONAL_FIGURES", "report_figures", "write_report"]

#: The report's plots, in order: name -> section title.
FIGURES = {
    "history": "Optimisation history",
    "parallel": "Parallel coordinates",
    "importance": "Parameter importance",
    "timeline": "Trial durations per worker",
}
#: Plots shown only when the experiment has what they draw, after the history plot:
#: learning curves need trials with intermediate values (multi-fidelity searches, optimize).
OPTIONAL_FIGURES = {"curves": "Learning curves"}
#: Parallel coordinates draw at most this many trials: the best ``_KEEP_BEST`` and a random
#: sample of the others. Axis ranges still come from every completed trial.
MAX_LINES = 1000
_KEEP_BEST = 100
#: The failed-trials table lists at most this many rows (the error summary counts them all).
_MAX_FAILED_ROWS = 500
_COLOURS = {
    COMPLETE: "#2b7bba",
    FAILED: "#d62728",
    TIMEOUT: "#ff7f0e",
    RUNNING: "#7f7f7f",
}
_OTHER_COLOUR = "#9467bd"
#: fANOVA's forest: Optuna's default (64 trees of depth 64) takes minutes on a thousand
#: noisy trials, its cost growing with the leaves; 32 trees of depth 6 give the same
#: ranking in well under a second.
_IMPORTANCE_TREES = 32
_IMPORTANCE_DEPTH = 6
#: fANOVA sees at most this many completed trials (a seeded random sample beyond it).
_IMPORTANCE_TRIALS = 1000


class _Absent:
    """The value of a parameter a trial did not set (conditional search spaces)."""

    def __repr__(self) -> str:
        return "<absent>"


_ABSENT = _Absent()


@dataclass(frozen=True)
class _Data:
    exp: ExperimentRecord
    trials: list[TrialRecord]
    params: list[str]


def _load(registry: Registry, experiment: str | int) -> _Data:
    exp = registry.experiment(experiment)  # NotFoundError for an unknown experiment
    trials = registry.store.get_trials(exp.id)
    params = sorted({name for t in trials for name in t.params})
    return _Data(exp, trials, params)


# -- value helpers -------------------------------------------------------------------------


def _colour(state: str) -> str:
    return _COLOURS.get(state, _OTHER_COLOUR)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def _finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(float(value))


def _score(trial: TrialRecord) -> float:
    """The trial's objective, or NaN when it has none (not complete, or not finite)."""
    value = trial.value
    if trial.state == COMPLETE and value is not None and _finite(value):
        return float(value)
    return math.nan


def _time(value: Any) -> float:
    return float(value) if _finite(value) else math.nan


def _text(value: Any) -> str:
    """How a value reads in the report (HTML tables and plot labels alike)."""
    if value is _ABSENT:
        return ""
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.6g}"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, default=str, allow_nan=True)
    return str(value)


def _label(value: Any, width: int = 24) -> str:
    """A one-line, shortened plot label that matplotlib draws literally."""
    text = " ".join(_text(value).split())
    if len(text) > width:
        text = text[: width - 1] + "…"
    # A "$" pair would start mathtext; an invalid expression fails the whole savefig.
    return text.replace("$", r"\$")


def _last_line(error: Any) -> str:
    lines = [line.strip() for line in str(error or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


# -- figures -------------------------------------------------------------------------------


def _figure(width: float = 8.0, height: float = 4.0) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        # Parameter values may hold characters the bundled font lacks: a box is drawn.
        warnings.filterwarnings("ignore", message="Glyph .* missing", category=UserWarning)
        fig.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


def _message(fig: Figure, message: str) -> None:
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, _label(message, 200), ha="center", va="center", fontsize=12, wrap=True)


def _legend_outside(ax: Axes) -> None:
    # Outside the axes: loc="best" costs a pass over every point, and nothing is hidden.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def _plot_history(trials: Sequence[TrialRecord]) -> Figure:
    """Objective per trial number, best so far as a step line, unscored trials marked."""
    fig = _figure()
    if not trials:
        _message(fig, "no trials recorded yet")
        return fig
    ax = fig.add_subplot()
    numbers = np.array([t.number for t in trials], dtype=float)
    values = np.array([_score(t) for t in trials])
    states = np.array([t.state for t in trials], dtype=object)
    ok = np.isfinite(values)
    size = 4.0 if len(trials) <= 500 else 2.0
    if ok.any():
        ax.plot(
            numbers[ok],
            values[ok],
            linestyle="none",
            marker="o",
            markersize=size,
            alpha=0.7,
            color=_colour(COMPLETE),
            label="completed",
        )
        best = np.fmax.accumulate(np.where(ok, values, -np.inf))
        shown = np.isfinite(best)
        ax.step(numbers[shown], best[shown], where="post", color="black", label="best so far")
        low, high = float(values[ok].min()), float(values[ok].max())
        marks = low - 0.08 * ((high - low) or abs(low) or 1.0)
    else:
        marks = 0.0
        ax.set_yticks([])
        ax.text(0.5, 0.6, "no trial has a score", transform=ax.transAxes, ha="center")
    for state in sorted(set(states[~ok])):
        where = ~ok & (states == state)
        ax.plot(
            numbers[where],
            np.full(int(where.sum()), marks),
            linestyle="none",
            marker="x",
            markersize=size + 2,
            color=_colour(state),
            label=f"{_label(state)} (no score)",
        )
    ax.set_xlabel("trial number")
    ax.set_ylabel("objective (greater is better)")
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    return fig


@dataclass(frozen=True)
class _Axis:
    """One parallel-coordinates axis: positions in [0, 1] (NaN where absent) and ticks."""

    positions: np.ndarray
    ticks: list[float]
    labels: list[str]
    log: bool = False


def _level_key(value: Any) -> tuple[int, float, str]:
    # Numbers in numeric order first, then everything else by its text.
    if _finite(value):
        return (0, float(value), repr(value))
    return (1, 0.0, _text(value) + "\0" + type(value).__name__)


def _categorical_axis(values: Sequence[Any]) -> _Axis:
    present = [v for v in values if v is not _ABSENT]
    levels: dict[tuple[int, float, str], Any] = {}
    for v in present:
        levels.setdefault(_level_key(v), v)
    keys = sorted(levels)
    where = {k: (i / (len(keys) - 1) if len(keys) > 1 else 0.5) for i, k in enumerate(keys)}
    positions = np.array(
        [math.nan if v is _ABSENT else where[_level_key(v)] for v in values], dtype=float
    )
    step = max(1, math.ceil(len(keys) / 15))  # at most ~15 readable labels
    shown = keys[::step]
    return _Axis(positions, [where[k] for k in shown], [_label(levels[k], 18) for k in shown])


def _numeric_axis(values: Sequence[Any]) -> _Axis:
    """Numbers scaled to [0, 1]; None, NaN or infinities get slots of their own below."""
    numbers = np.array([float(v) if _finite(v) else math.nan for v in values])
    present = numbers[np.isfinite(numbers)]
    specials: dict[str, float] = {}
    for v in values:
        if v is not _ABSENT and not _finite(v):
            specials.setdefault(_text(v), 0.1 * len(specials))
    base = 0.1 * len(specials) + (0.1 if specials else 0.0)
    lo, hi = float(present.min()), float(present.max())
    log = lo > 0 and hi / lo > 100
    ticks: list[float] = []
    labels: list[str] = []
    if hi > lo:
        s_lo, s_hi = (math.log10(lo), math.log10(hi)) if log else (lo, hi)
        with np.errstate(invalid="ignore", divide="ignore"):
            scaled = np.log10(numbers) if log else numbers
        positions = base + (1 - base) * (scaled - s_lo) / (s_hi - s_lo)
        distinct = np.unique(present)
        if len(distinct) <= 8:  # a few values (integers, a grid): label each of them
            marks = [float(m) for m in distinct]
        elif log:
            decades = list(range(math.ceil(s_lo), math.floor(s_hi) + 1))
            marks = [10.0**d for d in decades[:: max(1, math.ceil(len(decades) / 7))]]
        else:
            marks = [float(m) for m in np.linspace(lo, hi, 5)]
        for m in marks:
            s = math.log10(m) if log else m
            ticks.append(base + (1 - base) * (s - s_lo) / (s_hi - s_lo))
            labels.append(f"{m:.3g}")
    else:
        middle = base + (1 - base) / 2
        positions = np.where(np.isfinite(numbers), middle, math.nan)
        ticks, labels = [middle], [f"{lo:.3g}"]
    for i, v in enumerate(values):
        if v is not _ABSENT and not _finite(v):
            positions[i] = specials[_text(v)]
    for text, where in specials.items():
        ticks.append(where)
        labels.append(_label(text, 18))
    return _Axis(positions, ticks, labels, log)


def _axis(values: Sequence[Any]) -> _Axis:
    """A numeric axis when the set values are numbers (None/NaN allowed), else categorical."""
    present = [v for v in values if v is not _ABSENT]
    numeric = any(_finite(v) for v in present) and all(v is None or _is_number(v) for v in present)
    return _numeric_axis(values) if numeric else _categorical_axis(values)


def _sample(values: np.ndarray, rng_seed: int = 0) -> tuple[np.ndarray, str]:
    """Indices of the trials to draw (best last, so on top) and the caption saying so."""
    order = np.argsort(-values, kind="stable")
    if len(values) <= MAX_LINES:
        return order[::-1], ""
    rng = np.random.default_rng(rng_seed)
    rest = rng.choice(order[_KEEP_BEST:], size=MAX_LINES - _KEEP_BEST, replace=False)
    chosen = np.concatenate([order[:_KEEP_BEST], rest])
    chosen = chosen[np.argsort(values[chosen], kind="stable")]
    caption = (
        f"{MAX_LINES:,} of {len(values):,} completed trials drawn: the {_KEEP_BEST} best and "
        f"a random sample of the others. Axis ranges cover every completed trial."
    )
    return chosen, caption


def _plot_parallel(trials: Sequence[TrialRecord], params: Sequence[str]) -> tuple[Figure, str]:
    """One vertical axis per parameter and one for the objective; a line per scored trial."""
    scored = [t for t in trials if math.isfinite(_score(t))]
    if not scored or not params:
        fig = _figure(7.0, 2.5)
        _message(fig, "no completed trial with parameters to draw")
        return fig, ""
    values = np.array([_score(t) for t in scored])
    axes = [_axis([t.params.get(p, _ABSENT) for t in scored]) for p in params]
    axes.append(_numeric_axis(list(values)))
    grid = np.column_stack([a.positions for a in axes])
    chosen, caption = _sample(values)

    import matplotlib
    from matplotlib import cm, colors
    from matplotlib.collections import LineCollection

    fig = _figure(min(24.0, max(6.0, 1.5 * len(axes) + 1.5)), 4.5)
    ax = fig.add_subplot()
    xs = np.arange(len(axes), dtype=float)
    segments = []
    for row in grid[chosen]:
        ok = np.isfinite(row)  # a conditional parameter this trial did not set: skip its axis
        segments.append(np.column_stack([xs[ok], row[ok]]))
    low, high = float(values.min()), float(values.max())
    norm = colors.Normalize(vmin=low, vmax=high if high > low else low + 1e-12)
    cmap = matplotlib.colormaps["viridis"]
    alpha = 0.7 if len(chosen) <= 200 else 0.35
    ax.add_collection(
        LineCollection(segments, colors=cmap(norm(values[chosen])), linewidths=1, alpha=alpha)
    )
    for x, a in zip(xs, axes, strict=True):
        ax.axvline(x, color="grey", linewidth=0.8)
        for tick, text in zip(a.ticks, a.labels, strict=True):
            ax.text(
                x + 0.04,
                tick,
                text,
                fontsize=7,
                va="center",
                bbox={"facecolor": "white", "alpha": 0.6, "linewidth": 0, "pad": 0.5},
            )
    names = [
        _label(p, 20) + (" (log)" if a.log else "") for p, a in zip(params, axes, strict=False)
    ]
    ax.set_xticks(xs, [*names, "objective"], rotation=20, ha="right")
    ax.set_yticks([])
    ax.set_xlim(-0.1, len(axes) - 0.4)
    ax.set_ylim(-0.05, 1.05)
    for side in ("left", "right", "top", "bottom"):
        ax.spines[side].set_visible(False)
    fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="objective", pad=0.02)
    return fig, caption


def _importance(
    registry: Registry, exp_id: int, trials: Sequence[TrialRecord], params: Sequence[str]
) -> tuple[dict[str, float] | str, str]:
    """fANOVA importances through Optuna (or why there are none) and a caption."""
    scored = [t for t in trials if math.isfinite(_score(t))]
    if len(scored) < 2:
        return (
            f"not enough completed trials: importance needs at least 2, "
            f"this experiment has {len(scored)}",
            "",
        )
    if len({_score(t) for t in scored}) < 2:
        return "every completed trial has the same objective: there is nothing to explain", ""
    # fANOVA needs each parameter in every trial it looks at, and one that never varies
    # would only absorb noise (Optuna then reports it at 1.0, or fails on zero variance).
    everywhere = [p for p in params if all(p in t.params for t in scored)]
    varying = [p for p in everywhere if len({_level_key(t.params[p]) for t in scored}) > 1]
    conditional = [p for p in params if p not in everywhere]
    note = (
        f"Left out, not set in every completed trial: {', '.join(conditional)}."
        if conditional
        else ""
    )
    if not varying:
        return "no parameter both varies and is set in every completed trial", note
    import optuna
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    from .strategies.optuna import _quiet_optuna

    try:
        with _quiet_optuna(), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            study = registry.to_optuna(exp_id)
            # No deep copy: study.trials copies every trial, seconds for thousands.
            complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            done = [t for t in complete if _finite(t.value)]
            if len(done) > _IMPORTANCE_TRIALS:
                picked = np.random.default_rng(0).choice(
                    len(done), _IMPORTANCE_TRIALS, replace=False
                )
                done = [done[i] for i in sorted(picked)]
            if len(done) < len(complete):
                study = optuna.create_study(direction="maximize")
                study.add_trials(done)
            importances = get_param_importances(
                study,
                evaluator=FanovaImportanceEvaluator(
                    n_trees=_IMPORTANCE_TREES, max_depth=_IMPORTANCE_DEPTH, seed=0
                ),
                params=varying,
            )
    # ValueError: a value Optuna's distributions reject; RuntimeError: fANOVA found zero
    # variance in every tree. Both mean "no importances", not a failed report.
    except (ValueError, RuntimeError, optuna.exceptions.OptunaError) as exc:
        return f"importances could not be computed: {_last_line(exc)}", note
    if not importances:
        return "no parameter is set in every completed trial", note
    over = (
        f"a random sample of {len(done):,} of the {len(scored):,} completed trials"
        if len(done) < len(scored)
        else f"{len(scored):,} completed trials"
    )
    caption = (
        f"fANOVA ({_IMPORTANCE_TREES} trees of depth {_IMPORTANCE_DEPTH}, seed 0) over {over}, "
        f"normalised to sum to 1. {note}"
    ).strip()
    return {k: float(v) for k, v in importances.items()}, caption


def _plot_importance(importances: Mapping[str, float] | str) -> Figure:
    if isinstance(importances, str):
        fig = _figure(7.0, 2.5)
        _message(fig, importances)
        return fig
    names = list(importances)[::-1]  # most important on top
    fig = _figure(7.0, max(2.5, 1.0 + 0.35 * len(names)))
    ax = fig.add_subplot()
    heights = [importances[n] for n in names]
    ax.barh(range(len(names)), heights, color=_colour(COMPLETE))
    ax.set_yticks(range(len(names)), [_label(n, 30) for n in names])
    for y, h in enumerate(heights):
        ax.text(h, y, f" {h:.3f}", va="center", fontsize=8)
    ax.set_xlim(0, max(1.0, max(heights) * 1.15))
    ax.set_xlabel("importance (fANOVA, sums to 1)")
    return fig


def _lanes(spans: Sequence[tuple[float, float]]) -> list[int]:
    """Greedy interval partitioning: a lane per trial so that overlapping trials stack."""
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


def _plot_timeline(trials: Sequence[TrialRecord]) -> tuple[Figure, str]:
    """One row per worker; one bar per trial from its start to its end, coloured by state."""
    timed = [
        t for t in trials if math.isfinite(_time(t.started)) and math.isfinite(_time(t.finished))
    ]
    if not timed:
        fig = _figure(7.0, 2.5)
        _message(fig, "no trial timings recorded")
        return fig, ""
    t0 = min(_time(t.started) for t in timed)
    end = max(max(_time(t.started), _time(t.finished)) for t in timed)
    span = end - t0
    smallest = max(span * 0.002, 1e-3)  # a visible sliver for near-instant trials
    rows: dict[str, list[TrialRecord]] = {}
    for t in timed:
        rows.setdefault("(unknown)" if t.worker is None else str(t.worker), []).append(t)
    workers = sorted(rows)
    fig = _figure(9.0, min(16.0, max(2.5, 0.45 * len(workers) + 1.3)))
    ax = fig.add_subplot()
    # (row, lane, lanes, state) -> bars; one broken_barh call each, not one per trial.
    groups: dict[tuple[int, int, int, str], list[tuple[float, float]]] = {}
    most_lanes = 1
    for row, worker in enumerate(workers):
        spans = [
            (_time(t.started) - t0, _time(t.finished) - _time(t.started)) for t in rows[worker]
        ]
        # Lanes follow the real times; the drawn width is at least a visible sliver.
        lanes = _lanes([(s, s + max(w, 0.0)) for s, w in spans])
        spans = [(s, max(w, smallest)) for s, w in spans]
        n_lanes = max(lanes) + 1
        most_lanes = max(most_lanes, n_lanes)
        for t, bar, lane in zip(rows[worker], spans, lanes, strict=True):
            groups.setdefault((row, lane, n_lanes, t.state), []).append(bar)
    states: set[str] = set()
    # Thin white edges part back-to-back trials; with thousands of bars they would hide them.
    edge: dict[str, Any] = {"edgecolor": "white", "linewidth": 0.5} if len(timed) <= 500 else {}
    for (row, lane, n_lanes, state), bars in groups.items():
        height = 0.8 / n_lanes
        ax.broken_barh(
            bars, (row - 0.4 + lane * height, height * 0.9), facecolors=_colour(state), **edge
        )
        states.add(state)
    for state in sorted(states):
        ax.plot([], [], color=_colour(state), linewidth=6, label=_label(state))
    ax.set_yticks(range(len(workers)), [_label(w, 40) for w in workers])
    ax.tick_params(axis="y", labelsize=8 if len(workers) <= 40 else 5)
    ax.set_ylim(len(workers) - 0.5, -0.5)  # first worker on top
    ax.set_xlabel("seconds since the first trial started")
    ax.grid(axis="x", alpha=0.3)
    _legend_outside(ax)
    busy = sum(max(_time(t.finished) - _time(t.started), 0.0) for t in timed)
    caption = (
        f"{len(timed):,} timed trials on {len(workers)} worker(s) over {span:.3g} s; "
        f"mean concurrency {busy / span if span > 0 else 0.0:.2f} trials."
    )
    if most_lanes > 1:
        caption += " Trials that ran at the same time on one worker are stacked within its row."
    if len(timed) < len(trials):
        caption += f" {len(trials) - len(timed):,} trial(s) without timings are not shown."
    return fig, caption


def _curve(trial: TrialRecord) -> tuple[np.ndarray, np.ndarray]:
    """A trial's intermediate values as (resource, score), by resource; odd keys left out."""
    points = []
    for key, value in (trial.intermediate or {}).items():
        try:
            resource = float(key)
        except (TypeError, ValueError):
            continue
        if math.isfinite(resource) and _finite(value):
            points.append((resource, float(value)))
    points.sort()
    return np.array([p[0] for p in points]), np.array([p[1] for p in points])


def _plot_curves(trials: Sequence[TrialRecord]) -> tuple[Figure, str] | None:
    """Score against resource, one line per trial; None when no trial has a curve."""
    curves = {t.number: (t, *_curve(t)) for t in trials}
    curves = {n: c for n, c in curves.items() if len(c[1])}
    if not curves:
        return None
    last = np.array([c[2][-1] for c in curves.values()])
    numbers = np.array(list(curves))
    chosen, sampled = _sample(last)
    fig = _figure()
    ax = fig.add_subplot()
    top = max(float(c[1][-1]) for c in curves.values())
    labelled: set[str] = set()
    for number in numbers[chosen]:
        trial, resource, score = curves[int(number)]
        label = None if trial.state in labelled else _label(trial.state)
        labelled.add(trial.state)
        ax.plot(resource, score, color=_colour(trial.state), alpha=0.6, linewidth=1.0, label=label)
        ax.plot(resource[-1:], score[-1:], marker="o", markersize=3, color=_colour(trial.state))
    resources = np.concatenate([c[1] for c in curves.values()])
    if resources.min() > 0 and resources.max() / resources.min() > 100:
        ax.set_xscale("log")
    ax.set_xlabel("resource (budget: epochs, rounds, steps, rows)")
    ax.set_ylabel("intermediate score")
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    reached = sum(float(c[1][-1]) == top for c in curves.values())
    caption = (
        f"{len(curves):,} trials with intermediate values; {reached:,} reached the highest "
        f"resource, {top:.6g}. A dot marks where each trial stopped."
    )
    return fig, f"{caption} {sampled}".strip().replace("completed trials", "trials")


def _figures(registry: Registry, data: _Data) -> dict[str, tuple[bytes, str]]:
    """Each plot's PNG and caption, in the order of :data:`FIGURES`."""
    parallel, parallel_caption = _plot_parallel(data.trials, data.params)
    importances, importance_caption = _importance(registry, data.exp.id, data.trials, data.params)
    if isinstance(importances, str):  # the panel's text, also readable without the image
        importance_caption = f"{importances[0].upper()}{importances[1:]}. {importance_caption}"
    timeline, timeline_caption = _plot_timeline(data.trials)
    figures = {"history": (_plot_history(data.trials), "")}
    curves = _plot_curves(data.trials)
    if curves is not None:
        figures["curves"] = curves
    figures |= {
        "parallel": (parallel, parallel_caption),
        "importance": (_plot_importance(importances), importance_caption),
        "timeline": (timeline, timeline_caption),
    }
    return {name: (_png(fig), caption) for name, (fig, caption) in figures.items()}


def report_figures(registry: Registry, experiment: str | int) -> dict[str, bytes]:
    """The report's plots as PNG bytes: ``history``, ``parallel``, ``importance``, ``timeline``,
    and ``curves`` (learning curves) after ``history`` when trials have intermediate values.

    Raises the registry's ``NotFoundError`` for an unknown experiment.
    """
    data = _load(registry, experiment)
    return {name: png for name, (png, _) in _figures(registry, data).items()}


# -- HTML ----------------------------------------------------------------------------------


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    e = html.escape
    head = "".join(f"<th>{e(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{e(_text(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    attr = f" class='{e(cls)}'" if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _when(ts: Any) -> str:
    if not _finite(ts):
        return "-"
    moment = _dt.datetime.fromtimestamp(float(ts), tz=_dt.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _bytes(n: Any) -> str:
    if not _finite(n):
        return _text(n)
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.3g} {unit}"
        size /= 1024
    return _text(n)  # pragma: no cover - the loop always returns


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _params_text(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_text(v)}" for k, v in sorted(params.items())) or "(none)"


def _summary(data: _Data, board: Sequence[TrialRecord]) -> str:
    exp = data.exp
    states = Counter(t.state for t in data.trials)
    best = board[0] if board else None
    rows: list[list[Any]] = [
        ["status", exp.status],
        ["created", _when(exp.created)],
        ["trials", len(data.trials)],
        ["by state", ", ".join(f"{k}: {v}" for k, v in sorted(states.items())) or "-"],
        ["best value", "-" if best is None else best.value],
        ["best trial", "-" if best is None else best.number],
        ["best params", "-" if best is None else _params_text(best.params)],
        ["data fingerprint", exp.data_fingerprint or "-"],
    ]
    for key, value in sorted(exp.cluster.items()):
        shown = _bytes(value) if key.endswith("bytes") else value
        rows.append([f"cluster {key}", "-" if value is None else shown])
    return _table(["field", "value"], rows, "summary")


def _leaderboard(board: Sequence[TrialRecord]) -> str:
    if not board:
        return "<p>No completed trial yet.</p>"
    params = sorted({p for t in board for p in t.params})
    metrics = sorted({m for t in board for m in t.scores})
    header = ["rank", "number", "value", *(f"mean {m}" for m in metrics), "duration (s)"]
    rows = []
    for rank, t in enumerate(board, 1):
        means = [
            math.fsum(t.scores[m]) / len(t.scores[m]) if t.scores.get(m) else _ABSENT
            for m in metrics
        ]
        duration = t.duration if t.duration is not None else _ABSENT
        rows.append(
            [rank, t.number, t.value, *means, duration, *(t.params.get(p, _ABSENT) for p in params)]
        )
    return _table([*header, *params], rows, "leaderboard")


def _failures(trials: Sequence[TrialRecord]) -> str:
    failed = [t for t in trials if t.state not in (COMPLETE, RUNNING)]
    if not failed:
        return "<p>None.</p>"
    parts = []
    causes = Counter(_last_line(t.error) or "(no error message)" for t in failed)
    if len(failed) > 1:
        parts.append("<h3>By error</h3>")
        parts.append(
            _table(["trials", "error (last line)"], [[n, c] for c, n in causes.most_common(20)])
        )
        if len(causes) > 20:
            parts.append(f"<p>… and {len(causes) - 20:,} other errors.</p>")
    rows = [
        [t.number, t.state, t.worker or "-", t.retries, _last_line(t.error) or "-"]
        for t in failed[:_MAX_FAILED_ROWS]
    ]
    if len(failed) > 1:
        parts.append("<h3>Trials</h3>")
    parts.append(_table(["number", "state", "worker", "retries", "error (last line)"], rows))
    if len(failed) > _MAX_FAILED_ROWS:
        parts.append(f"<p>The first {_MAX_FAILED_ROWS:,} of {len(failed):,} are listed.</p>")
    return "\n".join(parts)


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1150px;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left;vertical-align:top}
th{background:#f2f2f2} table.summary td:first-child{font-weight:600;white-space:nowrap}
td{max-width:40em;overflow-wrap:anywhere}
figure{margin:0 0 1.5em} img{max-width:100%;border:1px solid #eee}
figcaption,.meta{color:#555;font-size:13px}
pre{background:#f7f7f7;padding:0.6em;overflow:auto;font-size:12px;max-height:40em}
"""


def _html(
    data: _Data, board: Sequence[TrialRecord], figures: Mapping[str, tuple[bytes, str]]
) -> str:
    from . import __version__

    e = html.escape
    exp = data.exp
    generated = _when(_dt.datetime.now(tz=_dt.timezone.utc).timestamp())
    parts = [
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        f"<title>dmlsearch report: {e(exp.name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Experiment {e(exp.name)}</h1>",
        f"<p class='meta'>Experiment id {exp.id}; report generated {e(generated)} by "
        f"dmlsearch {e(__version__)}.</p>",
        "<h2>Summary</h2>",
        _summary(data, board),
        "<h2>Configuration</h2>",
        f"<details><summary>the configuration snapshot ({_count(len(exp.config), 'key')})"
        "</summary>"
        f"<pre>{e(json.dumps(exp.config, indent=2, default=str))}</pre></details>",
        "<h2>Package versions</h2>",
        _table(["package", "version"], sorted(exp.package_versions.items()))
        if exp.package_versions
        else "<p>None recorded.</p>",
        f"<h2>Leaderboard</h2>{_leaderboard(board)}",
    ]
    for name, (png, caption) in figures.items():
        title = {**FIGURES, **OPTIONAL_FIGURES}[name]
        data_uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        parts.append(f"<h2>{e(title)}</h2><figure><img alt='{e(title)}' src='{data_uri}'>")
        if caption:
            parts.append(f"<figcaption>{e(caption)}</figcaption>")
        parts.append("</figure>")
    parts.append(f"<h2>Failed trials</h2>{_failures(data.trials)}")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_report(registry: Registry, experiment: str | int, path: str | os.PathLike[str]) -> Path:
    """Write one self-contained HTML report of ``experiment`` to ``path``; return the path.

    Parent folders are created; an existing file is replaced only once the new one is
    complete. Raises the registry's ``NotFoundError`` for an unknown experiment.
    """
    data = _load(registry, experiment)
    board = registry.store.leaderboard(data.exp.id, k=10)
    text = _html(data, board, _figures(registry, data))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the target, then renamed: a reader never sees half a report.
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out
