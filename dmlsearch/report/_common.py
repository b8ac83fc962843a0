"""Constants and helpers shared by the report's plots and its HTML."""

from __future__ import annotations

import io
import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..registry._base import COMPLETE, FAILED, RUNNING, TIMEOUT, TrialRecord
from ..registry._registry_runs import _multifidelity, experiment_direction

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ..registry import Registry
    from ..registry._base import ExperimentRecord


__all__: list[str] = []

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

    @property
    def minimize(self) -> bool:
        """Whether smaller objectives are better (``optimize(direction="minimize")``)."""
        return experiment_direction(self.exp) == "minimize"

    @property
    def staged(self) -> bool:
        """Whether trials rank by the resource they reached first (a multi-fidelity search)."""
        return _multifidelity(self.exp)


def _load(registry: Registry, experiment: str | int) -> _Data:
    exp = registry.experiment(experiment)  # NotFoundError for an unknown experiment
    trials = registry.store.get_trials(exp.id)
    params = sorted({name for t in trials for name in t.params})
    return _Data(exp, trials, params)


# -- value helpers -------------------------------------------------------------------------


def _colour(state: str) -> str:
    return _COLOURS.get(state, _OTHER_COLOUR)


#: The types of the values a store gives back for a number (or its absence), which numpy
#: converts as ``float()`` would (None to NaN): columns of only these skip the checks below.
_PLAIN = frozenset({float, int, np.float64, type(None)})


def _is_number(value: Any) -> bool:
    if type(value) in _PLAIN:  # the common case, without the isinstance checks
        return value is not None
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def _finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(float(value))


def _floats(values: Sequence[Any], *, infinite: bool = False) -> np.ndarray:
    """Each value as a float, one array: NaN for anything not a number (None, text, a bool),
    and for ±inf too unless ``infinite``. A whole column at once, not a check per value."""
    if not set(map(type, values)) <= _PLAIN:
        values = [float(v) if _is_number(v) else None for v in values]
    out = np.array(values, dtype=float)  # None -> NaN
    if not infinite:
        out[np.isinf(out)] = math.nan
    return out


def _objectives(trials: Sequence[TrialRecord]) -> np.ndarray:
    """Each trial's objective where it completed, infinities included (the leaderboard ranks
    them as any value); NaN where it has none."""
    complete = np.array([t.state == COMPLETE for t in trials], dtype=bool)
    return np.where(complete, _floats([t.value for t in trials], infinite=True), math.nan)


def _scores(trials: Sequence[TrialRecord]) -> np.ndarray:
    """Each trial's finite objective, NaN where it has none (not complete, or not finite)."""
    values = _objectives(trials)
    values[np.isinf(values)] = math.nan
    return values


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
