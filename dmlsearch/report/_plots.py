"""The report's figures as PNG bytes: history, learning curves, timeline, and the others."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..registry._base import COMPLETE, TrialRecord
from ._common import (
    _colour,
    _Data,
    _figure,
    _finite,
    _floats,
    _label,
    _legend_outside,
    _load,
    _message,
    _objectives,
    _png,
)
from ._markup import _count
from ._params import (
    _importance,
    _order,
    _plot_importance,
    _plot_parallel,
    _sample,
)
from ._training import is_training_job, job_figures, load_job

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ..registry import Registry


def _plot_history(trials: Sequence[TrialRecord], minimize: bool = False) -> tuple[Figure, str]:
    """Objective per trial number, best so far as a step line (least so far where
    ``minimize``), unscored trials marked, infinite objectives on rows of their own."""
    fig = _figure()
    if not trials:
        _message(fig, "no trials recorded yet")
        return fig, ""
    ax = fig.add_subplot()
    numbers = np.array([t.number for t in trials], dtype=float)
    values = _objectives(trials)
    states = np.array([t.state for t in trials], dtype=object)
    ok, infinite = np.isfinite(values), np.isinf(values)
    scored = ok | infinite
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
        low, high = float(values[ok].min()), float(values[ok].max())
        marks = low - 0.08 * ((high - low) or abs(low) or 1.0)
    else:
        marks = 0.0
        ax.set_yticks([])
        if not infinite.any():
            ax.text(0.5, 0.6, "no trial has a score", transform=ax.transAxes, ha="center")
    for state in sorted(set(states[~scored])):
        where = ~scored & (states == state)
        ax.plot(
            numbers[where],
            np.full(int(where.sum()), marks),
            linestyle="none",
            marker="x",
            markersize=size + 2,
            color=_colour(state),
            label=f"{_label(state)} (no score)",
        )
    # The finite values set the range; an infinite one gets a labelled row beyond it.
    bottom, top = ax.get_ylim()
    span = top - bottom
    rows = {"+inf": top + 0.08 * span, "-inf": bottom - 0.08 * span}
    drawn = [name for name in rows if (values == float(name)).any()]
    if drawn:
        from matplotlib.ticker import FixedLocator

        # The finite ticks stay where they were (and keep any offset their formatter uses);
        # the rows are labelled as minor ticks.
        finite = [float(t) for t in ax.get_yticks() if bottom <= t <= top] if ok.any() else []
        ax.yaxis.set_major_locator(FixedLocator(finite))
        ax.set_yticks([rows[name] for name in drawn], drawn, minor=True)
        for name in drawn:
            ax.axhline(rows[name], color="grey", linewidth=0.6, linestyle=":")
        ax.set_ylim(
            rows["-inf"] - 0.04 * span if "-inf" in drawn else bottom,
            rows["+inf"] + 0.04 * span if "+inf" in drawn else top,
        )
    if scored.any():
        if minimize:
            best = np.fmin.accumulate(np.where(scored, values, np.inf))
        else:
            best = np.fmax.accumulate(np.where(scored, values, -np.inf))
        seen = np.cumsum(scored) > 0
        shown = np.select([best == np.inf, best == -np.inf], [rows["+inf"], rows["-inf"]], best)
        ax.step(numbers[seen], shown[seen], where="post", color="black", label="best so far")
    for name, marker in (("+inf", "^"), ("-inf", "v")):
        where = values == float(name)
        if where.any():
            ax.plot(
                numbers[where],
                np.full(int(where.sum()), rows[name]),
                linestyle="none",
                marker=marker,
                markersize=size + 2,
                color=_colour(COMPLETE),
                label=f"completed, {name}",
            )
    ax.set_xlabel("trial number")
    ax.set_ylabel(f"objective ({'less' if minimize else 'greater'} is better)")
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    caption = ""
    if infinite.any():
        caption = (
            f"{_count(int(infinite.sum()), 'trial')} completed with an infinite objective: "
            "drawn as triangles on the rows labelled +inf (above the finite values) and -inf "
            "(below them), as is the best-so-far line where it is infinite."
        )
    return fig, caption


def _lanes(starts: Sequence[float], ends: Sequence[float]) -> list[int]:
    """Greedy interval partitioning: a lane per trial so that overlapping trials stack.

    In order of start (ties in the given order), each trial takes the lowest lane free at
    its start. Heaps of the busy lanes' ends and of the free lanes keep it O(n log lanes)
    rather than a scan of every lane per trial."""
    busy: list[tuple[float, int]] = []  # (end of its last trial, lane)
    free: list[int] = []
    out = [0] * len(starts)
    n_lanes = 0
    for i in sorted(range(len(starts)), key=lambda j: starts[j]):
        start = starts[i]
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, n_lanes = n_lanes, n_lanes + 1
        heapq.heappush(busy, (ends[i], lane))
        out[i] = lane
    return out


def _bars(ax: Axes, xs: np.ndarray, widths: np.ndarray, y: float, height: float, **kw: Any) -> None:
    """``ax.broken_barh(zip(xs, widths), (y, height), **kw)``, the same patches, with the
    vertices built as one array rather than a loop over the bars (thousands of trials)."""
    from matplotlib.collections import PolyCollection

    x0, x1 = xs, xs + widths
    vertices = np.empty((len(xs), 4, 2))
    vertices[:, :, 0] = np.column_stack([x0, x0, x1, x1])
    vertices[:, :, 1] = [y, y + height, y + height, y]
    # An (n, 4, 2) array, as broken_barh passes it (the stubs ask for a sequence).
    ax.add_collection(PolyCollection(cast("Sequence[np.ndarray]", vertices), **kw))


def _merged(xs: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bars ``(xs, widths)`` of one colour in one lane with those that overlap or touch
    joined into one: the same area painted, a fraction of the patches to build and draw."""
    order = np.argsort(xs, kind="stable")
    starts = xs[order]
    reach = np.maximum.accumulate(starts + widths[order])  # the furthest end so far
    first = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1]])
    last = np.r_[first[1:] - 1, len(starts) - 1]
    return starts[first], reach[last] - starts[first]


def _plot_timeline(trials: Sequence[TrialRecord]) -> tuple[Figure, str]:
    """One row per worker; one bar per trial from its start to its end, coloured by state."""
    started = _floats([t.started for t in trials])
    finished = _floats([t.finished for t in trials])
    timed = np.flatnonzero(np.isfinite(started) & np.isfinite(finished))
    if not len(timed):
        fig = _figure(7.0, 2.5)
        _message(fig, "no trial timings recorded")
        return fig, ""
    started, finished = started[timed], finished[timed]
    t0 = float(started.min())
    span = float(np.maximum(started, finished).max()) - t0
    smallest = max(span * 0.002, 1e-3)  # a visible sliver for near-instant trials
    begins, widths = started - t0, finished - started
    rows: dict[str, list[int]] = {}  # worker -> positions in ``timed``
    timed_trials = [trials[i] for i in timed.tolist()]
    for at, t in enumerate(timed_trials):
        worker = t.worker
        rows.setdefault("(unknown)" if worker is None else str(worker), []).append(at)
    workers = sorted(rows)
    fig = _figure(9.0, min(16.0, max(2.5, 0.45 * len(workers) + 1.3)))
    ax = fig.add_subplot()
    # (row, lane, lanes, state) -> positions; one collection each, not one per trial.
    groups: dict[tuple[int, int, int, str], list[int]] = {}
    most_lanes = 1
    for row, worker in enumerate(workers):
        ats = rows[worker]
        # Lanes follow the real times; the drawn width is at least a visible sliver.
        begin = begins[ats]
        lanes = _lanes(begin.tolist(), (begin + np.maximum(widths[ats], 0.0)).tolist())
        n_lanes = max(lanes) + 1
        most_lanes = max(most_lanes, n_lanes)
        for at, lane in zip(ats, lanes, strict=True):
            groups.setdefault((row, lane, n_lanes, timed_trials[at].state), []).append(at)
    states: set[str] = set()
    # Thin white edges part back-to-back trials; with thousands of bars they would hide
    # them. Without edges, bars of a colour that overlap on a lane are drawn as one.
    few = len(timed) <= 500
    edge: dict[str, Any] = {"edgecolor": "white", "linewidth": 0.5} if few else {}
    for (row, lane, n_lanes, state), ats in groups.items():
        height = 0.8 / n_lanes
        bars = begins[ats], np.maximum(widths[ats], smallest)
        xs, shown = bars if few else _merged(*bars)
        bottom = row - 0.4 + lane * height
        _bars(ax, xs, shown, bottom, height * 0.9, facecolors=_colour(state), **edge)
        states.add(state)
    for state in sorted(states):
        ax.plot([], [], color=_colour(state), linewidth=6, label=_label(state))
    ax.set_yticks(range(len(workers)), [_label(w, 40) for w in workers])
    ax.tick_params(axis="y", labelsize=8 if len(workers) <= 40 else 5)
    ax.set_ylim(len(workers) - 0.5, -0.5)  # first worker on top
    ax.set_xlabel("seconds since the first trial started")
    ax.grid(axis="x", alpha=0.3)
    _legend_outside(ax)
    busy = sum(np.maximum(widths, 0.0).tolist())  # in trial order, as a running sum
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


def _plot_curves(data: _Data) -> tuple[Figure, str] | None:
    """Score against resource, one line per trial; None when no trial has a curve.

    Beyond ``MAX_LINES`` curves, the best by last score are kept (by the resource reached
    first in a multi-fidelity search, as its leaderboard ranks)."""
    staged = data.staged
    curves = {t.number: (t, *_curve(t)) for t in data.trials if t.intermediate}
    curves = {n: c for n, c in curves.items() if len(c[1])}
    if not curves:
        return None
    last = np.array([c[2][-1] for c in curves.values()])
    numbers = np.array(list(curves))
    ends = np.array([c[1][-1] for c in curves.values()])
    chosen, sampled = _sample(
        _order(last, numbers, data.minimize, ends if staged else None), staged
    )
    fig = _figure()
    ax = fig.add_subplot()
    top = float(ends.max())
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
    at_top = int((ends == top).sum())
    caption = (
        f"{len(curves):,} trials with intermediate values; {at_top:,} reached the highest "
        f"resource, {top:.6g}. A dot marks where each trial stopped."
    )
    return fig, f"{caption} {sampled}".strip().replace("completed trials", "trials")


def _figures(data: _Data) -> dict[str, tuple[bytes, str]]:
    """Each plot's PNG and caption, in the order of :data:`FIGURES`."""
    parallel, parallel_caption = _plot_parallel(data)
    importances, importance_caption = _importance(data)
    if isinstance(importances, str):  # the panel's text, also readable without the image
        importance_caption = f"{importances[0].upper()}{importances[1:]}. {importance_caption}"
    timeline, timeline_caption = _plot_timeline(data.trials)
    figures = {"history": _plot_history(data.trials, data.minimize)}
    curves = _plot_curves(data)
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

    Of a training job: ``loss`` and ``throughput`` (per epoch), or none when no version
    was registered from it. Raises the registry's ``NotFoundError`` for an unknown
    experiment.
    """
    exp = registry.experiment(experiment)
    if is_training_job(exp):
        return {name: png for name, (png, _) in job_figures(load_job(registry, exp)).items()}
    data = _load(registry, exp.id)
    return {name: png for name, (png, _) in _figures(data).items()}
