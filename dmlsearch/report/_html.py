"""The report as one self-contained HTML file."""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import error_headline
from ..registry._base import COMPLETE, RUNNING, TrialRecord
from ._common import (
    _ABSENT,
    _MAX_FAILED_ROWS,
    FIGURES,
    OPTIONAL_FIGURES,
    _Data,
    _load,
    _text,
)
from ._markup import (
    _cluster_rows,
    _config_sections,
    _figure_section,
    _page,
    _table,
    _when,
    _write,
)
from ._plots import (
    _figures,
)
from ._training import is_training_job, training_report

if TYPE_CHECKING:
    from ..registry import Registry


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
    rows += _cluster_rows(exp)
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
    causes = Counter(error_headline(t.error) or "(no error message)" for t in failed)
    if len(failed) > 1:
        parts.append("<h3>By error</h3>")
        parts.append(
            _table(["trials", "error (last line)"], [[n, c] for c, n in causes.most_common(20)])
        )
        if len(causes) > 20:
            parts.append(f"<p>… and {len(causes) - 20:,} other errors.</p>")
    rows = [
        [t.number, t.state, t.worker or "-", t.retries, error_headline(t.error) or "-"]
        for t in failed[:_MAX_FAILED_ROWS]
    ]
    if len(failed) > 1:
        parts.append("<h3>Trials</h3>")
    parts.append(_table(["number", "state", "worker", "retries", "error (last line)"], rows))
    if len(failed) > _MAX_FAILED_ROWS:
        parts.append(f"<p>The first {_MAX_FAILED_ROWS:,} of {len(failed):,} are listed.</p>")
    return "\n".join(parts)


def _html(
    data: _Data, board: Sequence[TrialRecord], figures: Mapping[str, tuple[bytes, str]]
) -> str:
    parts = [
        "<h2>Summary</h2>",
        _summary(data, board),
        *_config_sections(data.exp),
        f"<h2>Leaderboard</h2>{_leaderboard(board)}",
    ]
    for name, (png, caption) in figures.items():
        parts.append(_figure_section({**FIGURES, **OPTIONAL_FIGURES}[name], png, caption))
    parts.append(f"<h2>Failed trials</h2>{_failures(data.trials)}")
    return _page(data.exp, "Experiment", parts)


def write_report(registry: Registry, experiment: str | int, path: str | os.PathLike[str]) -> Path:
    """Write one self-contained HTML report of ``experiment`` to ``path``; return the path.

    Parent folders are created; an existing file is replaced only once the new one is
    complete. Raises the registry's ``NotFoundError`` for an unknown experiment, and an
    ``OSError`` whose ``filename`` is ``path`` as given where it cannot be written:
    ``IsADirectoryError`` for a folder (``"reports/"`` too, existing or not),
    ``NotADirectoryError`` below a file.
    """
    exp = registry.experiment(experiment)  # NotFoundError for an unknown experiment
    if is_training_job(exp):
        return _write(training_report(registry, exp), path)
    data = _load(registry, exp.id)
    board = registry.best_trials(data.exp.id, k=10)
    return _write(_html(data, board, _figures(data)), path)
