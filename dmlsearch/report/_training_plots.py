"""A training job's figures: loss and throughput per epoch, resumes marked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..registry._base import COMPLETE
from ._common import _colour, _figure, _finite, _legend_outside, _png

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__: list[str] = []

#: A training job's plots, in order: name -> section title.
TRAINING_FIGURES = {
    "loss": "Loss per epoch",
    "throughput": "Throughput per epoch",
}
#: Above this many epochs the points are drawn as a line alone, without markers.
_MARKED_EPOCHS = 60
_RESUME_COLOUR = "#d62728"


def _series(history: Sequence[Mapping[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """(epoch, value) of the epochs that recorded a finite ``key``."""
    points = [
        (float(e["epoch"]), float(e[key]))
        for e in history
        if _finite(e.get("epoch")) and _finite(e.get(key))
    ]
    return np.array([p[0] for p in points]), np.array([p[1] for p in points])


def _mark_resumes(ax: Axes, resumed: Sequence[Mapping[str, Any]]) -> None:
    """A dashed line between the epoch a resume started from and the next one."""
    for i, r in enumerate(resumed):
        if not _finite(r.get("epoch")):
            continue
        ax.axvline(
            float(r["epoch"]) + 0.5,
            color=_RESUME_COLOUR,
            linestyle="--",
            linewidth=1.0,
            label=None if i else "resume",
        )


def _plot_epochs(
    history: Sequence[Mapping[str, Any]],
    resumed: Sequence[Mapping[str, Any]],
    key: str,
    ylabel: str,
    from_zero: bool = False,
) -> tuple[Figure, int]:
    """``key`` by epoch as a line; the figure and how many epochs it draws.

    ``from_zero``: the axis starts at 0 (a rate, whose drop reads true only from 0)."""
    epochs, values = _series(history, key)
    fig = _figure()
    ax = fig.add_subplot()
    marker = "o" if len(epochs) <= _MARKED_EPOCHS else None
    ax.plot(epochs, values, marker=marker, markersize=4, color=_colour(COMPLETE), label=ylabel)
    if len(values) and values.min() > 0 and values.max() / values.min() > 100:
        ax.set_yscale("log")
    elif from_zero and len(values) and values.min() >= 0:
        ax.set_ylim(bottom=0)
    _mark_resumes(ax, resumed)
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    # Whole epochs only: matplotlib would tick 1, 1.5, 2 on a short job.
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _legend_outside(ax)
    return fig, len(epochs)


def _resume_caption(resumed: Sequence[Mapping[str, Any]]) -> str:
    if not resumed:
        return ""
    return (
        f" Dashed: the {len(resumed)} resume(s), each after the epoch it resumed from "
        "(the last checkpoint): an elastic fit's on the workers left after a loss, a "
        "`dmlsearch resume` after its driver was lost."
    )


def training_figures(
    history: Sequence[Mapping[str, Any]], resumed: Sequence[Mapping[str, Any]]
) -> dict[str, tuple[bytes, str]]:
    """Each plot's PNG and caption, in the order of :data:`TRAINING_FIGURES`."""
    loss, drawn = _plot_epochs(history, resumed, "loss", "loss (mean over steps and ranks)")
    caption = f"{drawn} epoch(s) with a finite loss of {len(history)} recorded."
    figures = {"loss": (loss, caption + _resume_caption(resumed))}
    rate, drawn = _plot_epochs(history, resumed, "samples_per_s", "samples/s (all ranks)", True)
    caption = (
        f"Rows trained per second of each epoch, all ranks together (rank 0's epoch time); "
        f"{drawn} epoch(s) drawn."
    )
    figures["throughput"] = (rate, caption + _resume_caption(resumed))
    return {name: (_png(fig), text) for name, (fig, text) in figures.items()}
