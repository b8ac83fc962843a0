"""Plots over the search space: parallel coordinates and parameter importance (fANOVA)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import error_headline
from ..registry._base import COMPLETE, TrialRecord
from ..registry._registry_runs import optuna_study, resource_reached
from ._common import (
    _ABSENT,
    _IMPORTANCE_DEPTH,
    _IMPORTANCE_TREES,
    _IMPORTANCE_TRIALS,
    _KEEP_BEST,
    _PLAIN,
    MAX_LINES,
    _colour,
    _Data,
    _figure,
    _finite,
    _floats,
    _is_number,
    _label,
    _message,
    _objectives,
    _scores,
    _text,
)
from ._markup import _count

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..registry._base import ExperimentRecord


@dataclass(frozen=True)
class _Axis:
    """One parallel-coordinates axis: positions in [0, 1] (NaN where absent) and ticks."""

    positions: np.ndarray
    ticks: list[float]
    labels: list[str]
    log: bool = False


def _level_key(value: Any) -> tuple[int, float, str]:
    # Numbers in numeric order first, then everything else by its text.
    if type(value) is str:  # the common categorical value, without the checks below
        return (1, 0.0, value + "\0str")
    if _finite(value):
        return (0, float(value), repr(value))
    return (1, 0.0, _text(value) + "\0" + type(value).__name__)


def _categorical_axis(values: Sequence[Any]) -> _Axis:
    value_keys = [None if v is _ABSENT else _level_key(v) for v in values]
    levels: dict[tuple[int, float, str], Any] = {}
    for v, key in zip(values, value_keys, strict=True):
        if key is not None:
            levels.setdefault(key, v)
    keys = sorted(levels)
    where = {k: (i / (len(keys) - 1) if len(keys) > 1 else 0.5) for i, k in enumerate(keys)}
    positions = np.array(
        [math.nan if key is None else where[key] for key in value_keys], dtype=float
    )
    step = max(1, math.ceil(len(keys) / 15))  # at most ~15 readable labels
    shown = keys[::step]
    return _Axis(positions, [where[k] for k in shown], [_label(levels[k], 18) for k in shown])


def _numeric_axis(values: Sequence[Any]) -> _Axis:
    """Numbers scaled to [0, 1]; None, NaN or infinities get slots of their own below."""
    numbers = _floats(values)
    present = numbers[np.isfinite(numbers)]
    # None, NaN, infinities, by first appearance (the absent are left off the axis).
    odd = [i for i in np.flatnonzero(~np.isfinite(numbers)).tolist() if values[i] is not _ABSENT]
    specials: dict[str, float] = {}
    for i in odd:
        specials.setdefault(_text(values[i]), 0.1 * len(specials))
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
    for i in odd:
        positions[i] = specials[_text(values[i])]
    for text, where in specials.items():
        ticks.append(where)
        labels.append(_label(text, 18))
    return _Axis(positions, ticks, labels, log)


def _axis(values: Sequence[Any]) -> _Axis:
    """A numeric axis when the set values are numbers (None/NaN allowed), else categorical."""
    present = [v for v in values if v is not _ABSENT]
    numeric = bool(np.isfinite(_floats(present)).any()) and (
        set(map(type, present)) <= _PLAIN or all(v is None or _is_number(v) for v in present)
    )
    return _numeric_axis(values) if numeric else _categorical_axis(values)


def _order(
    values: np.ndarray,
    numbers: np.ndarray,
    minimize: bool = False,
    reached: np.ndarray | None = None,
) -> np.ndarray:
    """Indices best first, as ``Registry.best_trials`` ranks: the highest resource
    ``reached`` first where given (a multi-fidelity search), then the value (least first
    where ``minimize``), then the trial number."""
    keys = [numbers, values if minimize else -values]
    if reached is not None:
        keys.append(-reached)
    return np.lexsort(keys)  # the last key sorts first


def _sample(order: np.ndarray, staged: bool = False, rng_seed: int = 0) -> tuple[np.ndarray, str]:
    """Indices of the trials to draw, best last (so on top), from ``order`` (best first),
    and the caption saying what was left out."""
    if len(order) <= MAX_LINES:
        return order[::-1], ""
    rng = np.random.default_rng(rng_seed)
    rest = rng.choice(order[_KEEP_BEST:], size=MAX_LINES - _KEEP_BEST, replace=False)
    rank = np.empty(len(order), dtype=int)
    rank[order] = np.arange(len(order))
    chosen = np.concatenate([order[:_KEEP_BEST], rest])
    chosen = chosen[np.argsort(-rank[chosen], kind="stable")]
    ranked = " (as the leaderboard ranks them: highest resource reached first)" if staged else ""
    caption = (
        f"{MAX_LINES:,} of {len(order):,} completed trials drawn: the {_KEEP_BEST} best{ranked} "
        f"and a random sample of the others. Axis ranges cover every completed trial."
    )
    return chosen, caption


def _plot_parallel(data: _Data) -> tuple[Figure, str]:
    """One vertical axis per parameter and one for the objective; a line per scored trial,
    the best (ranked as :func:`_order` says) drawn last."""
    params, staged = data.params, data.staged
    objectives = _objectives(data.trials)
    ok = np.isfinite(objectives)
    scored = [t for t, keep in zip(data.trials, ok.tolist(), strict=True) if keep]
    infinite = int(np.isinf(objectives).sum())
    # The leaderboard ranks an infinite objective; a colour scale has no place for it.
    left_out = (
        f"{_count(infinite, 'completed trial')} with an infinite objective "
        f"{'is' if infinite == 1 else 'are'} not drawn."
        if infinite
        else ""
    )
    if not scored or not params:
        fig = _figure(7.0, 2.5)
        _message(fig, "no completed trial with parameters to draw")
        return fig, left_out
    values = objectives[ok]
    axes = [_axis([t.params.get(p, _ABSENT) for t in scored]) for p in params]
    axes.append(_numeric_axis(list(values)))
    grid = np.column_stack([a.positions for a in axes])
    numbers = np.array([t.number for t in scored], dtype=float)
    reached = np.array([resource_reached(t) for t in scored], dtype=float) if staged else None
    chosen, caption = _sample(_order(values, numbers, data.minimize, reached), staged)

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
    norm = colors.Normalize(vmin=low, vmax=high)
    # Reversed when minimising: the best trials, drawn on top, are the brightest either way.
    cmap = matplotlib.colormaps["viridis_r" if data.minimize else "viridis"]
    # One objective for all: one colour, and no colour bar (it would span 0 to 1e-12).
    lines = cmap(norm(values[chosen])) if high > low else [cmap(1.0)]
    alpha = 0.7 if len(chosen) <= 200 else 0.35
    ax.add_collection(LineCollection(segments, colors=lines, linewidths=1, alpha=alpha))
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
    same = ""
    if high > low:
        fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="objective", pad=0.02)
    else:
        same = f"Every trial drawn has the objective {_text(low)}: one colour, no colour bar."
    return fig, " ".join(part for part in (caption, same, left_out) if part)


def _varies(values: Iterable[Any]) -> bool:
    """Whether ``values`` hold two levels (as an axis tells them apart); stops at the second."""
    keys = map(_level_key, values)
    first = next(keys, None)
    return any(key != first for key in keys)


def _study(
    exp: ExperimentRecord, trials: Sequence[TrialRecord], done: Sequence[TrialRecord]
) -> Any:
    """An in-memory Optuna study of the completed trials ``done``, its distributions
    inferred from every trial's parameters as :meth:`Registry.to_optuna` infers them.

    The study fANOVA sees, built from the trials already read: converting every trial of
    the experiment (its store read again) only for fANOVA to look at a sample took most of
    a report of thousands of trials."""
    return optuna_study(exp, done, params_of=trials)


def _importance(data: _Data) -> tuple[dict[str, float] | str, str]:
    """fANOVA importances through Optuna (or why there are none) and a caption."""
    scores = _scores(data.trials)
    ok = np.isfinite(scores)
    scored = [t for t, keep in zip(data.trials, ok.tolist(), strict=True) if keep]
    if len(scored) < 2:
        return (
            f"not enough completed trials: importance needs at least 2, "
            f"this experiment has {len(scored)}",
            "",
        )
    if scores[ok].min() == scores[ok].max():
        return "every completed trial has the same objective: there is nothing to explain", ""
    # fANOVA needs each parameter in every trial it looks at, and one that never varies
    # would only absorb noise (Optuna then reports it at 1.0, or fails on zero variance).
    everywhere = [p for p in data.params if all(p in t.params for t in scored)]
    varying = [p for p in everywhere if _varies(t.params[p] for t in scored)]
    conditional = [p for p in data.params if p not in everywhere]
    note = (
        f"Left out, not set in every completed trial: {', '.join(conditional)}."
        if conditional
        else ""
    )
    if not varying:
        return "no parameter both varies and is set in every completed trial", note
    import optuna
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    from ..strategies.optuna import _quiet_optuna

    done = scored
    if len(done) > _IMPORTANCE_TRIALS:
        picked = np.random.default_rng(0).choice(len(done), _IMPORTANCE_TRIALS, replace=False)
        done = [done[i] for i in sorted(picked)]
    try:
        with _quiet_optuna(), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            importances = get_param_importances(
                _study(data.exp, data.trials, done),
                evaluator=FanovaImportanceEvaluator(
                    n_trees=_IMPORTANCE_TREES, max_depth=_IMPORTANCE_DEPTH, seed=0
                ),
                params=varying,
            )
    # ValueError: a value Optuna's distributions reject; RuntimeError: fANOVA found zero
    # variance in every tree. Both mean "no importances", not a failed report.
    except (ValueError, RuntimeError, optuna.exceptions.OptunaError) as exc:
        return f"importances could not be computed: {error_headline(exc)}", note
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
