"""A self-contained HTML report of one experiment: summary, leaderboard and PNG plots.

The plots are drawn on :class:`matplotlib.figure.Figure` objects with the Agg canvas, never
through ``pyplot``, so making a report leaves the caller's matplotlib state alone. Images
are embedded as ``data:`` URIs: the file can be mailed or archived on its own.
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from .registry import Registry
    from .registry._base import ExperimentRecord

__all__ = ["report_figures", "write_report"]

#: Parallel coordinates draw at most this many trials (the best ones are always kept).
MAX_LINES = 1000
_STATE_COLOURS = {"complete": "#2b7bba", "failed": "#d62728", "timeout": "#ff7f0e"}


# -- data helpers --------------------------------------------------------------------------


def _param_columns(trials: pd.DataFrame) -> list[str]:
    return [c for c in trials.columns if c.startswith("param_")]


def _finite(values: Any) -> np.ndarray:
    out = np.array([_as_float(v) for v in values], dtype=float)
    return out


def _as_float(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _numeric(column: pd.Series) -> bool:
    """Whether every present value of a parameter is a real number (bools are categories)."""
    present = [v for v in column if not _missing(v)]
    return bool(present) and all(
        isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
        for v in present
    )


def _missing(value: Any) -> bool:
    if value is None:
        return True
    return isinstance(value, float) and math.isnan(value)


def _label(value: Any, width: int = 24) -> str:
    text = "-" if _missing(value) else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


# -- plots ---------------------------------------------------------------------------------


def _figure(width: float = 8.0, height: float = 4.0) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


def _empty(fig: Figure, message: str) -> None:
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=12, wrap=True)


def plot_history(trials: pd.DataFrame) -> Figure:
    """Objective per trial number, best so far as a step line, failed trials marked."""
    fig = _figure()
    if trials.empty:
        _empty(fig, "no trials recorded yet")
        return fig
    ax = fig.add_subplot()
    numbers = trials["number"].to_numpy()
    values = _finite(trials["value"])
    ok = np.isfinite(values)
    ax.scatter(numbers[ok], values[ok], s=14, color=_STATE_COLOURS["complete"], label="trial")
    if ok.any():
        best = np.fmax.accumulate(np.where(ok, values, -np.inf))
        shown = np.isfinite(best)
        ax.step(numbers[shown], best[shown], where="post", color="black", label="best so far")
        low = float(np.nanmin(values[ok]))
    else:
        low = 0.0
    bad = ~ok
    if bad.any():
        ax.scatter(
            numbers[bad],
            np.full(int(bad.sum()), low),
            marker="x",
            color=_STATE_COLOURS["failed"],
            label="failed / no score",
        )
    ax.set_xlabel("trial number")
    ax.set_ylabel("objective (greater is better)")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    return fig


def _axis_values(column: pd.Series) -> tuple[np.ndarray, list[float], list[str]]:
    """Map a parameter's values to [0, 1]; return positions, tick positions and labels."""
    if _numeric(column):
        raw = _finite(column)
        present = raw[np.isfinite(raw)]
        lo, hi = float(present.min()), float(present.max())
        use_log = lo > 0 and hi / lo > 100
        scaled = np.log10(raw) if use_log else raw
        s_lo, s_hi = (math.log10(lo), math.log10(hi)) if use_log else (lo, hi)
        span = s_hi - s_lo or 1.0
        pos = (scaled - s_lo) / span
        ticks = [0.0, 1.0] if s_hi > s_lo else [0.0]
        labels = [f"{lo:.3g}", f"{hi:.3g}"][: len(ticks)]
        if use_log:
            labels = [f"{t} (log)" for t in labels]
        return pos, ticks, labels
    keys = [_label(v) for v in column]
    levels = sorted(set(keys))
    if len(levels) == 1:
        where = {levels[0]: 0.5}
    else:
        where = {k: i / (len(levels) - 1) for i, k in enumerate(levels)}
    pos = np.array([where[k] for k in keys], dtype=float)
    shown = levels if len(levels) <= 12 else levels[:: math.ceil(len(levels) / 12)]
    return pos, [where[k] for k in shown], shown


def plot_parallel_coordinates(trials: pd.DataFrame) -> tuple[Figure, str]:
    """One vertical axis per parameter; one line per completed trial, coloured by value."""
    params = _param_columns(trials)
    done = trials[np.isfinite(_finite(trials["value"]))] if not trials.empty else trials
    fig = _figure(max(6.0, 1.6 * (len(params) + 1)), 4.5)
    if done.empty or not params:
        _empty(fig, "no completed trials with parameters to draw")
        return fig, ""
    caption = ""
    if len(done) > MAX_LINES:
        caption = f"{MAX_LINES} of {len(done)} completed trials drawn (the best ones)."
        done = done.sort_values("value", ascending=False).head(MAX_LINES)
    values = _finite(done["value"])
    axes_pos = []
    ticks = []
    for name in params:
        pos, t, labels = _axis_values(done[name])
        axes_pos.append(pos)
        ticks.append((t, labels))
    vpos, _, _ = _axis_values(done["value"])
    axes_pos.append(vpos)
    columns = np.column_stack(axes_pos)
    ax = fig.add_subplot()
    import matplotlib
    from matplotlib import cm, colors

    norm = colors.Normalize(vmin=float(values.min()), vmax=float(values.max()))
    cmap = matplotlib.colormaps["viridis"]
    xs = np.arange(columns.shape[1])
    order = np.argsort(values)  # best lines drawn last, on top
    for i in order:
        row = columns[i]
        ok = np.isfinite(row)  # a conditional parameter missing from this trial
        ax.plot(xs[ok], row[ok], color=cmap(norm(values[i])), alpha=0.6, linewidth=1)
    for x, (t, labels) in enumerate(ticks):
        ax.axvline(x, color="grey", linewidth=0.8)
        for tick, text in zip(t, labels, strict=True):
            ax.text(x + 0.03, tick, text, fontsize=7, va="center")
    ax.axvline(len(params), color="grey", linewidth=0.8)
    ax.set_xticks(xs, [p[len("param_") :] for p in params] + ["objective"], rotation=20)
    ax.set_yticks([])
    ax.set_ylim(-0.05, 1.05)
    mappable = cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(mappable, ax=ax, label="objective")
    return fig, caption


def parameter_importance(registry: Registry, experiment: str | int) -> dict[str, float] | str:
    """fANOVA importances through Optuna, or the reason they cannot be computed."""
    import optuna

    from .strategies.optuna import _quiet_optuna

    with _quiet_optuna():
        study = registry.to_optuna(experiment)
        complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        if len(complete) < 2:
            return "not enough completed trials (at least 2 are needed)"
        try:
            with warnings.catch_warnings():
                # "few trials in a regime": the figure's caption is the place for doubt.
                warnings.simplefilter("ignore", UserWarning)
                importances = optuna.importance.get_param_importances(study)
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            return f"importances could not be computed: {exc}"
    if not importances:
        return "no parameter varies between the completed trials"
    return {k: float(v) for k, v in importances.items()}


def plot_importance(importances: dict[str, float] | str) -> Figure:
    fig = _figure(7.0, 0.5 + 0.4 * (len(importances) if isinstance(importances, dict) else 4))
    if isinstance(importances, str):
        _empty(fig, importances)
        return fig
    ax = fig.add_subplot()
    names = list(importances)[::-1]
    ax.barh(names, [importances[n] for n in names], color=_STATE_COLOURS["complete"])
    ax.set_xlabel("importance (fANOVA, sums to 1)")
    return fig


def plot_timeline(trials: pd.DataFrame) -> Figure:
    """One row per worker; one bar per trial from its start to its end, coloured by state."""
    fig = _figure(8.0, 4.0)
    timed = trials.dropna(subset=["started", "finished"]) if not trials.empty else trials
    if timed.empty:
        _empty(fig, "no trial timings recorded")
        return fig
    workers = sorted({_label(w, 40) for w in timed["worker"]})
    fig.set_size_inches(8.0, max(2.5, 0.5 * len(workers) + 1.5))
    ax = fig.add_subplot()
    t0 = float(timed["started"].min())
    row = {w: i for i, w in enumerate(workers)}
    for state, group in timed.groupby("state"):
        bars = [
            (float(s) - t0, max(float(f) - float(s), 1e-3))
            for s, f in zip(group["started"], group["finished"], strict=True)
        ]
        ys = [row[_label(w, 40)] for w in group["worker"]]
        colour = _STATE_COLOURS.get(str(state), "grey")
        for y, bar in zip(ys, bars, strict=True):
            ax.broken_barh([bar], (y - 0.4, 0.8), facecolors=colour)
        ax.plot([], [], color=colour, linewidth=6, label=str(state))
    ax.set_yticks(range(len(workers)), workers)
    ax.set_xlabel("seconds since the first trial started")
    ax.legend(loc="upper right", fontsize=8)
    return fig


# -- the report ----------------------------------------------------------------------------


def _collect(registry: Registry, experiment: str | int) -> tuple[ExperimentRecord, pd.DataFrame]:
    exp = registry.experiment(experiment)
    return exp, registry.trials(exp.id)


def report_figures(registry: Registry, experiment: str | int) -> dict[str, bytes]:
    """The report's plots as PNG bytes: history, parallel, importance, timeline."""
    exp, trials = _collect(registry, experiment)
    return {name: png for name, (png, _) in _figures(registry, exp, trials).items()}


def _figures(
    registry: Registry, exp: ExperimentRecord, trials: pd.DataFrame
) -> dict[str, tuple[bytes, str]]:
    parallel, caption = plot_parallel_coordinates(trials)
    makers: dict[str, Callable[[], tuple[Figure, str]]] = {
        "history": lambda: (plot_history(trials), ""),
        "parallel": lambda: (parallel, caption),
        "importance": lambda: (plot_importance(parameter_importance(registry, exp.id)), ""),
        "timeline": lambda: (plot_timeline(trials), ""),
    }
    out = {}
    for name, make in makers.items():
        fig, text = make()
        out[name] = (_png(fig), text)
    return out


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.6g}"
    return "-" if value is None else str(value)


def _when(ts: float | None) -> str:
    if ts is None or (isinstance(ts, float) and math.isnan(ts)):
        return "-"
    return _dt.datetime.fromtimestamp(float(ts), tz=_dt.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S UTC"
    )


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left;vertical-align:top}
th{background:#f2f2f2} img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
pre{background:#f7f7f7;padding:0.6em;overflow:auto;font-size:12px} .caption{color:#555}
"""

_TITLES = {
    "history": "Optimisation history",
    "parallel": "Parallel coordinates",
    "importance": "Parameter importance",
    "timeline": "Trial durations per worker",
}


def write_report(registry: Registry, experiment: str | int, path: str | os.PathLike[str]) -> Path:
    """Write one self-contained HTML report of ``experiment`` to ``path``; return the path.

    Raises the registry's ``NotFoundError`` for an unknown experiment.
    """
    exp, trials = _collect(registry, experiment)
    figures = _figures(registry, exp, trials)
    states = trials["state"].value_counts().to_dict() if not trials.empty else {}
    board = registry.leaderboard(exp.id, k=10)
    best = board.iloc[0].to_dict() if not board.empty else None
    e = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>dmlsearch report: {e(exp.name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Experiment {e(exp.name)}</h1>",
        "<h2>Summary</h2>",
        _table(
            ["field", "value"],
            [
                ["status", exp.status],
                ["created", _when(exp.created)],
                ["trials", len(trials)],
                ["by state", ", ".join(f"{k}: {v}" for k, v in sorted(states.items())) or "-"],
                ["best value", "-" if best is None else best["value"]],
                ["best trial", "-" if best is None else int(best["number"])],
                ["data fingerprint", exp.data_fingerprint or "-"],
                ["cluster", json.dumps(exp.cluster, default=str)],
            ],
        ),
        "<h2>Leaderboard</h2>",
        _table(list(board.columns), [list(r) for r in board.itertuples(index=False)])
        if not board.empty
        else "<p>No completed trial yet.</p>",
    ]
    for name, (png, caption) in figures.items():
        data = base64.b64encode(png).decode("ascii")
        parts.append(f"<h2>{_TITLES[name]}</h2>")
        parts.append(f"<img alt='{e(_TITLES[name])}' src='data:image/png;base64,{data}'>")
        if caption:
            parts.append(f"<p class='caption'>{e(caption)}</p>")
    failed = trials[trials["state"] != "complete"] if not trials.empty else trials
    parts.append("<h2>Failed trials</h2>")
    if failed.empty:
        parts.append("<p>None.</p>")
    else:
        rows = [
            [int(n), s, (str(err).strip().splitlines() or ["-"])[-1] if err else "-"]
            for n, s, err in zip(failed["number"], failed["state"], failed["error"], strict=True)
        ]
        parts.append(_table(["number", "state", "error (last line)"], rows))
    parts.append("<h2>Configuration</h2>")
    parts.append(f"<pre>{e(json.dumps(exp.config, indent=2, default=str))}</pre>")
    parts.append("<h2>Package versions</h2>")
    parts.append(_table(["package", "version"], sorted(exp.package_versions.items())))
    parts.append("</body></html>")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(parts), encoding="utf-8")
    return out
