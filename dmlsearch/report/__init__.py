"""A self-contained HTML report of one experiment: summary, leaderboard and PNG plots.

The plots are drawn on :class:`matplotlib.figure.Figure` objects with the Agg canvas, never
through ``pyplot``, so making a report leaves the caller's matplotlib state alone. Images
are embedded as ``data:`` URIs: the file can be mailed or archived on its own.

Trials are read as records (``registry.store.get_trials``) rather than as the flattened
DataFrame, because only the records tell a parameter a trial did not set (conditional
spaces) from one set to ``None``.

A training job (an experiment of kind ``train``, no trials) gets its own report instead:
its settings, status, model version(s), epoch table and loss/throughput plots.
"""

from __future__ import annotations

from ._common import FIGURES, MAX_LINES, OPTIONAL_FIGURES
from ._html import write_report
from ._plots import report_figures
from ._training_plots import TRAINING_FIGURES

__all__ = [
    "FIGURES",
    "MAX_LINES",
    "OPTIONAL_FIGURES",
    "TRAINING_FIGURES",
    "report_figures",
    "write_report",
]
